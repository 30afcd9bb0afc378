"""Celery tasks. They take ids, never objects, and are safe to run twice."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from celery import shared_task
from confluent_kafka import Producer
from django.conf import settings
from django.utils import timezone

from fanout.config import KafkaClient, StarlingConfig
from fanout.kafka import ensure_topics, producer_settings
from fanout.procs import per_process
from fanout.store.redis_conn import connect
from feed.models import OutboxEvent
from feed.outbox import RELAY_TASK, DjangoOutboxStore
from feed.relay import MarkState, OutboxRelay, RelayCoordinator, RelayResult

log = logging.getLogger(__name__)


def _relay_producer(config: StarlingConfig) -> Producer:
    """One long-lived idempotent producer per process and broker: a message
    still in flight is never produced a second time by a newer producer."""
    return _producer(config.kafka_client())


@per_process
def _producer(client: KafkaClient) -> Producer:
    return Producer(producer_settings(client))


@per_process
def _marks(bootstrap: str, topic_prefix: str) -> MarkState:
    """The last relay mark this process wrote to these topics."""
    return MarkState()


@per_process
def _ensure_topics_once(config: StarlingConfig) -> bool:
    ensure_topics(config, timeout=5.0)
    return True


def run_relay() -> RelayResult:
    """One exclusive relay pass (what the task does), callable directly."""

    def work() -> RelayResult:
        try:
            _ensure_topics_once(settings.STARLING)
        except Exception as exc:
            return RelayResult(error=f"topics not ready: {exc}")
        config = settings.STARLING
        relay = OutboxRelay(
            store=DjangoOutboxStore(),
            producer=_relay_producer(config),
            config=config,
            marks=_marks(config.kafka_bootstrap_servers, config.topics.prefix),
        )
        return relay.run()

    return RelayCoordinator(connect(settings.STARLING)).run(work) or RelayResult()


@shared_task(name=RELAY_TASK, ignore_result=True)
def relay_outbox() -> None:
    result = run_relay()
    if result.published:
        log.info("relay published %d outbox events", result.published)


#: Timelines refilled per task run (each is one query and one outbox event).
REFILLS_PER_RUN = 500


@shared_task(ignore_result=True)
def refill_timelines() -> int:
    """Refill the timelines the fanout job found short (removals left fewer
    than STARLING_TIMELINE_SIZE entries above their horizon) or whose regeneration's
    reset came stale: one reset each, computed by the database
    (services.timeline_reset), of a home timeline (u) or a mentions timeline
    (-u); one of a user who is no more is dropped. Run by beat every
    STARLING_REFILL_SECONDS."""
    from fanout.store.timelines import store_for
    from feed.errors import NotFound
    from feed.services import timeline_reset

    store = store_for(settings.STARLING)
    generation = store.active_generation()
    done = 0
    taken = store.take_refills(REFILLS_PER_RUN)
    for n, user_id in enumerate(taken):
        try:
            seq = timeline_reset(user_id=user_id)
            if generation is not None:  # a regeneration asked for again: cold until seq
                store.continue_regeneration(generation, user_id, seq)
            done += 1
        except NotFound:
            continue
        except Exception:
            store.request_refill(*taken[n:])  # the rest are tried again on the next run
            raise
    if done:
        log.info("refilled %d short timelines", done)
    return done


@shared_task(ignore_result=True)
def drop_idle_timelines() -> int:
    """Drop the timelines of users idle for STARLING_ACTIVE_DAYS (no read, no
    sign-in), and their lists': the fanout job then writes nothing for them,
    and their next read answers from the database while the timeline is
    regenerated. Run by
    beat every hour; it also drops what a rebuild wrote for idle users."""
    from fanout.store.timelines import store_for
    from feed.selectors import idle_batches

    config = settings.STARLING
    store = store_for(config)
    generation = store.active_generation()
    if generation is None:
        return 0
    cutoff = timezone.now() - timedelta(days=config.active_days)
    # Their lists' timelines (owners -L) go with theirs, and come back on read.
    dropped = sum(
        store.drop_idle(generation, users, lists=lists) for users, lists in idle_batches(cutoff)
    )
    if dropped:
        log.info(
            "dropped %d idle users' timelines (not seen for %d days)", dropped, config.active_days
        )
    return dropped


@shared_task(ignore_result=True)
def refresh_metrics() -> None:
    """Refresh the figures of ``/metrics`` that need SQL (feed.metrics): a
    scrape reads them from Redis. Run by beat every STARLING_METRICS_REFRESH_SECONDS."""
    from feed.metrics import refresh_database_gauges

    refresh_database_gauges()


@shared_task(ignore_result=True)
def restore_revocations() -> int:
    """Copy every token revocation in force to Redis again, where the read path
    checks them: one lost on its way after its commit (Redis down for a moment)
    is repaired within a period of beat. Returns how many were copied."""
    from feed.services import revocations_restore

    return revocations_restore()


@shared_task(ignore_result=True)
def prune_outbox() -> None:
    """Delete published outbox rows older than the retention period."""
    cutoff = timezone.now() - timedelta(days=settings.STARLING_OUTBOX_RETENTION_DAYS)
    deleted, _ = OutboxEvent.objects.filter(published_at__lt=cutoff).delete()
    if deleted:
        log.info("pruned %d published outbox rows", deleted)


@shared_task(ignore_result=True)
def rebuild_timelines(run_id: int) -> str:
    """Run ``manage.py rebuild_timelines`` (in a process of its own: it starts a
    Spark driver) for an admin-started rebuild and mirror its progress (which
    the rebuild publishes in Redis) into the row."""
    from fanout.store.timelines import store_for
    from feed.models import TimelineRebuild

    run = TimelineRebuild.objects.get(pk=run_id)
    run.status = TimelineRebuild.Status.RUNNING
    run.save(update_fields=["status"])
    logs = settings.VAR_DIR / "rebuild"
    logs.mkdir(parents=True, exist_ok=True)
    manage = settings.BASE_DIR / "manage.py"
    command = [sys.executable, str(manage), "rebuild_timelines", "--json"]
    if run.dry_run:
        command.append("--dry-run")
    store = store_for(settings.STARLING)
    log_path = logs / f"run-{run_id}.log"
    result_path = logs / f"run-{run_id}.json"  # the command's one JSON document
    with open(log_path, "ab") as log_file, open(result_path, "wb") as result_file:
        proc = subprocess.Popen(command, stdout=result_file, stderr=log_file)  # noqa: S603
        while proc.poll() is None:
            time.sleep(2)
            _mirror(run, store.rebuild_status())
    # The outcome from the command's own document: the status in Redis may
    # be another rebuild's by now (or all along, for a command refused
    # because another rebuild ran).
    result = _result(result_path)
    run.finished_at = timezone.now()
    if proc.returncode == 0:
        run.status = result.get("state", TimelineRebuild.Status.SUCCEEDED)
        run.summary = {k: v for k, v in result.items() if k not in ("ok", "state")} or None
    else:
        run.status = TimelineRebuild.Status.FAILED
        run.error = failure_text(result, proc.returncode, log_path)
    run.save()
    return str(run.status)


def failure_text(result: dict[str, Any], returncode: int, log_path: Path) -> str:
    """A failed rebuild's error for the admin: the command's reason, and, when
    it was stopped after its hand-over, which generation is (or is about to
    be) live after all."""
    error = result.get("error") or f"exit status {returncode}; see {log_path}"
    if result.get("live_untouched") is False and result.get("live"):
        error += f"; {result['live']}"
    return error


def _result(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def _mirror(run: Any, status: dict[str, str]) -> None:
    run.stage = status.get("stage", "")[:200]
    run.detail = status.get("detail", "")
    run.save(update_fields=["stage", "detail"])
