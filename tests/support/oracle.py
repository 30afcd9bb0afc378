"""The oracle of the end-to-end tests: a random workload through the HTTP API,
and every home timeline in Redis compared with the view computed by SQL over
the database."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import requests

from fanout.config import DEFAULT_ACTIVE_DAYS
from fanout.model import events
from fanout.store import keys
from spark.source.datasource import read_range
from spark.source.kafka_io import EndOffsetReader
from spark.source.offsets import ranges
from tests.support.stack import Stack

#: The join (docs/design.md) plus each user's own tweets, of the visible rows: a
#: suspended (inactive) author's tweets are in no view. The view being maintained.
ORACLE_SQL = """
    SELECT f.follower_id, t.id FROM feed_tweet t
    JOIN feed_follow f ON f.followee_id = t.author_id
    JOIN feed_user a ON a.id = t.author_id WHERE a.is_active
    UNION ALL
    SELECT t.author_id, t.id FROM feed_tweet t
    JOIN feed_user a ON a.id = t.author_id WHERE a.is_active
"""
PASSWORD = "pw-" + "x" * 12


@dataclass
class Workload:
    """Registers users, then mixes tweets, deletes, follows and unfollows at
    random, and (that share of ``suspensions`` of the writes) a moderator
    suspends or reinstates one of them."""

    stack: Stack
    rnd: random.Random
    prefix: str
    http: requests.Session = field(default_factory=requests.Session)
    users: dict[str, str] = field(default_factory=dict)  # username -> token
    live: dict[int, str] = field(default_factory=dict)  # tweet id -> author
    follows: set[tuple[str, str]] = field(default_factory=set)
    max_seq: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    suspensions: float = 0.0
    suspended: set[str] = field(default_factory=set)
    moderated: dict[str, int] = field(default_factory=dict)  # suspend / reinstate -> how many
    #: Users the moderator leaves alone (a test reads as them later).
    protected: set[str] = field(default_factory=set)

    def call(
        self, method: str, path: str, user: str | None = None, body: dict | None = None
    ) -> dict:
        headers = {"Authorization": f"Bearer {self.users[user]}"} if user else {}
        response = self.http.request(
            method, f"{self.stack.base}/api/v1{path}", json=body, headers=headers, timeout=30
        )
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        data = response.json() if response.content else {}
        seq = data.get("seq") or int(response.headers.get("X-Starling-Seq", 0))
        self.max_seq = max(self.max_seq, seq)
        return data

    def register(self, n: int) -> None:
        for i in range(n):
            name = f"{self.prefix}{i}"
            self.users[name] = self.call(
                "POST", "/auth/register", body={"username": name, "password": PASSWORD}
            )["token"]

    def moderate(self, name: str) -> None:
        """A moderator suspends ``name``, or reinstates them (who then signs in
        again: a suspension voids every token)."""
        moderator = f"{self.prefix}mod"
        if moderator not in self.users:
            secret = self.stack.logs / f"{moderator}.password"
            secret.write_text(PASSWORD)
            self.stack.manage("createmoderator", moderator, "--password-file", str(secret))
            body = {"username": moderator, "password": PASSWORD}
            self.users[moderator] = self.call("POST", "/auth/token", body=body)["token"]
        if name in self.suspended:
            self.call("DELETE", f"/users/{name}/suspension", moderator)
            self.suspended.discard(name)
            # Tokens are timestamped to the second, and the suspension voided
            # those up to the second after it: sign in once that has passed.
            time.sleep(2 - time.time() % 1)
            body = {"username": name, "password": PASSWORD}
            self.users[name] = self.call("POST", "/auth/token", body=body)["token"]
            kind = "reinstate"
        else:
            self.call("POST", f"/users/{name}/suspension", moderator, {"reason": "test"})
            self.suspended.add(name)
            kind = "suspend"
        self.moderated[kind] = self.moderated.get(kind, 0) + 1

    def run(self, writes: int, on_write: Callable[[int], None] = lambda i: None) -> None:
        names = sorted(n for n in self.users if n != f"{self.prefix}mod")
        # A few accounts are followed by many (power law), as on a real network.
        popularity = [1 / (rank + 1) for rank in range(len(names))]
        for i in range(writes):
            on_write(i)
            # (No draw without suspensions: the workloads of a seed stay what they were.)
            if self.suspensions and self.rnd.random() < self.suspensions:
                name = self.rnd.choices(names, popularity)[0]
                if name not in self.protected:
                    self.moderate(name)
                continue
            # A suspended user neither writes nor can be followed.
            active = [
                (n, w) for n, w in zip(names, popularity, strict=True) if n not in self.suspended
            ]
            roll = self.rnd.random()
            a = self.rnd.choice(active)[0]
            b = self.rnd.choices([n for n, _ in active], [w for _, w in active])[0]
            if roll < 0.45:
                text = " ".join(
                    self.rnd.choice(["hello", "world", "é", "🐦", "starling"]) for _ in range(5)
                )
                self.live[self.call("POST", "/tweets", a, {"text": text})["id"]] = a
                kind = "tweet"
            elif roll < 0.55 and self.live:
                tweet_id = self.rnd.choice(sorted(self.live))
                if self.live[tweet_id] in self.suspended:
                    continue
                self.call("DELETE", f"/tweets/{tweet_id}", self.live.pop(tweet_id))
                kind = "delete"
            elif roll < 0.85 and a != b:
                self.call("POST", f"/users/{b}/follow", a)
                self.follows.add((a, b))
                kind = "follow"
            elif self.follows:
                pair = self.rnd.choice(sorted(self.follows))
                if pair[0] in self.suspended:
                    continue
                self.follows.discard(pair)
                self.call("DELETE", f"/users/{pair[1]}/follow", pair[0])
                kind = "unfollow"
            else:
                continue
            self.counts[kind] = self.counts.get(kind, 0) + 1


def check_against_oracle(stack: Stack, usernames: list[str]) -> dict[str, int]:
    """Once the job has caught up (every write and refill applied), every
    timeline is exactly the join's newest ``STARLING_TIMELINE_SIZE``."""
    stack.settle()
    wanted = set(usernames)
    ids = {
        name: uid for name, uid in stack.sql("SELECT username, id FROM feed_user") if name in wanted
    }
    oracle: dict[int, list[int]] = {uid: [] for uid in ids.values()}
    for owner, tweet_id in stack.sql(ORACLE_SQL):
        if owner in oracle:
            oracle[owner].append(tweet_id)
    bodies = {
        tid: (author, text)
        for tid, author, text in stack.sql(
            "SELECT t.id, u.username, t.text"
            " FROM feed_tweet t JOIN feed_user u ON u.id = t.author_id"
        )
    }
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    cap = stack.timeline_size
    stats = {"timelines": 0, "with_horizon": 0, "at_the_cap": 0, "entries": 0}
    for name, uid in ids.items():
        full = sorted(set(oracle[uid]), reverse=True)
        found = store.timeline(generation, uid)
        assert found is not None, f"{name} has no timeline"
        shown = found.ids
        assert len(shown) == len(set(shown)), f"{name}: duplicate entries"
        # Exact: the join's newest `cap`, whatever was trimmed, deleted or unfollowed.
        assert shown == full[:cap], f"{name}: timeline differs from the join"
        stats["timelines"] += 1
        stats["entries"] += len(shown)
        stats["with_horizon"] += found.horizon > 0
        stats["at_the_cap"] += len(full) > cap
        for tweet_id, body in zip(shown[:5], store.bodies(shown[:5]), strict=True):
            assert body is not None and json.loads(body)["text"] == bodies[tweet_id][1]
    return stats


