"""Offsets of the changelog topics, and the arithmetic on them the Kafka
source (:mod:`spark.source.datasource`) plans its reads with: no I/O here."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

#: Offsets as Spark checkpoints them: ``{topic: {"<partition>": next offset}}``.
Offsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One input partition: records [start, end) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int


def data_loss(start: Offsets, ends: Offsets) -> list[str]:
    """Partitions whose checkpointed offset is beyond the end of the log."""
    problems = []
    for topic, parts in start.items():
        for p, offset in parts.items():
            end = ends.get(topic, {}).get(p)
            if end is None:
                problems.append(f"{topic}/{p}: partition no longer exists (was at offset {offset})")
            elif offset > end:
                problems.append(f"{topic}/{p}: checkpoint at offset {offset}, log ends at {end}")
    return problems


def clamp_to_log(start: Offsets, ends: Offsets) -> Offsets:
    """``start`` moved back to the end of the log where it is beyond it (failOnDataLoss=false)."""
    return {
        topic: {p: min(o, ends.get(topic, {}).get(p, 0)) for p, o in parts.items()}
        for topic, parts in start.items()
    }


def limit_offsets(start: Offsets, ends: Offsets, max_records: int) -> Offsets:
    """Advance from ``start`` towards ``ends`` by at most ``max_records`` in all.

    The budget is shared out in rounds so every partition with a backlog moves
    (no partition starves behind a big one).
    """
    pending = {
        (t, p): max(0, end - start.get(t, {}).get(p, 0))
        for t, parts in ends.items()
        for p, end in parts.items()
    }
    take = dict.fromkeys(pending, 0)
    budget = max_records
    while budget > 0:
        open_ = [tp for tp in pending if take[tp] < pending[tp]]
        if not open_:
            break
        share = max(1, budget // len(open_))
        for tp in open_:
            step = min(share, pending[tp] - take[tp], budget)
            take[tp] += step
            budget -= step
            if budget == 0:
                break
    return {
        t: {p: start.get(t, {}).get(p, 0) + take[(t, p)] for p in parts}
        for t, parts in ends.items()
    }


def ranges(start: Offsets, end: Offsets) -> list[OffsetRange]:
    out = []
    for topic, parts in end.items():
        for p, stop in parts.items():
            begin = start.get(topic, {}).get(p, 0)
            if stop > begin:
                out.append(OffsetRange(topic, int(p), begin, stop))
    return out


def split_ranges(parts: list[OffsetRange], pieces: int) -> list[OffsetRange]:
    """``parts`` cut into ranges of at most ``ceil(records / pieces)`` offsets,
    so that a batch read runs in about ``pieces`` tasks of similar size (more
    read tasks than topic-partitions; one big topic no longer makes one long
    task). A compacted range holds fewer records than offsets: the cut is by
    offsets, which is what a task reads through."""
    total = sum(r.end - r.start for r in parts)
    if pieces <= len(parts) or total == 0:
        return parts
    size = -(-total // pieces)
    return [
        OffsetRange(r.topic, r.partition, begin, min(begin + size, r.end))
        for r in parts
        for begin in range(r.start, r.end, size)
    ]
