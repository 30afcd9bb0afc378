"""Heavy-follower benchmark: the slowest single Redis command, from Redis's SLOWLOG.

    python -m load_tests.bench_heavy [--authors 5000] [--tweets-per-author K]
                                     [--tweets 2000] [--bound-ms 50]

    python -m load_tests.bench_heavy --authors 500 --tweets-per-author 100   # ~40 s
    STARLING_TIMELINE_SIZE=200 STARLING_TIMELINE_SLACK=16 python -m load_tests.bench_heavy

A *heavy follower* follows 5,000 accounts, each of which has at least
``K = STARLING_TIMELINE_SIZE + STARLING_TIMELINE_SLACK`` tweets. The defaults are fanout.config's
(800 + 64: K = 864, so 4.3 M tweets, ~6 minutes on 2 cores, most of it the
load); ``STARLING_TIMELINE_SIZE`` / ``STARLING_TIMELINE_SLACK`` in the environment change both
the job's timelines and the default K. The bound under test: no single Redis
command the fanout job or a timeline regeneration sends takes more than
50 ms (Redis runs one command at a time: every other client waits that long).

Starts its own broker and Redis (load_tests/fanout_rig.py) and runs the
real fanout job (``python -m spark.stream.job``). Redis logs every command with its
duration (``slowlog-log-slower-than 0``, a SLOWLOG long enough for a phase,
read and reset between phases). A script call is one ``EVALSHA`` entry
(named here after its Lua file); Redis 7.0 also logs the commands a script
runs, from the client ``?:0``, just before the call: they are counted as
part of it, not as commands of their own. All in one run:

0. load (set-up, reported, not checked): ``--authors`` authors and one heavy
   user H register (self edges), each author posts K tweets (round-robin,
   short texts), the job catches up. Millions of commands: only those of
   1 ms or more are logged;
1. phase A, bulk follow: H follows every author (``--authors`` Followed
   events: one micro-batch);
2. phase B, regeneration: H's timeline goes cold and is regenerated the way
   the web tier does it (feed.timeline ``_request_regeneration``,
   feed.services ``timeline_reset``): a cold read, the regeneration claim, a
   ``TimelineReset`` with the newest K + 1 of H's join cut to K (computed
   here from what was written), then reads until the timeline is warm. Cold
   means dropped as an idle user's (``TimelineStore.drop_idle``, a
   tombstone);
3. phase C, the baseline of the same run: ``--tweets`` tweets by random
   authors (all of them reach H).

After each phase the relay's marks (fanout.model.events.mark_record) are written,
so the contiguous watermark advances (it releases the reset), and H's
visible timeline is checked against the join. Commands of the benchmark's own
connections (waiting, dropping H's timeline, reading the SLOWLOG) are left
out; the emulated web tier's reads are in. Per phase: commands, the slowest
(name, ms), p99 and p50, the slowest script call and what it ran, the
largest script argument (inferred from the SLOWLOG's truncation, ``...
(N more bytes)``), then the three slowest commands. Exits 1 if a command of
phase A, B or C took longer than ``--bound-ms``, naming them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time
from collections.abc import Callable, Sequence

import redis

from fanout.config import StarlingConfig
from fanout.kafka import ensure_topics
from fanout.model import events, ids
from fanout.store import keys
from fanout.store.ops import timeline_ids
from fanout.store.timelines import TimelineStore
from load_tests import network
from load_tests.fanout_rig import Changelog, Job, start_services, stop_services, wait_for_seq
from load_tests.harness import Report, percentile, ratio
from load_tests.slowlog import BENCH_CLIENT, Phase, Slowlog

#: The emulated web tier's connection (cold reads, the regeneration claim): measured.
WEB_CLIENT = "web"
#: feed.timeline.REGENERATION_WINDOW (not imported: that module needs Django).
REGENERATION_WINDOW = 60


def write_marks(log: Changelog, config: StarlingConfig, seq: int) -> None:
    """The relay's marks (feed.relay): every event up to ``seq`` is published."""
    for topic in config.topics.all():
        for partition in range(config.partitions):
            key, headers = events.mark_record(partition, seq)
            log.producer.produce(
                topic, key=key, value=None, partition=partition, headers=list(headers)
            )
    log.flush()


