"""``bench_fanout --celebrity``: one author followed by a million accounts,
posting once a second on top of the steady load (the module docstring of
load_tests/bench_fanout.py describes the scenario and its checks)."""

from __future__ import annotations

import argparse
import itertools
import random
import threading
import time
from collections import defaultdict
from pathlib import Path

from fanout.kafka import ensure_topics
from fanout.model import events, ids
from fanout.store.redis_conn import Client
from fanout.store.timelines import store_for
from load_tests.fanout_rig import (
    Changelog,
    Job,
    SteadyLoad,
    celebrity_tweet,
    deliveries_counter,
    phase,
    report_batches,
    start_services,
    stop_services,
    tweet_authors,
    wait_for_seq,
    write_graph,
)
from load_tests.harness import Report, ratio


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
