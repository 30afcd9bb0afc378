"""The replies mix's ceiling without Spark: what the store's script spends per
post, posts only against a third of the posts replies, at the micro-batch
sizes the job runs at.

    python -m load_tests.bench_mix_ceiling [--users 10000] [--backlog 30000]
                                           [--replies 0.33] [--batch 800] [--runs 3]

``bench_fanout --mix --replies`` reports the ceiling of the whole backlog in
batches of 20,000 records (the job's catch-up); its steady phase, whose
micro-batch p50 is the target, applies about a thousand records at a time,
where the script's fixed cost per timeline op weighs more. This starts its
own Redis and, for each of ``--runs`` runs on a flushed Redis, writes the
same follow graph and mutations as ``bench_fanout --mix`` (by the same join
rules, outside Spark: load_tests/fanout_mix.py), in batches of ``--batch``
records: a backlog of posts (timelines filled), then ``--backlog`` posts
only, then ``--backlog`` posts a share ``--replies`` of which answer a
recent post, each with its counted engagement. For the last two phases it
reports the medians of

- the script's time (``INFO commandstats``: ``EVALSHA``) per post, and the
  store's whole ``apply`` (grouping, encoding, the round trips) per post;
- the mix's over the posts-only's: the replies' cost per post, what the
  ``bench_fanout`` p50 target (1.1 x) leaves room for;
- Redis commands per timeline op, by command, in the last run.

A few minutes; Redis only.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis

from fanout.model import events, ids
from fanout.store.ops import group_by_timeline
from fanout.store.timelines import TimelineStore
from feed.devstack import embedded
from load_tests import network
from load_tests.fanout_mix import Batch, Reactions, apply, followers_of, mixed, mixed_mutations
from load_tests.fanout_rig import ROOT, make_tweets
from load_tests.harness import Report, ratio

GENERATION = 1
PHASES = ("posts only", "mix")


def script_usec(client: redis.Redis) -> tuple[int, dict[str, int]]:
    """The script's microseconds so far, and the calls of every command."""
    stats: dict[str, Any] = client.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    return int(stats.get("cmdstat_evalsha", {}).get("usec", 0)), calls


def one_run(
    client: redis.Redis,
    pairs: Sequence[tuple[int, int]],
    runs: Sequence[tuple[list[Batch], int]],
    posts: int,
) -> dict[str, dict[str, Any]]:
    """The phases of ``runs`` (a warm-up, then the two measured) applied on a
    flushed Redis: per measured phase, µs per post (script, apply) and the
    commands per timeline op."""
    client.flushall()
    store = TimelineStore(client, cap=800)
    store.create_generation(GENERATION)
    followees: dict[int, list[int]] = defaultdict(list)
    for f, g in pairs:
        followees[f].append(g)
    store.write_followees(GENERATION, followees.items())
    out: dict[str, dict[str, Any]] = {}
    for name, (batches, _) in zip(("warm-up", *PHASES), runs, strict=True):
        ops = sum(len(group_by_timeline(b[1], keep=store.cap + store.slack)[0]) for b in batches)
        client.config_resetstat()
        started = time.perf_counter()
        for batch in batches:
            apply(store, GENERATION, batch)
        wall = time.perf_counter() - started
        usec, calls = script_usec(client)
        out[name] = {
            "script": usec / posts,
            "apply": wall * 1e6 / posts,
            "per_op": {k: c / ops for k, c in calls.items() if k != "evalsha" and c / ops >= 0.01},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--follows", type=int, default=50)
    parser.add_argument("--backlog", type=int, default=30_000, help="posts per phase")
    parser.add_argument("--replies", type=float, default=0.33)
    parser.add_argument("--batch", type=int, default=800, help="records per micro-batch")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    report = Report("bench_mix_ceiling", params=vars(args))
    rnd = random.Random(args.seed)
    pairs = [(u, u) for u in range(1, args.users + 1)]
    pairs += network.follows(args.users, args.follows, rnd)
    gen = ids.IdGenerator(7)
    authors = network.Popularity(args.users, random.Random(args.seed + 2))
    warm = make_tweets(args.backlog, authors, args.users, rnd, gen)
    posts = make_tweets(args.backlog, authors, args.users, rnd, gen)
    reactions = Reactions(
        followers_of(pairs),
        args.users,
        random.Random(args.seed + 3),
        reposts=0,
        likes=0,
        replies=args.replies,
    )
    stream = mixed(make_tweets(args.backlog, authors, args.users, rnd, gen), reactions, gen)
    print(
        f"{len(pairs):,} follows; mix: {reactions.made[events.REPLY]:,} replies in "
        f"{len(stream):,} records; the join's mutations, in batches of {args.batch}",
        flush=True,
    )
    runs = mixed_mutations(pairs, [warm, posts, stream], 800, args.batch)
    port = embedded.free_port()
    workdir = ROOT / "var" / "bench" / f"mix-ceiling-{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    proc = embedded.start(embedded.redis_command(port), port, log=workdir / "redis.log")
    try:
        client = redis.Redis(port=port)
        results = []
        for run in range(args.runs):
            results.append(one_run(client, pairs, runs, args.backlog))
            print(f"run {run + 1}/{args.runs} done", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
    med = {
        phase: {f: statistics.median(r[phase][f] for r in results) for f in ("script", "apply")}
        for phase in PHASES
    }
    for phase, (batches, deliveries) in zip(PHASES, runs[1:], strict=True):
        report.add(
            f"{phase}: script / apply, µs per post",
            f"{med[phase]['script']:.1f} / {med[phase]['apply']:.1f}",
            f"{deliveries:,} deliveries in {len(batches)} batches",
            key=f"{phase}_us_per_post",
        )
        last = results[-1][phase]["per_op"]
        report.add(
            "  Redis commands per timeline op",
            ", ".join(f"{k} {v:.2f}" for k, v in sorted(last.items(), key=lambda kv: -kv[1])),
        )
    script = ratio(med["mix"]["script"], med["posts only"]["script"])
    whole = ratio(med["mix"]["apply"], med["posts only"]["apply"])
    report.add("mix / posts only: script", round(script, 2), "per post", key="script_ratio")
    report.add("mix / posts only: apply", round(whole, 2), "per post", key="apply_ratio")
    report.print()
    print(f"report: {report.save()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
