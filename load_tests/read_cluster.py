"""``bench_read --cluster``: the same reads on a single Redis, then on a Redis
Cluster of six nodes on this machine (load_tests/bench_read.py runs it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from load_tests.bench_read import (
    LABELS,
    count_errors,
    fill,
    half_load_panel,
    paced,
    serve,
    stop_server,
    tokens_for,
    wrk,
)


def script_calls(nodes: list[Any]) -> int:
    """Script calls (EVALSHA and EVAL) served so far by ``nodes``: the calls a
    read costs the servers, whoever sends them (commands run inside scripts
    are not counted)."""
    total = 0
    for node in nodes:
        stats = node.info("commandstats")
        total += sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval"))
    return total


def against_cluster(
    args: argparse.Namespace, workdir: Path, env: dict[str, str], rport: int, nodes: list[Any]
) -> int:
    """The endpoint on a single Redis, then on a Redis Cluster holding the same
    data: requests/s, latency at half load, and the Redis calls per read."""
    import redis
    from redis.cluster import RedisCluster

    from fanout.config import StarlingConfig
    from fanout.store.timelines import store_for
    from feed.devstack import embedded
    from load_tests import charts
    from load_tests.harness import Report, ratio, round_trips_per_read

    layouts = {
        "single": {},
        "cluster": {"REDIS_CLUSTER_URLS": ",".join(node.url for node in nodes)},
    }
    readers: dict[str, list[int]] = {}
    runs: dict[str, dict[str, dict[str, float]]] = {}
    trips: dict[str, dict[str, float]] = {}
    shards = 0
    for layout, extra in layouts.items():
        config = StarlingConfig.from_env({**env, **extra})
        store = store_for(config)
        shards = max(shards, store.shards.count)
        readers["single"], readers["merged"] = fill(store, config, args.users)
        trips[layout] = {
            kind: round_trips_per_read(store, users) for kind, users in readers.items()
        }
        if layout == "cluster":
            cluster = RedisCluster.from_url(nodes[0].url)
            servers = [cluster.get_redis_connection(n) for n in cluster.get_primaries()]
        else:
            servers = [redis.Redis(port=rport)]
        tokens = tokens_for(readers["single"] + readers["merged"])
        wport = embedded.free_port()
        server = serve(wport, {**env, **extra}, args, workdir)
        try:
            url = f"http://127.0.0.1:{wport}/api/v1/timeline?count=50"
            for kind, users in readers.items():
                mine = [tokens[u] for u in users]
                wrk(url, mine, args.connections, 3, workdir)  # warm-up: workers, script cache
                before = script_calls(servers)
                peak = wrk(url, mine, args.connections, args.seconds, workdir)
                peak["calls"] = (script_calls(servers) - before) / max(1.0, peak["requests"])
                half = paced(url, mine, args.connections, args.seconds, workdir, peak["rps"] / 2)
                runs[f"{layout}: {LABELS[kind]}"] = {"peak": peak, "half": half}
        finally:
            stop_server(server)

    report = Report(
        "bench_read_cluster",
        params=vars(args)
        | {
            "page": "50 tweets",
            "cluster": "3 primaries + 3 replicas on this machine",
            "shards": shards,
            "merged": "20 pulled authors' lists beside the timeline",
        },
    )
    for kind in ("single", "merged"):
        one, many = (runs[f"{layout}: {LABELS[kind]}"] for layout in ("single", "cluster"))
        report.add(f"{LABELS[kind]}:", "")
        for layout, run in (("single Redis", one), ("Redis Cluster", many)):
            peak = run["peak"]
            report.add(
                f"  {layout}: requests/s at full load",
                round(peak["rps"]),
                f"p50 {peak['p50']:.2f} ms, p99 {peak['p99']:.2f} ms",
                key=f"{kind}_{layout.split()[-1].lower()}_rps",
            )
        report.add(
            "  cluster ÷ single, requests/s",
            round(ratio(many["peak"]["rps"], one["peak"]["rps"]), 2),
            key=f"{kind}_rps_ratio",
        )
        for layout, run in (("single", one), ("cluster", many)):
            report.add(
                f"  {layout}: at half load, p50 / p99",
                f"{run['half']['p50']:.2f} / {run['half']['p99']:.2f}",
                f"ms ({run['half']['rps']:,.0f} requests/s)",
            )
            report.add(
                f"  {layout}: Redis round trips per read",
                round(trips[layout][kind], 2),
                "client side, the store's read",
                key=f"{kind}_{layout}_round_trips",
            )
            report.add(
                f"  {layout}: script calls per request",
                round(run["peak"]["calls"], 2),
                "server side, all nodes",
                key=f"{kind}_{layout}_script_calls",
            )
    errors = count_errors(runs)
    report.add("non-2xx responses", int(errors))
    report.check("no errors", errors == 0)
    report.print()
    print(f"report: {report.save()}")
    chart = charts.draw(
        args.chart or report.path("png"),
        "Home-timeline reads through the endpoint: single Redis and Redis Cluster (same run)",
        charts.bars(
            {
                LABELS[kind]: {
                    layout: runs[f"{layout}: {LABELS[kind]}"]["peak"]["rps"]
                    for layout in ("single", "cluster")
                }
                for kind in ("single", "merged")
            },
            "requests/s",
            "Throughput at full load",
        ),
        half_load_panel(runs),
    )
    print(f"chart: {chart}")
    return 0
