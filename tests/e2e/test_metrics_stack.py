"""``/metrics`` of the running stack (granian, Celery beat, the fanout job):
after a workload it shows the requests it served, by route and status, the
timeline's fast path included, and database figures refreshed by beat."""

from __future__ import annotations

import random
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.oracle import Workload
from tests.support.stack import Stack

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

REQUESTS = "starling_http_request_duration_seconds"


def scrape(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = requests.get(f"{stack.base}/metrics", timeout=10)
    assert response.status_code == 200, response.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def requests_served(m: dict, route: str, method: str, status: str) -> float:
    labels = (("method", method), ("route", route), ("status", status))
    return m.get((f"{REQUESTS}_count", labels), 0.0)


def test_metrics_after_a_workload_show_its_requests_and_fresh_database_figures(
    stack: Stack,
) -> None:
    before = scrape(stack)
    work = Workload(stack, random.Random(31), prefix="mx")
    work.register(4)
    work.run(40)
    for token in work.users.values():
        for _ in range(3):
            read = requests.get(
                f"{stack.base}/api/v1/timeline",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
            assert read.status_code == 200
    assert requests.get(f"{stack.base}/api/v1/timeline", timeout=10).status_code == 401
    after = scrape(stack)

    def grew(route: str, method: str, status: str) -> float:
        return requests_served(after, route, method, status) - requests_served(
            before, route, method, status
        )

    assert grew("/api/v1/timeline", "GET", "200") == 12  # the fast path
    assert grew("/api/v1/timeline", "GET", "401") == 1
    assert grew("/api/v1/tweets", "POST", "201") == work.counts["tweet"]
    assert grew("/api/v1/auth/register", "POST", "201") == 4
    fast = (("le", "0.1"), ("method", "GET"), ("route", "/api/v1/timeline"), ("status", "200"))
    assert after[(f"{REQUESTS}_bucket", fast)] >= 12  # reads answer in well under 100 ms

    # Beat refreshes the database figures (every 10 s by default): a scrape shows
    # them, and the watermark once the job has applied the workload.
    stack.wait_for_seq(work.max_seq)
    deadline = time.monotonic() + 60
    while True:
        m = scrape(stack)
        age = m.get(("starling_database_gauges_age_seconds", ()))
        if age is not None and age < 30:
            break
        assert time.monotonic() < deadline, f"database figures not refreshed (age {age})"
        time.sleep(1)
    assert m[("starling_database_up", ())] == 1
    assert m[("starling_outbox_backlog", ())] >= 0
    assert m[("starling_redis_up", ())] == 1
    assert m[("starling_fanout_watermark_seq", ())] >= work.max_seq
