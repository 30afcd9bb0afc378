"""Load: a micro-batch's bundles into Redis, then the watermark.

``foreachBatch`` runs :class:`FanoutSink` on the driver. It has the executors
apply each partition's bundles (:func:`apply_bundles`, through ``mapInArrow``,
in the same stage as the operator), collects one small row of statistics
per partition, and records the batch in the watermark: the highest ``seq``
applied, the batch's end offsets, counters. Nothing but those statistics
reaches the driver.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from fanout.config import StarlingConfig
from fanout.join import Mutation, Op
from fanout.timelines import store_for
from fanout.watermark import batch_duration_counters, contiguous, merge_marks
from spark import arrow
from spark.checkpoint_files import logged_offsets
from spark.operator import decode_bundle
from spark.worker_heap import spark_task

STATS_SCHEMA = (
    "seq long, ts long, mutations long, deliveries long, added long, removed long, "
    "created long, short long, skipped long, dead_letters long, ignored long, calls long, "
    "redis_ms long, "
    "marks string"
)
#: Statistics combined across partitions by maximum; the others add up.
_MAXIMA = ("seq", "ts")
_NUMBERS = [name for name in arrow.names(STATS_SCHEMA) if name != "marks"]


#: Mutation weight (owners + tweet ids) applied at once: bounds an executor's
#: memory whatever a micro-batch holds (a user following thousands of
#: accounts in one batch is millions of ids before they are grouped).
SLICE_WEIGHT = 500_000


@spark_task
def apply_bundles(
    batches: Iterator[pa.RecordBatch], *, config: StarlingConfig, generation: int
) -> Iterator[pa.RecordBatch]:
    """Executor side: apply one partition's bundles to Redis, return its statistics.

    Bundles are applied in slices of :data:`SLICE_WEIGHT`, in order; within a
    slice the store groups the writes per timeline (a follower who gets five
    tweets in this batch gets one write). A bucket's events are one bundle,
    so they are never split.
    """
    store = store_for(config, timeout=120)
    totals: dict[str, Any] = dict.fromkeys(_NUMBERS, 0)
    bodies: dict[int, bytes] = {}
    mutations: list[Mutation] = []
    weight = 0
    dead: list[dict[str, Any]] = []
    marks: dict[str, int] = {}

    def flush() -> None:
        totals["mutations"] += len(mutations)
        totals["deliveries"] += sum(m.deliveries for m in mutations if m.op is Op.ADD)
        started = time.perf_counter()
        applied = store.apply(generation, bodies, mutations)
        totals["redis_ms"] += int((time.perf_counter() - started) * 1000)
        for name in ("added", "removed", "created", "short", "calls", "skipped"):
            totals[name] += getattr(applied, name)
        bodies.clear()
        mutations.clear()

    for batch in batches:
        for raw in batch.column(0).to_pylist():
            bundle = decode_bundle(raw)
            totals["seq"] = max(totals["seq"], bundle.seq)
            totals["ts"] = max(totals["ts"], bundle.ts)
            totals["ignored"] += bundle.ignored
            bodies.update(bundle.bodies)
            mutations.extend(bundle.mutations)
            weight += sum(len(m.owners) + len(m.tweets) for m in bundle.mutations)
            dead += bundle.dead_letters
            marks = merge_marks(marks, bundle.marks)
            if weight >= SLICE_WEIGHT:
                flush()
                weight = 0
    if bodies or mutations:
        flush()
    totals["dead_letters"] = store.dead_letter(dead)
    totals["marks"] = json.dumps(marks)
    yield arrow.batch({k: [v] for k, v in totals.items()}, STATS_SCHEMA)


@dataclass
class BatchReport:
    batch_id: int = -1
    stats: dict[str, int] = field(default_factory=dict)
    #: When the batch's writes and its watermark were done (epoch seconds).
    done_at: float = 0.0


class FanoutSink:
    """``foreachBatch``: write the batch from the executors, then the watermark."""

    def __init__(self, config: StarlingConfig, generation: int, checkpoint: Path) -> None:
        self.config = config
        self.generation = generation
        self.checkpoint = checkpoint
        self.last = BatchReport()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        write = functools.partial(apply_bundles, config=self.config, generation=self.generation)
        rows = batch.mapInArrow(write, STATS_SCHEMA).collect()  # one small row per partition
        stats = dict.fromkeys(_NUMBERS, 0)
        store = store_for(self.config)
        previous = store.watermark(self.generation)
        marks = merge_marks(
            previous.marks if previous else {}, *(json.loads(row["marks"]) for row in rows)
        )
        for row in rows:
            for name in stats:
                value = row[name] or 0
                stats[name] = max(stats[name], value) if name in _MAXIMA else stats[name] + value
        complete = contiguous(marks, self.config.topics.all(), self.config.partitions)
        released = store.release_resets(self.generation, complete)
        stats["added"] += released.added
        stats["short"] += released.short
        stats["skipped"] += released.skipped
        store.record_watermark(
            self.generation,
            batch_id=batch_id,
            seq=stats["seq"],
            marks=marks,
            contiguous=complete,
            event_time=stats["ts"] / 1000,
            offsets=logged_offsets(self.checkpoint, batch_id) or {},
            counters={
                "batches": 1,
                "deliveries": stats["deliveries"],
                "added": stats["added"],
                "removed": stats["removed"],
                "short": stats["short"],
                "skipped": stats["skipped"],
                "dead_letters": stats["dead_letters"],
                **batch_duration_counters(time.monotonic() - started),
            },
        )
        self.last = BatchReport(batch_id, stats, time.time())
