"""A Kafka source for Spark written as a Python data source.

The JVM Kafka connector cannot be installed here (no Maven Central), and a
Python data source keeps the offsets in Spark's checkpoint, so input is
exactly-once. Rows have the shape of Spark's own
Kafka source (``timestamp`` in epoch milliseconds); a tombstone is a row
with a null ``value``.

Options (``spark.readStream.format("starling-kafka").option(...)``):

| option | meaning |
| --- | --- |
| ``bootstrap.servers`` | the brokers |
| ``kafka.<setting>`` | a librdkafka setting of its consumers (``kafka.security.protocol``) |
| ``topics`` | comma-separated topic names |
| ``maxRecordsPerTrigger`` | read at most this many records per micro-batch |
| ``failOnDataLoss`` | ``true`` (default): fail when the checkpoint is ahead of the log |
| ``startingOffsets`` | JSON ``{topic: {partition: offset}}`` to start from (default: 0); a
  streaming query uses it only when it has no checkpoint yet (a rebuild's snapshot) |
| ``endingOffsets`` | batch reads: JSON ``{topic: {partition: offset}}`` (default: the end) |
| ``minPartitions`` | batch reads: at least this many tasks, offset ranges cut evenly |

**End offsets.** Apache Kafka's ListOffsets answers the end of the log; the
embedded Tansu broker answers the base offset of the last record batch + 1
(measured). So the source asks ListOffsets, then fetches from one
record before that answer with ``enable.partition.eof``: the end-of-partition
event carries the real end. On Kafka both agree; on Tansu the fetch corrects
the answer. One fetch of the last record batch per partition per trigger.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from fanout.config import KafkaClient
from fanout.procs import per_process
from spark.offsets import (
    OffsetRange,
    Offsets,
    clamp_to_log,
    data_loss,
    limit_offsets,
    ranges,
    split_ranges,
)
from spark.worker_heap import spark_task

log = logging.getLogger(__name__)

NAME = "starling-kafka"
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp bigint, "
    "headers array<struct<key: string, value: binary>>"
)
#: :data:`SCHEMA` as the Arrow schema Spark expects of a reader's record batches.
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        (
            "headers",
            pa.list_(
                pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))
            ),
        ),
    ]
)


class DataLossError(RuntimeError):
    pass


class MissingTopic(RuntimeError):
    """A topic the source reads does not exist (any more) on the broker."""


#: Source options with this prefix are Kafka client settings (as in Spark's own
#: Kafka source): ``kafka.security.protocol`` is librdkafka's ``security.protocol``.
KAFKA_OPTION = "kafka."


def connection(client: str | KafkaClient) -> KafkaClient:
    """A Kafka connection from its settings, or from brokers alone."""
    return (("bootstrap.servers", client),) if isinstance(client, str) else client


def source_options(client: KafkaClient) -> dict[str, str]:
    """The options that carry a Kafka connection to the source."""
    settings = dict(client)
    out = {"bootstrap.servers": settings.pop("bootstrap.servers")}
    return out | {KAFKA_OPTION + name: value for name, value in settings.items()}


@dataclass(frozen=True)
class SourceOptions:
    client: KafkaClient
    topics: tuple[str, ...]
    max_records: int | None = None
    fail_on_data_loss: bool = True
    read_timeout: float = 60.0
    starting: Offsets | None = None
    min_partitions: int = 0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        bootstrap = options.get("bootstrap.servers")
        topics = tuple(t.strip() for t in options.get("topics", "").split(",") if t.strip())
        if not bootstrap or not topics:
            raise ValueError("starling-kafka needs the options bootstrap.servers and topics")
        max_records = options.get("maxRecordsPerTrigger")
        settings = sorted(
            (name[len(KAFKA_OPTION) :], value)
            for name, value in options.items()
            if name.startswith(KAFKA_OPTION)
        )
        return cls(
            client=(("bootstrap.servers", bootstrap), *settings),
            topics=topics,
            max_records=int(max_records) if max_records else None,
            fail_on_data_loss=options.get("failOnDataLoss", "true").lower() != "false",
            read_timeout=float(options.get("readTimeoutSeconds", "60")),
            min_partitions=int(options.get("minPartitions", "0")),
            starting=json.loads(options["startingOffsets"])
            if options.get("startingOffsets")
            else None,
        )


# --- Kafka I/O -------------------------------------------------------------------------


def consumer_settings(client: KafkaClient) -> dict[str, Any]:
    return {
        **dict(client),
        "group.id": "starling-spark-source",  # never joined: partitions are assigned
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 10,
        # Big fetches: fewer round trips to the broker when a read is long (the
        # rebuild's, a replay's). Measured on a 639,278-record log: 131,000 ->
        # 165,000 records/s for one reader. These are upper bounds, so a
        # micro-batch's small fetches are unchanged.
        "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 16 << 20,
        # Once a partition's local queue holds queued.min.messages (100,000)
        # records, librdkafka pauses its fetches for fetch.queue.backoff.ms, by
        # default a whole second: a long read stalled about once per 100,000
        # records, with the broker and the reader both idle. Measured, one reader
        # of a 1,162,445-record partition: 7.6 s -> 1.2 s. The queue's bounds
        # (its memory) are unchanged; a micro-batch (20,000 records at most)
        # seldom fills the queue.
        "fetch.queue.backoff.ms": 10,
        "socket.connection.setup.timeout.ms": 5000,
        "logger": log,
    }


def _consumer(client: KafkaClient) -> Any:
    from confluent_kafka import Consumer

    return Consumer(consumer_settings(client))


class EndOffsetProbe:
    """Finds the true end offset of partitions, on Kafka and on Tansu."""

    def __init__(self, client: str | KafkaClient) -> None:
        self.client = connection(client)
        self.bootstrap = dict(self.client)["bootstrap.servers"]
        self._consumer: Any = None

    def end_offsets(self, topics: tuple[str, ...], timeout: float = 15.0) -> Offsets:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if self._consumer is None:
            self._consumer = _consumer(self.client)
        consumer = self._consumer
        try:
            metadata = consumer.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise RuntimeError(f"Kafka at {self.bootstrap} does not answer: {exc}") from exc
        listed: dict[tuple[str, int], int] = {}
        for topic in topics:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                raise MissingTopic(f"topic {topic!r} does not exist on {self.bootstrap}")
            for p in info.partitions:
                listed[(topic, p)] = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=timeout
                )[1]
        ends = dict(listed)
        probe = {tp: hi for tp, hi in listed.items() if hi > 0}
        if probe:
            consumer.assign([TopicPartition(t, p, hi - 1) for (t, p), hi in probe.items()])
            deadline = time.monotonic() + timeout
            seen: set[tuple[str, int]] = set()
            while len(seen) < len(probe):
                if time.monotonic() > deadline:
                    missing = sorted(set(probe) - seen)
                    raise RuntimeError(f"no end-of-partition answer from Kafka for {missing}")
                msg = consumer.poll(0.1)  # returns as soon as an event is there
                if msg is None:
                    continue
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    tp = (msg.topic(), msg.partition())
                    ends[tp] = max(ends[tp], msg.offset())
                    seen.add(tp)
            consumer.unassign()
        out: Offsets = {topic: {} for topic in topics}
        for (topic, p), end in sorted(ends.items()):
            out[topic][str(p)] = end
        return out

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def end_offsets(
    client: str | KafkaClient, topics: tuple[str, ...], timeout: float = 15.0
) -> Offsets:
    """The true end offsets of ``topics``, by a probe opened and closed for the
    question (:class:`EndOffsetProbe`)."""
    probe = EndOffsetProbe(client)
    try:
        return probe.end_offsets(topics, timeout)
    finally:
        probe.close()


def record_batch(
    part: OffsetRange,
    keys: list[bytes | None],
    values: list[bytes | None],
    offsets: list[int],
    stamps: list[int],
    headers: list[list[tuple[str, bytes]]],
) -> pa.RecordBatch:
    """The records of one ``consume()`` call as columns of :data:`SCHEMA`."""
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([part.topic] * n, pa.string()),
            pa.array([part.partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.int64()),
            pa.array(headers, ARROW_SCHEMA.field("headers").type),
        ],
        schema=ARROW_SCHEMA,
    )


@per_process
def _worker_consumer(client: KafkaClient) -> Any:
    """The Python worker's consumer, reused across the tasks it runs."""
    return _consumer(client)


