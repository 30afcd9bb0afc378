"""The fanout watermark: what the job records after each micro-batch.

It lives in Redis with the timelines of its generation (the store writes
and reads it); this module holds its shape, how the relay's marks make it
*contiguous*, and the encoding of the micro-batch duration histogram kept
beside it for ``/metrics``.

**Contiguous.** The highest ``seq`` applied says nothing about the seqs
below it: a partition can be ahead of another, and on PostgreSQL two
transactions can commit in the opposite order of their seqs. After every
delivered run the relay writes a *mark* P into every partition of every
topic (fanout.model.events.mark_record): everything with ``seq`` <= P is before
it in that partition. Once the job has applied the marks of all
partitions, every seq up to the smallest of them is applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Upper bounds (seconds) of the micro-batch duration histogram (/metrics).
BATCH_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Watermark:
    #: The highest seq applied. Not a promise about the seqs below it.
    seq: int
    #: Every seq up to this one is applied: what read-your-writes waits for.
    contiguous: int
    #: The relay marks applied, per ``topic/partition``.
    marks: dict[str, int]
    batch_id: int
    applied_at: float
    event_time: float
    offsets: dict[str, Any]
    counters: dict[str, int]


def mark_name(topic: str, partition: int | str) -> str:
    return f"{topic}/{partition}"


def merge_marks(*marks: dict[str, int]) -> dict[str, int]:
    """The newest mark per partition of several sets of marks."""
    out: dict[str, int] = {}
    for m in marks:
        for name, value in m.items():
            out[name] = max(out.get(name, 0), int(value))
    return out


def contiguous(marks: dict[str, int], topics: tuple[str, ...], partitions: int) -> int:
    """Every seq up to the result is applied: the smallest mark of every partition
    of every topic (0 while one of them has none yet)."""
    return min(
        (marks.get(mark_name(t, p), 0) for t in topics for p in range(partitions)), default=0
    )


def batch_duration_counters(seconds: float) -> dict[str, int]:
    """A micro-batch's duration as Prometheus histogram counters (cumulative
    buckets ``batch_le_<bound>``, ``batch_ms`` the sum), kept with the
    watermark so a replayed batch is not counted twice."""
    counters = {f"batch_le_{bound:g}": int(seconds <= bound) for bound in BATCH_BUCKETS}
    counters["batch_ms"] = int(seconds * 1000)
    return counters