def settle(log: Changelog, config: StarlingConfig, store: TimelineStore, job: Job) -> int:
    """Mark everything written as published and wait until the job has applied
    it all (the contiguous watermark, which also releases resets)."""
    seq = log.last_seq
    log.flush()
    write_marks(log, config, seq)
    wait_for_seq(store, job, seq, timeout=3600)
    generation = store.active_generation()
    assert generation is not None
    deadline = time.monotonic() + 600
    while store.contiguous_watermark(generation) < seq:
        if job.proc.poll() is not None:
            raise SystemExit(f"the fanout job exited ({job.proc.returncode}); see its log")
        if time.monotonic() > deadline:
            raise SystemExit(f"the contiguous watermark did not reach {seq}")
        time.sleep(0.2)
    # The job's progress file trails the watermark: wait for the batch that settled it.
    wm = store.watermark(generation)
    while wm is not None and time.monotonic() < deadline:
        if any(b["batch"] >= wm.batch_id for b in job.batches()):
            break
        time.sleep(0.1)
    return generation


def newest(posted: Sequence[int], n: int) -> list[int]:
    """The newest ``n`` of ``posted`` (ascending ids), newest first."""
    return sorted(posted[-n:], reverse=True) if n else []


def run_phase(
    name: str, slowlog: Slowlog, write: Callable[[], None], *, threshold_us: int = 0
) -> Phase:
    """Drain the SLOWLOG (the quiet time before belongs to no phase), run
    ``write`` (which waits for the job), drain again."""
    slowlog.log_slower_than(threshold_us)
    slowlog.drain()
    started = time.time()
    write()
    seconds = time.time() - started
    entries, lost = slowlog.drain()
    return Phase(name, entries, lost, started, seconds, threshold_us)


def report_phase(report: Report, phase: Phase, label: str, job: Job) -> None:
    measured = phase.measured
    micros = [e.micros for e in measured]
    key = phase.name
    batches = phase.batches(job)
    sampled = phase.threshold_us > 0
    report.add(
        f"{label}: commands" + (f" of >= {phase.threshold_us / 1000:g} ms" if sampled else ""),
        len(measured),
        f"{phase.seconds:.1f}s, {len(batches)} micro-batches"
        + ("" if sampled else f", {sum(len(e.inner) for e in measured):,} more run by scripts")
        + (f", {phase.lost:,} entries lost between reads" if phase.lost else ""),
        key=f"{key}_commands",
    )
    slowest = phase.slowest()
    if slowest is not None:
        report.add(
            "  slowest command (ms)", round(slowest.ms, 2), slowest.name, key=f"{key}_max_ms"
        )
    if sampled:
        over = [e for e in measured if e.micros > 50_000]
        report.add("  commands over 50 ms", len(over), key=f"{key}_over_50ms")
        return
    report.add("  p99 (ms)", round(percentile(micros, 99) / 1000, 3), key=f"{key}_p99_ms")
    report.add("  p50 (ms)", round(percentile(micros, 50) / 1000, 3), key=f"{key}_p50_ms")
    scripts = [e for e in measured if e.is_script]
    if scripts:
        top = max(scripts, key=lambda e: e.micros)
        report.add(
            "  slowest script call (ms)",
            round(top.ms, 2),
            f"{top.name}: {top.argc():,} args, {top.inside()}",
            key=f"{key}_script_max_ms",
        )
        report.add(
            "  script calls p99 (ms)",
            round(percentile([e.micros for e in scripts], 99) / 1000, 3),
            f"{len(scripts):,} calls",
            key=f"{key}_script_p99_ms",
        )
        big = max(scripts, key=lambda e: e.largest_arg())
        report.add(
            "  largest script argument (bytes)",
            big.largest_arg(),
            f"{big.name}, {big.ms:.2f} ms",
            key=f"{key}_largest_arg",
        )
        most = max(scripts, key=lambda e: e.argc())
        report.add(
            "  most script arguments",
            most.argc(),
            f"{most.name}, {most.ms:.2f} ms",
            key=f"{key}_most_args",
        )
        inner = [i for e in scripts for i in e.inner]
        if inner:
            worst = max(inner, key=lambda e: e.micros)
            report.add(
                "  slowest command inside a script (ms)",
                round(worst.ms, 2),
                f"{worst.name}, {worst.largest_arg():,} bytes",
                key=f"{key}_inner_max_ms",
            )
    by_name: dict[str, int] = {}
    for e in measured:
        by_name[e.name] = max(by_name.get(e.name, 0), e.micros)
    kinds = sorted(by_name.items(), key=lambda kv: kv[1], reverse=True)[:4]
    report.add(
        "  slowest per command",
        "",
        ", ".join(f"{n} {m / 1000:.2f} ms" for n, m in kinds),
        key=f"{key}_per_command",
    )
    report.figures[f"{key}_per_command"] = {n: round(m / 1000, 3) for n, m in by_name.items()}


