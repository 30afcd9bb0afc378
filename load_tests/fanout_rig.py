"""The fanout benchmarks' rig: their own broker and Redis, the changelogs
written straight, the real fanout job run and waited for, steady load and
backlog phases, and the job's micro-batches reported (used by bench_fanout,
bench_heavy, bench_rebuild, bench_grouping and the cluster run)."""

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fanout.config import DEFAULT_PULL_THRESHOLD, StarlingConfig, TopicNames
from fanout.kafka import make_producer
from fanout.model import events, ids
from fanout.model.partitioning import partition_for
from fanout.store.timelines import TimelineStore
from feed.devstack import embedded, kafka
from load_tests import network
from load_tests.harness import Report, percentile, summary
from spark.source.kafka_io import end_offsets
from spark.source.offsets import Offsets

ROOT = Path(__file__).resolve().parent.parent


def start_services(
    name: str, pull_threshold: int = DEFAULT_PULL_THRESHOLD, *, cluster: bool = False
) -> tuple[Path, StarlingConfig, list[subprocess.Popen[bytes]]]:
    """A work directory, and a broker and a Redis of the benchmark's own (stop
    them with :func:`stop_services`), with the configuration pointing at them.
    With ``cluster``, the timelines go to a Redis Cluster of three primaries and
    three replicas started here as well."""
    workdir = ROOT / "var" / "bench" / f"{name}-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    rport = embedded.free_port()
    broker = kafka.start_node(workdir / "kafka")
    assert broker.proc is not None
    redis_proc = embedded.start(embedded.redis_command(rport), rport, log=workdir / "redis.log")
    nodes = embedded.start_redis_cluster(workdir / "cluster") if cluster else []
    config = StarlingConfig(
        redis_url=f"redis://127.0.0.1:{rport}/0",
        redis_cluster_urls=tuple(node.url for node in nodes),
        kafka_bootstrap_servers=broker.bootstrap,
        topics=TopicNames("bench."),
        partitions=2,
        timeline_size=800,
        pull_threshold=pull_threshold,
    )
    return workdir, config, [*(node.proc for node in nodes), redis_proc, broker.proc]


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
        self.topics = {
            events.TWEETS: config.topics.tweets,
            events.FOLLOWS: config.topics.follows,
            events.ENGAGEMENTS: config.topics.engagements,
        }

    def send(self, event: events.Event) -> None:
        self.send_record(events.encode(event))

    def send_record(self, record: events.Record) -> None:
        """An event encoded beforehand (a fast writer encodes ahead of its phase)."""
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
        self.config = config
        self.progress = workdir / "progress.jsonl"
        env = {
            **os.environ,
            "REDIS_URL": config.redis_url,
            "REDIS_CLUSTER_URLS": ",".join(config.redis_cluster_urls),
            "KAFKA_BOOTSTRAP_SERVERS": config.kafka_bootstrap_servers,
            "STARLING_TOPIC_PREFIX": config.topics.prefix,
            "STARLING_PARTITIONS": str(config.partitions),
            "STARLING_TIMELINE_SIZE": str(config.timeline_size),
            "STARLING_PULL_THRESHOLD": str(config.pull_threshold),
            "PYTHONUNBUFFERED": "1",
            # A rebuild it runs for a benchmark keeps its files in the run's directory.
            "STARLING_VAR_DIR": str(workdir),
        }
        self.log = open(workdir / "fanout.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "spark.stream.job",
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
    """Wait until the job has applied everything written, ``seq`` being the last
    seq written (the writes have stopped); returns when that batch was applied.

    Everything means the highest seq applied is ``seq`` *and* the job's batches
    have read to the end of every partition: in a replay the partition that
    holds the last seq can be read ahead of the others (each micro-batch takes
    its share of every partition's backlog), so the seq alone is reached while
    hundreds of thousands of records are still to come."""
    deadline = time.monotonic() + timeout
    ends: Offsets | None = None
    while time.monotonic() < deadline:
        generation = store.active_generation()
        wm = store.watermark(generation) if generation else None
        if wm is not None and wm.seq >= seq:
            if ends is None:
                ends = end_offsets(job.config.kafka_client(), job.config.topics.all())
            if all(
                int(wm.offsets.get(topic, {}).get(p, 0)) >= end
                for topic, parts in ends.items()
                for p, end in parts.items()
            ):
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


def write_graph(
    log: Changelog, users: int, follows: int, rnd: random.Random, report: Report
) -> list[tuple[int, int]]:
    """The power-law follow graph of ``users`` (self edges first) into the changelog
    (not flushed); returns its (follower, followee) pairs."""
    pairs = list(network.follows(users, follows, rnd))
    counts: defaultdict[int, int] = defaultdict(int)
    for _, g in pairs:
        counts[g] += 1
    degrees = [counts.get(u, 0) for u in range(1, users + 1)]
    report.add("follows", len(pairs))
    report.add(
        "followers per user p50 / p99 / max",
        f"{percentile(degrees, 50):.0f} / {percentile(degrees, 99):.0f} / {max(degrees)}",
    )
    for u in range(1, users + 1):
        log.send(events.Followed(u, u))
    for f, g in pairs:
        log.send(events.Followed(f, g))
    return pairs


class SteadyLoad:
    """Tweets at ``rate`` per second from a background thread, and optionally one
    tweet a second by ``celebrity`` as well (the same thread: one writer)."""

    def __init__(
        self,
        log: Changelog,
        rate: int,
        authors: network.Popularity | None,
        users: int,
        rnd: random.Random,
        gen: ids.IdGenerator,
        celebrity: int | None = None,
    ) -> None:
        self.log, self.rate, self.authors, self.users = log, rate, authors, users
        self.rnd, self.gen, self.celebrity = rnd, gen, celebrity
        self.sent = self.celebrity_posts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            elapsed = time.monotonic() - start
            due = int(elapsed * self.rate)
            for tweet in make_tweets(due - self.sent, self.authors, self.users, self.rnd, self.gen):
                self.log.send(tweet)
            self.sent = max(self.sent, due)
            if self.celebrity is not None:
                while self.celebrity_posts < int(elapsed):
                    self.log.send(celebrity_tweet(self.celebrity, self.gen, self.rnd))
                    self.celebrity_posts += 1
            time.sleep(0.005)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def drain_backlog(
    log: Changelog, store: TimelineStore, job: Job, backlog: Sequence[events.Event]
) -> tuple[int, float, list[dict[str, Any]]]:
    """Write ``backlog`` at once and wait for the job to apply it: the deliveries
    made, deliveries per second from the first write to the last batch's
    application, and the micro-batches that drained it."""
    before = deliveries_counter(store)
    started = time.time()
    for event in backlog:
        log.send(event)
    log.flush()
    done_at = wait_for_seq(store, job, log.last_seq, timeout=1800)
    delivered = deliveries_counter(store) - before
    return delivered, delivered / (done_at - started), job.batches(since=started)


def steady_phase(
    log: Changelog,
    store: TimelineStore,
    job: Job,
    args: argparse.Namespace,
    authors: network.Popularity | None,
    gen: ids.IdGenerator,
) -> list[dict[str, Any]]:
    """Tweets at ``args.rate`` per second for ``args.seconds``; the micro-batches
    of that time, the first 10 seconds (warm-up) left out."""
    load = SteadyLoad(log, args.rate, authors, args.users, random.Random(args.seed + 1), gen)
    started = time.time()
    batches = phase(log, store, job, args, load, warm_up=10.0)
    return [b for b in batches if b["at"] <= started + args.seconds]


def tweet_authors(args: argparse.Namespace) -> network.Popularity | None:
    """Who tweets (``--authors``): a Zipf draw by popularity (activity is
    independent of popularity: a tweet reaches the average follower count), or
    None for every user alike."""
    if args.authors == "zipf":
        return network.Popularity(args.users, random.Random(args.seed + 2))
    return None


#: Spark's phases of a trigger (StreamingQueryProgress.durationMs) that are
#: parts of triggerExecution; the sink's Redis time is part of addBatch.
PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def mean_phases(batches: list[dict[str, Any]]) -> dict[str, float]:
    """Mean seconds per phase of a micro-batch (the rest of triggerExecution as
    ``other``) and the executors' Redis time within addBatch."""
    n = max(1, len(batches))
    out = {name: sum(b.get("phases", {}).get(name, 0) for b in batches) / n for name in PHASES}
    total = sum(b["duration"] for b in batches) / n
    out["other"] = max(0.0, total - sum(out.values()))
    out["of addBatch: Redis"] = sum(b.get("redis_ms", 0) for b in batches) / n / 1000
    return out


def report_batches(report: Report, label: str, key: str, batches: list[dict[str, Any]]) -> float:
    """Add a phase's micro-batch figures; returns its p99."""
    s = summary([b["duration"] for b in batches])
    report.add(f"{label}: micro-batch p50", round(s["p50"], 3), "seconds", key=f"{key}_batch_p50_s")
    report.add(f"{label}: micro-batch p99", round(s["p99"], 3), "seconds", key=f"{key}_batch_p99_s")
    report.add(
        "  batches / max",
        f"{len(batches)} / {s['max']:.2f}s",
        f"{sum(b['rows'] for b in batches) / max(1, len(batches)):.0f} records each",
    )
    report.add(
        "  redis time per batch (mean)",
        round(sum(b.get("redis_ms", 0) for b in batches) / max(1, len(batches)) / 1000, 3),
        "seconds, summed over the executors' apply calls",
        key=f"{key}_redis_s",
    )
    lags = [b["lag"] for b in batches]
    report.add(
        "  event-time lag p50 / p99",
        f"{percentile(lags, 50):.2f}s / {percentile(lags, 99):.2f}s",
        key=f"{key}_lag",
    )
    return s["p99"]


def celebrity_tweet(author: int, gen: ids.IdGenerator, rnd: random.Random) -> events.TweetPosted:
    return events.TweetPosted(gen.next_id(), author, f"user{author}", network.tweet_text(rnd))


def phase(
    log: Changelog,
    store: TimelineStore,
    job: Job,
    args: argparse.Namespace,
    load: SteadyLoad,
    warm_up: float,
) -> list[dict[str, Any]]:
    """Run ``load`` for ``--seconds``, wait until the job has applied it all; the
    micro-batches from ``warm_up`` seconds in until then (the catch-up included)."""
    t = time.time()
    load.start()
    time.sleep(args.seconds)
    load.stop()
    log.flush()
    wait_for_seq(store, job, log.last_seq, timeout=1800)
    time.sleep(1.0)  # the progress line follows the watermark
    return job.batches(since=t + warm_up)
