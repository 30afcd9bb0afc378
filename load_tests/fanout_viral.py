"""``bench_fanout --viral``: the steady load, then on top of it one tweet liked
``--viral-likes`` times and reposted ``--viral-reposts`` times a second for
``--viral-seconds`` (written to the changelogs as the web writes them: a
repost is its entry and its engagement). Reports the viral phase's
micro-batch p99 over the steady phase's (target <= 1.5) and the writes of
the tweet's counter (``ct:``) per micro-batch (target: one), counted from
Redis keyspace notifications of the counters' keys."""

from __future__ import annotations

import argparse
import bisect
import random
import threading
import time
from typing import Any

from fanout.kafka import ensure_topics
from fanout.model import events, ids
from fanout.store import keys
from fanout.store.redis_conn import Client
from fanout.store.timelines import store_for
from load_tests import network
from load_tests.fanout_mix import STORE_WRITES_COUNTS, MixedLoad, Reactions, Viral, followers_of
from load_tests.fanout_rig import (
    Changelog,
    Job,
    phase,
    report_batches,
    start_services,
    stop_services,
    tweet_authors,
    wait_for_seq,
    write_graph,
)
from load_tests.harness import Report, ratio


class KeyWrites:
    """Every keyspace event on the counters' keys (``ct:*``) while it runs:
    (time, key, event), from Redis's own notifications (scripts' writes
    included), no MONITOR."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.previous = str(
            client.config_get("notify-keyspace-events")["notify-keyspace-events"] or ""
        )
        client.config_set("notify-keyspace-events", "KA")
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.psubscribe(f"__keyspace@*__:{keys.COUNTS_PREFIX}*")
        self.seen: list[tuple[float, str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.pubsub.get_message(timeout=0.2)
            if message is None:
                continue
            channel, data = (
                v.decode() if isinstance(v, bytes) else str(v)
                for v in (message["channel"], message["data"])
            )
            self.seen.append((time.time(), channel.split(":", 1)[1], data))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.pubsub.close()
        self.client.config_set("notify-keyspace-events", self.previous)

    def of(self, key: str) -> list[float]:
        return [at for at, k, _ in self.seen if k == key]


def per_batch(writes: list[float], batches: list[dict[str, Any]]) -> list[int]:
    """The writes in each micro-batch's window (from the previous batch's
    progress line to its own), an approximation: a progress line is written
    just after its batch."""
    ends = [b["at"] for b in batches]
    counts = [0] * len(batches)
    for at in writes:
        i = bisect.bisect_left(ends, at)
        if i < len(counts):
            counts[i] += 1
    return counts


def run_viral(args: argparse.Namespace) -> int:
    workdir, config, services = start_services("fanout-viral", args.pull_threshold)
    params = {k: v for k, v in vars(args).items() if not k.startswith("celebrity")}
    report = Report(
        "bench_fanout_viral", params=params | {"store_writes_counts": STORE_WRITES_COUNTS}
    )
    job: Job | None = None
    watcher: KeyWrites | None = None
    try:
        ensure_topics(config)
        store = store_for(config)
        client = store.redis
        rnd = random.Random(args.seed)
        log = Changelog(config)
        pairs = write_graph(log, args.users, args.follows, rnd, report)
        log.flush()
        job = Job(config, workdir, args.max_records)
        wait_for_seq(store, job, log.last_seq, timeout=900)
        gen = ids.IdGenerator(7)
        authors = tweet_authors(args)
        fans = followers_of(pairs)
        reactions = (
            Reactions(fans, args.users, random.Random(args.seed + 3), args.mix_window)
            if args.mix
            else None
        )

        def load(viral: Viral | None = None) -> MixedLoad:
            prng = random.Random(args.seed + 1)
            return MixedLoad(log, args.rate, authors, args.users, prng, gen, reactions, viral)

        steady = phase(log, store, job, args, load(), min(10.0, args.seconds / 3))
        steady_p99 = report_batches(report, "steady", "steady", steady)

        star = max(fans, key=lambda a: len(fans[a]))
        tweet = events.TweetPosted(gen.next_id(), star, f"user{star}", network.tweet_text(rnd))
        log.send(tweet)
        log.flush()
        wait_for_seq(store, job, log.last_seq, timeout=300)
        counter = keys.counts(tweet.tweet_id, store.shards.tag_of(tweet.tweet_id))
        watcher = KeyWrites(client)
        viral = Viral(
            tweet, args.viral_likes, args.viral_reposts, args.viral_seconds, args.users, rnd, gen
        )
        loud_args = argparse.Namespace(**{**vars(args), "seconds": args.viral_seconds})
        loud = phase(log, store, job, loud_args, load(viral), 0.0)
        time.sleep(0.5)
        watcher.stop()
        loud_p99 = report_batches(report, "viral", "viral", loud)
        report.add(
            "  viral likes / reposts sent",
            f"{viral.sent[0]:,} / {viral.sent[1]:,}",
            f"{viral.sent[0] / args.viral_seconds:,.0f} / "
            f"{viral.sent[1] / args.viral_seconds:,.0f} per second; tweet {tweet.tweet_id} "
            f"by user {star} ({len(fans[star])} followers)",
        )
        report.add(
            "  records behind at most (steady / viral)",
            f"{max((b['behind'] for b in steady), default=0):,} / "
            f"{max((b['behind'] for b in loud), default=0):,}",
            f"the job keeps up if small; --max-records {args.max_records:,} per micro-batch",
        )
        p99_ratio = ratio(loud_p99, steady_p99)
        report.add("p99 viral / steady", round(p99_ratio, 3), "target <= 1.5", key="p99_ratio")

        writes = watcher.of(counter)
        in_batches = per_batch(writes, loud)
        report.add(
            "the viral tweet's counter writes",
            len(writes),
            f"in {len(loud)} micro-batches (keyspace notifications of {counter})",
            key="viral_counter_writes",
        )
        report.add(
            "  per micro-batch: mean / max",
            f"{len(writes) / max(1, len(loud)):.2f} / {max(in_batches, default=0)}",
            "max: writes between two progress lines",
            key="viral_counter_writes_per_batch",
        )
        others = len(watcher.seen) - len(writes)
        report.add("  other counters' writes", others, key="other_counter_writes")
        stored = client.get(counter)
        report.add(
            "  its counts in Redis", stored.decode() if isinstance(stored, bytes) else "none"
        )
        report.check("viral: micro-batch p99 <= 1.5 x steady", p99_ratio <= 1.5)
        if writes:
            report.check("one counter write per tweet per micro-batch", len(writes) <= len(loud))
        else:
            report.add(
                "  (not measurable yet)",
                "",
                "no counter written: the store and the job's sink write no counts yet",
            )
        report.print()
        print(f"report: {report.save()}\njob log: {workdir / 'fanout.log'}")
        return 0
    finally:
        if watcher is not None and not watcher._stop.is_set():
            watcher.stop()
        if job is not None:
            job.stop()
        stop_services(services)
