"""Health of the parts a request depends on: database, Redis, Kafka."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient
from django.conf import settings
from django.db import connection

from fanout.config import KafkaClient
from fanout.kafka import admin_settings, topic_partitions
from fanout.procs import per_process
from fanout.store.redis_conn import connect


@per_process
def _admin(client: KafkaClient) -> Any:
    return AdminClient(admin_settings(client))


def _timed(check: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        extra = check() or {}
        result: dict[str, Any] = {"ok": True, **extra}
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    result["latency_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return result


def _database() -> dict[str, Any]:
    from feed.outbox import DjangoOutboxStore

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {"vendor": connection.vendor, "outbox_backlog": DjangoOutboxStore().backlog()}


def _redis() -> None:
    connect(settings.STARLING).ping()


def _kafka() -> dict[str, Any]:
    config = settings.STARLING
    existing = topic_partitions(_admin(config.kafka_client()), timeout=2.0)
    return {"topics": {name: existing.get(name) for name in config.topics.all()}}


def check_all() -> dict[str, Any]:
    checks = {"database": _timed(_database), "redis": _timed(_redis), "kafka": _timed(_kafka)}
    healthy = all(c["ok"] for c in checks.values())
    return {"status": "ok" if healthy else "unavailable", "checks": checks}


#: How long a process answers health checks from its last run of them: a
#: flood of health requests costs one SQL query and one Kafka call a second.
CACHE_SECONDS = 1.0
_last: list[tuple[float, dict[str, Any]]] = []
_lock = threading.Lock()


def cached_check_all(clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """:func:`check_all`, run at most once per :data:`CACHE_SECONDS` per process."""
    with _lock:
        if _last and clock() - _last[0][0] < CACHE_SECONDS:
            return _last[0][1]
        report = check_all()
        _last[:] = [(clock(), report)]
        return report


def public(report: dict[str, Any]) -> dict[str, Any]:
    """What anyone may see: up or not. The checks (hosts, errors, the backlog)
    are for operators (feed.apis.HealthApi says who)."""
    return {"status": report["status"]}
