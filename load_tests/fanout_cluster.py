"""``bench_fanout --cluster``: the fanout job writing to a single Redis, then to
a Redis Cluster, the same workload in the same run.

For each layout it starts a broker, the store (one ``redis-server``, or three
primaries and three replicas), writes the same power-law follow graph to the
changelogs, starts the real job (``python -m spark.stream.job``) and measures:

1. end-to-end deliveries/s draining a backlog of ``--backlog`` tweets;
2. micro-batch p50/p99 and event-time lag at ``--rate`` tweets/s;
3. the store's own script on the same mutations, no Spark (the ceiling the
   job approaches on that layout).

Then it prints cluster ÷ single for each. The layouts run one after the
other on the same two cores; the cluster's six nodes share them with the
broker, Spark and the benchmark, so its figures are a floor.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from fanout.kafka import ensure_topics
from fanout.model import ids
from fanout.store.timelines import store_for
from load_tests import charts
from load_tests.fanout_baselines import script_rate
from load_tests.fanout_rig import (
    Changelog,
    Job,
    drain_backlog,
    make_tweets,
    start_services,
    steady_phase,
    stop_services,
    tweet_authors,
    wait_for_seq,
    write_graph,
)
from load_tests.harness import Report, percentile, ratio

LAYOUTS = ("single", "cluster")


def run_layout(args: argparse.Namespace, layout: str, report: Report) -> dict[str, Any]:
    """Everything measured on one layout (see the module docstring)."""
    workdir, config, services = start_services(
        f"fanout-{layout}", args.pull_threshold, cluster=layout == "cluster"
    )
    job: Job | None = None
    try:
        ensure_topics(config)
        store = store_for(config)
        rnd = random.Random(args.seed)
        log = Changelog(config)
        graph = Report("graph") if layout != LAYOUTS[0] else report  # described once
        pairs = write_graph(log, args.users, args.follows, rnd, graph)
        log.flush()
        job = Job(config, workdir, args.max_records)
        wait_for_seq(store, job, log.last_seq, timeout=900)
        gen = ids.IdGenerator(7)
        authors = tweet_authors(args)
        backlog = make_tweets(args.backlog, authors, args.users, rnd, gen)
        delivered, e2e_rate, _ = drain_backlog(log, store, job, backlog)
        steady = steady_phase(log, store, job, args, authors, gen)
        job.stop()
        job = None
        _, base_rate = script_rate(store, pairs, backlog, args)
        print(f"{layout}: done (logs in {workdir})", flush=True)
        return {
            "shards": store.shards.count,
            "delivered": delivered,
            "e2e": e2e_rate,
            "script": base_rate,
            "durations": [b["duration"] for b in steady],
            "lags": [b["lag"] for b in steady],
            "redis": [b.get("redis_ms", 0) / 1000 for b in steady],
        }
    finally:
        if job is not None:
            job.stop()
        stop_services(services)


def run(args: argparse.Namespace) -> int:
    params = {k: v for k, v in vars(args).items() if not k.startswith("celebrity")}
    report = Report(
        "bench_fanout_cluster",
        params=params
        | {
            "partitions": 2,
            "timeline_size": 800,
            "cluster": "3 primaries + 3 replicas on this machine",
        },
    )
    results = {layout: run_layout(args, layout, report) for layout in LAYOUTS}
    one, many = results["single"], results["cluster"]
    report.add("shards on the cluster", many["shards"])
    report.add("deliveries of the backlog", one["delivered"], f"cluster: {many['delivered']:,}")
    figures = (
        ("end-to-end deliveries/s (backlog)", "e2e", "produce -> Kafka -> Spark -> Redis"),
        ("the store's script alone, deliveries/s", "script", "same mutations, no Spark"),
    )
    for what, key, note in figures:
        report.add(f"{what}, single Redis", round(one[key]), note, key=f"single_{key}")
        report.add(f"{what}, Redis Cluster", round(many[key]), key=f"cluster_{key}")
        report.add("  cluster ÷ single", round(ratio(many[key], one[key]), 2), key=f"{key}_ratio")
    for layout, res in results.items():
        report.add(
            f"{layout}: end-to-end ÷ script",
            round(ratio(res["e2e"], res["script"]), 2),
            key=f"{layout}_e2e_to_script",
        )
    for layout, res in results.items():
        durations, lags, redis_s = res["durations"], res["lags"], res["redis"]
        report.add(
            f"{layout}: micro-batch p50 / p99 at {args.rate} tweets/s",
            f"{percentile(durations, 50):.2f} / {percentile(durations, 99):.2f}",
            f"seconds, {len(durations)} batches",
        )
        report.add(
            f"{layout}: event-time lag p50 / p99",
            f"{percentile(lags, 50):.2f} / {percentile(lags, 99):.2f}",
            "seconds",
        )
        report.add(
            f"{layout}: Redis time per batch (mean)",
            round(sum(redis_s) / max(1, len(redis_s)), 3),
            "seconds, the executors' writes",
            key=f"{layout}_redis_s",
        )
    p50 = {layout: percentile(res["durations"], 50) for layout, res in results.items()}
    report.add(
        "micro-batch p50, cluster ÷ single",
        round(ratio(p50["cluster"], p50["single"]), 2),
        key="batch_p50_ratio",
    )
    report.check("both layouts delivered the same", one["delivered"] == many["delivered"])
    report.print()
    print(f"report: {report.save()}")
    chart = charts.draw(
        args.chart or report.path("png"),
        f"Fanout job, single Redis and Redis Cluster, {args.users:,} users (same run)",
        charts.bars(
            {
                "end-to-end": {layout: results[layout]["e2e"] for layout in LAYOUTS},
                "the store's script": {layout: results[layout]["script"] for layout in LAYOUTS},
            },
            "deliveries/s",
            "Throughput on the same mutations",
        ),
        charts.cdf(
            {f"{layout}: micro-batch duration": results[layout]["durations"] for layout in LAYOUTS}
            | {f"{layout}: event-time lag": results[layout]["lags"] for layout in LAYOUTS},
            "seconds",
            f"At {args.rate} tweets/s",
        ),
    )
    print(f"chart: {chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit("run it as: python -m load_tests.bench_fanout --cluster")
