"""The rebuild as a command: arguments, progress, the summary, exit status.

``manage.py rebuild_timelines`` is the way in (for operators, and for the
admin's Celery task): it gives :func:`execute` the database oracle that the
verification stage samples against. Spark code does not import Django.
``python -m spark.rebuild`` is the same command.

With ``--json``, standard output carries exactly one JSON document, the
summary or ``{"ok": false, ...}``, whatever happens, also when the command
is stopped by a signal; progress and whatever Spark prints go to standard
error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from fanout.cli import interruptible, machine_output
from fanout.config import StarlingConfig
from fanout.store.generations import GenerationState
from fanout.store.rebuilds import RebuildState
from fanout.store.timelines import TimelineStore, store_for
from spark.rebuild.finish import Oracle, RebuildFailed, Settled, reason_of
from spark.rebuild.report import Progress, Summary
from spark.rebuild.request import ask, run_in_job
from spark.rebuild.stages import Rebuild, default_state_root
from spark.runtime.session import build_session

log = logging.getLogger("starling.rebuild")


def parser(prog: str = "manage.py rebuild_timelines") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run", action="store_true", help="compare with the live timelines, change nothing"
    )
    p.add_argument(
        "--standalone",
        action="store_true",
        help="run on a Spark of its own even when the fanout job runs (it would run the "
        "rebuild on its already warm session)",
    )
    p.add_argument(
        "--master",
        help="Spark master of a standalone rebuild (default: SPARK_MASTER or local[2]); "
        "implies --standalone",
    )
    p.add_argument(
        "--sample", type=int, default=200, help="timelines compared with the database (default 200)"
    )
    p.add_argument(
        "--wait", type=float, default=600, help="seconds to wait for the switch (default 600)"
    )
    p.add_argument(
        "--state-dir", type=Path, help="where the rebuilt author state goes (shared with the job)"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def execute(
    args: argparse.Namespace,
    *,
    oracle: Oracle | None,
    settled: Settled | None,
    spark: SparkSession | None = None,
    prepare: Callable[[], str] | None = None,
) -> int:
    """Run a rebuild as the command line asked; returns the exit status.

    With ``--json`` standard output carries exactly one JSON document (the
    summary, or ``{"ok": false, ...}`` with the reason), whatever happens,
    also when the command is stopped by a signal; progress lines and
    whatever Spark prints go to standard error. ``prepare`` runs once no
    other rebuild runs (this one holds the request), inside that guarantee;
    the line it returns is shown as progress.
    """
    with machine_output(args.json) as data, interruptible():
        human = sys.stderr if args.json else data
        config = StarlingConfig.from_env()
        store = store_for(config, timeout=60)
        progress = Progress(store, human)
        state_dir = args.state_dir.resolve() if args.state_dir else None
        summary: Summary | None = None
        newest_before: int | None = None
        try:
            # Inside the try: an unreachable Redis is a failure like any other
            # and still ends in the one JSON document.
            newest_before = store.newest_generation()
            in_job = spark is None and not (args.standalone or args.master) and store.fanout_job()
            asked = ask(
                store,
                dry_run=args.dry_run,
                sample=args.sample,
                state_dir=state_dir,
                for_job=bool(in_job),
            )
            # From here the rebuild's status is this command's: its final state
            # goes there before the request ends (after, it could land in the
            # status of the next command's rebuild).
            with asked as renewal:
                try:
                    if prepare is not None:
                        print(prepare(), file=human)
                    if in_job:
                        summary = run_in_job(
                            store,
                            config,
                            progress,
                            renewal,
                            dry_run=args.dry_run,
                            wait=args.wait,
                            oracle=oracle,
                            settled=settled,
                        )
                    if summary is None:
                        summary = standalone(
                            args, config, store, progress, state_dir, oracle, settled, spark
                        )
                except (Exception, KeyboardInterrupt) as exc:
                    progress.publish(
                        state=RebuildState.FAILED, error=failure(exc), finished_at=time.time()
                    )
                    raise
                state = final_state(summary)
                progress.publish(
                    state=state, finished_at=time.time(), summary=orjson.dumps(asdict(summary))
                )
        except (Exception, KeyboardInterrupt) as exc:
            reason = failure(exc)
            log.debug("rebuild failed", exc_info=True)
            print(f"rebuild failed: {reason}", file=human)
            if not isinstance(exc, RebuildFailed | KeyboardInterrupt | RedisConnectionError):
                traceback.print_exc(file=sys.stderr)
            live = left_behind(store, newest_before)
            print(live.said, file=human)
            if args.json:
                document = {
                    "ok": False,
                    "state": RebuildState.FAILED,
                    "error": reason,
                    "live_untouched": live.untouched,
                }
                if live.generation is not None:
                    document["generation"] = live.generation
                    document["live"] = live.said
                print(json.dumps(document), file=data)
            return 130 if isinstance(exc, KeyboardInterrupt) else 1
        if args.json:
            print(json.dumps({"ok": True, "state": state, **asdict(summary)}, indent=2), file=data)
        else:
            print_summary(summary, data)
        return 0


@dataclass(frozen=True)
class LiveTimelines:
    """What a rebuild that failed, or was stopped, left of the live timelines."""

    #: None when it could not be checked.
    untouched: bool | None
    #: The line the command prints.
    said: str
    #: The rebuilt generation that is, or is about to be, live.
    generation: int | None = None


def left_behind(store: TimelineStore, newest_before: int | None) -> LiveTimelines:
    """Whether the live timelines changed after all: a rebuild stopped after
    its hand-over (Ctrl-C during the wait for the switch, say) has a
    generation that is live, or that the fanout job switches to once caught
    up. One rebuild runs at a time, so a generation above ``newest_before``
    (the newest one when the command started; None if it never got that
    far) that is handed over or active is this command's."""
    if newest_before is None:
        return LiveTimelines(True, "the live timelines are untouched")
    try:
        active = store.active_generation()
        found = store.generations()
    except RedisError as exc:
        return LiveTimelines(None, f"whether the live timelines changed is unknown ({exc})")
    if active is not None and active > newest_before:
        return LiveTimelines(
            False, f"generation {active} is live: the rebuild had switched to it", active
        )
    handed = [
        number
        for number, meta in found.items()
        if number > newest_before and meta["state"] == GenerationState.READY
    ]
    if handed:
        return LiveTimelines(
            False,
            f"generation {max(handed)} was handed over: the fanout job switches to it "
            "once it has caught up",
            max(handed),
        )
    return LiveTimelines(True, "the live timelines are untouched")


