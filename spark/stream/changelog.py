"""Extract: the changelogs as the streaming job reads them (the rebuild
decodes them in its read tasks instead: spark.rebuild.read, spark.rebuild.decode).

Each record becomes ``bucket``, what the join groups by (the state bucket of
the record's join key: :func:`bucket_column`), and ``record``, everything
else about the Kafka record packed into one binary value
(:class:`ChangelogRecord`: the source's ``topic``, ``partition``,
``offset``, ``timestamp``, ``key`` and ``value``, plus the headers parsed
once here in SQL: ``seq``, the outbox seq; ``jk``, the join key the header
names; ``mark``, set on the relay's marks only). Then each Arrow batch of
those is cut into *runs*, one row per bucket (:func:`runs`: the records'
lengths and the records one after another), and the runs are what the join
receives.

The join key is ``jk``; :data:`MARKS` for the relay's marks; a negative
per-partition key for a record without a usable one (decoding then fails
and dead-letters it). The join reads each author's id back from ``jk``.

Why packed, and why runs: PySpark hands a stateful operator its input as
one ``Row`` per input row, built cell by cell from Arrow (a pyarrow scalar
and its ``as_py()`` per cell), and shuffles it row by row. With ten columns
per record that conversion cost about as much as the join itself; packed,
it is two cells and one ``bytes.partition``; in runs, three cells per
bucket and batch, and a slice per record. A like, which delivers nothing,
costs about half as much in the job in runs as one row per record
(docs/performance.md has the figures).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fanout.config import StarlingConfig
from fanout.model import events
from spark.source.datasource import KafkaChangelogSource, changelog_options
from spark.source.offsets import Offsets


def header_column(name: str) -> Any:
    """A decimal header as a bigint (null when missing or not a number)."""
    return F.expr(
        f"try_cast(cast(get(filter(headers, h -> h.key = '{name}'), 0).value as string) as bigint)"
    )


#: The join key every relay mark is grouped under.
MARKS = 0


def join_key_column() -> Any:
    jk = F.col("jk")
    return (
        F.when(F.col("mark").isNotNull(), F.lit(MARKS))
        .when(jk > 0, jk)
        .otherwise(-(F.col("partition") + 1))
    )


#: How many state buckets the join's authors are spread over (spark.stream.operator).
#: Fewer buckets, fewer state calls per micro-batch (a bucket's key is set
#: once however many of its authors are active); it must stay well above the
#: shuffle partitions so every state partition gets some, and it is fixed for
#: a checkpoint's life (changing it is a state layout change: a rebuild).
STATE_BUCKETS = 256


def bucket_column(join_key: Any) -> Any:
    """The state bucket of a join key: 1 to :data:`STATE_BUCKETS` for an
    author, the key itself for the marks and for records without a key
    (those never reach an author's state)."""
    return F.when(join_key > 0, F.pmod(join_key, F.lit(STATE_BUCKETS)) + 1).otherwise(join_key)


class ChangelogRecord(NamedTuple):
    """One changelog record as the join receives it (:func:`record_column`)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    seq: int | None
    jk: int | None
    mark: int | None = None


#: The fields of :func:`record_column`'s text head, in order, before the two lengths.
_HEAD = ("topic", "partition", "offset", "timestamp", "seq", "jk", "mark")


def record_column() -> Any:
    """The record packed into one binary column (what :func:`unpack_record`
    reads): a UTF-8 head ``topic|partition|offset|timestamp|seq|jk|mark|
    key length|value length`` (an empty field for a null, -1 for a null key or
    value), a newline, then the key's bytes and the value's. Kafka topic names
    hold neither ``|`` nor a newline."""
    text = [F.coalesce(F.col(name).cast("string"), F.lit("")) for name in _HEAD]
    lengths = [F.coalesce(F.length(name), F.lit(-1)).cast("string") for name in ("key", "value")]
    return F.concat(
        F.encode(F.concat_ws("|", *text, *lengths), "UTF-8"),
        F.lit(b"\n"),
        F.coalesce(F.col("key"), F.lit(b"")),
        F.coalesce(F.col("value"), F.lit(b"")),
    )


def _number(text: str) -> int | None:
    return int(text) if text else None


def unpack_record(raw: bytes) -> ChangelogRecord:
    """A record packed by :func:`record_column`."""
    head, _, body = raw.partition(b"\n")
    fields = head.decode().split("|")
    topic, partition, offset, timestamp, seq, jk, mark, key_len, value_len = fields
    k, v = int(key_len), int(value_len)
    return ChangelogRecord(
        topic,
        int(partition),
        int(offset),
        _number(timestamp),
        None if k < 0 else body[:k],
        None if v < 0 else body[max(k, 0) :],
        _number(seq),
        _number(jk),
        _number(mark),
    )


def pack_record(record: ChangelogRecord) -> bytes:
    """:func:`record_column` in Python, for tests that hand the join records
    without Spark (a test checks that both agree)."""
    values = [getattr(record, name) for name in _HEAD]
    head = ["" if value is None else str(value) for value in values]
    head += [str(-1 if b is None else len(b)) for b in (record.key, record.value)]
    return "|".join(head).encode() + b"\n" + (record.key or b"") + (record.value or b"")


#: What :func:`read_changelogs` hands the join: runs of records of one bucket.
RUNS_SCHEMA = "bucket bigint, lengths binary, records binary"
_LENGTH = np.dtype("<i4")


def runs(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The (``bucket``, ``record``) rows of ``batch`` as one row per bucket:
    ``lengths``, the records' byte lengths (little-endian int32), and
    ``records``, the records one after another, in the batch's order."""
    buckets = batch.column(0).to_numpy(zero_copy_only=False)
    order = np.argsort(buckets, kind="stable")
    records = batch.column(1).take(pa.array(order)).cast(pa.large_binary())
    buckets = buckets[order]
    _, offsets_buffer, data = records.buffers()
    first = records.offset
    offsets = np.frombuffer(offsets_buffer, np.int64)[first : first + len(records) + 1]
    lengths = np.diff(offsets).astype(_LENGTH)
    cuts = [0, *(np.flatnonzero(np.diff(buckets)) + 1).tolist(), len(buckets)]
    spans = list(itertools.pairwise(cuts))
    view = memoryview(data)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([int(buckets[i]) for i, _ in spans], pa.int64()),
            pa.array([lengths[i:j].tobytes() for i, j in spans], pa.binary()),
            pa.array([view[offsets[i] : offsets[j]].tobytes() for i, j in spans], pa.binary()),
        ],
        names=["bucket", "lengths", "records"],
    )


