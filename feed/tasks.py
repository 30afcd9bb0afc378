"""Celery tasks. They take no arguments and are safe to run twice."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

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


@shared_task(ignore_result=True)
def rebuild_timelines(run_id: int) -> str:
    """Run ``python -m spark.rebuild`` for an admin-started rebuild and mirror
    its progress (which the rebuild publishes in Redis) into the row."""
    from fanout.timelines import store_for
    from feed.models import TimelineRebuild

    run = TimelineRebuild.objects.get(pk=run_id)
    run.status = TimelineRebuild.Status.RUNNING
    run.save(update_fields=["status"])
    logs = settings.VAR_DIR / "rebuild"
    logs.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "spark.rebuild", "--json"]
    if run.dry_run:
        command.append("--dry-run")
    store = store_for(settings.STARLING)
    log_path = logs / f"run-{run_id}.log"
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)  # noqa: S603
        while proc.poll() is None:
            time.sleep(2)
            _mirror(run, store.rebuild_status())
    status = store.rebuild_status()
    _mirror(run, status)
    run.finished_at = timezone.now()
    if proc.returncode == 0:
        run.status = status.get("state", TimelineRebuild.Status.SUCCEEDED)
        run.summary = json.loads(status["summary"]) if "summary" in status else None
    else:
        run.status = TimelineRebuild.Status.FAILED
        run.error = status.get("error") or f"exit status {proc.returncode}; see {log_path}"
    run.save()
    return str(run.status)


def _mirror(run: Any, status: dict[str, str]) -> None:
    run.stage = status.get("stage", "")[:200]
    run.detail = status.get("detail", "")
    run.save(update_fields=["stage", "detail"])
