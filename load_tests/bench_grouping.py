"""The sink's regrouping of a micro-batch per timeline, vectorised against general.

    python -m load_tests.bench_grouping [--authors zipf|uniform] [--users 10000]

The fanout sink turns a micro-batch's mutations into one write per timeline
(fanout.store.ops.group_by_timeline). Plain adds (posts, and follows'
merges: nearly every batch) take a vectorised path; everything else takes
the general one, in Python. This benchmark builds the mutations of
``bench_fanout``'s backlog (the same follow graph and authors, the join's
rules, micro-batches of ``--max-records`` posts), takes one executor's share
(every other mutation) of a micro-batch, and times both paths on it, best of
``--repeat``, with the cyclic collector paused as it is in a Spark task
(spark.runtime.worker_heap). The two results must be equal, op for op.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from fanout.config import DEFAULT_TIMELINE_SLACK
from fanout.model import ids
from fanout.model.join import Mutation
from fanout.store.ops import _group_adds, _group_any
from load_tests import network
from load_tests.fanout_baselines import baseline_mutations
from load_tests.fanout_rig import make_tweets, tweet_authors
from load_tests.harness import Report, ratio

CAP = 800


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--follows", type=int, default=50, help="mean follows per user")
    parser.add_argument("--authors", choices=["zipf", "uniform"], default="zipf")
    parser.add_argument("--max-records", type=int, default=20_000, help="posts per micro-batch")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)

    rnd = random.Random(args.seed)
    pairs = [(u, u) for u in range(1, args.users + 1)]
    pairs += list(network.follows(args.users, args.follows, rnd))
    posts = make_tweets(
        args.max_records * 2, tweet_authors(args), args.users, rnd, ids.IdGenerator(7)
    )
    batches, _ = baseline_mutations(pairs, args.users, posts, CAP, args.max_records)
    share: list[Mutation] = batches[1][1][::2]  # the second batch: the authors have tweets
    keep = CAP + DEFAULT_TIMELINE_SLACK

    report = Report("bench_grouping", params=vars(args))
    report.add("mutations (one executor's share)", len(share))
    report.add("deliveries", sum(m.deliveries for m in share))
    paused = gc.isenabled()
    gc.disable()
    try:
        general, by_general = best_of(args.repeat, lambda: _group_any(share, keep, {}))
        vectorised, by_vector = best_of(args.repeat, lambda: _group_adds(share, keep, {}))
    finally:
        if paused:
            gc.enable()
    report.add("timeline writes", len(by_vector))
    report.add("general grouping (Python)", round(general * 1000, 1), "ms", key="general_ms")
    report.add("vectorised grouping", round(vectorised * 1000, 1), "ms", key="vectorised_ms")
    report.add("speed-up", round(ratio(general, vectorised), 2), key="speedup")
    report.check("same timeline writes, in the same order", by_vector == by_general)
    report.check("vectorised is faster", vectorised < general)
    report.print()
    print(f"report: {report.save()}")
    return 0 if all(ok for _, ok in report.checks) else 1


if __name__ == "__main__":
    sys.exit(main())