def failure(exc: BaseException) -> str:
    """Why the rebuild failed, as the command reports it."""
    reason = reason_of(exc)
    return f"interrupted ({reason})" if isinstance(exc, KeyboardInterrupt) else reason


def final_state(summary: Summary) -> str:
    if summary.switched or summary.dry_run:
        return RebuildState.SUCCEEDED
    return RebuildState.HANDED_OVER


def standalone(
    args: argparse.Namespace,
    config: StarlingConfig,
    store: TimelineStore,
    progress: Progress,
    state_dir: Path | None,
    oracle: Oracle | None,
    settled: Settled | None,
    spark: SparkSession | None,
) -> Summary:
    """The rebuild on a Spark of the command's own (``spark``, when given)."""
    store.clear_rebuild_status()
    progress.publish(state=RebuildState.RUNNING, dry_run=int(args.dry_run), started_at=time.time())
    own = spark is None
    spark = spark or build_session(args.master or config.spark_master, "starling-rebuild")
    rebuild = Rebuild(
        spark,
        config,
        store,
        progress,
        state_dir or default_state_root(),
        oracle,
        settled,
        args.sample,
        release=spark.stop if own else None,
    )
    return rebuild.run(dry_run=args.dry_run, wait=args.wait)


def print_summary(s: Summary, out: Any) -> None:
    rate = s.records / s.seconds if s.seconds else 0.0
    lines = [
        "rebuild summary" + (" (dry run: nothing changed)" if s.dry_run else ""),
        f"  changelog records read  {s.records:,} ({rate:,.0f}/s)",
        f"  live tweets / follows   {s.tweets:,} / {s.follows:,}; filters {s.filters:,}; "
        f"bad records {s.bad_records:,}",
        f"  timelines               {s.timelines:,}"
        + (f" ({s.timelines / s.seconds:,.0f}/s)" if s.seconds else ""),
    ]
    if s.dry_run:
        lines += [
            f"  differ from live        {s.differing:,} (missing in live {s.live_missing:,})",
            f"  entries missing / wrong {s.missing_entries:,} / {s.extra_entries:,}",
            f"  by entries off          {s.diff_histogram}",
        ]
    else:
        lines += [
            f"  generation              {s.generation} "
            f"({'active' if s.switched else 'handed over, not yet active'})",
            f"  entries                 {s.entries:,} ({s.short:,} timelines short: "
            "refills queued)",
            f"  mentions timelines      {s.mentions:,} ({s.mention_entries:,} entries)",
            f"  lists' timelines        {s.lists:,} ({s.list_entries:,} entries, "
            f"{s.lists_dropped:,} of idle owners dropped)",
            f"  verified                {s.verified_counts:,} lengths, "
            f"{s.sample_checked} sampled against the database",
        ]
    lines.append(f"  took                    {s.seconds:.1f}s")
    print("\n".join(lines), file=out)
