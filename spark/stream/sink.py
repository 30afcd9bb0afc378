"""Load: a micro-batch's bundles into Redis, then the watermark.

``foreachBatch`` runs :class:`FanoutSink` on the driver. The executors write
in two steps (spark.stream.bundles says why):

1. :func:`apply_first`, through ``mapInArrow`` in the operator's stage:
   each task writes its buckets' first bundles (bodies, deleted bodies,
   pulled authors' lists, dead letters) and hands on their timeline bundles;
2. after a shuffle by route, :func:`apply_timelines`: each task writes the
   timelines of its share of the owners, every timeline once.

A micro-batch of fewer than ``route_from`` records (the job's ``--route-from``) skips the shuffle:
each task writes its first bundles, then its own timeline bundles
(:func:`apply_here`). Its timelines get a few ids each, so a second write
to one of them costs little, less than the stage the shuffle adds.

One small row of statistics per partition reaches the driver, which records
the batch in the watermark: the highest ``seq`` applied, the batch's end
offsets, counters.
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
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fanout.config import StarlingConfig
from fanout.model.engagements import Counts
from fanout.model.join import Mutation, Op
from fanout.model.watermark import batch_duration_counters, contiguous, merge_marks
from fanout.store.timelines import TimelineStore, store_for
from spark.runtime import arrow
from spark.runtime.worker_heap import spark_task
from spark.source.offsets import Offsets, ranges
from spark.stream.bundles import FIRST, Bundle, decode_bundle
from spark.stream.checkpoint import logged_offsets

STATS_SCHEMA = (
    "seq long, ts long, mutations long, deliveries long, added long, removed long, "
    "created long, short long, skipped long, dead_letters long, ignored long, calls long, "
    "redis_ms long, "
    "marks string"
)
#: Statistics combined across partitions by maximum; the others add up
#: (``mutations`` counts a mutation cut across sink partitions in each).
_MAXIMA = ("seq", "ts")
_NUMBERS = [name for name in arrow.names(STATS_SCHEMA) if name != "marks"]
#: Between the two steps: timeline bundles by route, and each first task's
#: statistics (JSON in ``stats``, no bundle) routed like any row.
ROUTED_SCHEMA = "route int, bundle binary, stats string"


#: Mutation weight (owners + tweet ids) applied at once: bounds an executor's
#: memory whatever a micro-batch holds (a user following thousands of
#: accounts in one batch is millions of ids before they are grouped).
SLICE_WEIGHT = 500_000


def route_labels(spark: SparkSession, parts: int) -> tuple[int, ...]:
    """One route label per sink partition: values of the ``route`` column that
    Spark's hash partitioning (``repartition(parts, "route")``) sends to
    partitions 0, 1, ..., ``parts - 1``, so that each task gets one share of
    the owners. Asked of Spark's own hash, once per query."""
    candidates = F.col("id").cast("int")
    rows = (
        spark.range(64 * parts)
        .select(candidates.alias("label"), F.pmod(F.hash(candidates), F.lit(parts)).alias("p"))
        .collect()
    )
    first: dict[int, int] = {}
    for row in rows:
        first.setdefault(row["p"], row["label"])
    missing = [p for p in range(parts) if p not in first]
    if missing:
        raise RuntimeError(f"no route label found for sink partitions {missing}")
    return tuple(first[p] for p in range(parts))


def combine(totals: dict[str, int], stats: Any) -> None:
    """Add one task's statistics (a mapping or a Row) to ``totals``, marks aside."""
    for name in _NUMBERS:
        value = stats[name] or 0
        totals[name] = max(totals[name], value) if name in _MAXIMA else totals[name] + value


