"""Exact timelines at the cap, through the HTTP API against the whole stack
(STARLING_TIMELINE_SIZE=20, STARLING_TIMELINE_SLACK=4): removals refilled, paging past what
Redis keeps, operator commands racing writes, pollers that never miss."""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import requests

from fanout.model import events
from feed.devstack import embedded
from tests.support.kafka_helpers import read_topic
from tests.support.oracle import ORACLE_SQL, check_against_oracle
from tests.support.stack import BIN, ROOT, Stack

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


class Api:
    """A few named users and the calls the scenarios make."""

    def __init__(self, stack: Stack, prefix: str, base: str | None = None) -> None:
        self.stack = stack
        self.base = base or stack.base
        self.prefix = prefix
        self.tokens: dict[str, str] = {}
        self.http = requests.Session()

    def call(self, method: str, path: str, who: str | None = None, **kw: object) -> dict:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        response = self.http.request(
            method, f"{self.base}/api/v1{path}", headers=headers, timeout=30, **kw
        )
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else {}

    def name(self, who: str) -> str:
        return f"{self.prefix}{who}"

    def register(self, *who: str) -> None:
        for w in who:
            body = {"username": self.name(w), "password": "pw-" + "x" * 12}
            self.tokens[w] = self.call("POST", "/auth/register", json=body)["token"]

    def post(self, who: str, n: int = 1) -> list[int]:
        return [
            self.call("POST", "/tweets", who, json={"text": f"{who} {i}"})["id"] for i in range(n)
        ]

    def follow(self, who: str, whom: str) -> None:
        self.call("POST", f"/users/{self.name(whom)}/follow", who)

    def unfollow(self, who: str, whom: str) -> None:
        self.call("DELETE", f"/users/{self.name(whom)}/follow", who)

    def delete(self, who: str, tweet_id: int) -> None:
        self.call("DELETE", f"/tweets/{tweet_id}", who)

    def timeline(self, who: str, **params: object) -> requests.Response:
        return self.http.get(
            f"{self.base}/api/v1/timeline",
            params=params,
            headers={"Authorization": f"Bearer {self.tokens[who]}"},
            timeout=30,
        )

    def joined(self, who: str) -> list[int]:
        """The view by SQL: the user's and their followees' tweets, newest first."""
        uid = self.stack.sql("SELECT id FROM feed_user WHERE username = ?", self.name(who))[0][0]
        return sorted({t for owner, t in self.stack.sql(ORACLE_SQL) if owner == uid}, reverse=True)


def first_page(api: Api, who: str) -> list[int]:
    response = api.timeline(who, count=20)
    assert response.headers["X-Starling-Source"] == "redis", response.headers
    return [t["id"] for t in response.json()["tweets"]]


def test_follows_unfollows_and_deleted_histories_at_the_cap_leave_exact_timelines(
    stack: Stack,
) -> None:
    api = Api(stack, "cap_")
    friends = [f"friend{i}" for i in range(5)]
    api.register("f", "p", "q", *friends)
    for friend in friends:
        api.post(friend, 8)  # 40 tweets between them
        api.follow("f", friend)
    stack.settle()
    assert first_page(api, "f") == api.joined("f")[:20]

    api.post("p", 40)  # newer than all of the friends'
    api.follow("f", "p")
    stack.settle()
    assert first_page(api, "f") == api.joined("f")[:20]

    api.unfollow("f", "p")  # everything Redis kept was p's: refilled from the database
    stack.settle()
    page = first_page(api, "f")
    assert page == api.joined("f")[:20] and len(page) == 20

    for tweet_id in api.post("q", 40):  # a history deleted entirely
        api.delete("q", tweet_id)
    api.follow("f", "q")
    stack.settle()
    page = first_page(api, "f")
    assert page == api.joined("f")[:20] and len(page) == 20

    # Paging goes on past what Redis keeps, from the database: no gap, no repeat.
    seen: list[int] = []
    sources: list[str] = []
    params: dict[str, object] = {"count": 15}
    while True:
        response = api.timeline("f", **params)
        body = response.json()
        seen += [t["id"] for t in body["tweets"]]
        sources.append(response.headers["X-Starling-Source"])
        if body["next_max_id"] is None:
            break
        params = {"count": 15, "max_id": body["next_max_id"]}
    assert seen == api.joined("f") and len(seen) == 40
    assert sources[0] == "redis" and "database" in sources
    check_against_oracle(stack, [api.name(w) for w in ("f", "p", "q", *friends)])


