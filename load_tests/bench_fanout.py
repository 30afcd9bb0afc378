"""Fanout job benchmark: deliveries per second, micro-batch latency, memory.

    python -m load_tests.bench_fanout [--users 10000] [--follows 50] [--backlog 50000]
                                      [--rate 1000] [--seconds 60]
    python -m load_tests.bench_fanout --cluster [--users 10000] [--backlog 50000] [--seconds 60]
    python -m load_tests.bench_fanout --mix [--mix-window 5000] [--users 10000] [--backlog 50000]
                                      [--reposts 1] [--likes 5] [--replies 0.0] [--lists 0.0]
    python -m load_tests.bench_fanout --viral [--viral-likes 20000] [--viral-reposts 2000]
                                      [--viral-seconds 30] [--mix]
    python -m load_tests.bench_fanout --celebrity [--celebrity-followers 1000000]
                                      [--users 10000] [--follows 50] [--rate 1000] [--seconds 60]
                                      [--pull-threshold 10000]

Starts its own broker and Redis, writes a follow graph with a power-law
follower distribution (load_tests/network.py) straight to the changelogs,
runs the real fanout job (``python -m spark.stream.job``) and measures:

1. sustained throughput: a backlog of tweets drained by the job, in timeline
   deliveries per second (one delivery = one tweet id into one timeline);
2. micro-batch latency while tweets arrive at ``--rate`` per second (p50/p99);
3. the baseline, in the same run and on the same Redis: the same mutations
   (computed by the same join rules, outside Spark) written straight to Redis
   with pipelined script calls, which is the ceiling the job can approach;
   also the naive sorted-set baseline (pipelined ZADD + trim per delivery);
4. memory: bytes per timeline entry, packed strings against sorted sets.

``--celebrity`` runs the celebrity scenario instead, in one run: the same
graph plus one author C (user ``users + 1``) followed by
``--celebrity-followers`` accounts: the graph's users first, then extra
accounts (each with its self edge) for the rest, all written to the
changelogs before the job starts. It measures

1. baseline: ``--rate`` tweets/s by the graph's authors for ``--seconds``, C
   silent: micro-batch p50/p99 (the job's progress file, after a warm-up of
   up to 10 s) and the job's peak RSS (driver, JVM and Python workers,
   sampled from /proc every 0.5 s);
2. the same traffic with C posting once a second as well: micro-batch
   p50/p99 (including the catch-up after the traffic stops), its p99 over the
   baseline's, the job's peak RSS;
3. the Redis writes one C post causes, the rest of the traffic stopped: the
   delta of ``INFO commandstats`` (every write command, those run by the
   scripts included) from before the post until the watermark reaches it.

C is pulled (``--pull-threshold``, STARLING_PULL_THRESHOLD's default unless
given; 0 pushes every author, the layout before hybrid fan-out): its checks
are at most 10 Redis writes per C post and a p99 within 1.5x of the
baseline's.

``--mix`` (load_tests/fanout_reposts.py) runs the backlog and the steady
phase posts-only, then again with reposts and likes (per post one repost of
a recent post by a follower of its author, written as its entry and its
engagement, and five likes of recent posts), on the same job; its ceiling
is the same mixed mutations (and counts, where the store writes them)
through the store's script. It reports each phase's end to end ÷ ceiling
and micro-batch p50, the mix's over the posts-only (targets >= 0.9 and
<= 1.1), and bytes per post entry, per repost entry and per counted tweet.
``--replies 0.33 --reposts 0 --likes 0`` is the replies mix: a third of the
posts answer a recent post (a follower of its author answering, mostly).

``--viral`` (load_tests/fanout_viral.py) runs the steady load, then one
tweet liked ``--viral-likes`` and reposted ``--viral-reposts`` times a second
on top for ``--viral-seconds``: micro-batch p99 viral ÷ steady (target
<= 1.5) and the writes of that tweet's counter per micro-batch (target 1).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from fanout.config import DEFAULT_PULL_THRESHOLD
from fanout.kafka import ensure_topics
from fanout.model import ids
from fanout.store.timelines import store_for
from load_tests import charts
from load_tests.fanout_baselines import (
    memory_per_entry,
    naive_zset_rate,
    raw_append_rate,
    script_rate,
)
from load_tests.fanout_celebrity import celebrity
from load_tests.fanout_rig import (
    Changelog,
    Job,
    drain_backlog,
    make_tweets,
    mean_phases,
    start_services,
    steady_phase,
    stop_services,
    tweet_authors,
    wait_for_seq,
    write_graph,
)
from load_tests.harness import Report, percentile, ratio, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--follows", type=int, default=50, help="mean follows per user")
    parser.add_argument(
        "--backlog", type=int, default=50_000, help="tweets in the throughput phase"
    )
    parser.add_argument(
        "--rate", type=int, default=1000, help="tweets per second in the latency phase"
    )
    parser.add_argument("--seconds", type=int, default=60, help="length of the latency phase")
    parser.add_argument("--max-records", type=int, default=20_000, help="maxRecordsPerTrigger")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--chart", type=Path, help="the chart's PNG (default: beside the report)")
    parser.add_argument(
        "--authors",
        choices=["zipf", "uniform"],
        default="zipf",
        help="who tweets: zipf (the top 10%% of users write ~77%% of tweets, as measured on "
        "Twitter) or uniform (every user alike: the most distinct authors per batch)",
    )
    parser.add_argument(
        "--celebrity",
        action="store_true",
        help="run the celebrity scenario instead (see the module docstring)",
    )
    parser.add_argument(
        "--celebrity-followers", type=int, default=1_000_000, help="followers of the celebrity"
    )
    parser.add_argument(
        "--pull-threshold",
        type=int,
        default=DEFAULT_PULL_THRESHOLD,
        help="STARLING_PULL_THRESHOLD of the job (0: every author pushed)",
    )
    parser.add_argument(
        "--mix",
        action="store_true",
        help="the posts-only phases, then the same with one repost and five likes per post "
        "(load_tests/fanout_reposts.py); with --viral, a mixed steady load",
    )
    parser.add_argument(
        "--mix-window",
        type=int,
        default=5000,
        help="reposts and likes go to the last this many posts (newer ones likelier)",
    )
    parser.add_argument("--reposts", type=int, default=1, help="--mix: reposts per post")
    parser.add_argument("--likes", type=int, default=5, help="--mix: likes per post")
    parser.add_argument(
        "--replies", type=float, default=0.0, help="--mix: the share of posts that are replies"
    )
    parser.add_argument(
        "--lists",
        type=float,
        default=0.0,
        help="--mix: the share of users who make three lists of 50 members before the mix",
    )
    parser.add_argument(
        "--viral",
        action="store_true",
        help="the steady load, then one tweet liked and reposted at --viral-likes and "
        "--viral-reposts per second on top (load_tests/fanout_viral.py)",
    )
    parser.add_argument("--viral-likes", type=int, default=20_000, help="likes per second")
    parser.add_argument("--viral-reposts", type=int, default=2_000, help="reposts per second")
    parser.add_argument("--viral-seconds", type=int, default=30, help="length of the viral phase")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="run the job on a single Redis, then on a Redis Cluster (three primaries, "
        "three replicas on this machine), same workload; report cluster ÷ single",
    )
    args = parser.parse_args(argv)
    if args.celebrity:
        return celebrity(args)
    if args.viral:
        from load_tests.fanout_viral import run_viral

        return run_viral(args)
    if args.mix:
        from load_tests.fanout_reposts import run_mix

        return run_mix(args)
    if args.cluster:
        from load_tests import fanout_cluster  # it builds on this module

        return fanout_cluster.run(args)

    workdir, config, services = start_services("fanout", args.pull_threshold)
    params = {
        k: v for k, v in vars(args).items() if not k.startswith(("celebrity", "mix", "viral"))
    }
    report = Report("bench_fanout", params=params | {"partitions": 2, "timeline_size": 800})
    job: Job | None = None
    try:
        ensure_topics(config)
        store = store_for(config)
        client = store.redis
        rnd = random.Random(args.seed)
        log = Changelog(config)

        # --- the follow graph -----------------------------------------------------------
        pairs = write_graph(log, args.users, args.follows, rnd, report)
        log.flush()
        job = Job(config, workdir, args.max_records)
        started = time.time()
        wait_for_seq(store, job, log.last_seq, timeout=900)
        report.add(
            "graph ingest",
            f"{(len(pairs) + args.users) / (time.time() - started):,.0f} follows/s",
            "includes the job's start-up",
        )

        # --- 1. sustained throughput: drain a backlog ----------------------------------------
        gen = ids.IdGenerator(7)
        authors = tweet_authors(args)
        backlog = make_tweets(args.backlog, authors, args.users, rnd, gen)
        delivered, e2e_rate, drain = drain_backlog(log, store, job, backlog)
        report.add("backlog tweets", len(backlog))
        report.add("deliveries", delivered, f"{delivered / len(backlog):.0f} per tweet")
        report.add(
            "end-to-end deliveries/s",
            round(e2e_rate),
            "produce -> Kafka -> Spark -> Redis",
            key="e2e_deliveries_per_s",
        )
        report.add(
            "  micro-batches",
            len(drain),
            f"p50 {percentile([b['duration'] for b in drain], 50):.2f}s",
        )

        # --- 2. latency while tweets arrive at a steady rate ---------------------------------
        steady = steady_phase(log, store, job, args, authors, gen)
        durations = [b["duration"] for b in steady]
        lags = [b["lag"] for b in steady]
        s = summary(durations)
        report.add(
            f"micro-batch at {args.rate} tweets/s p50",
            round(s["p50"], 3),
            "seconds",
            key="batch_p50_s",
        )
        report.add(
            f"micro-batch at {args.rate} tweets/s p99",
            round(s["p99"], 3),
            "seconds",
            key="batch_p99_s",
        )
        report.add(
            "  batches measured",
            len(steady),
            f"{sum(b['rows'] for b in steady) / max(1, len(steady)):.0f} records each",
        )
        report.add(
            "event-time lag p50 / p99",
            f"{percentile(lags, 50):.2f}s / {percentile(lags, 99):.2f}s",
            "newest record's age when its batch's writes were done",
        )
        phases = mean_phases(steady)
        report.add("where a micro-batch's time goes (mean):", "")
        for name, seconds in phases.items():
            report.add(f"  {name}", round(seconds, 3), "seconds", key=f"phase_{name}_s")
        job.stop()
        job = None

        # --- 3. baseline: the same mutations straight to Redis --------------------------------
        batches, base_rate = script_rate(store, pairs, backlog, args)
        flat = [m for _, ms in batches for m in ms]
        raw = raw_append_rate(client, flat, limit=500_000)
        naive = naive_zset_rate(client, flat, 800, limit=300_000)
        report.add(
            "baseline: raw pipelined APPEND per delivery",
            round(raw),
            "deliveries/s, one client",
            key="raw_append_per_s",
        )
        report.add(
            "  ratio end-to-end / raw pipelined writes",
            round(ratio(e2e_rate, raw), 2),
            key="ratio_to_raw",
        )
        report.add(
            "reference: same mutations, the store's script",
            round(base_rate),
            "deliveries/s: grouped per timeline, no Spark",
            key="script_deliveries_per_s",
        )
        report.add(
            "  ratio end-to-end / script",
            round(ratio(e2e_rate, base_rate), 2),
            key="ratio_to_script",
        )
        report.add(
            "reference: sorted sets, pipelined ZADD + trim",
            round(naive),
            "deliveries/s",
            key="naive_zset_per_s",
        )
        report.add(
            "  ratio end-to-end / sorted sets",
            round(ratio(e2e_rate, naive), 2),
            key="ratio_to_zset",
        )

        # --- 4. memory ----------------------------------------------------------------------
        generation = store.active_generation() or 1
        mem = memory_per_entry(client, generation, args.users, 2000, rnd)
        report.add(
            "bytes per timeline entry (packed)",
            round(mem["packed"], 1),
            "MEMORY USAGE / entries",
            key="bytes_per_entry",
        )
        report.add("  same timelines as sorted sets (skiplist)", round(mem["zset_skiplist"], 1))
        report.add(
            "  same timelines as sorted sets (listpack 1024)", round(mem["zset_listpack"], 1)
        )

        report.check("end-to-end >= 100,000 deliveries/s", e2e_rate >= 100_000)
        report.check(
            "end-to-end >= half of raw pipelined writes of the same mutations", e2e_rate >= raw / 2
        )
        report.check(f"micro-batch p50 < 1 s at {args.rate} tweets/s", s["p50"] < 1.0)
        report.check("<= 21 bytes per timeline entry", mem["packed"] <= 21)
        report.print()
        print(f"report: {report.save()}\njob log: {workdir / 'fanout.log'}")
        chart = charts.draw(
            args.chart or report.path("png"),
            f"Fanout job at {args.rate} tweets/s, {args.users:,} users (same run)",
            charts.cdf(
                {"event-time lag": lags, "micro-batch duration": durations},
                "seconds",
                "Freshness: each micro-batch's newest record, and its duration",
            ),
            charts.bars(
                {
                    "end-to-end\n(Kafka, Spark, Redis)": {"deliveries/s": e2e_rate},
                    "the store's script\n(no Spark)": {"deliveries/s": base_rate},
                    "raw pipelined\nAPPEND": {"deliveries/s": raw},
                    "sorted sets\nZADD + trim": {"deliveries/s": naive},
                },
                "deliveries/s",
                "Throughput on the same mutations",
            ),
            charts.bars(
                {name.replace(": ", ":\n"): {"s": v} for name, v in phases.items() if v >= 0.001},
                "seconds (mean per micro-batch)",
                "Where a micro-batch's time goes",
            ),
        )
        print(f"chart: {chart}")
        return 0
    finally:
        if job is not None:
            job.stop()
        stop_services(services)


if __name__ == "__main__":
    sys.exit(main())
