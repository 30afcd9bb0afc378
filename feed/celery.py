"""The Celery app: runs the outbox relay (triggered on commit, swept by beat).

Every task run is timed into ``starling_task_duration_seconds`` (by task and
outcome). In compose the worker is a container of its own: with
``STARLING_WORKER_METRICS_PORT`` and ``PROMETHEUS_MULTIPROC_DIR`` set, its
main process serves what all its pool processes recorded on that port
(Prometheus scrapes it there). On one host (``make run``) the worker shares
the web's directory instead and ``/metrics`` shows both.
"""

import logging
import os
import time
from typing import Any

from celery import Celery, signals

from fanout.config import Env

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feed.settings")

log = logging.getLogger(__name__)

app = Celery("starling")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["feed"])

_started: dict[str, float] = {}


@signals.task_prerun.connect
def _task_started(task_id: str, **_: Any) -> None:
    _started[task_id] = time.perf_counter()


@signals.task_postrun.connect
def _task_finished(task_id: str, task: Any, state: str | None = None, **_: Any) -> None:
    started = _started.pop(task_id, None)
    if started is not None:
        from feed import metrics

        metrics.observe_task(task.name, (state or "unknown").lower(), time.perf_counter() - started)


@signals.worker_ready.connect
def _serve_metrics(**_: Any) -> None:
    port = Env().int("STARLING_WORKER_METRICS_PORT", 0, low=0, high=65535)
    if not port:
        return
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        log.warning("STARLING_WORKER_METRICS_PORT needs PROMETHEUS_MULTIPROC_DIR: not serving")
        return
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    start_http_server(port, registry=registry)
    log.info("worker metrics on port %s", port)
