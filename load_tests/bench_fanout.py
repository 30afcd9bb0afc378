"""Fanout job benchmark: deliveries per second, micro-batch latency, memory.

    python -m load_tests.bench_fanout [--users 10000] [--follows 50] [--backlog 50000]
                                      [--rate 1000] [--seconds 60]
    python -m load_tests.bench_fanout --cluster [--users 10000] [--backlog 50000] [--seconds 60]
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

from fanout.config import DEFAULT_PULL_THRESHOLD, StarlingConfig, TopicNames
from fanout.kafka import ensure_topics, make_producer
from fanout.model import events, ids
from fanout.model.author_state import AuthorState
from fanout.model.join import Mutation, join_events
from fanout.model.partitioning import partition_for
from fanout.store.keys import timeline as timeline_key
from fanout.store.ops import entries, timeline_ids
from fanout.store.redis_conn import Client
from fanout.store.timelines import TimelineStore, store_for
from feed.devstack import embedded, kafka
from load_tests import charts, network
from load_tests.harness import Report, percentile, ratio, summary
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
    log: Changelog, store: TimelineStore, job: Job, backlog: list[events.TweetPosted]
) -> tuple[int, float, list[dict[str, Any]]]:
    """Write ``backlog`` at once and wait for the job to apply it: the deliveries
    made, deliveries per second from the first write to the last batch's
    application, and the micro-batches that drained it."""
    before = deliveries_counter(store)
    started = time.time()
    for tweet in backlog:
        log.send(tweet)
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


def script_rate(
    store: TimelineStore,
    pairs: list[tuple[int, int]],
    backlog: list[events.TweetPosted],
    args: argparse.Namespace,
) -> tuple[list[tuple[dict[int, bytes], list[Mutation]]], float]:
    """The job's mutations for ``backlog`` (same rules, batches of
    ``--max-records``) and the deliveries per second of the store's own script
    applying them to a spare generation of the same Redis (or cluster)."""
    batches, planned = baseline_mutations(pairs, args.users, backlog, 800, args.max_records)
    spare = TimelineStore(store.redis, cap=800, shards=store.shards)
    spare.create_generation(99)
    started = time.perf_counter()
    for bodies, mutations in batches:
        spare.apply(99, bodies, mutations)
    return batches, planned / (time.perf_counter() - started)


def raw_append_rate(client: Client, mutations: list[Mutation], limit: int) -> float:
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


def naive_zset_rate(client: Client, mutations: list[Mutation], cap: int, limit: int) -> float:
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
    client: Client, generation: int, users: int, sample: int, rnd: random.Random
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


# --- the celebrity scenario ------------------------------------------------------------


def celebrity_tweet(author: int, gen: ids.IdGenerator, rnd: random.Random) -> events.TweetPosted:
    return events.TweetPosted(gen.next_id(), author, f"user{author}", network.tweet_text(rnd))


def process_tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (the job's driver, its
    JVM, the Python workers), from /proc. Shared pages count once per process."""
    parents: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(fields[1])].append(int(stat.parent.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += parents.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


class PeakRss:
    """Samples the RSS of a process tree every ``interval`` seconds; :meth:`take`
    returns the peak since the previous call."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid, self.interval = pid, interval
        self.peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            rss = process_tree_rss(self.pid)
            with self._lock:
                self.peak = max(self.peak, rss)

    def take(self) -> int:
        with self._lock:
            peak, self.peak = self.peak, 0
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def command_calls(client: Client) -> dict[str, tuple[int, int]]:
    """Calls and microseconds per command so far (INFO commandstats; Redis 7
    counts the commands scripts run as well)."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in stats.items()
    }


def command_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    out = {}
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0))
        if calls > c0:
            out[name] = (calls - c0, usec - u0)
    return out


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