@per_process
def _topic_looked_up(client: KafkaClient, topic: str) -> bool:
    """Ask the broker about ``topic`` once per worker, before the worker's
    consumer is first assigned one of its partitions.

    librdkafka looks up a topic it has not seen yet on its periodic topic
    scan, once a second, and fetches nothing from it until then: the first
    read of each topic in a worker waited 0.5-1.0 s with nothing to do
    (measured: the first micro-batch of tweets after a restart, each read
    task of a rebuild). A metadata request of our own fills the client's
    cache, and the assignment finds the partition's leader there. If the
    broker does not answer, the read goes on and waits for the scan."""
    from confluent_kafka import KafkaException

    try:
        _worker_consumer(client).list_topics(topic, timeout=10)
    except KafkaException as exc:
        log.warning("metadata of %s not fetched ahead of the read: %s", topic, exc)
        return False
    return True


#: One ``consume()`` call's records of a range, as columns: keys, values,
#: offsets, timestamps (ms), headers.
Columns = tuple[
    list[bytes | None], list[bytes | None], list[int], list[int], list[list[tuple[str, bytes]]]
]


@spark_task
def consume_range(
    client: str | KafkaClient, part: OffsetRange, timeout: float
) -> Iterator[Columns]:
    """Yield the records of ``part`` (executor side) as :data:`Columns`, one
    tuple per ``consume()`` call; :class:`DataLossError` if they do not all
    arrive within ``timeout`` seconds."""
    from confluent_kafka import KafkaError, TopicPartition

    client = connection(client)
    consumer = _worker_consumer(client)
    _topic_looked_up(client, part.topic)
    consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
    deadline = time.monotonic() + timeout
    position = part.start
    try:
        while position < part.end:
            if time.monotonic() > deadline:
                raise DataLossError(
                    f"{part.topic}/{part.partition}: offsets {position}-{part.end} did not arrive "
                    f"within {timeout:.0f}s; did the broker lose data?"
                )
            # Ask for exactly what is missing: consume() returns as soon as that many
            # messages are buffered (it would otherwise wait out its timeout).
            columns: Columns = ([], [], [], [], [])
            keys, values, offsets, stamps, headers = columns
            for msg in consumer.consume(min(part.end - position, 10_000), timeout=0.1):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= part.end:  # compacted away up to the end
                            position = part.end
                        continue
                    raise RuntimeError(f"{part.topic}/{part.partition}: {err}")
                offset = msg.offset()
                if offset < part.start:
                    continue
                if offset >= part.end:
                    position = part.end
                    break
                position = offset + 1
                keys.append(msg.key())
                values.append(msg.value())
                offsets.append(offset)
                stamps.append(msg.timestamp()[1])
                headers.append(msg.headers() or [])
            if offsets:
                yield columns
    finally:
        consumer.unassign()


