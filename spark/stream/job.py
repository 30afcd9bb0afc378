"""The streaming fanout job: tweets ⋈ follows → home timelines in Redis.

    python -m spark.stream.job [--master local[2]] [--checkpoint DIR] [--trigger "250 milliseconds"]

Extract, transform, load::

    spark.stream.changelog  both changelogs, offsets in the Spark checkpoint (exactly-once)
    spark.stream.operator   grouped by join key, transformWithState: fanout.model.join's rules
    spark.stream.sink       the executors write the mutations to Redis, then the driver
                            records the watermark (highest seq applied, offsets, counters)

:mod:`spark.stream.supervisor` keeps the query on the right generation (rebuilds,
lost data); :mod:`spark.rebuild.service` runs the rebuilds ``manage.py
rebuild_timelines`` asks for on the job's session, beside the query. A
record that cannot be decoded is counted, written to the dead-letter hash in
Redis with its topic, partition and offset, and skipped.
Spark code here never imports Django.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from fanout import logs
from fanout.config import (
    DEFAULT_MAX_RECORDS_PER_TRIGGER,
    DEFAULT_ROUTE_FROM,
    LOG_LEVELS,
    Env,
    StarlingConfig,
)
from fanout.kafka import ensure_topics
from fanout.store.generations import GenerationState
from fanout.store.timelines import store_for
from spark.rebuild.service import RebuildService
from spark.runtime.session import build_session
from spark.source.offsets import Offsets
from spark.stream.changelog import read_changelogs
from spark.stream.operator import join_by_author
from spark.stream.progress import ProgressLogger
from spark.stream.sink import FanoutSink, route_labels
from spark.stream.supervisor import Supervisor, Target

log = logging.getLogger("starling.fanout")


@dataclass(frozen=True)
class JobOptions:
    trigger: str = "250 milliseconds"
    max_records: int | None = None
    fail_on_data_loss: bool = True
    progress_file: Path | None = None
    query_name: str = "fanout"


def build_query(
    spark: SparkSession,
    config: StarlingConfig,
    *,
    generation: int,
    checkpoint: Path,
    trigger: str = JobOptions.trigger,
    max_records: int | None = None,
    fail_on_data_loss: bool = True,
    query_name: str = JobOptions.query_name,
    starting_offsets: Offsets | None = None,
    initial_state: DataFrame | None = None,
) -> tuple[Any, FanoutSink]:
    """The streaming query, started: extract → transform → load. A rebuilt
    generation is taken over from its snapshot: ``starting_offsets`` and
    ``initial_state`` (``join_key``, ``blob``) apply only to a checkpoint that
    has not committed a batch yet."""
    changelogs = read_changelogs(
        spark,
        config,
        starting=starting_offsets,
        max_records=max_records,
        fail_on_data_loss=fail_on_data_loss,
    )
    routes = route_labels(spark, int(spark.conf.get("spark.sql.shuffle.partitions") or 1))
    bundles = join_by_author(changelogs, config, routes, initial_state=initial_state)
    sink = FanoutSink(config, generation, checkpoint, routes)
    query = (
        bundles.writeStream.queryName(query_name)
        .foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=trigger)
        .start()
    )
    return query, sink


class QueryStarter:
    """What the supervisor calls to (re)start the query, with one progress
    listener registered at a time."""

    def __init__(self, spark: SparkSession, config: StarlingConfig, options: JobOptions) -> None:
        self.spark = spark
        self.config = config
        self.options = options
        self.listener: ProgressLogger | None = None

    def __call__(self, target: Target) -> Any:
        log.info(
            "fanout: generation %d%s, checkpoint %s, master %s, trigger %s",
            target.generation,
            " (taking over a rebuild)" if target.takeover else "",
            target.checkpoint,
            self.spark.sparkContext.master,
            self.options.trigger,
        )
        options = self.options
        query, sink = build_query(
            self.spark,
            self.config,
            generation=target.generation,
            checkpoint=target.checkpoint,
            trigger=options.trigger,
            max_records=options.max_records,
            fail_on_data_loss=options.fail_on_data_loss,
            query_name=options.query_name,
            starting_offsets=target.starting_offsets,
            initial_state=self.spark.read.parquet(target.initial_state)
            if target.takeover and target.initial_state
            else None,
        )
        if self.listener is not None:
            self.spark.streams.removeListener(self.listener)
        self.listener = ProgressLogger(sink, self.options.progress_file)
        self.spark.streams.addListener(self.listener)
        return query


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m spark.stream.job", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--master", help="Spark master (default: SPARK_MASTER or local[2])")
    parser.add_argument(
        "--checkpoint", type=Path, help="checkpoint root (one directory per generation)"
    )
    parser.add_argument("--trigger", default="250 milliseconds", help="micro-batch interval")
    parser.add_argument(
        "--max-records",
        type=int,
        default=DEFAULT_MAX_RECORDS_PER_TRIGGER,
        help="changelog records per micro-batch at most (default: %(default)s)",
    )
    parser.add_argument(
        "--route-from",
        type=int,
        default=DEFAULT_ROUTE_FROM,
        help="micro-batches of this many records or more write each timeline from one task, "
        "after a shuffle by owner; smaller ones where the join ran (0: always shuffle; "
        "default: %(default)s)",
    )
    parser.add_argument(
        "--reset",
        action="store_true",
        help="delete the checkpoints and replay the changelogs into a new, active generation",
    )
    parser.add_argument("--no-fail-on-data-loss", action="store_true", help="skip lost offsets")
    parser.add_argument(
        "--progress-file", type=Path, help="append one JSON line per micro-batch to this file"
    )
    return parser.parse_args(argv)


def default_checkpoint() -> Path:
    return Path(Env().text("STARLING_VAR_DIR", "var")) / "spark" / "fanout"


def main(argv: list[str] | None = None) -> int:
    logs.configure()  # STARLING_LOG_FORMAT: plain lines or JSON
    log.setLevel(Env().choice("STARLING_LOG_LEVEL", "info", LOG_LEVELS).upper())
    args = _parse(argv)
    config = replace(StarlingConfig.from_env(), route_from=args.route_from)
    root: Path = (args.checkpoint or default_checkpoint()).resolve()
    store = store_for(config)
    if args.reset:
        shutil.rmtree(root, ignore_errors=True)
        old = store.active_generation()
        generation = store.new_generation(state=GenerationState.ACTIVE, reason="reset")
        store.switch(generation, old)
        log.info("reset: replaying the changelogs into new generation %d", generation)
    log.info(
        "waiting for topics %s on %s",
        ", ".join(config.topics.all()),
        config.kafka_bootstrap_servers,
    )
    ensure_topics(config, timeout=120)
    spark = build_session(args.master or config.spark_master, "starling-fanout")
    stopping = threading.Event()

    def stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping after the current micro-batch", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    options = JobOptions(
        trigger=args.trigger,
        max_records=args.max_records,
        fail_on_data_loss=not args.no_fail_on_data_loss,
        progress_file=args.progress_file,
    )
    starter = QueryStarter(spark, config, options)
    rebuilds = RebuildService(spark, config, store, stopping).start()
    try:
        return Supervisor(store, config, root, starter, stopping).run()
    finally:
        rebuilds.stop()


if __name__ == "__main__":
    sys.exit(main())
