"""The small harness every benchmark shares: summaries, tables, ratios, reports.

Benchmarks compare against a baseline measured in the same run: absolute
times on a shared 2-core machine are noisy, ratios hold.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis

T = TypeVar("T")
REPORTS = Path(__file__).resolve().parent / "reports"


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) with linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values, default=0.0),
        "mean": statistics.fmean(values) if values else 0.0,
    }


def repeat(fn: Callable[[], T], *, runs: int = 3, warmup: int = 1) -> list[T]:
    """Run ``fn`` ``warmup`` times unmeasured, then ``runs`` times."""
    for _ in range(warmup):
        fn()
    return [fn() for _ in range(runs)]


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def mark_applied(store: Any, generation: int) -> None:
    """Record one applied micro-batch in the store (batch 1, seq 1), as the job
    would after writing what a benchmark wrote itself: reads then see a
    watermark."""
    store.record_watermark(
        generation,
        batch_id=1,
        seq=1,
        marks={},
        contiguous=1,
        event_time=time.time(),
        offsets={},
        counters={},
    )


def round_trips_per_read(store: Any, users: list[int]) -> float:
    """Round trips to Redis per page read (a pipeline to one node is one),
    counted by wrapping redis-py's connection."""
    reads = users[:200]
    cls = redis.connection.AbstractConnection
    send = cls.send_packed_command
    sent = [0]

    def counted(conn: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return send(conn, *args, **kwargs)

    setattr(cls, "send_packed_command", counted)  # noqa: B010 - patched for the count
    try:
        for user in reads:
            store.read_page(user, count=50)
    finally:
        setattr(cls, "send_packed_command", send)  # noqa: B010
    return sent[0] / len(reads)


def ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline else float("nan")


@dataclass
class Report:
    """Collects a benchmark's figures, prints them as a table, saves them as JSON."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    checks: list[tuple[str, bool]] = field(default_factory=list)
    stamp: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))

    def path(self, suffix: str) -> Path:
        """Where this run's files go: ``load_tests/reports/<name>-<time>.<suffix>``."""
        return REPORTS / f"{self.name}-{self.stamp}.{suffix}"

    def add(self, what: str, value: Any, note: str = "", *, key: str | None = None) -> None:
        shown = (
            f"{value:,.2f}"
            if isinstance(value, float)
            else f"{value:,}"
            if isinstance(value, int)
            else str(value)
        )
        self.rows.append((what, shown, note))
        self.figures[key or what] = value

    def check(self, what: str, ok: bool) -> None:
        self.checks.append((what, ok))

    def print(self) -> None:
        width = max((len(r[0]) for r in self.rows), default=10)
        vwidth = max((len(r[1]) for r in self.rows), default=10)
        print(f"\n== {self.name} ==")
        for k, v in self.params.items():
            print(f"  {k}: {v}")
        print()
        for what, value, note in self.rows:
            print(f"  {what:<{width}}  {value:>{vwidth}}  {note}")
        if self.checks:
            print()
            for what, ok in self.checks:
                print(f"  [{'PASS' if ok else 'MISS'}] {what}")
        print()

    def save(self) -> Path:
        REPORTS.mkdir(parents=True, exist_ok=True)
        path = self.path("json")
        path.write_text(
            json.dumps(
                {
                    "name": self.name,
                    "machine": {"python": platform.python_version(), "cpus": _cpus()},
                    "params": self.params,
                    "figures": self.figures,
                    "checks": dict(self.checks),
                },
                indent=2,
                default=str,
            )
        )
        return path


def _cpus() -> int:
    import os

    return os.cpu_count() or 0
