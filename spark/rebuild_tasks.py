"""The rebuild's executor side: pure Python over Arrow batches (see
:mod:`spark.rebuild` for the stages that use them).

The read keeps the newest record of each key and decodes it in its read
tasks (:class:`NewestRecordSource`, :func:`newest_per_key`,
:func:`spark.rebuild_decode.decode_records`); every other function here is run by ``mapInArrow``:
it takes an iterator of Arrow batches and yields batches of the schema named
beside it (a Spark DDL string).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from fanout.config import StarlingConfig, TopicNames
from fanout.join import newest, rebuilt_author_state, rebuilt_timeline
from fanout.timeline_ops import pack_timeline, visible
from fanout.timelines import store_for
from spark import arrow
from spark.kafka_source import (
    Columns,
    KafkaBatchReader,
    KafkaChangelogSource,
    SourceOptions,
    consume_range,
)
from spark.offsets import OffsetRange, Offsets, ranges
from spark.rebuild_decode import DECODED, decode_records
from spark.worker_heap import collector_paused, spark_task

#: Records decoded (and handed to Spark) per Arrow batch of the read.
DECODE_CHUNK = 10_000
#: Bytes of Python memory a read task holds per record of its partition
#: (measured: 941 MiB resident, 123 MiB of it the interpreter, for a
#: partition of 1,162,445 follows).
READ_BYTES_PER_RECORD = 740
#: state_partition: an author's join state, and what of it timelines are made from.
STATE = "join_key long, blob binary, kept array<long>, horizon long, pulled boolean"
#: write_timelines_partition: each timeline written, and its length.
WRITTEN = "owner long, entries int"
#: diff_partition: how a rebuilt timeline differs from the live one.
DIFF = "owner long, live_missing boolean, missing int, extra int"
#: write_lists_partition: how many pulled authors' lists were written.
COUNT = "n long"


def largest_partition(ends: Offsets) -> tuple[str, int, int, float]:
    """(topic, partition, offsets, GiB its read task needs) of the largest
    partition up to ``ends``: what a read task of :class:`NewestRecordSource`
    must hold in memory at most."""
    topic, part, n = max(
        ((t, int(p), int(o)) for t, parts in ends.items() for p, o in parts.items()),
        key=lambda x: x[2],
        default=("", 0, 0),
    )
    return topic, part, n, n * READ_BYTES_PER_RECORD / 2**30


def newest_per_key(
    chunks: Iterable[Columns],
) -> tuple[dict[bytes | None, tuple[Any, int, Any]], int]:
    """({key: (value, offset, headers)} of the newest record of each key, how
    many records were read) of one partition's records, read in offset order
    (a later record replaces an earlier one, as compaction would)."""
    newest: dict[bytes | None, tuple[Any, int, Any]] = {}
    read = 0
    for keys, values, offsets, _, headers in chunks:
        newest.update(zip(keys, zip(values, offsets, headers, strict=True), strict=True))
        read += len(offsets)
    return newest, read


class NewestRecordReader(KafkaBatchReader):
    """One task per topic-partition, largest first (Spark starts tasks in this
    order: the long ones do not come last). Each keeps the newest record of
    each key of its partition and decodes only those."""

    def __init__(self, options: SourceOptions, raw: Mapping[str, str], topics: TopicNames) -> None:
        super().__init__(options, raw)
        self.topics = topics
        self.redis_url = raw.get("redisUrl")
        self.store_config = StarlingConfig(
            redis_url=self.redis_url or "",
            redis_cluster_urls=tuple(u for u in raw.get("redisClusterUrls", "").split(",") if u),
            redis_shards=int(raw.get("redisShards", "1")),
        )
        self.write_bodies = raw.get("writeBodies", "false").lower() == "true"

    def partitions(self) -> list[OffsetRange]:
        return sorted(ranges(self.start, self.end), key=lambda r: r.start - r.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        with collector_paused():  # a million records held, no cycles among them
            yield from self._read(partition)

    def _read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:
        newest, read = newest_per_key(
            consume_range(self.options.client, partition, self.options.read_timeout)
        )
        store = store_for(self.store_config, timeout=120) if self.redis_url else None
        if store is not None:
            store.count_records_read(read - len(newest))  # a key's older records: done
        order = list(newest)
        for at in range(0, len(order), DECODE_CHUNK):
            some = order[at : at + DECODE_CHUNK]
            values, offsets, headers = zip(*(newest.pop(k) for k in some), strict=True)
            rows, bodies = decode_records(
                partition, some, list(values), list(offsets), list(headers), topics=self.topics
            )
            if store is not None:
                if self.write_bodies:
                    store.write_bodies(bodies)
                store.count_records_read(len(some))
            yield rows


class NewestRecordSource(KafkaChangelogSource):
    """``starling-changelog-newest``: the changelogs as tables, read as a batch:
    the newest record of each key, decoded in its read task (rows of
    :data:`DECODED`; a tombstone is a ``gone`` row). Takes the Kafka source's
    options plus ``topicPrefix`` (the deployment's topic names), ``redisUrl``
    (where the tasks count the records they are done with, as they go: a task
    reads a whole partition, so finished tasks alone would say little) and
    ``writeBodies`` (``true``: the tasks put the live tweets' bodies in the
    tweet cache there, the same bytes the fanout job writes, so that the
    bodies never travel through Spark).

    The newest record of a key is found within its partition, with no shuffle:
    every record of a key is in the same partition, because the relay
    partitions by the join key, which a key's records share (a tweet's author,
    a follow's followee; :mod:`fanout.partitioning`). Kafka's compaction rests
    on the same property. A task holds its partition's newest records in
    memory until it has read them all (:data:`READ_BYTES_PER_RECORD`; the
    rebuild's snapshot stage names the largest partition and what it needs)."""

    @classmethod
    def name(cls) -> str:
        return "starling-changelog-newest"

    def schema(self) -> str:
        return DECODED

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        raise NotImplementedError(
            "starling-changelog-newest is read as a batch (the rebuild's read); the "
            "fanout job streams from starling-kafka"
        )

    def reader(self, schema: Any) -> DataSourceReader:
        topics = TopicNames(self.options.get("topicPrefix", ""))
        return NewestRecordReader(SourceOptions.parse(self.options), self.options, topics)


@spark_task
def state_partition(
    batches: Iterator[pa.RecordBatch], cap: int, slack: int, pull_threshold: int
) -> Iterator[pa.RecordBatch]:
    """Per author: the fanout job's state blob, the newest tweets a follow of
    the author merges (or its list holds, if pulled), with their horizon."""
    for batch in batches:
        out: dict[str, list[Any]] = arrow.columns(STATE)
        for row in batch.to_pylist():
            state = rebuilt_author_state(
                row["author"],
                row["followers"] or (),
                row["tweets"] or (),
                pull_threshold=pull_threshold,
            )
            kept, horizon = newest(state.tweets, cap + slack)  # what a follow merges
            out["join_key"].append(row["author"])
            out["blob"].append(state.encode())
            out["kept"].append(list(kept))
            out["horizon"].append(horizon)
            out["pulled"].append(state.pulled)
        yield arrow.batch(out, STATE)


@spark_task
def write_lists_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, generation: int
) -> Iterator[pa.RecordBatch]:
    """Write the pulled authors' lists (``join_key``, ``kept``, ``horizon``) into
    ``generation``."""
    store = store_for(config, timeout=120)
    for batch in batches:
        rows = batch.to_pylist()
        n = store.write_lists(
            generation, ((r["join_key"], pack_timeline(r["horizon"], r["kept"])) for r in rows)
        )
        yield arrow.batch({"n": [n]}, COUNT)


def _timelines(
    batch: pa.RecordBatch, cap: int, slack: int, *, ids: str = "ids", floor: str = "floor"
) -> Iterator[tuple[int, int, list[int]]]:
    """(owner, horizon, ids) of each timeline, from the columns ``ids`` and ``floor``."""
    for row in batch.to_pylist():
        horizon, kept = rebuilt_timeline(
            row[ids] or (), cap=cap, slack=slack, floor=row[floor] or 0
        )
        yield row["owner"], horizon, kept


@spark_task
def write_timelines_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, generation: int
) -> Iterator[pa.RecordBatch]:
    """Write this partition's timelines into ``generation``; return their lengths
    (-1 for the users idle in the active generation: their timelines stay dropped)."""
    store = store_for(config, timeout=120)
    live = store.active_generation()
    for batch in batches:
        rows = list(_timelines(batch, config.timeline_size, config.timeline_slack))
        owners = [o for o, _, _ in rows]
        idle = store.dropped(live, owners) if live is not None and live != generation else set()
        store.write_timelines(
            generation, ((o, pack_timeline(h, ids)) for o, h, ids in rows if o not in idle)
        )
        store.write_dropped(generation, idle)
        pulls = batch.column("pulls").to_pylist()
        store.write_pulls(generation, ((o, p) for o, p in zip(owners, pulls, strict=True) if p))
        yield arrow.batch(
            {"owner": owners, "entries": [-1 if o in idle else len(ids) for o, _, ids in rows]},
            WRITTEN,
        )


@spark_task
def diff_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, live: int, newest_tweet: int
) -> Iterator[pa.RecordBatch]:
    """Compare what readers see of the rebuilt timelines (the pulled authors'
    lists merged in) with what they see of the live generation's; tweets newer
    than the snapshot are left out of the live side."""
    store = store_for(config, timeout=120)
    cap = config.timeline_size
    for batch in batches:
        rows = list(_timelines(batch, cap, config.timeline_slack, ids="seen", floor="seen_floor"))
        views = store.timelines(live, [o for o, _, _ in rows])
        out: dict[str, list[Any]] = arrow.columns(DIFF)
        for (owner, _, ids), view in zip(rows, views, strict=True):
            want = set(visible(ids, cap))
            have = {i for i in view.ids if i <= newest_tweet} if view else set()
            out["owner"].append(owner)
            out["live_missing"].append(view is None)
            out["missing"].append(len(want - have))
            out["extra"].append(len(have - want))
        yield arrow.batch(out, DIFF)
