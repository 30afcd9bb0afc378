"""``GET /metrics``: what operators watch, in Prometheus' text format.

| metric | from |
| --- | --- |
| ``starling_http_request_duration_seconds`` | web requests by route, method, status |
| ``starling_task_duration_seconds`` | Celery task runs by task and outcome (a histogram) |
| ``starling_outbox_backlog`` | outbox rows not yet on Kafka |
| ``starling_relay_lag_seconds`` | age of the oldest unpublished outbox row |
| ``starling_relay_published_total`` | outbox rows the relay has put on Kafka |
| ``starling_relay_failures`` | relay runs failed in a row (0 when the last one worked) |
| ``starling_fanout_watermark_seq`` | every write ``seq`` up to it is in the timelines |
| ``starling_fanout_highest_seq`` | the highest write ``seq`` applied (not all below it may be) |
| ``starling_fanout_lag_seconds`` | Kafka → Redis for the newest applied record |
| ``starling_fanout_watermark_age_seconds`` | since the job last applied a micro-batch |
| ``starling_freshness_seconds`` | commit-to-visible of the newest applied write |
| ``starling_fanout_batch_seconds`` | histogram of micro-batch durations (the sink's view) |
| ``starling_fanout_deliveries_total`` etc. | counters kept with the watermark |
| ``starling_refills_pending`` | short timelines waiting for a refill from the database |
| ``starling_dead_letters`` | changelog records set aside |
| ``starling_database_gauges_age_seconds`` | since the database figures were last refreshed |

**No SQL on a scrape.** The figures that need the database (the outbox
backlog and age, the freshness of the newest applied write) are computed by
the ``refresh_metrics`` beat task every ``STARLING_METRICS_REFRESH_SECONDS``
and kept in Redis (:data:`fanout.store.keys.DB_GAUGES`); a scrape reads Redis
only, so a busy Prometheus cannot load the database, and a scrape while the
database is down still answers.

**Processes.** With ``PROMETHEUS_MULTIPROC_DIR`` set (``make run`` and the
compose file set it), every granian worker and Celery pool process records
into its own files there and a scrape sums them (prometheus_client's
multiprocess mode); without it a scrape sees the answering process only.
The directory must be emptied when the server starts (a tmpfs in compose).

**Access.** At the root, not under the API, answered before Django's host
check and TLS redirect (:func:`answer`). With
``STARLING_METRICS_TOKEN`` set, a scrape needs ``Authorization: Bearer
<token>``; the production settings refuse to serve it without a token.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Min
from prometheus_client import CollectorRegistry, Histogram, multiprocess
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from fanout.model.watermark import BATCH_BUCKETS, Watermark
from fanout.store.timelines import TimelineStore, store_for

log = logging.getLogger(__name__)

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

#: Request latency buckets: a timeline read is ~1-3 ms, a write ~10 ms.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUESTS = Histogram(
    "starling_http_request_duration_seconds",
    "Web requests by route (the URL pattern), method and status.",
    ["route", "method", "status"],
    buckets=REQUEST_BUCKETS,
)
TASKS = Histogram(
    "starling_task_duration_seconds",
    "Celery task runs by task name and outcome.",
    ["task", "outcome"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0, 3600.0),
)

#: Where scrapes come (the WSGI front and the URL conf).
PATH = "/metrics"

#: The route label of a request no URL pattern matched (bounded cardinality).
UNMATCHED = "<unmatched>"


#: Method label values; any other method a client sends counts as OTHER.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def observe_request(route: str, method: str, status: int, seconds: float) -> None:
    REQUESTS.labels(route, method if method in METHODS else "OTHER", str(status)).observe(seconds)


def observe_task(task: str, outcome: str, seconds: float) -> None:
    TASKS.labels(task, outcome).observe(seconds)


# --- the database figures, refreshed by a beat task --------------------------


def refresh_database_gauges(now: float | None = None) -> dict[str, float]:
    """Compute the figures that need SQL and keep them in Redis for scrapes.

    Run by the ``refresh_metrics`` task; what it stores is what the scrapes
    show until the next run. If the database does not answer, it says so
    (``database_up`` 0) and keeps the last figures."""
    from feed.models import OutboxEvent

    now = time.time() if now is None else now
    store = store_for(settings.STARLING)
    figures: dict[str, float] = {"refreshed_at": now, "database_up": 1}
    try:
        pending = OutboxEvent.objects.filter(published_at__isnull=True)
        oldest = pending.aggregate(t=Min("created_at"))["t"]
        figures["outbox_backlog"] = pending.count()
        figures["oldest_pending_at"] = oldest.timestamp() if oldest else 0
        _, wm = _active_watermark(store)
        if wm is not None and wm.seq:
            created = (
                OutboxEvent.objects.filter(pk=wm.seq).values_list("created_at", flat=True).first()
            )
            if created is not None:
                figures["freshness"] = max(0.0, wm.applied_at - created.timestamp())
    except DatabaseError:
        log.warning("metrics refresh: the database did not answer", exc_info=True)
        figures = {"refreshed_at": now, "database_up": 0}
    store.keep_database_figures(figures)
    return figures


def _active_watermark(store: TimelineStore) -> tuple[int | None, Watermark | None]:
    """The active generation and its watermark (either may be missing)."""
    generation = store.active_generation()
    return generation, store.watermark(generation) if generation is not None else None


#: What :func:`refresh_database_gauges` stores.
DB_FIGURES = ("refreshed_at", "database_up", "outbox_backlog", "oldest_pending_at", "freshness")


# --- the scrape ---------------------------------------------------------------


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class StarlingCollector(Collector):
    """The pipeline's figures, read from Redis at each scrape (no SQL)."""

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        try:
            yield from self._from_redis(now)
            redis_up = 1
        except Exception:
            log.warning("metrics: Redis did not answer", exc_info=True)
            redis_up = 0
        yield _gauge("starling_redis_up", "1 if Redis answered this scrape.", redis_up)

    def _from_redis(self, now: float) -> Iterator[Metric]:
        store = store_for(settings.STARLING)
        generation, wm = _active_watermark(store)
        db = {k: v for k, v in store.database_figures().items() if k in DB_FIGURES}
        relay = store.relay_figures()
        yield _gauge("starling_generation", "The active timeline generation.", generation or 0)
        yield _gauge(
            "starling_dead_letters", "Changelog records set aside.", store.dead_letter_count()
        )
        yield _gauge(
            "starling_refills_pending",
            "Short timelines waiting for a refill from the database.",
            store.pending_refills(),
        )
        yield CounterMetricFamily(
            "starling_relay_published",
            "Outbox rows the relay has put on Kafka.",
            value=relay["published"],
        )
        yield _gauge(
            "starling_relay_failures",
            "Relay runs failed in a row (0 when the last one worked).",
            relay["failures"],
        )
        yield from _database_figures(db, now)
        if wm is not None:
            yield from _watermark_figures(wm, now)