def go_idle(stack: Stack, names: list[str]) -> None:
    """The users stop reading: a month later the hourly sweep drops their timelines."""
    long_ago = datetime.now(UTC) - timedelta(days=DEFAULT_ACTIVE_DAYS + 1)
    for name in names:
        stack.sql("UPDATE feed_user SET last_active = ? WHERE username = ?", long_ago, name)
    assert json.loads(stack.manage("drop_idle_timelines", "--json")) == {"dropped": len(names)}


def come_back(stack: Stack, tokens: dict[str, str]) -> None:
    """The users read again: the database answers, the timelines are regenerated."""
    for name, token in tokens.items():
        read_while_dropped(stack, name, token)
    check_against_oracle(stack, sorted(tokens))


def pulled_authors(stack: Stack) -> tuple[set[int], set[int]]:
    """(authors with a list: pulled at some point, authors pulled now: in
    someone's set of pulls)."""
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    lists = store.redis.scan_iter(keys.list_prefix(generation) + "*")
    listed = {keys.id_of(k) for k in lists}
    pulled: set[int] = set()
    for key in store.redis.scan_iter(keys.pulls_prefix(generation) + "*"):
        pulled |= {int(a) for a in store.redis.smembers(key)}
    return listed, pulled


def read_while_dropped(stack: Stack, name: str, token: str) -> None:
    """A returning user's first read: answered by the database at once."""
    headers = {"Authorization": f"Bearer {token}"}
    response = requests.get(f"{stack.base}/api/v1/timeline", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["X-Starling-Source"] == "fallback", name


def seqs_on_the_topics(stack: Stack) -> Counter[int]:
    """How many times each outbox seq is on the changelogs (all records, from 0)."""
    bootstrap = stack.env["KAFKA_BOOTSTRAP_SERVERS"]
    prefix = stack.env["STARLING_TOPIC_PREFIX"]
    topics = (prefix + events.TWEETS, prefix + events.FOLLOWS)
    reader = EndOffsetReader(bootstrap)
    try:
        ends = reader.end_offsets(topics)
    finally:
        reader.close()
    seen: Counter[int] = Counter()
    for part in ranges({}, ends):
        for batch in read_range(bootstrap, part, 60):
            for pairs in batch.column("headers").to_pylist():
                headers = {h["key"]: h["value"] for h in pairs}
                if events.HEADER_SEQ in headers:
                    seen[int(headers[events.HEADER_SEQ])] += 1
    return seen


def outbox_seqs(stack: Stack, after: int) -> list[int]:
    return [
        s for (s,) in stack.sql("SELECT id FROM feed_outboxevent WHERE id > ? ORDER BY id", after)
    ]
