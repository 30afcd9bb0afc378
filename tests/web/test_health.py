from __future__ import annotations

from dataclasses import replace

import pytest
from rest_framework.test import APIClient

from feed.devstack.embedded import free_port

pytestmark = pytest.mark.django_db


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
