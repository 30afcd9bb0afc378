"""The Django side of the transactional outbox.

:func:`append` is called by the use-cases inside their transaction;
:class:`DjangoOutboxStore` is what :class:`feed.relay.OutboxRelay` reads.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from fanout.model import events
from fanout.store.redis_conn import connect
from feed.celery import app
from feed.models import OutboxEvent
from feed.relay import PendingEvent, RelayCoordinator

log = logging.getLogger(__name__)

#: The Celery task that runs the relay (feed.tasks.relay_outbox), sent by name.
RELAY_TASK = "feed.tasks.relay_outbox"


def append(event: events.Event) -> int:
    """Add ``event`` to the outbox of the current transaction; return its ``seq``.

    The relay is poked once the transaction commits (never before: it must
    not see, or miss, a row whose transaction may still roll back).
    """
    return append_many([event])


def append_many(batch: Sequence[events.Event]) -> int:
    """Add events to the outbox of the current transaction in one insert;
    returns the last ``seq``."""
    _own_transaction_id()
    rows = OutboxEvent.objects.bulk_create([outbox_row(e) for e in batch])
    transaction.on_commit(notify_relay, robust=True)
    return max(row.pk for row in rows)


def _own_transaction_id() -> None:
    """On PostgreSQL, make sure the transaction has its id before it takes a
    seq: the relay's wait for in-flight transactions (:func:`settled_high`)
    relies on every seq belonging to a transaction it can see in a snapshot."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_xact_id()")


#: How long the relay waits for transactions still in flight (seconds).
SETTLE_TIMEOUT = 2.0


def settled_high() -> int | None:
    """The highest ``seq`` below which no row can still appear (PostgreSQL).

    Sequence values are handed out in one order and committed in another:
    seq 11 can be visible while 10 is still in flight. So: read the last
    seq handed out, take a snapshot, wait until every transaction in flight
    in it has ended; then every seq up to that value is committed or gone
    for good. None if they do not end within ``SETTLE_TIMEOUT``.
    SQLite runs one write transaction at a time: every seq it has handed out
    is settled.
    """
    if connection.vendor != "postgresql":
        return high_water_seq()
    table = OutboxEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sequence_last_value(pg_get_serial_sequence(%s, 'id'))", [table])
        high = cursor.fetchone()[0] or 0
        cursor.execute("SELECT pg_current_snapshot()::text")
        snapshot = cursor.fetchone()[0]
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            cursor.execute(
                "SELECT count(*) FROM pg_snapshot_xip(%s::pg_snapshot) AS x "
                "WHERE pg_xact_status(x) = 'in progress'",
                [snapshot],
            )
            if cursor.fetchone()[0] == 0:
                return int(high)
            if time.monotonic() > deadline:
                log.warning(
                    "outbox: transactions in flight for %.0fs hold the relay", SETTLE_TIMEOUT
                )
                return None
            time.sleep(0.005)


def outbox_row(event: events.Event) -> OutboxEvent:
    """The (unsaved) outbox row of ``event``."""
    record = events.encode(event)
    return OutboxEvent(
        topic=record.topic,
        key=record.key.decode("ascii"),
        value=None if record.value is None else record.value.decode("utf-8"),
        join_key=record.join_key,
    )


def high_water_seq() -> int:
    """The newest ``seq`` written so far: what a no-op write returns.

    Waiting for the fanout watermark to reach it means "my view reflects
    everything committed before my request", the same promise a real write's
    ``seq`` makes.
    """
    return OutboxEvent.objects.aggregate(m=Max("id"))["m"] or 0


def notify_relay() -> None:
    """Queue one relay task unless one is already on its way (runs after commit).

    The relay's dirty flag (:class:`feed.relay.RelayCoordinator`) says so: a
    relay clears it, under its lock, before it reads the outbox, so a row
    committed before that read is seen by it, and a row committed after sets
    the flag again: a task is queued, or the relay still holding the lock
    goes round once more. If Redis is down the write has still succeeded;
    Celery beat's sweep publishes the row later.
    """
    coordinator = RelayCoordinator(connect(settings.STARLING))
    try:
        if not coordinator.mark_dirty():
            return
        app.send_task(RELAY_TASK, retry=False)
    except Exception as exc:  # Redis or Celery's broker: the write must not fail
        log.warning("could not queue the outbox relay (%s); the beat sweep will publish", exc)
        with contextlib.suppress(redis.RedisError):
            coordinator.unmark()


class DjangoOutboxStore:
    def pending(self, limit: int) -> Sequence[PendingEvent]:
        high = settled_high()
        if high is None:
            return []
        rows = (
            OutboxEvent.objects.filter(published_at__isnull=True, id__lte=high)
            .order_by("id")
            .values_list("id", "topic", "key", "value", "join_key")[:limit]
        )
        return [
            PendingEvent(
                seq=seq,
                topic=topic,
                key=key.encode("ascii"),
                value=None if value is None else value.encode("utf-8"),
                join_key=join_key,
            )
            for seq, topic, key, value, join_key in rows
        ]

    def mark_published(self, seqs: Sequence[int]) -> None:
        OutboxEvent.objects.filter(id__in=list(seqs)).update(published_at=timezone.now())

    def published_high(self) -> int:
        """The highest published seq. The relay publishes settled rows in seq
        order, so every seq below it is published or never existed."""
        newest = OutboxEvent.objects.filter(published_at__isnull=False).order_by("-id")
        return newest.values_list("id", flat=True).first() or 0

    def backlog(self) -> int:
        return OutboxEvent.objects.filter(published_at__isnull=True).count()