def read_range(
    client: str | KafkaClient, part: OffsetRange, timeout: float
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``part`` as Arrow batches of :data:`SCHEMA`
    (executor side), one per ``consume()`` call.
    Handing Spark columns instead of a tuple per record spares its per-record
    type checks and conversion (measured: ~8 µs of a record's ~28 µs in the
    rebuild's read)."""
    for columns in consume_range(client, part, timeout):
        yield record_batch(part, *columns)


# --- the data source ---------------------------------------------------------------------


class KafkaStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._probe = EndOffsetProbe(options.client)
        self._latest: Offsets | None = None

    def initialOffset(self) -> dict:
        ends = self._probe.end_offsets(self.options.topics)
        given = self.options.starting or {}
        return {t: {p: int(given.get(t, {}).get(p, 0)) for p in parts} for t, parts in ends.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records:
            return ReadMaxRows(self.options.max_records)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        ends = self._probe.end_offsets(self.options.topics)
        self._latest = ends
        # New partitions start at 0; known ones must not be beyond the log.
        start = {t: {**dict.fromkeys(ends.get(t, {}), 0), **parts} for t, parts in start.items()}
        problems = data_loss(start, ends)
        if problems:
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    "the Kafka log is behind this query's checkpoint: "
                    + "; ".join(problems)
                    + ". The broker lost data (the embedded Tansu broker keeps everything in "
                    "memory). Start the fanout job with a fresh checkpoint (--reset) and rebuild "
                    "the timelines, or set failOnDataLoss=false to skip ahead."
                )
            log.warning("data loss, continuing from the end of the log: %s", problems)
            start = clamp_to_log(start, ends)
        if isinstance(limit, ReadMaxRows):
            return limit_offsets(start, ends, limit.max_rows)
        return {
            t: {p: max(o, start.get(t, {}).get(p, 0)) for p, o in parts.items()}
            for t, parts in ends.items()
        }

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        return ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.options.client, partition, self.options.read_timeout)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing to commit to Kafka."""

    def stop(self) -> None:
        self._probe.close()


class KafkaBatchReader(DataSourceReader):
    """Reads from ``startingOffsets`` (default: the start) to ``endingOffsets`` (or the
    end)."""

    def __init__(self, options: SourceOptions, raw: Mapping[str, str]) -> None:
        self.options = options
        self.end: Offsets = (
            json.loads(raw["endingOffsets"])
            if "endingOffsets" in raw
            else end_offsets(options.client, options.topics)
        )
        self.start: Offsets = options.starting or {}

    def partitions(self) -> list[OffsetRange]:
        return split_ranges(ranges(self.start, self.end), self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self.options.client, partition, self.options.read_timeout)


class KafkaChangelogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions.parse(self.options))

    def reader(self, schema: Any) -> DataSourceReader:
        return KafkaBatchReader(SourceOptions.parse(self.options), self.options)
