"""Redis memory with idle users' timelines dropped, against every timeline kept.

    python -m load_tests.bench_idle [--users 20000] [--follows 20] [--tweets 400000]
                                    [--active 0.2]

Starts a Redis of its own, draws a network like the other benchmarks
(power-law follows, Zipf-distributed authors: load_tests/network.py), and
writes, in one run:

1. the tweet bodies (one per tweet, whoever reads it);
2. every user's home timeline, as the fanout job or a rebuild writes it
   (packed ids, the join's newest ``STARLING_TIMELINE_SIZE + STARLING_TIMELINE_SLACK``; the
   ids are drawn from the user's followees' tweets, their number is the
   join's): the all-push figure;
3. then drops the timelines of all but ``--active`` of the users, as the
   hourly sweep does for users idle for STARLING_ACTIVE_DAYS (each leaves a
   tombstone), and measures again.

Reported: Redis's ``used_memory`` over the empty server for each stage, the
timelines alone and with the bodies, and the ratio of the idle-dropped
figure to the all-push one (the target: at most 0.30 with 20% active).
"""

from __future__ import annotations

import argparse
import random
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from fanout.config import DEFAULT_TIMELINE_SIZE, DEFAULT_TIMELINE_SLACK, StarlingConfig
from fanout.model import ids
from fanout.store.ops import pack_timeline
from fanout.store.redis_conn import Client
from fanout.store.timelines import store_for
from feed.devstack import embedded
from load_tests import charts, network
from load_tests.harness import Report, ratio

GENERATION = 1


def used(client: Client) -> int:
    client.memory_purge()
    return int(client.info("memory")["used_memory"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--follows", type=int, default=20, help="follows per user (mean)")
    parser.add_argument("--tweets", type=int, default=400_000)
    parser.add_argument("--active", type=float, default=0.2, help="share of users active")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--chart", type=Path, help="the chart's PNG (default: beside the report)")
    args = parser.parse_args(argv)
    rnd = random.Random(args.seed)
    keep = DEFAULT_TIMELINE_SIZE + DEFAULT_TIMELINE_SLACK

    port = embedded.free_port()
    proc: subprocess.Popen[bytes] = embedded.start(embedded.redis_command(port), port)
    try:
        config = StarlingConfig(redis_url=f"redis://127.0.0.1:{port}/0")
        store = store_for(config, timeout=60)
        client = store.redis
        store.create_generation(GENERATION)
        empty = used(client)

        authors = network.Popularity(args.users, rnd)
        gen = ids.IdGenerator(5)
        per_author: Counter[int] = Counter()
        tweet_ids: list[int] = []
        for _ in range(args.tweets):
            per_author[authors.draw(rnd)] += 1
            tweet_ids.append(gen.next_id())
        bodies = ((t, network.tweet_text(rnd).encode() * 2) for t in tweet_ids)
        store.write_bodies(bodies)
        with_bodies = used(client)

        followees: dict[int, set[int]] = defaultdict(set)
        for follower, followee in network.follows(args.users, args.follows, rnd):
            followees[follower].add(followee)
        kept_entries = 0

        def timelines() -> Iterator[tuple[int, bytes]]:
            nonlocal kept_entries
            for user in range(1, args.users + 1):
                joined = per_author[user] + sum(per_author[a] for a in followees[user])
                n = min(keep, joined)
                kept_entries += n
                horizon_ids = sorted(rnd.sample(tweet_ids, n))
                horizon = horizon_ids[0] if joined > keep else 0
                yield user, pack_timeline(horizon, horizon_ids)

        store.write_timelines(GENERATION, timelines())
        all_push = used(client)

        idle = rnd.sample(range(1, args.users + 1), round(args.users * (1 - args.active)))
        dropped = store.drop_idle(GENERATION, idle)
        after = used(client)
    finally:
        embedded.stop(proc)

    timelines_push, timelines_idle = all_push - with_bodies, after - with_bodies
    report = Report(
        "idle",
        params={
            "users": args.users,
            "follows per user": args.follows,
            "tweets": args.tweets,
            "active share": args.active,
            "timeline size + slack": keep,
        },
    )
    report.add("timeline entries written (all users)", kept_entries)
    report.add("tweet bodies, MB", (with_bodies - empty) / 1e6)
    report.add("timelines, all pushed, MB", timelines_push / 1e6, key="timelines_all_push_mb")
    report.add("timelines, idle dropped, MB", timelines_idle / 1e6, key="timelines_idle_mb")
    report.add("timelines dropped", dropped)
    timelines_ratio = ratio(timelines_idle, timelines_push)
    total_ratio = ratio(after - empty, all_push - empty)
    report.add("timelines: idle-dropped / all-push", timelines_ratio, key="timelines_ratio")
    report.add("with bodies: idle-dropped / all-push", total_ratio, key="total_ratio")
    report.add("bytes per user, all push", (all_push - with_bodies) / args.users)
    report.check(
        f"timelines with {args.active:.0%} active <= 0.30 of all-push", timelines_ratio <= 0.30
    )
    report.print()
    print(f"saved {report.save()}")
    chart = charts.draw(
        args.chart or report.path("png"),
        f"Redis memory, {args.users:,} users, {args.active:.0%} active (same run)",
        charts.bars(
            {
                "every timeline kept": {"timelines, MB": timelines_push / 1e6},
                "idle users' dropped": {"timelines, MB": timelines_idle / 1e6},
            },
            "MB",
            "Timelines in Redis (tweet bodies excluded)",
        ),
    )
    print(f"chart: {chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
