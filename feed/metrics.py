"""``GET /metrics``: Prometheus text exposition of what operators watch.

| metric | from |
| --- | --- |
| ``starling_outbox_backlog`` | outbox rows not yet on Kafka (database) |
| ``starling_relay_lag_seconds`` | age of the oldest unpublished outbox row |
| ``starling_fanout_watermark_seq`` | every write ``seq`` up to it is in the timelines |
| ``starling_fanout_highest_seq`` | the highest write ``seq`` applied (not all below it may be) |
| ``starling_refills_pending`` | short timelines waiting for a refill from the database |
| ``starling_fanout_lag_seconds`` | Kafka → Redis for the newest applied record |
| ``starling_fanout_watermark_age_seconds`` | since the job last applied a micro-batch |
| ``starling_freshness_seconds`` | post-to-visible of the newest applied write |
| ``starling_fanout_batch_seconds`` | histogram of micro-batch durations (the sink's view) |
| ``starling_fanout_deliveries_total`` etc. | counters kept with the watermark |
| ``starling_dead_letters`` | changelog records set aside |

Served by Django at the root (not under the API); expose it to the
monitoring network only, or set ``STARLING_METRICS_TOKEN`` to require
``Authorization: Bearer <that token>``.
"""

from __future__ import annotations

import hmac
import os
import time
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Min
from django.http import HttpRequest, HttpResponse

from fanout.timelines import store_for
from fanout.watermark import BATCH_BUCKETS
from feed.models import OutboxEvent

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _line(name: str, value: float, help_text: str, kind: str = "gauge") -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value:g}"]


def collect(now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    out: list[str] = []
    up = {"database": 1, "redis": 1}
    try:
        pending = OutboxEvent.objects.filter(published_at__isnull=True)
        oldest = pending.aggregate(t=Min("created_at"))["t"]
        out += _line("starling_outbox_backlog", pending.count(), "Outbox rows not yet on Kafka.")
        lag = max(0.0, now - oldest.timestamp()) if oldest else 0.0
        out += _line("starling_relay_lag_seconds", lag, "Age of the oldest unpublished outbox row.")
    except DatabaseError:
        up["database"] = 0
    wm: Any = None
    try:
        store = store_for(settings.STARLING)
        generation = store.active_generation()
        wm = store.watermark(generation) if generation is not None else None
        out += _line(
            "starling_dead_letters", store.dead_letter_count(), "Changelog records set aside."
        )
        out += _line(
            "starling_refills_pending",
            store.pending_refills(),
            "Short timelines waiting for a refill from the database.",
        )
        out += _line("starling_generation", generation or 0, "The active timeline generation.")
    except Exception:
        up["redis"] = 0
    if wm is not None:
        out += _line(
            "starling_fanout_watermark_seq",
            wm.contiguous,
            "Every write seq up to this one is applied to the timelines.",
        )
        out += _line(
            "starling_fanout_highest_seq", wm.seq, "The highest write seq applied to timelines."
        )
        if wm.event_time:
            out += _line(
                "starling_fanout_lag_seconds",
                max(0.0, wm.applied_at - wm.event_time),
                "Kafka to Redis for the newest applied record.",
            )
        out += _line(
            "starling_fanout_watermark_age_seconds",
            max(0.0, now - wm.applied_at),
            "Seconds since the fanout job last applied a micro-batch.",
        )
        try:
            row = OutboxEvent.objects.filter(pk=wm.seq).values_list("created_at", flat=True).first()
            if row is not None:
                out += _line(
                    "starling_freshness_seconds",
                    max(0.0, wm.applied_at - row.timestamp()),
                    "Post-to-visible of the newest applied write.",
                )
        except DatabaseError:
            up["database"] = 0
        counters = wm.counters
        for name in ("batches", "deliveries", "added", "removed", "skipped", "dead_letters"):
            out += _line(
                f"starling_fanout_{name}_total",
                counters.get(name, 0),
                f"Fanout counter '{name}' of the active generation.",
                "counter",
            )
        out += [
            "# HELP starling_fanout_batch_seconds Micro-batch durations (the sink's view).",
            "# TYPE starling_fanout_batch_seconds histogram",
        ]
        for bound in BATCH_BUCKETS:
            count = counters.get(f"batch_le_{bound:g}", 0)
            out.append(f'starling_fanout_batch_seconds_bucket{{le="{bound:g}"}} {count}')
        out.append(
            f'starling_fanout_batch_seconds_bucket{{le="+Inf"}} {counters.get("batches", 0)}'
        )
        out.append(f"starling_fanout_batch_seconds_sum {counters.get('batch_ms', 0) / 1000:g}")
        out.append(f"starling_fanout_batch_seconds_count {counters.get('batches', 0)}")
    for part, value in up.items():
        out += _line(f"starling_{part}_up", value, f"1 if the {part} answered this scrape.")
    return out


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = os.environ.get("STARLING_METRICS_TOKEN", "")
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given, token):
            return HttpResponse("unauthorized\n", status=401, content_type=CONTENT_TYPE)
    return HttpResponse("\n".join(collect()) + "\n", content_type=CONTENT_TYPE)
