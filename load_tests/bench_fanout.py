"""Fanout job benchmark: deliveries per second, micro-batch latency, memory.

    python -m load_tests.bench_fanout [--users 10000] [--follows 50] [--backlog 50000]
                                      [--rate 1000] [--seconds 60]

Starts its own broker and Redis, writes a follow graph with a power-law
follower distribution (load_tests/network.py) straight to the changelogs,
runs the real fanout job (``python -m spark.job``) and measures:

1. sustained throughput: a backlog of tweets drained by the job, in timeline
   deliveries per second (one delivery = one tweet id into one timeline);
2. micro-batch latency while tweets arrive at ``--rate`` per second (p50/p99);
3. the baseline, in the same run and on the same Redis: the same mutations
   (computed by the same join rules, outside Spark) written straight to Redis
   with pipelined script calls, which is the ceiling the job can approach;
   also the naive sorted-set baseline (pipelined ZADD + trim per delivery);
4. memory: bytes per timeline entry, packed strings against sorted sets.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import redis

from fanout import embedded, events, ids
from fanout.config import StarlingConfig, TopicNames
from fanout.join import AuthorState, Mutation, join_events
from fanout.kafka import ensure_topics, make_producer
from fanout.keys import timeline as timeline_key
from fanout.partitioning import partition_for
from fanout.timeline_ops import entries, timeline_ids
from fanout.timelines import TimelineStore, store_for
from load_tests import network
from load_tests.harness import Report, percentile, ratio, summary

ROOT = Path(__file__).resolve().parent.parent


def start_services(
    name: str,
) -> tuple[Path, StarlingConfig, list[subprocess.Popen[bytes]]]:
    """A work directory, and a broker and a Redis of the benchmark's own (stop
    them with :func:`stop_services`), with the configuration pointing at them."""
    workdir = ROOT / "var" / "bench" / f"{name}-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    kport, rport = embedded.free_port(), embedded.free_port()
    broker = embedded.start(embedded.broker_command(kport), kport, log=workdir / "broker.log")
    redis_proc = embedded.start(embedded.redis_command(rport), rport, log=workdir / "redis.log")
    config = StarlingConfig(
        redis_url=f"redis://127.0.0.1:{rport}/0",
        kafka_bootstrap_servers=f"127.0.0.1:{kport}",
        topics=TopicNames("bench."),
        partitions=2,
        timeline_size=800,
    )
    return workdir, config, [redis_proc, broker]


def stop_services(services: list[subprocess.Popen[bytes]]) -> None:
    for proc in services:
        embedded.stop(proc)


class Changelog:
    """Writes events with increasing seq, the way the relay does."""

    def __init__(self, config: StarlingConfig) -> None:
        self.config = config
        self.producer = make_producer(config, **{"linger.ms": 20, "batch.num.messages": 10000})
        self.seq = itertools.count(1)
        self.last_seq = 0
        self.topics = {events.TWEETS: config.topics.tweets, events.FOLLOWS: config.topics.follows}

    def send(self, event: events.Event) -> None:
        record = events.encode(event)
        self.last_seq = next(self.seq)
        while True:
            try:
                self.producer.produce(
                    self.topics[record.topic],
                    key=record.key,
                    value=record.value,
                    partition=partition_for(record.join_key, self.config.partitions),
                    headers=list(events.headers(self.last_seq, record.join_key)),
                )
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def flush(self) -> None:
        self.producer.flush(60)


class Job:
    """The fanout job as its own process, like make run runs it."""

    def __init__(self, config: StarlingConfig, workdir: Path, max_records: int) -> None:
        self.progress = workdir / "progress.jsonl"
        env = {
            **os.environ,
            "REDIS_URL": config.redis_url,
            "KAFKA_BOOTSTRAP_SERVERS": config.kafka_bootstrap_servers,
            "STARLING_TOPIC_PREFIX": config.topics.prefix,
            "STARLING_PARTITIONS": str(config.partitions),
            "TIMELINE_SIZE": str(config.timeline_size),
            "PYTHONUNBUFFERED": "1",
        }
        self.log = open(workdir / "fanout.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "spark.job",
                "--checkpoint",
                str(workdir / "checkpoint"),
                "--max-records",
                str(max_records),
                "--progress-file",
                str(self.progress),
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def batches(self, since: float = 0.0) -> list[dict[str, Any]]:
        if not self.progress.exists():
            return []
        rows = [json.loads(line) for line in self.progress.read_text().splitlines() if line]
        return [r for r in rows if r["at"] >= since]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def wait_for_seq(store: TimelineStore, job: Job, seq: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        generation = store.active_generation()
        wm = store.watermark(generation) if generation else None
        if wm is not None and wm.seq >= seq:
            return wm.applied_at
        if job.proc.poll() is not None:
            raise SystemExit(f"the fanout job exited ({job.proc.returncode}); see its log")
        time.sleep(0.2)
    raise SystemExit(f"the fanout job did not reach seq {seq} within {timeout:.0f}s")


def deliveries_counter(store: TimelineStore) -> int:
    generation = store.active_generation()
    wm = store.watermark(generation) if generation else None
    return wm.counters.get("deliveries", 0) if wm else 0


def make_tweets(
    n: int, authors: network.Popularity | None, users: int, rnd: random.Random, gen: ids.IdGenerator
) -> list[events.TweetPosted]:
    out = []
    for _ in range(n):
        author = authors.draw(rnd) if authors else rnd.randint(1, users)
        out.append(
            events.TweetPosted(gen.next_id(), author, f"user{author}", network.tweet_text(rnd))
        )
    return out


def baseline_mutations(
    pairs: list[tuple[int, int]],
    users: int,
    tweets: list[events.TweetPosted],
    cap: int,
    per_batch: int,
) -> tuple[list[tuple[dict[int, bytes], list[Mutation]]], int]:
    """The job's mutations for ``tweets``, by the same join rules, without Spark."""
    followers: dict[int, set[int]] = defaultdict(set)
    for f, g in pairs:
        followers[g].add(f)
    states = {a: AuthorState(followers=set(fs)) for a, fs in followers.items()}
    batches = []
    total = 0
    seq = itertools.count(1)
    for start in range(0, len(tweets), per_batch):
        by_author: dict[int, list[events.Envelope]] = defaultdict(list)
        for t in tweets[start : start + per_batch]:
            by_author[t.author_id].append(events.Envelope(next(seq), t))
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for author, envs in by_author.items():
            result = join_events(author, states.get(author, AuthorState()), envs, cap=cap)
            states[author] = result.state
            bodies.update(result.bodies)
            mutations += result.mutations
        total += sum(m.deliveries for m in mutations)
        batches.append((bodies, mutations))
    return batches, total


