"""What a rebuild tells its operator: progress by stage (on the terminal and in
Redis, for the admin) and the summary it ends with (spark/rebuild/stages.py)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fanout.store.timelines import TimelineStore

log = logging.getLogger("starling.rebuild")


def estimate(
    done: int, total: int, elapsed: float, records: int = 0, *, counted: bool = False
) -> str | None:
    """A stage's progress line: ``done`` of ``total`` Spark tasks finished after
    ``elapsed`` seconds; with ``records`` (the read stage: the snapshot's
    size), in records read, about as many as the share of tasks done; with
    ``counted``, ``done`` and ``total`` are records, as the read tasks counted
    them. The time left assumes the rest goes at the pace so far."""
    if total <= 0:
        return None
    share = min(done, total) / total
    what = f"{share:4.0%} of {total:,} tasks"
    if counted:
        what = f"{share:4.0%}: {min(done, total):,} of {total:,} records read"
    elif records:
        what = f"{share:4.0%}: about {int(records * share):,} of {records:,} records read"
    if done <= 0:
        return f"{what}, time left unknown yet"
    left = elapsed * (total - done) / done
    return f"{what}, about {left:.0f}s left"


class TaskWatcher:
    """Polls Spark's status tracker while a stage runs (each stage's actions
    run in a job group of its own) and prints :func:`estimate` every
    ``every`` seconds: the read, join and write stages are long Spark jobs
    that would otherwise print nothing until they end.

    What it counts, so that the share only grows:

    * the read stage (``records`` given): while its first Spark stage (the
      one reading the changelogs) runs, the records its tasks counted
      (``counted``), or else its finished tasks, in records; after that, the
      rest;
    * otherwise, and after the read: the Spark stages running now (a job's
      stages that are skipped, their input already computed, never run and
      are not counted), their time left measured from when they were first
      seen running.
    """

    def __init__(self, progress: Progress, spark: Any, every: float) -> None:
        self.progress = progress
        self.context = spark.sparkContext
        self.every = every
        self.group = ""
        self.group_started = 0.0
        self.records = 0
        self.counted: Callable[[], int] | None = None
        self.seen: dict[int, float] = {}  # Spark stage -> when first seen running
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rebuild-progress", daemon=True)
        self._thread.start()

    def begin(self, group: str, records: int = 0, counted: Callable[[], int] | None = None) -> None:
        """Called on the thread that runs the stage's actions (job groups are per thread)."""
        self.context.setJobGroup(group, f"starling rebuild: {group}")
        self.group, self.records, self.counted = group, records, counted
        self.group_started = time.monotonic()

    def line(self) -> str | None:
        tracker = self.context.statusTracker()
        jobs = sorted(tracker.getJobIdsForGroup(self.group))
        if not jobs:
            return None
        now = time.monotonic()
        if self.records:
            first = tracker.getJobInfo(jobs[0])
            scan = tracker.getStageInfo(min(first.stageIds)) if first and first.stageIds else None
            if scan is not None and scan.numCompletedTasks < scan.numTasks:
                if self.counted is not None:
                    elapsed = now - self.group_started
                    return estimate(self.counted(), self.records, elapsed, counted=True)
                return estimate(
                    scan.numCompletedTasks, scan.numTasks, now - self.group_started, self.records
                )
        ours = {s for job in jobs if (info := tracker.getJobInfo(job)) for s in info.stageIds}
        running = [
            info
            for stage in tracker.getActiveStageIds()
            if stage in ours and (info := tracker.getStageInfo(stage)) is not None
        ]
        if not running:
            return None
        for info in running:
            self.seen.setdefault(info.stageId, now)
        since = min(self.seen[info.stageId] for info in running)
        done = sum(info.numCompletedTasks for info in running)
        line = estimate(done, sum(info.numTasks for info in running), now - since)
        prefix = f"all {self.records:,} records read; " if self.records else ""
        return f"{prefix}Spark stage {', '.join(str(i.stageId) for i in running)}: {line}"

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                line = self.line() if self.group else None
            except Exception:  # the display must never fail the rebuild
                log.debug("could not read Spark's progress", exc_info=True)
                continue
            if line is not None:
                self.progress.note(line)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@dataclass
class Progress:
    """Stages on the terminal (with elapsed time and, while Spark works, the
    share of tasks done and the time left) and in Redis for the admin."""

    store: TimelineStore | None
    out: Any = sys.stdout
    started: float = field(default_factory=time.monotonic)
    stage_started: float = 0.0
    current: str = ""
    durations: dict[str, float] = field(default_factory=dict)
    watcher: TaskWatcher | None = None

    def watch(self, spark: Any, every: float = 10.0) -> None:
        """Report the Spark tasks of each stage from now on (:class:`TaskWatcher`)."""
        self.watcher = TaskWatcher(self, spark, every)

    def stage(self, name: str, records: int = 0, counted: Callable[[], int] | None = None) -> None:
        """A stage begins; ``records``: how many records it reads, ``counted``: how
        many it has read so far (for its progress)."""
        self.stage_started = time.monotonic()
        self.current = name
        self._print(f"{name} ...")
        self.publish(stage=name)
        if self.watcher is not None:
            self.watcher.begin(name, records, counted)

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None

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
    #: Live follows, those that mute the followee included.
    follows: int = 0
    #: Owners with a filter's record (their hidden users; some may be empty).
    filters: int = 0
    bad_records: int = 0
    authors: int = 0
    timelines: int = 0
    #: Idle users whose timelines stay dropped in the new generation.
    dropped: int = 0
    #: Timelines written short (their filters left entries out), queued for a refill.
    short: int = 0
    entries: int = 0
    #: Mentions timelines written (owner -u beside user u's; an idle user's stays dropped).
    mentions: int = 0
    mention_entries: int = 0
    #: Lists' timelines written (owner -L; an idle owner's lists stay dropped:
    #: ``lists_dropped``), and their entries.
    lists: int = 0
    lists_dropped: int = 0
    list_entries: int = 0
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
    #: Where the Spark stages ran: the fanout job's session, or the command's own.
    ran_in: str = "own session"
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