def batch_runs(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """:func:`runs` of each non-empty batch (a ``mapInArrow`` function)."""
    for batch in batches:
        if batch.num_rows:
            yield runs(batch)


def records_of(lengths: bytes, records: bytes) -> Iterator[bytes]:
    """The packed records of one run (:func:`runs`)."""
    start = 0
    for n in np.frombuffer(lengths, _LENGTH).tolist():
        yield records[start : start + n]
        start += n


def read_changelogs(
    spark: SparkSession,
    config: StarlingConfig,
    *,
    starting: Offsets | None = None,
    max_records: int | None = None,
    fail_on_data_loss: bool = True,
) -> DataFrame:
    """Both changelogs as a stream of (``bucket``, ``record``), from
    ``starting`` (default: the start of the log; it applies only to a
    checkpoint that has not committed a batch), at most ``max_records``
    records per micro-batch."""
    options = changelog_options(config, starting, None, max_records, fail_on_data_loss)
    spark.dataSource.register(KafkaChangelogSource)
    return (
        spark.readStream.format(KafkaChangelogSource.name())
        .options(**options)
        .load()
        .withColumn("seq", header_column(events.HEADER_SEQ))
        .withColumn("jk", header_column(events.HEADER_JOIN_KEY))
        .withColumn("mark", header_column(events.HEADER_MARK))
        .select(bucket_column(join_key_column()).alias("bucket"), record_column().alias("record"))
        .mapInArrow(batch_runs, RUNS_SCHEMA)
    )