def raw_append_rate(client: redis.Redis, mutations: list[Mutation], limit: int) -> float:
    """The same deliveries as plain pipelined commands on the packed layout: one
    ``APPEND`` of 8 bytes per delivery, no script, no ordering check, no trim
    (an optimistic bound for raw writes of these mutations)."""
    pipe = client.pipeline(transaction=False)
    done = 0
    started = time.perf_counter()
    for m in mutations:
        for t in m.tweets:
            packed = t.to_bytes(8, "big")
            for owner in m.owners:
                pipe.append(f"ba:{owner}", packed)
                done += 1
                if done % 2000 == 0:
                    pipe.execute()
        if done >= limit:
            break
    pipe.execute()
    return done / (time.perf_counter() - started)


def naive_zset_rate(client: redis.Redis, mutations: list[Mutation], cap: int, limit: int) -> float:
    """Pipelined ZADD + ZREMRANGEBYRANK per delivery (the textbook fanout write)."""
    pipe = client.pipeline(transaction=False)
    done = 0
    started = time.perf_counter()
    for m in mutations:
        for owner in m.owners:
            for t in m.tweets:
                key = f"bz:{owner}"
                pipe.zadd(key, {str(t): t})
                pipe.zremrangebyrank(key, 0, -cap - 1)
                done += 1
                if done % 2000 == 0:
                    pipe.execute()
        if done >= limit:
            break
    pipe.execute()
    return done / (time.perf_counter() - started)


