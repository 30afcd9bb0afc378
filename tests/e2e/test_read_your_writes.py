"""Read-your-writes over HTTP through the whole stack (granian's fast path,
the Celery relay, the Spark job)."""

from __future__ import annotations

import time

import pytest
import requests

from tests.support.stack import READ_YOUR_WRITES_WAIT, Stack

pytestmark = pytest.mark.spark


def register(stack: Stack, name: str) -> str:
    response = requests.post(
        f"{stack.base}/api/v1/auth/register",
        json={"username": name, "password": "pw-" + "x" * 12},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()["token"]


def call(stack: Stack, method: str, path: str, token: str, **kw: object) -> requests.Response:
    return requests.request(
        method,
        f"{stack.base}/api/v1{path}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
        **kw,
    )


def test_a_write_is_visible_to_a_read_that_names_its_seq(stack: Stack) -> None:
    author, reader = register(stack, "ryw_author"), register(stack, "ryw_reader")
    seq = call(stack, "POST", "/users/ryw_author/follow", reader).json()["seq"]
    stack.wait_for_seq(seq)  # the follow is in; now the real test: a post read at once
    for i in range(5):
        posted = call(stack, "POST", "/tweets", author, json={"text": f"fresh {i}"}).json()
        started = time.monotonic()
        response = call(stack, "GET", f"/timeline?min_seq={posted['seq']}&count=5", reader)
        waited = time.monotonic() - started
        assert response.status_code == 200
        assert response.headers["X-Starling-Source"] == "redis"
        assert "X-Starling-Stale" not in response.headers, f"not visible after {waited:.2f}s"
        assert response.json()["tweets"][0]["id"] == posted["id"]
        assert int(response.headers["X-Starling-Watermark"]) >= posted["seq"]
        assert float(response.headers["X-Starling-Fanout-Lag"]) >= 0


def test_a_deleted_tweet_is_gone_for_a_read_that_names_the_delete(stack: Stack) -> None:
    token = register(stack, "ryw_deleter")
    posted = call(stack, "POST", "/tweets", token, json={"text": "oops"}).json()
    deleted = call(stack, "DELETE", f"/tweets/{posted['id']}", token)
    seq = int(deleted.headers["X-Starling-Seq"])
    stack.wait_for_seq(seq)  # so the read below is Redis's, not the cold fallback's
    response = call(stack, "GET", f"/timeline?min_seq={seq}", token)
    assert response.headers["X-Starling-Source"] == "redis"  # the delete's fanout is tested
    assert posted["id"] not in [t["id"] for t in response.json()["tweets"]]


def test_a_seq_no_write_has_is_clamped_to_the_newest_and_does_not_wait(stack: Stack) -> None:
    token = register(stack, "ryw_impatient")
    seq = call(stack, "POST", "/tweets", token, json={"text": "warm me up"}).json()["seq"]
    stack.settle()  # every write so far applied
    started = time.monotonic()
    response = call(stack, "GET", f"/timeline?min_seq={2**60}", token)
    took = time.monotonic() - started
    assert response.status_code == 200 and response.headers["X-Starling-Source"] == "redis"
    assert "X-Starling-Stale" not in response.headers  # the newest write is applied
    assert int(response.headers["X-Starling-Watermark"]) >= seq
    assert took < READ_YOUR_WRITES_WAIT / 2, f"waited {took:.2f}s for a seq nobody wrote"
