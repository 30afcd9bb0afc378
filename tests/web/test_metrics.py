"""``GET /metrics``: the Prometheus figures, from the real database and Redis,
and the request histograms of every web process."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.wsgi import get_wsgi_application
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from fanout.config import StarlingConfig
from fanout.model.watermark import batch_duration_counters
from fanout.store.timelines import store_for
from feed.auth import issue_token
from feed.fastpath import TimelineFastPath
from feed.metrics import refresh_database_gauges
from feed.models import OutboxEvent
from feed.services import tweet_create
from tests.deploy.test_monitoring import dashboard_queries, rule_queries, starling_metric_names
from tests.support.clients import StarlingClient
from tests.support.factories import UserFactory

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def scrape(client: Client | None = None, **headers: str) -> dict[str, float]:
    """Every sample of a scrape, by ``name{labels}`` (labels sorted)."""
    response = (client or StarlingClient()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    values = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            values[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
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
        contiguous=seq - 1,
        event_time=0,
        offsets={},
        counters={"batches": 1},
    )
    store.request_refill(7, 8)
    before = scrape()
    assert "starling_outbox_backlog" not in before  # nothing refreshed yet: nothing made up
    assert "starling_database_gauges_age_seconds" not in before
    refresh_database_gauges()
    with CaptureQueriesContext(connection) as queries:
        m = scrape()
    assert len(queries) == 0, [q["sql"] for q in queries]  # a scrape runs no SQL
    assert m["starling_outbox_backlog"] >= 1 and m["starling_relay_lag_seconds"] >= 0
    assert m["starling_fanout_watermark_seq"] == seq - 1  # contiguous: all applied up to it
    assert m["starling_fanout_highest_seq"] == seq
    assert m["starling_refills_pending"] == 2
    assert m["starling_fanout_batches_total"] == 3 and m["starling_fanout_deliveries_total"] == 30
    assert m['starling_fanout_batch_seconds_bucket{le="0.5"}'] == 1
    assert m['starling_fanout_batch_seconds_bucket{le="1.0"}'] == 2
    assert m['starling_fanout_batch_seconds_bucket{le="+Inf"}'] == 3
    assert m["starling_fanout_batch_seconds_sum"] == pytest.approx(4.0)
    assert 0 <= m["starling_freshness_seconds"] < 60
    assert m["starling_fanout_watermark_age_seconds"] < 60
    assert m["starling_database_gauges_age_seconds"] < 60
    assert m["starling_redis_up"] == 1 and m["starling_database_up"] == 1
    assert m["starling_dead_letters"] == 0


def test_the_relay_lag_is_the_oldest_pending_row_s_age_at_the_last_refresh(
    starling: StarlingConfig,
) -> None:
    seq = tweet_create(author=UserFactory(), text="waiting for the relay").seq
    committed = OutboxEvent.objects.get(pk=seq).created_at.timestamp()
    refresh_database_gauges(now=committed + 7)
    assert scrape()["starling_relay_lag_seconds"] == pytest.approx(7)
    time.sleep(0.2)  # a scrape later still tells the refresh's figure
    assert scrape()["starling_relay_lag_seconds"] == pytest.approx(7)
    refresh_database_gauges(now=committed + 40)
    assert scrape()["starling_relay_lag_seconds"] == pytest.approx(40)
    OutboxEvent.objects.filter(pk=seq).update(published_at=timezone.now())
    refresh_database_gauges()
    assert scrape()["starling_relay_lag_seconds"] == 0


def test_metrics_say_redis_is_down_instead_of_failing(settings, starling: StarlingConfig) -> None:
    from dataclasses import replace

    settings.STARLING = replace(starling, redis_url="redis://127.0.0.1:1/0")
    started = time.monotonic()
    m = scrape()
    assert m["starling_redis_up"] == 0
    assert time.monotonic() - started < 10


def test_metrics_can_require_a_token(settings, starling: StarlingConfig) -> None:
    settings.STARLING_METRICS_TOKEN = "s3cret"
    assert StarlingClient().get("/metrics").status_code == 401
    assert StarlingClient().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert scrape(HTTP_AUTHORIZATION="Bearer s3cret")["starling_redis_up"] == 1


def test_production_settings_serve_metrics_only_with_a_token(settings, starling) -> None:
    settings.STARLING_METRICS_REQUIRE_TOKEN = True
    settings.STARLING_METRICS_TOKEN = ""
    refused = StarlingClient().get("/metrics")
    assert refused.status_code == 403 and b"STARLING_METRICS_TOKEN" in refused.content
    settings.STARLING_METRICS_TOKEN = "s3cret"
    assert scrape(HTTP_AUTHORIZATION="Bearer s3cret")["starling_redis_up"] == 1


def _wsgi_get(
    app: Any, path: str, query: str = "", token: str = "", host: str = "testserver"
) -> str:
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "HTTP_HOST": host,
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
    }
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    return f"{status[0]}\n{body.decode()}"


def _count(m: dict[str, float], route: str, method: str, status: int) -> float:
    key = f'{{method="{method}",route="{route}",status="{status}"}}'
    return m.get(f"starling_http_request_duration_seconds_count{key}", 0)


def test_requests_are_timed_by_route_and_status_fast_path_included(
    starling: StarlingConfig,
) -> None:
    ann = UserFactory()
    token = issue_token(ann)
    before = scrape()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    for n in range(3):
        assert api.post("/api/v1/tweets", {"text": f"t{n}"}, format="json").status_code == 201
    assert api.get(f"/api/v1/tweets/{10**15}").status_code == 404
    assert api.get("/api/v1/tweets/1x").status_code == 404  # no route matched
    app = TimelineFastPath(get_wsgi_application())
    assert _wsgi_get(app, "/api/v1/timeline", token=token).startswith("200")
    assert _wsgi_get(app, "/api/v1/timeline").startswith("401")
    after = scrape()
    grew = {
        (route, method, status): _count(after, route, method, status)
        - _count(before, route, method, status)
        for route, method, status in [
            ("/api/v1/tweets", "POST", 201),
            ("/api/v1/tweets/<int:tweet_id>", "GET", 404),
            ("<unmatched>", "GET", 404),
            ("/api/v1/timeline", "GET", 200),
            ("/api/v1/timeline", "GET", 401),
        ]
    }
    assert grew == {
        ("/api/v1/tweets", "POST", 201): 3,
        ("/api/v1/tweets/<int:tweet_id>", "GET", 404): 1,
        ("<unmatched>", "GET", 404): 1,
        ("/api/v1/timeline", "GET", 200): 1,
        ("/api/v1/timeline", "GET", 401): 1,
    }
    labels = 'method="POST",route="/api/v1/tweets",status="201"'
    bucket = f'starling_http_request_duration_seconds_bucket{{le="+Inf",{labels}}}'
    assert after[bucket] - before.get(bucket, 0) == 3


RECORD = """
import sys
from feed import metrics
for _ in range(int(sys.argv[1])):
    metrics.observe_request("/api/v1/timeline", "GET", 200, 0.002)