def test_republishing_the_changelogs_while_writes_go_on_resurrects_nothing(
    stack: Stack,
) -> None:
    api = Api(stack, "rep_")
    api.register("a", "b", "c")
    tweets = api.post("a", 60)
    api.follow("b", "a")
    api.follow("c", "a")
    stack.settle()
    doomed = random.Random(5).sample(tweets, 30)
    proc = subprocess.Popen(
        [str(BIN / "python"), "manage.py", "republish_changelogs"],
        cwd=ROOT,
        env=stack.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for tweet_id in doomed:  # deletes and an unfollow racing the command
        api.delete("a", tweet_id)
    api.unfollow("c", "a")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    check_against_oracle(stack, [api.name(w) for w in "abc"])
    # On the compacted log, each deleted tweet's last record is its tombstone.
    topic = stack.env["STARLING_TOPIC_PREFIX"] + events.TWEETS
    records = read_topic(stack.env["KAFKA_BOOTSTRAP_SERVERS"], topic, 2, expect=1, settle=2.0)
    last: dict[bytes, bytes | None] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        last[r.key] = r.value
    assert all(last[str(t).encode()] is None for t in doomed)


@contextmanager
def second_web_process(stack: Stack) -> Iterator[str]:
    """Another web process on the same database and Redis (its own id node)."""
    port = embedded.free_port()
    proc = stack.start_web("web2", port)
    try:
        embedded.wait_for_port("127.0.0.1", port, 60, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stack.procs.pop("web2")
        proc.terminate()
        proc.wait(20)


class Poller(threading.Thread):
    """A client following the polling protocol of the README: ``since_id`` the
    newest id seen; when the timeline's version changes, the first page again."""

    def __init__(self, api: Api, who: str) -> None:
        super().__init__(daemon=True)
        self.api, self.who = api, who
        self.seen: set[int] = set()
        self.resyncs = 0
        self.stop = threading.Event()

    def poll(self, since: int, version: str | None) -> tuple[int, str | None]:
        params: dict[str, object] = {"count": 10}
        if since:
            params["since_id"] = since
        response = self.api.timeline(self.who, **params)
        if not response.headers.get("X-Starling-Source", "").startswith("redis"):
            return since, version  # not warm yet
        now = response.headers["X-Starling-Timeline-Version"]
        body = response.json()
        ids = [t["id"] for t in body["tweets"]]
        while body["next_max_id"] is not None:  # more arrived than a page: page down to S
            body = self.api.timeline(self.who, **params, max_id=body["next_max_id"]).json()
            ids += [t["id"] for t in body["tweets"]]
        if version is not None and now != version:
            self.resyncs += 1  # an entry arrived below what was seen: the first page again
            ids += [t["id"] for t in self.api.timeline(self.who, count=20).json()["tweets"]]
        self.seen.update(ids)
        return max([since, *ids]), now

    def run(self) -> None:
        since, version = 0, None
        while not self.stop.is_set():
            since, version = self.poll(since, version)
            time.sleep(0.05)
        self.poll(since, version)


def test_a_poller_following_the_protocol_sees_every_tweet_of_its_final_timeline(
    stack: Stack,
) -> None:
    api = Api(stack, "poll_")
    writers = [f"w{i}" for i in range(6)]
    api.register("reader", *writers)
    for w in writers:
        api.follow("reader", w)
    stack.settle()
    poller = Poller(api, "reader")
    poller.start()
    with second_web_process(stack) as other:
        apis = [api, Api(stack, "poll_", base=other)]
        apis[1].tokens = api.tokens

        def write(i: int) -> None:
            rnd = random.Random(i)
            for n in range(25):
                mine = writers[i]
                rnd.choice(apis).call("POST", "/tweets", mine, json={"text": f"{mine} {n}"})

        threads = [threading.Thread(target=write, args=(i,)) for i in range(len(writers))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    stack.settle()
    time.sleep(0.5)
    poller.stop.set()
    poller.join(30)
    final = [t["id"] for t in api.timeline("reader", count=20).json()["tweets"]]
    assert len(final) == 20 and final == api.joined("reader")[:20]
    assert set(final) <= poller.seen, sorted(set(final) - poller.seen)
    print(f"\npoller: saw {len(poller.seen)} tweets, re-read {poller.resyncs} times")
