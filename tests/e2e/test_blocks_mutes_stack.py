"""Blocks, mutes and the reposts flag through the whole stack: the web writes
the relations, the job and the store apply them, and what a reader gets is
the view's (docs/design.md), at once and after catch-up."""

from __future__ import annotations

import pytest

from tests.e2e.test_read_your_writes import call, register
from tests.support.oracle import check_against_oracle
from tests.support.stack import Stack

pytestmark = pytest.mark.spark


def home(stack: Stack, token: str, min_seq: int = 0) -> list[int]:
    """The reader's first page of its home timeline, ids newest first."""
    query = f"/timeline?count=50&min_seq={min_seq}" if min_seq else "/timeline?count=50"
    response = call(stack, "GET", query, token)
    assert response.status_code == 200, response.text
    assert "X-Starling-Stale" not in response.headers
    return [t["id"] for t in response.json()["tweets"]]


def write(stack: Stack, method: str, path: str, token: str, body: dict | None = None) -> dict:
    response = call(stack, method, path, token, json=body)
    assert response.status_code < 300, (method, path, response.status_code, response.text)
    data = response.json() if response.content else {}
    data.setdefault("seq", int(response.headers.get("X-Starling-Seq", 0)))
    return data


def test_reposts_of_hidden_users_tweets_stay_out_and_come_back_exactly(stack: Stack) -> None:
    """A followee's repost of a muted user's tweet never reaches the muter's
    timeline, the muter's own repost of it does; a block hides, for a read
    naming its seq, a followee's repost made before it; unmuting brings back
    the repost made while the mute stood; reposts turned off and on take a
    followee's reposts out and back. After each step the reader's timeline is
    the SQL view's."""
    f, a, b, c = (register(stack, f"bm_{n}") for n in ("f", "a", "b", "c"))
    write(stack, "POST", "/users/bm_a/follow", f)
    t1 = write(stack, "POST", "/tweets", b, {"text": "by b"})["id"]
    write(stack, "POST", "/users/bm_b/mute", f)
    r1 = write(stack, "POST", f"/tweets/{t1}/repost", a)
    assert r1["id"] not in home(stack, f, r1["seq"])  # screened when it reached f's timeline
    check_against_oracle(stack, ["bm_f"])
    # A block hides at once what came before it.
    t2 = write(stack, "POST", "/tweets", c, {"text": "by c"})["id"]
    r2 = write(stack, "POST", f"/tweets/{t2}/repost", a)
    assert r2["id"] in home(stack, f, r2["seq"])
    blocked = write(stack, "POST", "/users/bm_f/block", c)
    assert r2["id"] not in home(stack, f, blocked["seq"])
    check_against_oracle(stack, ["bm_f", "bm_c"])
    # Unmuting brings back the repost made while the mute stood.
    write(stack, "DELETE", "/users/bm_b/mute", f)
    check_against_oracle(stack, ["bm_f"])
    assert r1["id"] in home(stack, f)
    # The reader's own repost of a muted user's tweet always shows.
    write(stack, "POST", "/users/bm_b/mute", f)
    own = write(stack, "POST", f"/tweets/{t1}/repost", f)
    check_against_oracle(stack, ["bm_f"])
    shown = home(stack, f, own["seq"])
    assert own["id"] in shown and r1["id"] not in shown
    # Reposts off, then on again.
    d = register(stack, "bm_d")
    t3 = write(stack, "POST", "/tweets", a, {"text": "a's post"})["id"]
    t4 = write(stack, "POST", "/tweets", d, {"text": "by d"})["id"]
    r4 = write(stack, "POST", f"/tweets/{t4}/repost", a)
    shown = home(stack, f, r4["seq"])
    assert t3 in shown and r4["id"] in shown
    off = write(stack, "PATCH", "/users/bm_a/follow", f, {"reposts": False})
    shown = home(stack, f, off["seq"])
    assert t3 in shown and r4["id"] not in shown
    check_against_oracle(stack, ["bm_f"])
    write(stack, "PATCH", "/users/bm_a/follow", f, {"reposts": True})
    check_against_oracle(stack, ["bm_f"])
    assert r4["id"] in home(stack, f)