class _Writer:
    """One task's writes and statistics: bundles are applied in slices of
    :data:`SLICE_WEIGHT`, in order; within a slice the store groups the
    writes per timeline (a follower who gets five tweets in this batch gets
    one write). A bundle is never split."""

    def __init__(self, config: StarlingConfig, generation: int, high_water: int = 0) -> None:
        self.store: TimelineStore = store_for(config, timeout=120)
        self.generation = generation
        #: The highest seq of the batches before this one (the watermark's ``seq``).
        self.high_water = high_water
        self.totals: dict[str, Any] = dict.fromkeys(_NUMBERS, 0)
        self.marks: dict[str, int] = {}
        self.bodies: dict[int, bytes] = {}
        self.counts: dict[int, Counts] = {}
        self.mutations: list[Mutation] = []
        self.weight = 0
        self.dead: list[dict[str, Any]] = []

    def add(self, bundle: Bundle) -> None:
        totals = self.totals
        totals["seq"] = max(totals["seq"], bundle.seq)
        totals["ts"] = max(totals["ts"], bundle.ts)
        totals["ignored"] += bundle.ignored
        self.bodies.update(bundle.bodies)
        self.counts.update(bundle.counts)
        self.mutations.extend(bundle.mutations)
        self.weight += sum(len(m.owners) + len(m.tweets) for m in bundle.mutations)
        self.dead += bundle.dead_letters
        self.marks = merge_marks(self.marks, bundle.marks)
        if self.weight >= SLICE_WEIGHT:
            self.flush()

    def merge(self, stats: dict[str, Any]) -> None:
        """Another task's statistics (a first step's, as JSON)."""
        combine(self.totals, stats)
        self.marks = merge_marks(self.marks, json.loads(stats["marks"]))

    def flush(self) -> None:
        totals, mutations = self.totals, self.mutations
        if self.bodies or mutations or self.counts:
            totals["mutations"] += len(mutations)
            totals["deliveries"] += sum(m.deliveries for m in mutations if m.op is Op.ADD)
            started = time.perf_counter()
            # What this task writes to a timeline came from its own bundles (one
            # task writes each timeline, D25) or from earlier batches: a trim
            # fences at the highest seq of either.
            applied = self.store.apply(
                self.generation,
                self.bodies,
                mutations,
                counts=self.counts,
                high_water=max(self.high_water, totals["seq"]),
            )
            totals["redis_ms"] += int((time.perf_counter() - started) * 1000)
            for name in ("added", "removed", "created", "short", "calls", "skipped"):
                totals[name] += getattr(applied, name)
        self.bodies, self.counts, self.mutations, self.weight = {}, {}, [], 0
        if self.dead:
            totals["dead_letters"] += self.store.dead_letter(self.dead)
            self.dead = []

    def stats(self) -> dict[str, Any]:
        self.flush()
        return {**self.totals, "marks": json.dumps(self.marks)}


def _first_and_rest(batch: pa.RecordBatch) -> tuple[list[bytes], pa.RecordBatch]:
    """The first bundles of the operator's rows, and the rows of the others."""
    first = pc.equal(batch.column("route"), FIRST)
    return batch.filter(first).column("bundle").to_pylist(), batch.filter(pc.invert(first))


@spark_task
def apply_first(
    batches: Iterator[pa.RecordBatch],
    *,
    config: StarlingConfig,
    generation: int,
    routes: tuple[int, ...],
    high_water: int = 0,
) -> Iterator[pa.RecordBatch]:
    """Executor side, in the operator's stage: write this task's first
    bundles; hand on its timeline bundles as they are, then its statistics."""
    writer = _Writer(config, generation, high_water)
    for batch in batches:
        first, rest = _first_and_rest(batch)
        for raw in first:
            writer.add(decode_bundle(raw))
        if rest.num_rows:
            yield pa.RecordBatch.from_arrays(
                [rest.column("route"), rest.column("bundle"), pa.nulls(rest.num_rows, pa.string())],
                schema=arrow.schema(ROUTED_SCHEMA),
            )
    stats = json.dumps(writer.stats())
    yield arrow.batch({"route": [routes[0]], "bundle": [None], "stats": [stats]}, ROUTED_SCHEMA)


