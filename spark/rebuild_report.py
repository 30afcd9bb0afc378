"""What a rebuild tells its operator: progress by stage (on the terminal and in
Redis, for the admin) and the summary it ends with (spark/rebuild.py)."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from fanout.timelines import TimelineStore

log = logging.getLogger("starling.rebuild")


@dataclass
class Progress:
    """Stages on the terminal (with elapsed time) and in Redis for the admin."""

    store: TimelineStore | None
    out: Any = sys.stdout
    started: float = field(default_factory=time.monotonic)
    stage_started: float = 0.0
    current: str = ""
    durations: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str) -> None:
        self.stage_started = time.monotonic()
        self.current = name
        self._print(f"{name} ...")
        self.publish(stage=name)

    def done(self, what: str) -> None:
        took = time.monotonic() - self.stage_started
        self.durations[self.current] = round(took, 2)
        self._print(f"  {what} ({took:.1f}s)")
        self.publish(detail=what)

    def note(self, what: str) -> None:
        self._print(f"  {what}")
        self.publish(detail=what)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _print(self, line: str) -> None:
        print(f"[{self.elapsed():7.1f}s] {line}", file=self.out, flush=True)

    def publish(self, **fields: Any) -> None:
        if self.store is not None:
            try:
                self.store.publish_rebuild_status(**fields)
            except Exception:  # progress display must not fail the rebuild
                log.debug("could not publish progress", exc_info=True)


@dataclass
class Summary:
    generation: int | None = None
    dry_run: bool = False
    records: int = 0
    tweets: int = 0
    follows: int = 0
    bad_records: int = 0
    authors: int = 0
    timelines: int = 0
    #: Idle users whose timelines stay dropped in the new generation.
    dropped: int = 0
    entries: int = 0
    snapshot_seq: int = 0
    snapshot_contiguous: int = 0
    verified_counts: int = 0
    sample_checked: int = 0
    sample_skipped: int = 0
    differing: int = 0
    live_missing: int = 0
    missing_entries: int = 0
    extra_entries: int = 0
    diff_histogram: dict[str, int] = field(default_factory=dict)
    switched: bool = False
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
