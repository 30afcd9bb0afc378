"""``GET /metrics``: the Prometheus figures, from the real database and Redis."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from fanout.config import StarlingConfig
from fanout.timelines import store_for
from fanout.watermark import batch_duration_counters
from feed.models import OutboxEvent
from feed.services import tweet_create
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def scrape(client: Client, **headers: str) -> dict[str, float]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    values = {}
    for line in response.content.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_metrics_report_backlog_watermark_batches_and_freshness(starling: StarlingConfig) -> None:
    ann = UserFactory(username="ann")
    seq = tweet_create(author=ann, text="hello").seq
    store = store_for(starling)
    generation = store.ensure_active_generation()
    committed = OutboxEvent.objects.get(pk=seq).created_at.timestamp()
    for batch_id, seconds in enumerate([0.3, 0.7, 3.0]):
        store.record_watermark(
            generation,
            batch_id=batch_id,
            seq=seq,
            marks={},
            contiguous=seq - 1,
            event_time=committed + 0.1,
            offsets={},
            counters={"batches": 1, "deliveries": 10, **batch_duration_counters(seconds)},
        )
    store.record_watermark(  # a replayed batch counts once
        generation,
        batch_id=2,
        seq=seq,
        marks={},
        contiguous=seq,
        event_time=0,
        offsets={},
        counters={"batches": 1},
    )
    store.request_refill(7, 8)
    m = scrape(Client())
    assert m["starling_outbox_backlog"] >= 1 and m["starling_relay_lag_seconds"] >= 0
    assert m["starling_fanout_watermark_seq"] == seq - 1  # contiguous: all applied up to it
    assert m["starling_fanout_highest_seq"] == seq
    assert m["starling_refills_pending"] == 2
    assert m["starling_fanout_batches_total"] == 3 and m["starling_fanout_deliveries_total"] == 30
    assert m['starling_fanout_batch_seconds_bucket{le="0.5"}'] == 1
    assert m['starling_fanout_batch_seconds_bucket{le="1"}'] == 2
    assert m['starling_fanout_batch_seconds_bucket{le="+Inf"}'] == 3
    assert m["starling_fanout_batch_seconds_sum"] == pytest.approx(4.0)
    assert 0 <= m["starling_freshness_seconds"] < 60
    assert m["starling_fanout_watermark_age_seconds"] < 60
    assert m["starling_redis_up"] == 1 and m["starling_database_up"] == 1
    assert m["starling_dead_letters"] == 0


def test_metrics_say_redis_is_down_instead_of_failing(settings, starling: StarlingConfig) -> None:
    from dataclasses import replace

    settings.STARLING = replace(starling, redis_url="redis://127.0.0.1:1/0")
    started = time.monotonic()
    m = scrape(Client())
    assert m["starling_redis_up"] == 0 and m["starling_database_up"] == 1
    assert time.monotonic() - started < 10


def test_metrics_can_require_a_token(
    monkeypatch: pytest.MonkeyPatch, starling: StarlingConfig
) -> None:
    monkeypatch.setenv("STARLING_METRICS_TOKEN", "s3cret")
    assert Client().get("/metrics").status_code == 401
    assert scrape(Client(), HTTP_AUTHORIZATION="Bearer s3cret")["starling_redis_up"] == 1
