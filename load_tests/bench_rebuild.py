"""Rebuild benchmark: the batch rebuild against the streaming job replaying the same log.

    python -m load_tests.bench_rebuild [--users 100000] [--follows 20] [--tweets 1000000]
                                       [--authors zipf|uniform]

Starts its own broker and Redis and writes a network to the changelogs
(power-law follows from load_tests/network.py, self edges, tweets by
Zipf-distributed authors (``--authors uniform``: every user alike), 5% of
tweets deleted and 5% of follows undone: tombstones a compacted log would
still hold). Then, in the same run:

1. the baseline: the streaming fanout job (``python -m spark.stream.job``)
   replays the whole log from offset 0 until its watermark reaches the last
   record: records per second;
2. the rebuild (``python -m spark.rebuild``) of the same log while that job
   runs, which runs it on its session: records per second and timelines per
   second up to the verified generation (the hand-over, which waits for the
   job, is reported apart);
3. the ratio of the two;
4. the same rebuild on a Spark of its own (``--standalone``), as it runs when
   no job is running, and its ratio (``--no-standalone`` skips it).

The issue's scale is the default (100,000 users, 2,000,000 follows,
1,000,000 tweets); ``--users 20000 --tweets 200000`` is a quicker run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fanout.kafka import ensure_topics
from fanout.model import events, ids
from fanout.store.timelines import store_for
from load_tests import charts, network
from load_tests.fanout_rig import Changelog, Job, start_services, stop_services, wait_for_seq
from load_tests.harness import Report, ratio

ROOT = Path(__file__).resolve().parent.parent


def write_network(log: Changelog, args: argparse.Namespace, rnd: random.Random) -> int:
    """The network as changelog records; returns how many were written."""
    written = 0
    for u in range(1, args.users + 1):
        log.send(events.Followed(u, u))
        written += 1
    pairs = list(network.follows(args.users, args.follows, rnd))
    for f, g in pairs:
        log.send(events.Followed(f, g))
    for f, g in rnd.sample(pairs, len(pairs) // 20):
        log.send(events.Unfollowed(f, g))
    written += len(pairs) + len(pairs) // 20
    # Zipf: a few accounts write most tweets (drawn from ``rnd``: the same network as ever).
    authors = network.Popularity(args.users, rnd) if args.authors == "zipf" else None
    gen = ids.IdGenerator(3)
    posted: list[tuple[int, int]] = []
    for i in range(args.tweets):
        author = authors.draw(rnd) if authors else rnd.randint(1, args.users)
        tweet_id = gen.next_id()
        log.send(events.TweetPosted(tweet_id, author, f"user{author}", network.tweet_text(rnd)))
        posted.append((tweet_id, author))
        if i % 100_000 == 0:
            print(f"  {i:,} tweets written", flush=True)
    for tweet_id, author in rnd.sample(posted, len(posted) // 20):
        log.send(events.TweetDeleted(tweet_id, author))
    written += len(posted) + len(posted) // 20
    log.flush()
    return written


def draw_chart(path: Path, records: int, rates: dict[str, float], stages: dict[str, float]) -> Path:
    """Throughput beside the baseline (``rates``: records/s by run, the
    baseline first), and the seconds of each stage of the rebuild (starting
    first)."""
    return charts.draw(
        path,
        f"Rebuilding every timeline from {records:,} changelog records (same run)",
        charts.bars(
            {name: {"records/s": rate} for name, rate in rates.items()},
            "records/s",
            "Throughput",
        ),
        charts.bars(
            # starting, snapshot, reading, joining, ...
            {stage.split()[0]: {"s": took} for stage, took in stages.items()},
            "seconds",
            "Where the rebuild's time goes",
        ),
    )


def timed_rebuild(
    env: dict[str, str], workdir: Path, name: str, *options: str
) -> tuple[dict[str, Any], float, float, float]:
    """Run ``python -m spark.rebuild`` and time it: (its summary, seconds from the
    command's start to a verified generation, of which starting, the hand-over).
    The hand-over (which waits for the job) is left out, since what an operator
    waits for is the verified generation; the command's start (Python, Django,
    and a standalone rebuild's Spark) is in, as the replay's figure includes the
    job's start-up."""
    started = time.monotonic()
    out = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "spark.rebuild", "--json", "--sample", "0", "--wait", "600",
         *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    (workdir / f"rebuild-{name}.log").write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"rebuild failed; see {workdir / f'rebuild-{name}.log'}")
    summary = json.loads(out.stdout[out.stdout.rfind("\n{") + 1 :])  # the last document
    handover = sum(v for k, v in summary["stages"].items() if k.startswith("handing"))
    return summary, wall - handover, wall - summary["seconds"], handover


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--follows", type=int, default=20, help="mean follows per user")
    parser.add_argument("--tweets", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--authors",
        choices=["zipf", "uniform"],
        default="zipf",
        help="who tweets: zipf (a few accounts write most tweets) or uniform",
    )
    parser.add_argument("--chart", type=Path, help="the chart's PNG (default: beside the report)")
    parser.add_argument(
        "--no-standalone",
        action="store_true",
        help="skip the second rebuild, on a Spark of its own (--standalone)",
    )
    args = parser.parse_args(argv)

    workdir, config, services = start_services("rebuild")
    report = Report("bench_rebuild", params=vars(args))
    job: Job | None = None
    try:
        ensure_topics(config)
        store = store_for(config)
        log = Changelog(config)
        print("writing the network to the changelogs ...", flush=True)
        started = time.monotonic()
        records = write_network(log, args, random.Random(args.seed))
        report.add("changelog records", records, f"written in {time.monotonic() - started:.0f}s")

        print("baseline: the streaming job replays the log ...", flush=True)
        job = Job(config, workdir, max_records=200_000)
        started = time.monotonic()
        wait_for_seq(store, job, log.last_seq, timeout=7200)
        stream_seconds = time.monotonic() - started
        stream_rate = records / stream_seconds
        report.add(
            "streaming replay (records/s)",
            round(stream_rate),
            f"{stream_seconds:.0f}s incl. the job's start-up",
            key="stream_rps",
        )

        print("the rebuild ...", flush=True)
        env = {
            **os.environ,
            "REDIS_URL": config.redis_url,
            "KAFKA_BOOTSTRAP_SERVERS": config.kafka_bootstrap_servers,
            "STARLING_TOPIC_PREFIX": config.topics.prefix,
            "STARLING_PARTITIONS": str(config.partitions),
            "STARLING_TIMELINE_SIZE": str(config.timeline_size),
            "STARLING_VAR_DIR": str(workdir),
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
            # The rebuild restores token revocations from the database: an empty one
            # here (the network exists only on the changelogs), with its tables.
            "DATABASE_URL": f"sqlite:///{workdir / 'empty.sqlite3'}",
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            check=True,
        )
        summary, seconds, starting, handover = timed_rebuild(env, workdir, "in-job")
        rebuild_rate = summary["records"] / seconds
        report.add(
            "rebuild (records/s)",
            round(rebuild_rate),
            f"{seconds:.0f}s from the command's start to a verified generation, "
            f"run by {summary['ran_in']}",
            key="rebuild_rps",
        )
        report.add("  of which starting (Python, Django)", round(starting, 1), "s")
        report.add(
            "rebuild (timelines/s)", round(summary["timelines"] / seconds), key="rebuild_tps"
        )
        report.add("timelines / entries", f"{summary['timelines']:,} / {summary['entries']:,}")
        for stage, took in summary["stages"].items():
            report.add(f"  {stage}", round(took, 1), "s")
        report.add("hand-over until switched", round(handover, 1), "s (the job catches up)")
        report.add(
            "ratio rebuild / streaming replay",
            round(ratio(rebuild_rate, stream_rate), 2),
            key="ratio",
        )
        switched = bool(summary["switched"])
        rates = {"streaming replay": stream_rate, "rebuild by the job": rebuild_rate}
        if not args.no_standalone:
            print("the same rebuild on a Spark of its own (--standalone) ...", flush=True)
            own, own_seconds, own_starting, _ = timed_rebuild(
                env, workdir, "standalone", "--standalone"
            )
            own_rate = own["records"] / own_seconds
            report.add(
                "standalone rebuild (records/s)",
                round(own_rate),
                f"{own_seconds:.0f}s, of which {own_starting:.1f}s starting (Python, Django, "
                "Spark)",
                key="standalone_rps",
            )
            report.add(
                "ratio standalone rebuild / streaming replay",
                round(ratio(own_rate, stream_rate), 2),
                key="standalone_ratio",
            )
            switched = switched and bool(own["switched"])
            rates["rebuild, --standalone"] = own_rate
        report.check("switched to the rebuilt generation", switched)
        report.check("rebuild faster than the streaming replay", rebuild_rate > stream_rate)
        report.print()
        print(f"report: {report.save()}")
        chart = draw_chart(
            args.chart or report.path("png"),
            summary["records"],
            rates,
            {"starting": starting, **summary["stages"]},
        )
        print(f"chart: {chart}")
        return 0
    finally:
        if job is not None:
            job.stop()
        stop_services(services)


if __name__ == "__main__":
    sys.exit(main())