metrics.observe_task("feed.tasks.relay_outbox", "success", 0.05)
"""


def test_a_scrape_sums_what_every_process_recorded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, starling: StarlingConfig
) -> None:
    """Multiprocess mode, as under granian's workers and Celery's pool: each
    process writes its own files; the scrape adds them up."""
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "tests.support.settings",
    }
    for n in (2, 5):
        subprocess.run(
            [sys.executable, "-c", "import django; django.setup()\n" + RECORD, str(n)],
            cwd=ROOT,
            env={**os.environ, **env},
            check=True,
            timeout=60,
        )
    assert len(list(tmp_path.glob("histogram_*.db"))) == 2
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    m = scrape()
    assert _count(m, "/api/v1/timeline", "GET", 200) == 7
    task = 'starling_task_duration_seconds_count{outcome="success",task="feed.tasks.relay_outbox"}'
    assert m[task] == 2
    assert m["starling_redis_up"] == 1


def test_the_wsgi_front_serves_metrics_to_an_internal_host_name(settings, starling) -> None:
    """Prometheus scrapes ``web:8000``, which is not one of ALLOWED_HOSTS; the
    front answers before Django's host check, with the same token rule."""
    settings.STARLING_METRICS_TOKEN = "s3cret"
    app = TimelineFastPath(get_wsgi_application())
    assert _wsgi_get(app, "/api/v1/tweets/1", host="web:8000").startswith("400")  # Django's check
    assert _wsgi_get(app, "/metrics", host="web:8000").startswith("401")
    scraped = _wsgi_get(app, "/metrics", token="s3cret", host="web:8000")
    assert scraped.startswith("200") and "starling_redis_up 1.0" in scraped


def test_the_dashboard_and_the_alerts_use_metrics_that_exist(starling: StarlingConfig) -> None:
    """Every starling_* name the Grafana dashboard and the alert rules query
    is in a real scrape (one with a watermark, a refresh, a request and a task)."""
    seq = tweet_create(author=UserFactory(), text="applied").seq
    store = store_for(starling)
    generation = store.ensure_active_generation()
    store.record_watermark(
        generation,
        batch_id=0,
        seq=seq,
        marks={},
        contiguous=seq,
        event_time=time.time(),
        offsets={},
        counters={"batches": 1, **batch_duration_counters(0.4)},
    )
    refresh_database_gauges()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(UserFactory())}")
    assert api.post("/api/v1/tweets", {"text": "hi"}, format="json").status_code == 201
    from feed import metrics

    metrics.observe_task("feed.tasks.relay_outbox", "success", 0.01)
    scraped = {name.split("{")[0] for name in scrape()}
    wanted = starling_metric_names(dashboard_queries() + rule_queries())
    assert wanted - scraped == set()


def test_celery_task_runs_are_timed_by_task_and_outcome(starling: StarlingConfig) -> None:
    from feed.tasks import refresh_metrics

    key = (
        'starling_task_duration_seconds_count{outcome="success",task="feed.tasks.refresh_metrics"}'
    )
    before = scrape().get(key, 0)
    refresh_metrics.apply()  # run here, with the signals a worker sends
    after = scrape()
    assert after[key] == before + 1
    assert after["starling_database_gauges_age_seconds"] < 60  # what the task refreshed


def test_request_methods_outside_http_s_own_count_as_other(starling: StarlingConfig) -> None:
    Client().generic("BREW", "/api/v1/tweets")
    m = scrape()
    assert _count(m, "/api/v1/tweets", "OTHER", 405) == 1
    assert not any('method="BREW"' in name for name in m)
