"""The timeline store on a Redis Cluster against a single Redis, same run.

Starts a single ``redis-server`` and a Redis Cluster of three primaries and
three replicas (all on this machine), writes the same fan-out to both
through the store (a network of users following 100 others each, every
author tweeting; 20 pulled authors read by half the users), then reads
pages from both. Prints:

* deliveries/s of the store's writes, cluster ÷ single;
* pages/s of ``read_page`` (50 tweets) for users who read no pulled author
  and for users who read them, cluster ÷ single;
* the round trips to Redis per page read (a pipeline to one node is one).

All six nodes and the benchmark share the machine's cores: on two cores the
cluster's figures are a floor, not what separate machines would give.

    python -m load_tests.bench_cluster [--users 2000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import redis
from redis.cluster import RedisCluster

from fanout.config import DEFAULT_CLUSTER_SHARDS
from fanout.model import events, ids
from fanout.model.author_state import AuthorState
from fanout.model.join import Mutation, Op, join_events, newest
from fanout.store.keys import Shards
from fanout.store.timelines import TimelineStore
from feed.devstack import embedded
from load_tests import network
from load_tests.harness import Report, mark_applied, ratio, round_trips_per_read

CAP, SLACK = 800, 64


def workload(users: int, follows: int, seed: int) -> list[tuple[dict[int, bytes], list[Mutation]]]:
    """The batches both stores apply: rounds of one tweet per author, then the
    pulled authors' lists and the pulls of the second half of the users."""
    rnd = random.Random(seed)
    gen = ids.IdGenerator(5)
    people = range(1, users + 1)
    followers: dict[int, set[int]] = {a: set() for a in people}
    for u in people:
        for a in rnd.sample(people, follows):
            if a != u:
                followers[a].add(u)
    batches = []
    for _ in range(CAP // follows + 2):
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for author in people:
            ev = events.TweetPosted(gen.next_id(), author, f"user{author}", network.tweet_text(rnd))
            result = join_events(
                author, AuthorState(followers=followers[author]), [events.Envelope(1, ev)], cap=CAP
            )
            bodies |= result.bodies
            mutations += result.mutations
        batches.append((bodies, mutations))
    bodies, mutations = {}, []
    readers = tuple(range(users // 2 + 1, users + 1))
    for author in range(users + 1, users + 21):
        tweets = []
        for _ in range(CAP + SLACK + 10):
            ev = events.TweetPosted(gen.next_id(), author, f"user{author}", network.tweet_text(rnd))
            bodies[ev.tweet_id] = events.tweet_json(ev)
            tweets.append(ev.tweet_id)
        kept, horizon = newest(tweets, CAP + SLACK)
        mutations.append(Mutation(Op.LIST, (author,), kept, horizon))
        mutations.append(Mutation(Op.PULL, readers, (), 0, 1, 0, (author,)))
    batches.append((bodies, mutations))
    return batches


def fill(store: TimelineStore, batches: list[tuple[dict[int, bytes], list[Mutation]]]) -> float:
    """Apply the batches; deliveries per second."""
    generation = store.ensure_active_generation()
    deliveries = 0
    started = time.perf_counter()
    for bodies, mutations in batches:
        store.apply(generation, bodies, mutations)
        deliveries += sum(m.deliveries for m in mutations if m.op is Op.ADD)
    elapsed = time.perf_counter() - started
    mark_applied(store, generation)
    return deliveries / elapsed


def read_rate(store: TimelineStore, users: list[int], seconds: float, seed: int) -> float:
    """Pages (50 tweets) per second, one reader, for random ``users``."""
    rnd = random.Random(seed)
    n, deadline = 0, time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        for _ in range(50):
            page = store.read_page(rnd.choice(users), count=50)
            assert page.status == "ok", page.status
        n += 50
    return n / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--follows", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0, help="per read measurement")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    port = embedded.free_port()
    single_proc = embedded.start(embedded.redis_command(port), port, log=workdir / "single.log")
    nodes = embedded.start_redis_cluster(workdir / "cluster")
    try:
        single = redis.Redis(port=port)
        cluster = RedisCluster.from_url(nodes[0].url)
        stores = {
            "single": TimelineStore(single, cap=CAP, slack=SLACK),
            "cluster": TimelineStore(
                cluster, cap=CAP, slack=SLACK, shards=Shards(DEFAULT_CLUSTER_SHARDS)
            ),
        }
        batches = workload(args.users, args.follows, seed=7)
        report = Report(
            "bench_cluster",
            params={
                "users": args.users,
                "follows": args.follows,
                "cluster": "3 primaries + 3 replicas on this machine",
                "shards": DEFAULT_CLUSTER_SHARDS,
            },
        )
        writes = {mode: fill(store, batches) for mode, store in stores.items()}
        plain = list(range(1, args.users // 2 + 1))
        merged = list(range(args.users // 2 + 1, args.users + 1))
        reads: dict[str, dict[str, list[float]]] = {m: {"plain": [], "merged": []} for m in stores}
        for round_ in range(3):  # alternated: a drift of the machine hits both
            for mode, store in stores.items():
                for kind, users in (("plain", plain), ("merged", merged)):
                    reads[mode][kind].append(read_rate(store, users, args.seconds / 3, seed=round_))
        calls = {
            mode: {
                kind: round_trips_per_read(store, users)
                for kind, users in (("plain", plain), ("merged", merged))
            }
            for mode, store in stores.items()
        }
        report.add("single: deliveries/s (store writes)", writes["single"], key="single_writes")
        report.add("cluster: deliveries/s", writes["cluster"], key="cluster_writes")
        report.add(
            "cluster ÷ single, writes",
            ratio(writes["cluster"], writes["single"]),
            key="write_ratio",
        )
        for kind, label in (("plain", "no pulled author"), ("merged", "20 pulled authors")):
            one = sum(reads["single"][kind]) / 3
            many = sum(reads["cluster"][kind]) / 3
            report.add(f"single: pages/s, {label}", one, key=f"single_reads_{kind}")
            report.add(f"cluster: pages/s, {label}", many, key=f"cluster_reads_{kind}")
            report.add(f"cluster ÷ single, {label}", ratio(many, one), key=f"read_ratio_{kind}")
            for mode in stores:
                report.add(
                    f"{mode}: round trips per read, {label}",
                    calls[mode][kind],
                    key=f"{mode}_round_trips_{kind}",
                )
        report.print()
        print(f"report: {report.save()}")
    finally:
        embedded.stop_redis_cluster(nodes)
        embedded.stop(single_proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
