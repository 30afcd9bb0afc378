"""Locust scenarios against a running Starling, as the users of the seed file.

    make load                                           # seeds first if needed
    locust -f load_tests/locustfile.py --host http://127.0.0.1:8000

``SEED_FILE`` (default ``var/load/seed.json``, written by ``python -m
load_tests.seed``) gives every seeded user's token, follower count and a few
of its followers. Two kinds of users:

* :class:`Member` does what people do: mostly reads its home timeline
  (sometimes the next page, with ``next_max_id`` as ``max_id``), now and then
  posts, follows or unfollows someone, or deletes one of its tweets.
* :class:`FreshnessProbe` (``LOAD_PROBES`` of them, default 4) posts as a
  seeded author, then polls the home timeline of one of the author's
  followers with ``count=5``, as a client refreshing would (no ``min_seq``),
  until the tweet is there. The time from sending the post to the first
  read that shows it is reported as request type ``FRESHNESS``, overall and
  by the author's follower count; after ``FRESHNESS_TIMEOUT`` seconds (15) it
  counts as a failure. A tweet first seen in a timeline answered from the
  database (``X-Starling-Source: fallback``) did not go through the fanout
  and is reported apart, as ``post-to-visible [fallback read]``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import gevent
from locust import HttpUser, between, events, task
from locust.env import Environment

from load_tests import network
from load_tests.harness import percentile

log = logging.getLogger(__name__)

SEED_FILE = Path(
    os.environ.get("SEED_FILE", Path(__file__).resolve().parent.parent / "var/load/seed.json")
)
FRESHNESS_TIMEOUT = float(os.environ.get("FRESHNESS_TIMEOUT", "15"))
#: Seconds between two polls of the follower's timeline: the resolution of the
#: measurement (the probes' polls are load too: 4 probes poll 40 times a second).
POLL_INTERVAL = 0.1
#: Follower-count buckets: (label, lowest, highest exclusive).
BUCKETS = [("1-10", 1, 10), ("10-100", 10, 100), ("100-1000", 100, 1000), ("1000+", 1000, None)]
OVERALL = "post-to-visible"


def bucket_of(followers: int) -> str | None:
    for label, low, high in BUCKETS:
        if followers >= low and (high is None or followers < high):
            return label
    return None


def _load_seed() -> dict[str, Any]:
    if not SEED_FILE.exists():
        raise SystemExit(
            f"no seed file at {SEED_FILE}: run `make seed` "
            "(or python -m load_tests.seed --users 2000 --seed 1) against the running stack"
        )
    data: dict[str, Any] = json.loads(SEED_FILE.read_text())
    return data


SEED = _load_seed()
ACCOUNTS: list[dict[str, Any]] = SEED["users"]
BY_ID = {account["id"]: account for account in ACCOUNTS}
#: Authors the probe can use (they have a seeded follower), by follower bucket.
AUTHORS: dict[str, list[dict[str, Any]]] = defaultdict(list)
for _account in ACCOUNTS:
    _label = bucket_of(_account["followers"])
    if _label is not None and _account["follower_sample"]:
        AUTHORS[_label].append(_account)

#: Exact post-to-visible times (ms) by metric name, timeouts included, for the
#: summary at the end (Locust's own percentiles round times above 1 s to 100 ms).
SAMPLES: dict[str, list[float]] = defaultdict(list)
TIMEOUTS: dict[str, int] = defaultdict(int)


def bearer(account: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {account['token']}"}


class Member(HttpUser):
    """A seeded user using the service."""

    wait_time = between(0.2, 1.0)

    def on_start(self) -> None:
        self.me = random.choice(ACCOUNTS)
        self.client.headers.update(bearer(self.me))
        self.posted: list[int] = []
        self.followed: list[str] = []  # follows this session created (so it may undo them)

    @task(30)
    def read_home_timeline(self) -> None:
        url, name = "/api/v1/timeline?count=20", "/api/v1/timeline"
        for _ in range(3):  # the first page, sometimes one or two more
            with self.client.get(url, name=name, catch_response=True) as response:
                if response.status_code != 200:
                    response.failure(f"status {response.status_code}: {response.text[:200]}")
                    return
                next_max_id = response.json().get("next_max_id")
            if next_max_id is None or random.random() > 0.3:
                return
            url = f"/api/v1/timeline?count=20&max_id={next_max_id}"
            name = "/api/v1/timeline [next page]"

    @task(4)
    def post(self) -> None:
        text = network.tweet_text(random.Random())
        with self.client.post(
            "/api/v1/tweets", json={"text": text}, catch_response=True
        ) as response:
            if response.status_code != 201:
                response.failure(f"status {response.status_code}: {response.text[:200]}")
                return
            self.posted.append(response.json()["id"])

    @task(1)
    def delete_a_tweet(self) -> None:
        if not self.posted:
            return
        tweet_id = self.posted.pop(random.randrange(len(self.posted)))
        with self.client.delete(
            f"/api/v1/tweets/{tweet_id}", name="/api/v1/tweets/{id}", catch_response=True
        ) as response:
            if response.status_code != 204:
                response.failure(f"status {response.status_code}: {response.text[:200]}")

    @task(1)
    def follow(self) -> None:
        other = random.choice(ACCOUNTS)
        if other is self.me:
            return
        with self.client.post(
            f"/api/v1/users/{other['username']}/follow",
            name="/api/v1/users/{username}/follow",
            catch_response=True,
        ) as response:
            if response.status_code == 201:
                self.followed.append(other["username"])
            elif response.status_code != 200:  # 200: already following
                response.failure(f"status {response.status_code}: {response.text[:200]}")

    @task(1)
    def unfollow(self) -> None:
        if not self.followed:
            return
        username = self.followed.pop(random.randrange(len(self.followed)))
        with self.client.delete(
            f"/api/v1/users/{username}/follow",
            name="/api/v1/users/{username}/follow",
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}: {response.text[:200]}")


class FreshnessTimeout(Exception):
    pass


class FreshnessProbe(HttpUser):
    """Post, then poll a follower's timeline until the tweet shows."""

    fixed_count = int(os.environ.get("LOAD_PROBES", "4"))
    wait_time = between(0.5, 1.5)

    def on_start(self) -> None:
        self.labels = [label for label, _, _ in BUCKETS if AUTHORS[label]]
        self.turn = random.randrange(len(self.labels))

    @task
    def probe(self) -> None:
        label = self.labels[self.turn % len(self.labels)]  # buckets in turn
        self.turn += 1
        author = random.choice(AUTHORS[label])
        follower = BY_ID[random.choice(author["follower_sample"])]
        started = time.perf_counter()
        with self.client.post(
            "/api/v1/tweets",
            json={"text": network.tweet_text(random.Random())},
            headers=bearer(author),
            name="/api/v1/tweets [probe]",
            catch_response=True,
        ) as response:
            if response.status_code != 201:
                response.failure(f"status {response.status_code}: {response.text[:200]}")
                return
            tweet_id = response.json()["id"]
        deadline = started + FRESHNESS_TIMEOUT
        while True:
            with self.client.get(
                "/api/v1/timeline?count=5",
                headers=bearer(follower),
                name="/api/v1/timeline [probe poll]",
                catch_response=True,
            ) as response:
                if response.status_code != 200:
                    response.failure(f"status {response.status_code}: {response.text[:200]}")
                elif any(t["id"] == tweet_id for t in response.json()["tweets"]):
                    elapsed = (time.perf_counter() - started) * 1000
                    fallback = response.headers.get("X-Starling-Source") == "fallback"
                    names = (
                        [f"{OVERALL} [fallback read]"]
                        if fallback
                        else [OVERALL, f"{OVERALL} [followers {label}]"]
                    )
                    self._report(names, elapsed, None)
                    return
            if time.perf_counter() >= deadline:
                log.warning(
                    "tweet %s by %s not in the timeline of %s after %.0f s",
                    tweet_id,
                    author["username"],
                    follower["username"],
                    FRESHNESS_TIMEOUT,
                )
                error = FreshnessTimeout(
                    f"tweet not in a follower's home timeline after {FRESHNESS_TIMEOUT:.0f} s"
                )
                elapsed = (time.perf_counter() - started) * 1000
                self._report([OVERALL, f"{OVERALL} [followers {label}]"], elapsed, error)
                return
            gevent.sleep(POLL_INTERVAL)

    def _report(self, names: list[str], elapsed_ms: float, error: Exception | None) -> None:
        for name in names:
            self.environment.events.request.fire(
                request_type="FRESHNESS",
                name=name,
                response_time=elapsed_ms,
                response_length=0,
                exception=error,
                context={},
            )
            SAMPLES[name].append(elapsed_ms)
            TIMEOUTS[name] += error is not None


@events.test_stop.add_listener
def print_freshness(environment: Environment, **_kwargs: Any) -> None:
    """Exact freshness percentiles (Locust's tables round them above 1 s); a
    timed-out probe counts with its time (at least ``FRESHNESS_TIMEOUT``)."""
    if not SAMPLES:
        return
    print(f"\n{'post-to-visible, exact (ms)':<38} {'n':>5} {'timeouts':>8}     p50     p95     p99")
    for name in sorted(SAMPLES, key=lambda n: (n != OVERALL, n)):
        values = SAMPLES[name]
        print(
            f"  {name:<36} {len(values):>5} {TIMEOUTS[name]:>8} {percentile(values, 50):>7.0f} "
            f"{percentile(values, 95):>7.0f} {percentile(values, 99):>7.0f}"
        )
