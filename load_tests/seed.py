"""Seed a running Starling with a realistic network, through the write use-cases.

    python -m load_tests.seed --users 2000 --seed 1 [--tweets-per-user 20]
                              [--follows-per-user 50] [--wait http://127.0.0.1:8000]

Generates users, a power-law follow graph and tweets (:mod:`load_tests.network`),
then writes them with the bulk use-cases of :mod:`feed.services`: every chunk
of rows is committed with its outbox events in one transaction, so the
relay publishes them and the fanout job materializes the timelines exactly
as it would for writes made through the API (self edges included).

Run it with the stack's environment (the same ``DATABASE_URL``; ``REDIS_URL``
as printed by ``make run``, so the seeder can poke the relay; without it the
rows wait for Celery beat's sweep, every 2 s).
It writes ``var/load/seed.json`` for the Locust scenarios: every seeded
user's id, username and a signed API token, follower count and a few of its
followers. With ``--wait URL`` it then waits for the relay and the fanout
job to have applied everything (the ``X-Starling-Watermark`` of a timeline
read) and says how long that took.

Seeded users are named ``seed<S>_<n>`` and share the password
:data:`PASSWORD`. Run again with the same ``--seed`` and ``--users`` it
writes no rows and only rewrites the seed file from the database; with
another ``--users`` it refuses.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from load_tests import network

if TYPE_CHECKING:
    from feed.models import User

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "var" / "load" / "seed.json"
PASSWORD = "starling-load-test"  # noqa: S105 - the documented password of seeded accounts
#: Followers of each account listed in the seed file (the freshness probe polls one).
FOLLOWER_SAMPLE = 8
#: Nothing listens on port 1: without the stack's REDIS_URL the relay poke fails fast.
NO_REDIS = "redis://127.0.0.1:1/0"
#: The id-generator node of the seeder; web processes count theirs up from 0.
SEEDER_NODE_ID = "31"

T = TypeVar("T")


# --- the network (pure) -------------------------------------------------------


def username(seed: int, n: int) -> str:
    return f"seed{seed}_{n}"


@dataclass(frozen=True)
class Network:
    """Users are numbered 1..len(usernames); ``usernames[n - 1]`` is user n."""

    seed: int
    usernames: list[str]
    follows: list[tuple[int, int]]  # (follower, followee)
    tweets: list[tuple[int, str]]  # (author, text), in posting order

    def follower_counts(self) -> list[int]:
        """Followers of each user, indexed like ``usernames``."""
        counts = [0] * len(self.usernames)
        for _, followee in self.follows:
            counts[followee - 1] += 1
        return counts

    @property
    def rows(self) -> int:
        return len(self.usernames) + len(self.follows) + len(self.tweets)


def generate(
    users: int, seed: int, *, tweets_per_user: int = 20, follows_per_user: int = 50
) -> Network:
    """The same network for the same arguments.

    Follows: :func:`network.follows` (popularity is Zipf over a random
    ranking: a few accounts are followed by a large share of users). Tweets:
    ``users * tweets_per_user`` of them, authors drawn by a second Zipf
    ranking independent of popularity (a few users write most tweets, as on
    Twitter), texts from :func:`network.tweet_text`.
    """
    if users < 2:
        raise ValueError("a network needs at least 2 users")
    follows = list(network.follows(users, follows_per_user, random.Random(f"follows/{seed}")))
    activity = network.Popularity(users, random.Random(f"activity/{seed}"))
    rnd = random.Random(f"tweets/{seed}")
    tweets = [(activity.draw(rnd), network.tweet_text(rnd)) for _ in range(users * tweets_per_user)]
    return Network(seed, [username(seed, n) for n in range(1, users + 1)], follows, tweets)


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Progress:
    """Prints done/total, percent, rows/s and the time left at most every
    ``every`` seconds."""

    def __init__(self, total: int, every: float = 2.0) -> None:
        self.total = total
        self.every = every
        self.done = 0
        self.started = self.last = time.monotonic()

    def add(self, n: int, what: str) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every or self.done >= self.total:
            self.last = now
            rate = self.done / max(now - self.started, 1e-9)
            left = max(self.total - self.done, 0) / max(rate, 1e-9)
            print(
                f"  {what:<8} {self.done:>11,}/{self.total:,} rows "
                f"{100 * self.done / max(self.total, 1):5.1f}%  {rate:,.0f} rows/s  "
                f"ETA {left:,.0f}s",
                flush=True,
            )

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


# --- loading (Django) ---------------------------------------------------------


def load(net: Network, *, chunk: int) -> tuple[int, float]:
    """Write ``net`` through the bulk use-cases; return (last seq, seconds)."""
    from load_tests import bulk_writes

    progress = Progress(net.rows)
    users: list[User] = []
    for names in chunks(net.usernames, chunk):
        users += bulk_writes.user_register_many(usernames=list(names), password=PASSWORD)
        progress.add(len(names), "users")
    for pairs in chunks(net.follows, chunk):
        ids = [(users[f - 1].pk, users[g - 1].pk) for f, g in pairs]
        bulk_writes.follow_create_many(pairs=ids)
        progress.add(len(pairs), "follows")
    last_seq = 0
    for posts in chunks(net.tweets, chunk):
        last_seq = bulk_writes.tweet_create_many(posts=[(users[a - 1], text) for a, text in posts])
        progress.add(len(posts), "tweets")
    return last_seq, progress.elapsed


def seed_file(seed: int, prefix: str) -> dict[str, Any]:
    """What the Locust scenarios need, read back from the database."""
    from django.db.models import Max

    from feed.auth import issue_token
    from feed.models import Follow, OutboxEvent, Tweet, User

    accounts = list(
        User.objects.filter(username__startswith=prefix)
        .order_by("id")
        .values_list("id", "username")
    )
    seeded = {user_id for user_id, _ in accounts}
    counts: Counter[int] = Counter()
    sample: defaultdict[int, list[int]] = defaultdict(list)
    follows = (
        Follow.objects.filter(followee__username__startswith=prefix)
        .order_by("id")
        .values_list("followee_id", "follower_id")
    )
    for followee, follower in follows.iterator(chunk_size=10_000):
        counts[followee] += 1
        if follower in seeded and len(sample[followee]) < FOLLOWER_SAMPLE:
            sample[followee].append(follower)
    return {
        "seed": seed,
        "password": PASSWORD,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "follows": sum(counts.values()),
        "tweets": Tweet.objects.filter(author__username__startswith=prefix).count(),
        "last_seq": OutboxEvent.objects.aggregate(m=Max("id"))["m"] or 0,
        "users": [
            {
                "id": user_id,
                "username": name,
                "token": issue_token(User(id=user_id)),
                "followers": counts[user_id],
                "follower_sample": sample[user_id],
            }
            for user_id, name in accounts
        ],
    }


# --- waiting for the stack ----------------------------------------------------


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - our own stack
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, _lower(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, _lower(exc.headers), exc.read()


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def wait_applied(base: str, token: str, last_seq: int, timeout: float) -> tuple[float, float]:
    """Wait until the relay has published everything (outbox backlog 0, from
    the health check) and the timelines reflect ``last_seq`` (the watermark of
    a timeline read); return the seconds each took."""
    started = time.monotonic()
    relayed = applied = 0.0
    shown = 0.0
    while time.monotonic() - started < timeout:
        now = time.monotonic() - started
        if not relayed:
            _, _, body = _get(f"{base}/api/v1/health")
            backlog = json.loads(body)["checks"]["database"].get("outbox_backlog", -1)
            if backlog == 0:
                relayed = now
            elif now - shown >= 2:
                shown = now
                print(f"  {now:6.1f}s relay: {backlog:,} outbox events still to publish")
        if relayed:
            status, headers, _ = _get(f"{base}/api/v1/timeline?count=1", token)
            watermark = int(headers.get("x-starling-watermark", "0"))
            if status == 200 and watermark >= last_seq:
                applied = now
                return relayed, applied
            if now - shown >= 2:
                shown = now
                print(f"  {now:6.1f}s fanout: watermark {watermark:,} of {last_seq:,}")
        time.sleep(0.25)
    raise SystemExit(f"the stack had not applied seq {last_seq} after {timeout:.0f} s")


# --- main ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1, help="makes the network repeatable")
    parser.add_argument("--tweets-per-user", type=int, default=20, help="on average")
    parser.add_argument("--follows-per-user", type=int, default=50, help="on average")
    parser.add_argument("--chunk", type=int, default=2000, help="rows per transaction")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the seed file")
    parser.add_argument("--wait", metavar="URL", help="then wait until the stack at URL applied it")
    parser.add_argument("--wait-timeout", type=float, default=900)
    args = parser.parse_args(argv)
    if not 0 <= args.seed < 10**9:
        parser.error("--seed must be between 0 and 999999999")

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feed.settings")
    if not os.environ.get("REDIS_URL"):
        print(
            "REDIS_URL is not set: the relay is not poked, Celery beat's sweep publishes "
            "the rows (set REDIS_URL to the one `make run` printed to skip that wait)"
        )
        os.environ["REDIS_URL"] = NO_REDIS
        os.environ.setdefault("STARLING_NODE_ID", SEEDER_NODE_ID)
        logging.getLogger("feed.outbox").setLevel(logging.ERROR)
    import django

    django.setup()
    from django.conf import settings

    from feed.models import User

    prefix = username(args.seed, 0)[:-1]
    print(f"database: {settings.DATABASES['default']['NAME']}")
    existing = User.objects.filter(username__startswith=prefix).count()
    if existing and existing != args.users:
        raise SystemExit(
            f"the database already holds {existing:,} users seeded with --seed {args.seed} "
            f"({prefix}*), not {args.users:,}: seeding again would mix two networks. "
            "Use another --seed, or start from an empty database (stop the stack, "
            "remove var/starling.sqlite3, start it again)."
        )
    if existing:
        print(
            f"already seeded with --seed {args.seed} ({existing:,} users): writing no rows, "
            f"only the seed file"
        )
    else:
        started = time.monotonic()
        net = generate(
            args.users,
            args.seed,
            tweets_per_user=args.tweets_per_user,
            follows_per_user=args.follows_per_user,
        )
        counts = sorted(net.follower_counts(), reverse=True)
        top = counts[: max(1, len(counts) // 100)]
        print(
            f"generated in {time.monotonic() - started:.1f}s: {args.users:,} users, "
            f"{len(net.follows):,} follows (followers max {counts[0]:,}, "
            f"top 1% of accounts hold {100 * sum(top) / max(1, len(net.follows)):.0f}% of "
            f"follows), {len(net.tweets):,} tweets"
        )
        last_seq, seconds = load(net, chunk=args.chunk)
        print(
            f"loaded {net.rows:,} rows (+{args.users:,} self edges) in {seconds:.1f}s "
            f"({net.rows / seconds:,.0f} rows/s); last outbox seq {last_seq:,}"
        )
    data = seed_file(args.seed, prefix)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(args.out)
    print(
        f"seed file: {args.out} ({len(data['users']):,} users, {data['follows']:,} follows, "
        f"{data['tweets']:,} tweets, password {PASSWORD!r})"
    )
    if args.wait:
        print(f"waiting for {args.wait} to apply everything up to seq {data['last_seq']:,}...")
        relayed, applied = wait_applied(
            args.wait.rstrip("/"), data["users"][0]["token"], data["last_seq"], args.wait_timeout
        )
        print(f"relay done after {relayed:.1f}s, timelines applied after {applied:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
