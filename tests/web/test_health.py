from __future__ import annotations

from dataclasses import replace

import pytest
from rest_framework.test import APIClient

from feed import health
from feed.devstack.embedded import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_checks() -> None:
    """Each test sees its own services' health, not the last test's cached report."""
    health._last.clear()


def test_health_reports_every_part(starling) -> None:
    response = APIClient().get("/api/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert {k: v["ok"] for k, v in body["checks"].items()} == {
        "database": True,
        "redis": True,
        "kafka": True,
    }
    assert body["checks"]["database"]["outbox_backlog"] == 0


@pytest.mark.parametrize("part", ["redis", "kafka"])
def test_health_is_503_naming_the_part_that_is_down(settings, starling, part: str) -> None:
    dead = free_port()
    settings.STARLING = (
        replace(starling, redis_url=f"redis://127.0.0.1:{dead}/0")
        if part == "redis"
        else replace(starling, kafka_bootstrap_servers=f"127.0.0.1:{dead}")
    )
    response = APIClient().get("/api/v1/health")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks[part]["ok"] is False and checks[part]["error"]
    assert all(c["ok"] for name, c in checks.items() if name != part)


PUBLIC = {"REMOTE_ADDR": "203.0.113.9"}  # a client that is not on this machine


def test_a_public_client_sees_up_or_down_and_nothing_else(settings, starling) -> None:
    settings.STARLING_METRICS_TOKEN = "operator-secret"
    up = APIClient().get("/api/v1/health", **PUBLIC)
    assert up.status_code == 200 and up.json() == {"status": "ok"}
    operator = APIClient().get(
        "/api/v1/health", HTTP_AUTHORIZATION="Bearer operator-secret", **PUBLIC
    )
    assert operator.json()["checks"]["database"]["ok"] is True
    guess = APIClient().get("/api/v1/health", HTTP_AUTHORIZATION="Bearer guess", **PUBLIC)
    assert guess.json() == {"status": "ok"}
    settings.STARLING = replace(starling, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    health._last.clear()  # the next request runs the checks again
    down = APIClient().get("/api/v1/health", **PUBLIC)
    assert down.status_code == 503 and down.json() == {"status": "unavailable"}


def test_the_checks_run_at_most_once_a_second_per_process(starling) -> None:
    now = [1000.0]
    health._last.clear()
    first = health.cached_check_all(clock=lambda: now[0])
    now[0] += 0.5
    assert health.cached_check_all(clock=lambda: now[0]) is first
    now[0] += 0.6
    assert health.cached_check_all(clock=lambda: now[0]) is not first
