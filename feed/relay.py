"""The outbox relay: publish committed outbox rows to Kafka, in order, once.

The write use-cases never talk to Kafka; they append
an outbox row in the same transaction as their table change. This relay
reads unpublished rows in id (``seq``) order, produces them with an
idempotent producer, waits for every delivery report, and only then marks
the delivered rows published.

After a run it writes a *mark* into every partition of every topic: the
highest published ``seq``, below which everything is on the log (see
:mod:`fanout.model.watermark`, which turns the marks into the contiguous
watermark read-your-writes waits for).

Ordering rule: a run marks published only the longest *prefix* of a batch
that was delivered. If record 5 fails and 6 (another key) succeeds, 6 stays
unpublished too and is sent again after 5, so the log's suffix replays the
writes in commit order: each key's last record is still its latest state.

:class:`OutboxRelay` knows nothing of Django (the rows come from an
:class:`OutboxStore`) and :class:`RelayCoordinator` makes sure one relay runs
at a time across all Celery workers (a Redis lock plus a "dirty" flag so a
trigger that arrives while another relay holds the lock is never lost).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fanout.config import StarlingConfig
from fanout.model import events
from fanout.model.partitioning import partition_for
from fanout.store import keys

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PendingEvent:
    seq: int
    topic: str  # logical: events.TWEETS / events.FOLLOWS
    key: bytes
    value: bytes | None
    join_key: int


class OutboxStore(Protocol):
    def pending(self, limit: int) -> Sequence[PendingEvent]:
        """Unpublished rows, lowest ``seq`` first; none that a lower seq could
        still precede (an uncommitted transaction's row)."""

    def mark_published(self, seqs: Sequence[int]) -> None: ...

    def published_high(self) -> int:
        """The highest published ``seq``: every lower one is published or
        will never exist (a rolled-back transaction's)."""


@dataclass(frozen=True)
class RelayResult:
    published: int = 0
    error: str | None = None
    more: bool = False  # stopped at the batch limit with rows still pending

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class MarkState:
    """The last mark this process wrote (see fanout.model.events.mark_record): a run
    with nothing new to say writes none."""

    seq: int = 0
    #: The highest mark a run could not write: the next run writes it, even
    #: with nothing new to publish (else readers would wait for the next write).
    owed: int = 0


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One record to produce to an explicit partition."""

    seq: int
    topic: str
    key: bytes
    value: bytes | None
    partition: int
    headers: list[tuple[str, bytes]]


class OutboxRelay:
    def __init__(
        self,
        *,
        store: OutboxStore,
        producer: Any,  # a confluent_kafka.Producer (or a test double with its methods)
        config: StarlingConfig,
        marks: MarkState | None = None,
        batch_size: int = 1000,
        max_batches: int = 20,
        delivery_timeout: float = 45.0,
    ) -> None:
        self.store = store
        self.producer = producer
        self.config = config
        self.marks = marks if marks is not None else MarkState()
        self.batch_size = batch_size
        self.max_batches = max_batches
        # Longer than the producer's message.timeout.ms, so every message has
        # a delivery report (success or failure) before the run ends.
        self.delivery_timeout = delivery_timeout

    def run(self) -> RelayResult:
        published, more, high = 0, True, 0
        for _ in range(self.max_batches):
            batch = self.store.pending(self.batch_size)
            if not batch:
                more = False
                break
            delivered, error = self._produce([self._outgoing(e) for e in batch])
            if delivered:
                self.store.mark_published([e.seq for e in batch[:delivered]])
                published += delivered
                high = batch[delivered - 1].seq
            if error is not None:
                log.warning("outbox relay stopped after %d records: %s", published, error)
                mark_error = self._mark(high)
                if mark_error is not None:
                    log.warning("outbox relay could not write its mark: %s", mark_error)
                return RelayResult(published, error=error)
        high = max(high, self.marks.owed)
        if not high and not self.marks.seq:  # a new process: say where the log stands
            high = self.store.published_high()
        error = self._mark(high)
        return RelayResult(published, error=error, more=more)

    def _outgoing(self, event: PendingEvent) -> Outgoing:
        return Outgoing(
            seq=event.seq,
            topic=self.config.topics.physical(event.topic),
            key=event.key,
            value=event.value,
            partition=partition_for(event.join_key, self.config.partitions),
            headers=events.headers(event.seq, event.join_key),
        )

    def _mark(self, high: int) -> str | None:
        """Write the mark ``high`` (everything up to it is published) into every
        partition of every topic, unless this process already has; the first error."""
        if high <= self.marks.seq:
            return None
        records = []
        for topic in self.config.topics.all():
            for partition in range(self.config.partitions):
                key, headers = events.mark_record(partition, high)
                records.append(Outgoing(high, topic, key, None, partition, headers))
        _, error = self._produce(records)
        if error is not None:
            self.marks.owed = max(self.marks.owed, high)
            return f"mark {high}: {error}"
        self.marks.seq = high
        self.marks.owed = 0 if self.marks.owed <= high else self.marks.owed
        return None

    def _produce(self, records: Sequence[Outgoing]) -> tuple[int, str | None]:
        """Produce ``records`` in order; return (length of the delivered prefix,
        first error)."""
        outcome: dict[int, str | None] = {}

        def report(n: int) -> Callable[[Any, Any], None]:
            def on_delivery(err: Any, _msg: Any) -> None:
                outcome[n] = None if err is None else str(err)

            return on_delivery

        def produce(n: int, record: Outgoing) -> None:
            self.producer.produce(
                record.topic,
                key=record.key,
                value=record.value,
                partition=record.partition,
                headers=record.headers,
                on_delivery=report(n),
            )

        for n, record in enumerate(records):
            try:
                produce(n, record)
            except BufferError:
                self.producer.poll(0.5)  # local queue full: serve reports, retry once
                try:
                    produce(n, record)
                except BufferError as exc:
                    outcome[n] = f"producer queue full: {exc}"
                    records = records[: n + 1]
                    break
        deadline = time.monotonic() + self.delivery_timeout
        while self.producer.flush(1.0) > 0:
            if time.monotonic() > deadline:
                break
        delivered = 0
        for n, record in enumerate(records):
            err = outcome.get(n, "no delivery report")
            if err is not None:
                return delivered, f"seq {record.seq}: {err}"
            delivered += 1
        return delivered, None


class RelayCoordinator:
    """Runs the relay at most once at a time across processes, with back-off.

    ``run(work)``: set the dirty flag, take the lock (or leave: the holder will
    see the flag), clear the flag, work, release, and go again if the flag was
    set meanwhile. A failed run sets an exponential back-off (1 s to 30 s)
    during which triggers only mark the outbox dirty. :meth:`mark_dirty` is the
    commit's trigger: the same flag says whether a relay task is already on
    its way.
    """

    LOCK = keys.RELAY_LOCK
    DIRTY = keys.RELAY_DIRTY
    BACKOFF = keys.RELAY_BACKOFF
    FAILURES = keys.RELAY_FAILURES
    STATS = keys.RELAY_STATS

    def __init__(self, redis: Any, *, lock_timeout: float = 120.0, max_backoff: int = 30) -> None:
        self.redis = redis
        self.lock_timeout = lock_timeout
        self.max_backoff = max_backoff

    def mark_dirty(self) -> bool:
        """Mark the outbox dirty; True if it was clean, i.e. no relay task is
        queued or running that will still see the new rows (queue one)."""
        return bool(self.redis.set(self.DIRTY, 1, nx=True))

    def unmark(self) -> None:
        """Clear the flag again (the task could not be queued: the next commit tries)."""
        self.redis.delete(self.DIRTY)

    def run(self, work: Callable[[], RelayResult]) -> RelayResult | None:
        self.redis.set(self.DIRTY, 1)
        result: RelayResult | None = None
        while True:
            if self.redis.exists(self.BACKOFF):
                return result
            lock = self.redis.lock(self.LOCK, timeout=self.lock_timeout, blocking=False)
            if not lock.acquire(blocking=False):
                return result
            try:
                self.redis.delete(self.DIRTY)
                result = work()
                self._record(result)
            finally:
                lock.release()
            if not result.ok:
                return result
            if result.more:
                self.redis.set(self.DIRTY, 1)
            if not self.redis.exists(self.DIRTY):
                return result

    def _record(self, result: RelayResult) -> None:
        now = time.time()
        pipe = self.redis.pipeline()
        pipe.hincrby(self.STATS, "published", result.published)
        pipe.hset(self.STATS, "last_run", now)
        if result.ok:
            pipe.delete(self.FAILURES)
            pipe.hset(self.STATS, "last_ok", now)
            pipe.execute()
            return
        pipe.incr(self.FAILURES)
        pipe.hset(self.STATS, "last_error", result.error or "")
        failures = pipe.execute()[-2]
        backoff = min(self.max_backoff, 2 ** (int(failures) - 1))
        self.redis.set(self.BACKOFF, 1, ex=backoff)
        log.warning("outbox relay backing off %ss after %s failed runs", backoff, failures)