@spark_task
def apply_here(
    batches: Iterator[pa.RecordBatch],
    *,
    config: StarlingConfig,
    generation: int,
    high_water: int = 0,
) -> Iterator[pa.RecordBatch]:
    """Executor side, in the operator's stage, for a small micro-batch: write
    this task's first bundles, then its timeline bundles; return its statistics.
    A timeline may get writes from several of these tasks in one batch: one
    task's high water can miss another's bundles (docs/decisions.md D29)."""
    writer = _Writer(config, generation, high_water)
    timelines: list[bytes] = []
    for batch in batches:
        first, rest = _first_and_rest(batch)
        for raw in first:
            writer.add(decode_bundle(raw))
        timelines += rest.column("bundle").to_pylist()
    writer.flush()  # the bodies and lists before any timeline
    for raw in timelines:
        writer.add(decode_bundle(raw))
    yield arrow.batch({k: [v] for k, v in writer.stats().items()}, STATS_SCHEMA)


@spark_task
def apply_timelines(
    batches: Iterator[pa.RecordBatch],
    *,
    config: StarlingConfig,
    generation: int,
    high_water: int = 0,
) -> Iterator[pa.RecordBatch]:
    """Executor side, after the shuffle: write this partition's timeline
    bundles; return its statistics and those of the first step it received."""
    writer = _Writer(config, generation, high_water)
    for batch in batches:
        bundles, stats = batch.column("bundle").to_pylist(), batch.column("stats").to_pylist()
        for raw, first_stats in zip(bundles, stats, strict=True):
            if first_stats is not None:
                writer.merge(json.loads(first_stats))
            else:
                writer.add(decode_bundle(raw))
    yield arrow.batch({k: [v] for k, v in writer.stats().items()}, STATS_SCHEMA)


@dataclass
class BatchReport:
    batch_id: int = -1
    stats: dict[str, int] = field(default_factory=dict)
    #: When the batch's writes and its watermark were done (epoch seconds).
    done_at: float = 0.0


class FanoutSink:
    """``foreachBatch``: write the batch from the executors, then the watermark."""

    def __init__(
        self, config: StarlingConfig, generation: int, checkpoint: Path, routes: tuple[int, ...]
    ) -> None:
        self.config = config
        self.generation = generation
        self.checkpoint = checkpoint
        self.routes = routes
        self.last = BatchReport()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        offsets = logged_offsets(self.checkpoint, batch_id)
        store = store_for(self.config)
        previous = store.watermark(self.generation)  # its seq: the batches before's highest
        high_water = previous.seq if previous else 0
        rows = self._write(batch, self._records(batch_id, offsets), high_water)
        stats = dict.fromkeys(_NUMBERS, 0)
        marks = merge_marks(
            previous.marks if previous else {}, *(json.loads(row["marks"]) for row in rows)
        )
        for row in rows:
            combine(stats, row)
        complete = contiguous(marks, self.config.topics.all(), self.config.partitions)
        released = store.release_resets(
            self.generation, complete, high_water=max(high_water, stats["seq"])
        )
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
            offsets=offsets or {},
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

    def _write(self, batch: DataFrame, records: int | None, high_water: int) -> list[Any]:
        """Run the executors' writes; one small row of statistics per partition."""
        options: dict[str, Any] = {
            "config": self.config,
            "generation": self.generation,
            "high_water": high_water,
        }
        if records is not None and records < self.config.route_from:
            here = functools.partial(apply_here, **options)
            return batch.mapInArrow(here, STATS_SCHEMA).collect()
        first = functools.partial(apply_first, routes=self.routes, **options)
        return (
            batch.mapInArrow(first, ROUTED_SCHEMA)
            .repartition(len(self.routes), "route")
            .mapInArrow(functools.partial(apply_timelines, **options), STATS_SCHEMA)
            .collect()
        )

    def _records(self, batch_id: int, end: Offsets | None) -> int | None:
        """How many records the micro-batch reads, up to its ``end`` offsets,
        from the offset log (None for the first batch, or when the log cannot say)."""
        start = logged_offsets(self.checkpoint, batch_id - 1) if batch_id > 0 else None
        if end is None or start is None:
            return None
        return sum(r.end - r.start for r in ranges(start, end))
