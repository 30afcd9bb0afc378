"""The Django side of the transactional outbox.

:func:`append` is called by the use-cases inside their transaction;
:class:`DjangoOutboxStore` is what :class:`fanout.relay.OutboxRelay` reads.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from fanout import events
from fanout.redis_conn import client
from fanout.relay import PendingEvent
from feed.models import OutboxEvent

log = logging.getLogger(__name__)

#: Set while a relay task is queued and not yet started: triggers coalesce.
RELAY_QUEUED = "starling:relay:queued"


def append(event: events.Event) -> int:
    """Add ``event`` to the outbox of the current transaction; return its ``seq``.

    The relay is poked once the transaction commits (never before: it must
    not see, or miss, a row whose transaction may still roll back).
    """
    row = outbox_row(event)
    row.save()
    transaction.on_commit(notify_relay, robust=True)
    return row.pk


def append_many(batch: list[events.Event]) -> int:
    """:func:`append` for many events in one insert; returns the last ``seq``."""
    rows = OutboxEvent.objects.bulk_create([outbox_row(e) for e in batch])
    transaction.on_commit(notify_relay, robust=True)
    return max(row.pk for row in rows)


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
    """Queue one relay task unless one is already queued (runs after commit).

    A relay task clears the flag before it reads the outbox, so a row
    committed before that read is seen by it and a row committed after finds
    the flag clear and queues another task. If Redis is down the write has
    still succeeded; Celery beat's sweep publishes the row later.
    """
    from feed.tasks import relay_outbox

    r = client(settings.STARLING.redis_url)
    try:
        if not r.set(RELAY_QUEUED, 1, nx=True, ex=5):
            return
        relay_outbox.apply_async(retry=False)
    except Exception as exc:  # Redis or Celery's broker: the write must not fail
        log.warning("could not queue the outbox relay (%s); the beat sweep will publish", exc)
        with contextlib.suppress(redis.RedisError):
            r.delete(RELAY_QUEUED)


class DjangoOutboxStore:
    def pending(self, limit: int) -> Sequence[PendingEvent]:
        rows = (
            OutboxEvent.objects.filter(published_at__isnull=True)
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

    def backlog(self) -> int:
        return OutboxEvent.objects.filter(published_at__isnull=True).count()