def main(argv: list[str] | None = None) -> int:
    env_config = StarlingConfig.from_env()
    cap, slack = env_config.timeline_size, env_config.timeline_slack
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors", type=int, default=5000, help="accounts H follows")
    parser.add_argument(
        "--tweets-per-author",
        type=int,
        default=cap + slack,
        help="tweets each author posts (default STARLING_TIMELINE_SIZE + STARLING_TIMELINE_SLACK)",
    )
    parser.add_argument("--tweets", type=int, default=2000, help="tweets in phase C")
    parser.add_argument("--bound-ms", type=float, default=50.0, help="the bound for A, B, C")
    parser.add_argument("--max-records", type=int, default=200_000, help="maxRecordsPerTrigger")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)

    workdir, config, services = start_services("heavy")
    config = dataclasses.replace(config, timeline_size=cap, timeline_slack=slack)
    os.environ["STARLING_TIMELINE_SLACK"] = str(
        slack
    )  # Job passes STARLING_TIMELINE_SIZE, inherits the rest
    keep = cap + slack
    report = Report(
        "bench_heavy",
        params=vars(args) | {"timeline_size": cap, "timeline_slack": slack, "partitions": 2},
    )
    job: Job | None = None
    try:
        ensure_topics(config)
        bench = redis.Redis.from_url(config.redis_url, client_name=BENCH_CLIENT)
        web_client = redis.Redis.from_url(config.redis_url, client_name=WEB_CLIENT)
        store = TimelineStore(bench, cap=cap, slack=slack)
        web = TimelineStore(web_client, cap=cap, slack=slack)
        slowlog = Slowlog(
            redis.Redis.from_url(config.redis_url, client_name=BENCH_CLIENT), max_len=1_000_000
        )
        rnd = random.Random(args.seed)
        log = Changelog(config)
        log.topics[events.TIMELINES] = config.topics.timelines  # resets go there
        heavy = args.authors + 1
        authors = list(range(1, args.authors + 1))
        gen = ids.IdGenerator(5)
        posted: list[int] = []  # every tweet id, ascending (one generator)

        # --- 0. load: registrations and K tweets per author ----------------------------
        def load() -> None:
            nonlocal job
            for user in [*authors, heavy]:
                log.send(events.Followed(user, user))
            print(f"writing {args.authors:,} x {args.tweets_per_author:,} tweets ...", flush=True)
            for r in range(args.tweets_per_author):
                rnd.shuffle(authors)
                for author in authors:
                    tweet_id = gen.next_id()
                    log.send(events.TweetPosted(tweet_id, author, f"user{author}", f"t{r}"))
                    posted.append(tweet_id)
            print(f"  {len(posted):,} tweets written; the job catches up ...", flush=True)
            job = Job(config, workdir, args.max_records)
            settle(log, config, store, job)

        # Millions of commands: only those of 1 ms or more are logged (the log holds them).
        load_phase = run_phase("load", slowlog, load, threshold_us=1000)
        assert job is not None
        running: Job = job
        generation = store.active_generation()
        assert generation is not None
        visible: dict[str, bool] = {}

        def check_visible(phase: str) -> None:
            """H's visible timeline is the join's newest ``cap`` (H follows every author)."""
            tl = store.timeline(generation, heavy)
            expected = newest(posted, cap)
            visible[phase] = tl is not None and tl.ids == expected
            if tl is None:
                print(f"  after {phase}: H has no timeline", flush=True)
            elif tl.ids != expected:
                raw = bench.get(keys.timeline(generation, heavy))
                held = timeline_ids(raw) if isinstance(raw, bytes) else []
                missing = sorted(set(expected) - set(tl.ids))
                print(
                    f"  after {phase}: H's timeline differs from the join: {len(held)} entries "
                    f"held (horizon {tl.horizon}), {len(tl.ids)} visible, {len(missing)} of the "
                    f"newest {cap} missing (oldest missing {missing[:1]}, newest "
                    f"{missing[-1:]}; held from {held[:1]} to {held[-1:]})",
                    flush=True,
                )

        # --- A. bulk follow --------------------------------------------------------------
        def bulk_follow() -> None:
            print(f"phase A: H follows {args.authors:,} authors ...", flush=True)
            for author in sorted(authors):
                log.send(events.Followed(heavy, author))
            settle(log, config, store, running)

        phase_a = run_phase("A", slowlog, bulk_follow)
        check_visible("A")

        # --- B. regeneration of a cold timeline --------------------------------------------
        regen_seconds = 0.0
        cold_by = ""

        def regenerate() -> None:
            nonlocal regen_seconds, cold_by
            print("phase B: H's timeline cold, regenerated by a reset ...", flush=True)
            # A cold timeline: an idle user's, dropped (a tombstone,
            # fanout/store/lua/drop_idle.lua).
            cold_by = "dropped as idle (TimelineStore.drop_idle)"
            if store.drop_idle(generation, [heavy]) != 1:
                raise SystemExit("H's timeline was not dropped")
            t0 = time.monotonic()
            # feed.timeline.TimelineReader: a cold read claims the regeneration ...
            cold = web.read_page(heavy, count=50)
            if cold.status != "cold":
                raise SystemExit(f"H's timeline should read cold, not {cold.status}")
            if not web.claim_regeneration(generation, heavy, window=REGENERATION_WINDOW):
                raise SystemExit("the regeneration of H was already claimed")
            # ... feed.services.timeline_reset: the join's newest keep (+1: are there older?)
            as_of = log.last_seq
            found = newest(posted, keep + 1)
            kept = found[:keep]
            horizon = kept[-1] if len(found) > keep else 0
            log.send(events.TimelineReset(heavy, tuple(sorted(kept)), horizon, as_of))
            web.regenerating_until(generation, heavy, log.last_seq, window=REGENERATION_WINDOW)
            settle(log, config, store, running)
            while (page := web.read_page(heavy, count=50)).status != "ok":
                if time.monotonic() - t0 > 600:
                    raise SystemExit(f"H's timeline still reads {page.status}")
                time.sleep(0.05)
            regen_seconds = time.monotonic() - t0

        phase_b = run_phase("B", slowlog, regenerate)
        check_visible("B")

        # --- C. baseline: ordinary tweets ------------------------------------------------
        def ordinary() -> None:
            print(f"phase C: {args.tweets:,} tweets by random authors ...", flush=True)
            prng = random.Random(args.seed + 1)
            for _ in range(args.tweets):
                author = prng.choice(authors)
                tweet_id = gen.next_id()
                log.send(
                    events.TweetPosted(tweet_id, author, f"user{author}", network.tweet_text(prng))
                )
                posted.append(tweet_id)
            settle(log, config, store, running)

        phase_c = run_phase("C", slowlog, ordinary)
        check_visible("C")

        # --- the report ------------------------------------------------------------------
        report.add(
            "load: tweets",
            len(posted) - args.tweets,
            f"{(len(posted) - args.tweets) / load_phase.seconds:,.0f}/s end-to-end "
            "incl. the job's start-up",
        )
        report_phase(report, load_phase, "load (set-up, not checked)", running)
        report_phase(report, phase_a, f"A bulk follow ({args.authors:,} follows)", running)
        report_phase(report, phase_b, "B regeneration (TimelineReset)", running)
        report.add(
            "  cold read -> warm read (s)", round(regen_seconds, 2), cold_by, key="B_regen_s"
        )
        report_phase(report, phase_c, f"C baseline ({args.tweets:,} tweets)", running)
        slowest = {p.name: p.slowest() for p in (phase_a, phase_b, phase_c)}
        baseline = slowest["C"]
        for name in ("A", "B"):
            entry = slowest[name]
            if entry is not None and baseline is not None:
                report.add(
                    f"ratio slowest command {name} / slowest C",
                    round(ratio(entry.micros, baseline.micros), 2),
                    key=f"ratio_{name}_to_C",
                )
        offenders = {p.name: p.over(args.bound_ms) for p in (phase_a, phase_b, phase_c)}
        for name in ("A", "B", "C"):
            report.check(f"{name}: no command over {args.bound_ms:g} ms", not offenders[name])
        report.check(
            "A, B, C: no SLOWLOG entry lost between reads",
            not (phase_a.lost or phase_b.lost or phase_c.lost),
        )
        for name, ok in visible.items():
            report.check(f"{name}: H's visible timeline = the join's newest {cap}", ok)
        report.print()
        print(f"report: {report.save()}\njob log: {workdir / 'fanout.log'}\n")
        for phase in (load_phase, phase_a, phase_b, phase_c):
            top = sorted(phase.measured, key=lambda e: e.micros, reverse=True)[:3]
            sampled = f" (only commands of >= {phase.threshold_us / 1000:g} ms logged)"
            print(f"slowest of {phase.name}{sampled if phase.threshold_us else ''}:")
            for entry in top:
                print(f"  {entry.describe()}")
        failed = False
        for name, entries in offenders.items():
            for entry in entries:
                failed = True
                print(f"phase {name}: over {args.bound_ms:g} ms: {entry.describe()}")
        return 1 if failed else 0
    finally:
        if job is not None:
            job.stop()
        stop_services(services)


if __name__ == "__main__":
    sys.exit(main())
