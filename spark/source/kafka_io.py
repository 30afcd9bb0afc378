"""Reading Kafka outside Spark's own API: the consumers the source and the
rebuild use, the true end offsets of partitions, and an offset range's
records (executor side). :mod:`spark.source.datasource` makes a Spark data
source of them.

**End offsets.** ListOffsets (``get_watermark_offsets``, asked of the broker,
not the client's cache) answers the end of the log: the offset the next
record gets, whatever compaction removed below it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from fanout.config import KafkaClient
from fanout.procs import per_process
from spark.runtime.worker_heap import spark_task
from spark.source.offsets import OffsetRange, Offsets

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    pass


class MissingTopic(RuntimeError):
    """A topic the source reads does not exist (any more) on the broker."""


def connection(client: str | KafkaClient) -> KafkaClient:
    """A Kafka connection from its settings, or from brokers alone."""
    return (("bootstrap.servers", client),) if isinstance(client, str) else client


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


#: Errors that asking again cannot mend: a refused login or permission, a bad
#: argument. Every other error of a partition's end offset is its leadership
#: moving (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, OFFSET_NOT_AVAILABLE
#: while a new leader's high watermark catches up, UNKNOWN_TOPIC_OR_PART for
#: a moment) or a leader that died (_TIMED_OUT, _TRANSPORT, _DESTROY_BROKER,
#: _ALL_BROKERS_DOWN): measured on a three-node cluster with nodes SIGKILLed.
HOPELESS = frozenset({29, 30, 31, 58, -169, -186})
#: How long the end offsets of a set of topics may take while a partition's
#: leadership moves: a killed broker is noticed by the controller after its
#: session timeout (9 s by default), then the client learns the new leader.
END_OFFSETS_TIMEOUT = 30.0
#: One ListOffsets attempt: a request to a leader that died waits this long,
#: then the client asks where the leader is now.
ATTEMPT_TIMEOUT = 2.0


class EndOffsetReader:
    """Asks the broker for the end offsets of topics' partitions, over one
    consumer kept between questions (the stream's source asks every trigger)."""

    def __init__(self, client: str | KafkaClient) -> None:
        self.client = connection(client)
        self.bootstrap = dict(self.client)["bootstrap.servers"]
        self._consumer: Any = None

    def end_offsets(self, topics: tuple[str, ...], timeout: float = END_OFFSETS_TIMEOUT) -> Offsets:
        from confluent_kafka import KafkaException, TopicPartition

        if self._consumer is None:
            self._consumer = _consumer(self.client)
        consumer = self._consumer
        try:
            metadata = consumer.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise RuntimeError(f"Kafka at {self.bootstrap} does not answer: {exc}") from exc
        out: Offsets = {}
        for topic in topics:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                raise MissingTopic(f"topic {topic!r} does not exist on {self.bootstrap}")
            deadline = time.monotonic() + timeout
            out[topic] = {
                str(p): self._end(TopicPartition(topic, p), deadline)
                for p in sorted(info.partitions)
            }
        return out

    def _end(self, partition: Any, deadline: float) -> int:
        """One partition's end offset. While its leadership moves (a broker
        lost, measured on a three-node cluster), the old leader answers
        NOT_LEADER_OR_FOLLOWER or, killed, nothing at all (the request times
        out), and a new topic's partitions may not be in the client's metadata
        yet: asked again, in short attempts, until ``deadline``, each time
        after asking the cluster where the partition's leader is now."""
        from confluent_kafka import KafkaError, KafkaException

        warned = False
        while True:
            left = deadline - time.monotonic()
            try:
                return int(
                    self._consumer.get_watermark_offsets(
                        partition, timeout=max(0.1, min(ATTEMPT_TIMEOUT, left)), cached=False
                    )[1]
                )
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                moving = isinstance(error, KafkaError) and not (
                    error.fatal() or error.code() in HOPELESS
                )
                if not moving or deadline - time.monotonic() <= 0:
                    raise RuntimeError(f"Kafka at {self.bootstrap} does not answer: {exc}") from exc
                if not warned:
                    log.warning(
                        "end offset of %s/%d: its leader does not answer (%s); asking the "
                        "cluster for the partition's leader and again, for up to %.0f s",
                        partition.topic,
                        partition.partition,
                        error.str() if isinstance(error, KafkaError) else exc,
                        max(0.0, left),
                    )
                    warned = True
                with contextlib.suppress(KafkaException):  # refreshes the client's metadata
                    self._consumer.list_topics(partition.topic, timeout=min(ATTEMPT_TIMEOUT, left))
                time.sleep(0.1)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def end_offsets(
    client: str | KafkaClient, topics: tuple[str, ...], timeout: float = END_OFFSETS_TIMEOUT
) -> Offsets:
    """The end offsets of ``topics``, by a reader opened and closed for the
    question (:class:`EndOffsetReader`)."""
    reader = EndOffsetReader(client)
    try:
        return reader.end_offsets(topics, timeout)
    finally:
        reader.close()


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
