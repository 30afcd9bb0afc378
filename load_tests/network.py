"""A realistic social graph and tweets, shared by the seeder and the benchmarks.

Who follows whom: each user follows ``follows_per_user`` accounts on average
(a geometric spread around it); 80% of follows pick the followee by
popularity (Zipf over a random ranking, exponent 1: a few accounts are
followed by a large share of users) and 20% uniformly (friends). Tweet
texts have realistic lengths: most are short, some near the 280 limit.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator


class Popularity:
    """Draws followees with probability ~ 1 / rank."""

    def __init__(self, users: int, rnd: random.Random, exponent: float = 1.0) -> None:
        self.ranking = list(range(1, users + 1))
        rnd.shuffle(self.ranking)
        weights = [1 / (rank + 1) ** exponent for rank in range(users)]
        self.cumulative = list(itertools.accumulate(weights))

    def draw(self, rnd: random.Random) -> int:
        at = bisect.bisect_left(self.cumulative, rnd.random() * self.cumulative[-1])
        return self.ranking[min(at, len(self.ranking) - 1)]


def follows(users: int, follows_per_user: int, rnd: random.Random) -> Iterator[tuple[int, int]]:
    """(follower, followee) pairs, no self-follows, no duplicates per follower."""
    popular = Popularity(users, rnd)
    for follower in range(1, users + 1):
        n = min(users - 1, max(1, int(rnd.expovariate(1 / follows_per_user))))
        chosen: set[int] = set()
        attempts = 0
        while len(chosen) < n and attempts < n * 10:
            attempts += 1
            followee = popular.draw(rnd) if rnd.random() < 0.8 else rnd.randint(1, users)
            if followee != follower:
                chosen.add(followee)
        for followee in sorted(chosen):
            yield follower, followee


WORDS = (
    "the",
    "a",
    "starling",
    "sings",
    "over",
    "the",
    "river",
    "morning",
    "coffee",
    "build",
    "ship",
    "test",
    "deploy",
    "kafka",
    "spark",
    "redis",
    "timeline",
    "fanout",
    "join",
    "stream",
    "batch",
    "latency",
    "throughput",
    "hello",
    "world",
    "today",
    "great",
    "news",
    "sunset",
    "city",
    "train",
    "music",
    "book",
    "read",
    "write",
    "code",
    "review",
    "merge",
    "friday",
    "weekend",
    "🐦",
    "✨",
    "🚀",
    "é",
)


def tweet_text(rnd: random.Random) -> str:
    """Lengths spread like real tweets: median ~60 characters, a tail up to 280."""
    target = min(280, max(5, int(rnd.lognormvariate(4.0, 0.7))))
    words: list[str] = []
    length = 0
    while length < target:
        word = rnd.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:280].strip() or "hello"
