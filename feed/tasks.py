"""Celery tasks. They take no arguments and are safe to run twice."""

from __future__ import annotations

import logging
import os
from datetime import timedelta

from celery import shared_task
from confluent_kafka import Producer
from django.conf import settings
from django.utils import timezone

from fanout.kafka import ensure_topics, make_producer
from fanout.redis_conn import client
from fanout.relay import OutboxRelay, RelayCoordinator, RelayResult
from feed.models import OutboxEvent
from feed.outbox import RELAY_QUEUED, DjangoOutboxStore

log = logging.getLogger(__name__)

# One long-lived idempotent producer per process: a message that is still
# in flight is never produced a second time by a newer producer.
_producer: tuple[int, str, Producer] | None = None
_topics_ready: set[tuple[str, str]] = set()


def _relay_producer() -> Producer:
    global _producer
    config = settings.STARLING
    key = (os.getpid(), config.kafka_bootstrap_servers)
    if _producer is None or _producer[:2] != key:
        _producer = (*key, make_producer(config))
    return _producer[2]


def _ensure_topics_once() -> None:
    config = settings.STARLING
    key = (config.kafka_bootstrap_servers, config.topics.prefix)
    if key not in _topics_ready:
        ensure_topics(config, timeout=5.0)
        _topics_ready.add(key)


def run_relay() -> RelayResult:
    """One exclusive relay pass (what the task does), callable directly."""

    def work() -> RelayResult:
        try:
            _ensure_topics_once()
        except Exception as exc:
            return RelayResult(error=f"topics not ready: {exc}")
        relay = OutboxRelay(
            store=DjangoOutboxStore(), producer=_relay_producer(), config=settings.STARLING
        )
        return relay.run()

    r = client(settings.STARLING.redis_url)
    r.delete(RELAY_QUEUED)
    return RelayCoordinator(r).run(work) or RelayResult()


@shared_task(ignore_result=True)
def relay_outbox() -> None:
    result = run_relay()
    if result.published:
        log.info("relay published %d outbox events", result.published)


@shared_task(ignore_result=True)
def prune_outbox() -> None:
    """Delete published outbox rows older than the retention period."""
    cutoff = timezone.now() - timedelta(days=settings.STARLING_OUTBOX_RETENTION_DAYS)
    deleted, _ = OutboxEvent.objects.filter(published_at__lt=cutoff).delete()
    if deleted:
        log.info("pruned %d published outbox rows", deleted)