def _database_figures(db: dict[str, float], now: float) -> Iterator[Metric]:
    if "refreshed_at" not in db:
        return  # never refreshed: no beat running yet
    yield _gauge(
        "starling_database_gauges_age_seconds",
        "Seconds since the database figures were refreshed (the refresh_metrics task).",
        max(0.0, now - db["refreshed_at"]),
    )
    yield _gauge(
        "starling_database_up", "1 if the database answered the last refresh.", db["database_up"]
    )
    if "outbox_backlog" in db:
        backlog = db["outbox_backlog"]
        yield _gauge("starling_outbox_backlog", "Outbox rows not yet on Kafka.", backlog)
        # As of the refresh, not now: with beat stopped, a lag growing from a stale
        # figure would page about the relay (StarlingMetricsStale says it instead).
        oldest = db.get("oldest_pending_at", 0)
        yield _gauge(
            "starling_relay_lag_seconds",
            "Age of the oldest unpublished outbox row (as of the last refresh).",
            max(0.0, db["refreshed_at"] - oldest) if oldest else 0.0,
        )
    if "freshness" in db:
        yield _gauge(
            "starling_freshness_seconds",
            "Commit-to-visible of the newest applied write (as of the last refresh).",
            db["freshness"],
        )


def _watermark_figures(wm: Watermark, now: float) -> Iterator[Metric]:
    yield _gauge(
        "starling_fanout_watermark_seq",
        "Every write seq up to this one is applied to the timelines.",
        wm.contiguous,
    )
    yield _gauge("starling_fanout_highest_seq", "The highest write seq applied.", wm.seq)
    if wm.event_time:
        yield _gauge(
            "starling_fanout_lag_seconds",
            "Kafka to Redis for the newest applied record.",
            max(0.0, wm.applied_at - wm.event_time),
        )
    yield _gauge(
        "starling_fanout_watermark_age_seconds",
        "Seconds since the fanout job last applied a micro-batch.",
        max(0.0, now - wm.applied_at),
    )
    counters = wm.counters
    for name in ("batches", "deliveries", "added", "removed", "skipped", "dead_letters"):
        yield CounterMetricFamily(
            f"starling_fanout_{name}",
            f"Fanout counter '{name}' of the active generation.",
            value=counters.get(name, 0),
        )
    buckets = [(floatToGoString(b), counters.get(f"batch_le_{b:g}", 0)) for b in BATCH_BUCKETS]
    yield HistogramMetricFamily(
        "starling_fanout_batch_seconds",
        "Micro-batch durations (the sink's view).",
        buckets=[*buckets, ("+Inf", counters.get("batches", 0))],
        sum_value=counters.get("batch_ms", 0) / 1000,
    )


def registry() -> CollectorRegistry:
    """What a scrape shows: this process's (or, in multiprocess mode, every
    process's) recorded metrics and the pipeline's figures."""
    scrape = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(scrape)
    else:
        scrape.register(_Recorded())
    scrape.register(StarlingCollector())
    return scrape


class _Recorded(Collector):
    """This process's request and task histograms (single-process mode)."""

    def collect(self) -> Iterator[Metric]:
        for metric in (REQUESTS, TASKS):
            yield from metric.collect()


def answer(authorization: str, accept: str) -> tuple[int, str, bytes]:
    """A scrape: ``(status, content type, body)`` for these request headers.

    Served by the WSGI front (feed.fastpath), which answers ``/metrics``
    before Django so that Prometheus can scrape a web container by its
    internal name (not one of ALLOWED_HOSTS) over plain HTTP (no TLS
    redirect)."""
    token = settings.STARLING_METRICS_TOKEN
    if not token and settings.STARLING_METRICS_REQUIRE_TOKEN:
        return 403, TEXT, b"/metrics is off: set STARLING_METRICS_TOKEN to serve it\n"
    if token:
        given = authorization.removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return 401, TEXT, b"unauthorized: send Authorization: Bearer <the metrics token>\n"
    encode, content_type = choose_encoder(accept)
    return 200, content_type, encode(registry())


TEXT = "text/plain; charset=utf-8"