def celebrity(args: argparse.Namespace) -> int:
    """The celebrity scenario (see the module docstring): exits 0, its checks printed."""
    n = args.celebrity_followers
    workdir, config, services = start_services("celebrity", args.pull_threshold)
    params = {k: v for k, v in vars(args).items() if k not in ("backlog", "celebrity")}
    report = Report(
        "bench_fanout_celebrity", params=params | {"partitions": 2, "timeline_size": 800}
    )
    job: Job | None = None
    rss: PeakRss | None = None
    try:
        ensure_topics(config)
        store = store_for(config)
        client = store.redis
        rnd = random.Random(args.seed)
        log = Changelog(config)

        # --- the graph, and C with n followers ----------------------------------------------
        set_up = time.time()
        pairs = write_graph(log, args.users, args.follows, rnd, report)
        star = args.users + 1
        reused = min(n, args.users)
        extra = range(star + 1, star + 1 + n - reused)
        for u in extra:
            log.send(events.Followed(u, u))
        log.send(events.Followed(star, star))
        for u in itertools.chain(range(1, reused + 1), extra):
            log.send(events.Followed(u, star))
        log.flush()
        records = args.users + len(pairs) + len(extra) + 1 + n
        report.add(
            "celebrity C: followers",
            n,
            f"user {star}: the graph's {reused:,} users + {len(extra):,} extra accounts",
        )
        job = Job(config, workdir, args.max_records)
        rss = PeakRss(job.proc.pid)
        produced = time.time() - set_up
        wait_for_seq(store, job, log.last_seq, timeout=3600)
        report.add(
            "set-up: changelog written + ingested",
            round(time.time() - set_up, 1),
            f"seconds ({produced:.0f} writing): {records:,} follow records, job start-up",
            key="set_up_s",
        )
        report.add(
            "  redis memory after set-up",
            f"{int(client.info('memory')['used_memory']) / 2**20:,.0f} MiB",
        )
        rss.take()

        gen = ids.IdGenerator(7)
        authors = tweet_authors(args)
        prng = random.Random(args.seed + 1)

        # --- baseline: the graph's authors at --rate, C silent --------------------------------
        warm_up = min(10.0, args.seconds / 3)
        quiet = phase(
            log,
            store,
            job,
            args,
            SteadyLoad(log, args.rate, authors, args.users, prng, gen),
            warm_up,
        )
        quiet_rss = rss.take()
        quiet_p99 = report_batches(report, "baseline (C silent)", "baseline", quiet)
        report.add(
            "  job peak RSS",
            f"{quiet_rss / 2**20:,.0f} MiB",
            "driver + JVM + Python workers",
            key="baseline_peak_rss_mib",
        )

        # --- celebrity phase: the same, and C posts once a second -----------------------------
        before = deliveries_counter(store)
        load = SteadyLoad(log, args.rate, authors, args.users, prng, gen, celebrity=star)
        loud = phase(log, store, job, args, load, 0.0)
        loud_rss = rss.take()
        loud_p99 = report_batches(report, "celebrity (C posts 1/s)", "celebrity", loud)
        report.add(
            "  job peak RSS",
            f"{loud_rss / 2**20:,.0f} MiB",
            "driver + JVM + Python workers",
            key="celebrity_peak_rss_mib",
        )
        report.add(
            "  C's posts / deliveries",
            f"{load.celebrity_posts} / {deliveries_counter(store) - before:,}",
        )
        p99_ratio = ratio(loud_p99, quiet_p99)
        report.add(
            "p99 ratio celebrity / baseline",
            round(p99_ratio, 2),
            f"C {'pulled' if 0 < args.pull_threshold <= n else 'pushed'}; target <= 1.5",
            key="p99_ratio",
        )

        # --- one C post, nothing else: Redis writes it causes -------------------------------
        commands = client.command()
        time.sleep(2.0)
        calls_before, delivered_before = command_calls(client), deliveries_counter(store)
        posted = time.time()
        log.send(celebrity_tweet(star, gen, prng))
        log.flush()
        wait_for_seq(store, job, log.last_seq, timeout=600)
        delta = command_delta(calls_before, command_calls(client))
        time.sleep(1.0)
        writes = {
            name: calls
            for name, (calls, _) in delta.items()
            if "write" in commands.get(name, {}).get("flags", [])
        }
        total_writes = sum(writes.values())
        timeline_writes = sum(writes.get(c, 0) for c in ("set", "append", "setrange"))
        top = ", ".join(f"{k} {v:,}" for k, v in sorted(writes.items(), key=lambda kv: -kv[1]))
        report.add(
            "Redis writes caused by one celebrity post",
            total_writes,
            f"write commands (INFO commandstats): {top}; target <= 10",
            key="writes_per_celebrity_post",
        )
        report.add(
            "  of which SET / APPEND / SETRANGE",
            timeline_writes,
            f"{deliveries_counter(store) - delivered_before:,} deliveries",
        )
        scripts = sum(delta.get(c, (0, 0))[0] for c in ("evalsha", "eval"))
        script_usec = sum(delta.get(c, (0, 0))[1] for c in ("evalsha", "eval"))
        report.add(
            "  script calls / Redis time",
            f"{scripts:,} / {script_usec / 1e6:.2f}s",
            "EVALSHA calls and their time inside Redis",
        )
        for b in job.batches(since=posted):
            report.add(
                "  its micro-batch",
                f"{b['duration']:.2f}s",
                f"batch {b['batch']}: redis {b.get('redis_ms', 0) / 1000:.2f}s (executors), "
                f"{b.get('calls', 0)} script calls",
            )

        report.check("Redis writes per celebrity post <= 10", total_writes <= 10)
        report.check("micro-batch p99 with C posting <= 1.5 x baseline", p99_ratio <= 1.5)
        report.print()
        print(f"report: {report.save()}\njob log: {workdir / 'fanout.log'}")
        return 0
    finally:
        if rss is not None:
            rss.stop()
        if job is not None:
            job.stop()
        stop_services(services)


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
        "--cluster",
        action="store_true",
        help="run the job on a single Redis, then on a Redis Cluster (three primaries, "
        "three replicas on this machine), same workload; report cluster ÷ single",
    )
    args = parser.parse_args(argv)
    if args.celebrity:
        return celebrity(args)
    if args.cluster:
        from load_tests import fanout_cluster  # it builds on this module

        return fanout_cluster.run(args)

    workdir, config, services = start_services("fanout", args.pull_threshold)
    params = {k: v for k, v in vars(args).items() if not k.startswith("celebrity")}
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