def memory_per_entry(
    client: redis.Redis, generation: int, users: int, sample: int, rnd: random.Random
) -> dict[str, float]:
    """Bytes per entry of a sample of timelines, packed and as sorted sets."""
    picked = rnd.sample(range(1, users + 1), min(sample, users))
    packed_bytes = total = 0
    ids_by_user: dict[int, list[int]] = {}
    for user in picked:
        key = timeline_key(generation, user)
        raw = client.get(key)
        if not isinstance(raw, bytes) or entries(raw) == 0:
            continue
        packed_bytes += int(client.memory_usage(key, samples=0) or 0)
        total += entries(raw)
        ids_by_user[user] = timeline_ids(raw)
    out = {"packed": packed_bytes / total if total else 0.0, "entries_sampled": float(total)}
    for label, listpack_entries in (("zset_skiplist", 128), ("zset_listpack", 1024)):
        previous = str(client.config_get("zset-max-listpack-entries")["zset-max-listpack-entries"])
        client.config_set("zset-max-listpack-entries", listpack_entries)
        zset_bytes = 0
        for user, tl in ids_by_user.items():
            key = f"bzmem:{user}"
            client.delete(key)
            client.zadd(key, {str(t): t for t in tl})
            zset_bytes += int(client.memory_usage(key, samples=0) or 0)
            client.delete(key)
        client.config_set("zset-max-listpack-entries", previous)
        out[label] = zset_bytes / total if total else 0.0
    return out


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
    parser.add_argument(
        "--authors",
        choices=["zipf", "uniform"],
        default="zipf",
        help="who tweets: zipf (the top 10%% of users write ~77%% of tweets, as measured on "
        "Twitter) or uniform (every user alike: the most distinct authors per batch)",
    )
    args = parser.parse_args(argv)

    workdir, config, services = start_services("fanout")
    report = Report("bench_fanout", params=vars(args) | {"partitions": 2, "timeline_size": 800})
    job: Job | None = None
    try:
        ensure_topics(config)
        store = store_for(config)
        client = store.redis
        rnd = random.Random(args.seed)
        log = Changelog(config)

        # --- the follow graph -----------------------------------------------------------
        pairs = list(network.follows(args.users, args.follows, rnd))
        counts: defaultdict[int, int] = defaultdict(int)
        for _, g in pairs:
            counts[g] += 1
        degrees = [counts.get(u, 0) for u in range(1, args.users + 1)]
        report.add("follows", len(pairs))
        report.add(
            "followers per user p50 / p99 / max",
            f"{percentile(degrees, 50):.0f} / {percentile(degrees, 99):.0f} / {max(degrees)}",
        )
        for u in range(1, args.users + 1):
            log.send(events.Followed(u, u))
        for f, g in pairs:
            log.send(events.Followed(f, g))
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
        # Activity is independent of popularity: a tweet reaches the average follower count.
        authors = (
            network.Popularity(args.users, random.Random(args.seed + 2))
            if args.authors == "zipf"
            else None
        )
        backlog = make_tweets(args.backlog, authors, args.users, rnd, gen)
        before = deliveries_counter(store)
        t0 = time.time()
        for tweet in backlog:
            log.send(tweet)
        log.flush()
        done_at = wait_for_seq(store, job, log.last_seq, timeout=1800)
        delivered = deliveries_counter(store) - before
        e2e_rate = delivered / (done_at - t0)
        drain = job.batches(since=t0)
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
        stop = threading.Event()
        sent = 0

        def produce_steadily() -> None:
            nonlocal sent
            start = time.monotonic()
            prng = random.Random(args.seed + 1)
            while not stop.is_set():
                due = int((time.monotonic() - start) * args.rate)
                for tweet in make_tweets(due - sent, authors, args.users, prng, gen):
                    log.send(tweet)
                sent = max(sent, due)
                time.sleep(0.005)

        t1 = time.time()
        producer = threading.Thread(target=produce_steadily, daemon=True)
        producer.start()
        time.sleep(args.seconds)
        stop.set()
        producer.join()
        log.flush()
        wait_for_seq(store, job, log.last_seq, timeout=600)
        steady = [
            b for b in job.batches(since=t1 + 10) if b["at"] <= t1 + args.seconds
        ]  # skip warm-up
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
            "newest record's age when its batch finished",
        )
        job.stop()
        job = None

        # --- 3. baseline: the same mutations straight to Redis --------------------------------
        batches, planned = baseline_mutations(pairs, args.users, backlog, 800, args.max_records)
        base_store = TimelineStore(client, cap=800)
        base_store.create_generation(99)
        t = time.perf_counter()
        for bodies, mutations in batches:
            base_store.apply(99, bodies, mutations)
        base_rate = planned / (time.perf_counter() - t)
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
        return 0
    finally:
        if job is not None:
            job.stop()
        stop_services(services)


if __name__ == "__main__":
    sys.exit(main())
