"""Rebuild every home timeline from the changelogs, verify, switch atomically.

    python -m spark.rebuild [--dry-run] [--sample 200] [--wait 600]
    manage.py rebuild_timelines [same options]

What an operator runs after fixing a bug in the fanout logic, and what
brings Redis back after it lost its data (DESIGN.md decision 8):

1. **snapshot**: the end offsets of both changelogs;
2. **read** the compacted changelogs from offset 0 to the snapshot as a
   Spark batch job, keeping the newest record per key (a tombstone removes
   the row): the current ``tweets`` and ``follows`` tables;
3. **join**: every timeline is the newest ``TIMELINE_SIZE`` (+ slack)
   tweets of the user and of the users they follow (the SQL of DESIGN.md,
   computed per follower with Spark), and every author's join state (the
   fanout job's ``AuthorState``), by the same rules as the streaming job
   (:func:`fanout.join.rebuilt_timeline`, :func:`fanout.join.rebuilt_author_state`);
4. **write** them into a new generation (``tl:{g}:*``), which no reader
   sees yet, and the tweet bodies that are missing;
5. **verify**: every timeline's length in Redis against the computed one,
   and a sample against the oracle query on the database;
6. **hand over**: the fanout job restarts on the new generation from the
   snapshot offsets with the rebuilt state (``initialState``), so writes
   made during the rebuild are applied to it; once it has caught up with
   the live generation it switches the active generation (one ``SET``:
   readers see the old timelines or the new ones, never a mix) and deletes
   the old generation.

On failure the new generation is deleted and the live one is untouched; the
exit status is 1 with the reason. ``--dry-run`` stops after step 3 and
reports how many live timelines differ from the rebuilt ones, and by how much.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fanout import events
from fanout.config import StarlingConfig
from fanout.join import rebuilt_author_state, rebuilt_timeline
from fanout.timelines import (
    REBUILD_STATUS,
    TimelineStore,
    pack_timeline,
    store_for,
    unpack_timeline,
    visible,
)
from spark.fanout import header_column
from spark.kafka_source import NAME as SOURCE
from spark.kafka_source import EndOffsetProbe, Offsets
from spark.session import build_session

log = logging.getLogger("starling.rebuild")

#: Oracle(user_ids, cap) -> {user: visible timeline ids, newest first} from the
#: database, and Settled(user_ids, seq) -> the users no write after ``seq`` touched.
Oracle = Callable[[Sequence[int], int], dict[int, list[int]]]
Settled = Callable[[Sequence[int], int], set[int]]

DECODED = (
    "kind string, a long, b long, body binary, seq long, "
    "topic string, partition int, offset long, error string"
)
STATE = "join_key long, blob binary, kept array<long>, horizon long"
WRITTEN = "owner long, entries int"
DIFF = "owner long, live_missing boolean, missing int, extra int"


class RebuildFailed(RuntimeError):
    """The rebuild stopped; the live generation is untouched."""


# --- progress --------------------------------------------------------------------------


@dataclass
class Progress:
    """Stages on the terminal (with elapsed time) and in Redis for the admin."""

    store: TimelineStore | None
    out: Any = sys.stdout
    started: float = field(default_factory=time.monotonic)
    stage_started: float = 0.0
    current: str = ""
    durations: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str) -> None:
        self.stage_started = time.monotonic()
        self.current = name
        self._print(f"{name} ...")
        self.publish(stage=name)

    def done(self, what: str) -> None:
        took = time.monotonic() - self.stage_started
        self.durations[self.current] = round(took, 2)
        self._print(f"  {what} ({took:.1f}s)")
        self.publish(detail=what)

    def note(self, what: str) -> None:
        self._print(f"  {what}")
        self.publish(detail=what)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _print(self, line: str) -> None:
        print(f"[{self.elapsed():7.1f}s] {line}", file=self.out, flush=True)

    def publish(self, **fields: Any) -> None:
        if self.store is not None:
            try:
                mapping = {**fields, "updated_at": time.time()}
                self.store.redis.hset(REBUILD_STATUS, mapping=mapping)  # type: ignore[arg-type]
            except Exception:  # progress display must not fail the rebuild
                log.debug("could not publish progress", exc_info=True)


# --- executor side (pure Python over Arrow batches) ------------------------------------


def decode_partition(batches: Iterator[pa.RecordBatch], topics: Any) -> Iterator[pa.RecordBatch]:
    """The newest record of each key, decoded: ``tweet`` (a=author, b=tweet id,
    body), ``follow`` (a=followee, b=follower), ``gone`` (a tombstone) or ``bad``."""
    for batch in batches:
        out: dict[str, list[Any]] = {k: [] for k in _names(DECODED)}
        for row in batch.to_pylist():
            kind, a, b, body, error = "bad", None, None, None, None
            try:
                envelope = events.decode_record(
                    topics.logical(row["topic"]), row["key"], row["value"], row["seq"], row["jk"]
                )
                ev = envelope.event
                if isinstance(ev, events.TweetPosted):
                    kind, a, b, body = "tweet", ev.author_id, ev.tweet_id, events.tweet_json(ev)
                elif isinstance(ev, events.Followed):
                    kind, a, b = "follow", ev.followee_id, ev.follower_id
                else:
                    kind = "gone"
            except (events.BadEvent, KeyError) as exc:
                error = str(exc)
            for name, value in (
                ("kind", kind),
                ("a", a),
                ("b", b),
                ("body", body),
                ("seq", row["seq"]),
                ("topic", row["topic"]),
                ("partition", row["partition"]),
                ("offset", row["offset"]),
                ("error", error),
            ):
                out[name].append(value)
        yield _batch(out, DECODED)


def state_partition(
    batches: Iterator[pa.RecordBatch], cap: int, slack: int
) -> Iterator[pa.RecordBatch]:
    """Per author: the fanout job's state blob, its kept tweets and horizon."""
    for batch in batches:
        out: dict[str, list[Any]] = {k: [] for k in _names(STATE)}
        for row in batch.to_pylist():
            state = rebuilt_author_state(
                row["author"], row["followers"] or (), row["tweets"] or (), cap=cap, slack=slack
            )
            out["join_key"].append(row["author"])
            out["blob"].append(state.encode())
            out["kept"].append(state.tweets)
            out["horizon"].append(state.horizon)
        yield _batch(out, STATE)


def _timelines(batch: pa.RecordBatch, cap: int, slack: int) -> Iterator[tuple[int, int, list[int]]]:
    for row in batch.to_pylist():
        horizon, ids = rebuilt_timeline(
            row["ids"] or (), cap=cap, slack=slack, floor=row["floor"] or 0
        )
        yield row["owner"], horizon, ids


def write_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, generation: int
) -> Iterator[pa.RecordBatch]:
    """Write this partition's timelines into ``generation``; return their lengths."""
    store = store_for(config, timeout=120)
    for batch in batches:
        rows = list(_timelines(batch, config.timeline_size, config.timeline_slack))
        store.write_timelines(generation, ((o, pack_timeline(h, ids)) for o, h, ids in rows))
        yield _batch(
            {"owner": [o for o, _, _ in rows], "entries": [len(ids) for _, _, ids in rows]},
            WRITTEN,
        )


def diff_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, live: int, newest_tweet: int
) -> Iterator[pa.RecordBatch]:
    """Compare rebuilt timelines with the live generation's (what readers see);
    tweets newer than the snapshot are left out of the live side."""
    store = store_for(config, timeout=120)
    cap = config.timeline_size
    for batch in batches:
        rows = list(_timelines(batch, cap, config.timeline_slack))
        packed = store.packed_timelines(live, [o for o, _, _ in rows])
        out: dict[str, list[Any]] = {k: [] for k in _names(DIFF)}
        for (owner, _, ids), raw in zip(rows, packed, strict=True):
            want = set(visible(ids, cap))
            have = (
                {i for i in visible(unpack_timeline(raw)[1], cap) if i <= newest_tweet}
                if raw
                else set()
            )
            out["owner"].append(owner)
            out["live_missing"].append(raw is None)
            out["missing"].append(len(want - have))
            out["extra"].append(len(have - want))
        yield _batch(out, DIFF)


def bodies_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig
) -> Iterator[pa.RecordBatch]:
    store = store_for(config, timeout=120)
    for batch in batches:
        n = store.write_bodies(
            zip(batch.column("b").to_pylist(), batch.column("body").to_pylist(), strict=True)
        )
        yield _batch({"n": [n]}, "n long")


def _first(df: DataFrame) -> Any:
    """The first row of a one-row (aggregate) result."""
    row = df.first()
    assert row is not None
    return row


_ARROW_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "array<long>": pa.list_(pa.int64()),
}


def _fields(schema: str) -> list[tuple[str, str]]:
    """(name, type) pairs of a Spark DDL string such as ``"a long, b binary"``."""
    pairs = [part.strip().split(" ", 1) for part in schema.split(",")]
    return [(name, kind.strip()) for name, kind in pairs]


def _names(schema: str) -> list[str]:
    return [name for name, _ in _fields(schema)]


def _batch(columns: dict[str, list[Any]], schema: str) -> pa.RecordBatch:
    """An Arrow batch with exactly the types of ``schema`` (a Spark DDL string)."""
    arrow = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in _fields(schema)])
    return pa.RecordBatch.from_pydict(columns, schema=arrow)


# --- the driver ------------------------------------------------------------------------


@dataclass
class Summary:
    generation: int | None = None
    dry_run: bool = False
    records: int = 0
    tweets: int = 0
    follows: int = 0
    bad_records: int = 0
    authors: int = 0
    timelines: int = 0
    entries: int = 0
    snapshot_seq: int = 0
    verified_counts: int = 0
    sample_checked: int = 0
    sample_skipped: int = 0
    differing: int = 0
    live_missing: int = 0
    missing_entries: int = 0
    extra_entries: int = 0
    diff_histogram: dict[str, int] = field(default_factory=dict)
    switched: bool = False
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)


@dataclass
class Rebuild:
    spark: SparkSession
    config: StarlingConfig
    store: TimelineStore
    progress: Progress
    state_root: Path
    oracle: Oracle | None = None
    settled: Settled | None = None
    sample: int = 200
    summary: Summary = field(default_factory=Summary)

    # --- stages

    def snapshot(self) -> Offsets:
        self.progress.stage("snapshot of the changelog end offsets")
        probe = EndOffsetProbe(self.config.kafka_bootstrap_servers)
        try:
            ends = probe.end_offsets(self.config.topics.all())
        finally:
            probe.close()
        self.summary.records = sum(o for parts in ends.values() for o in parts.values())
        self.progress.done(f"{self.summary.records:,} records up to {json.dumps(ends)}")
        return ends

    def read(self, ends: Offsets) -> DataFrame:
        self.progress.stage("reading the changelogs (newest record per key)")
        raw = (
            self.spark.read.format(SOURCE)
            .option("bootstrap.servers", self.config.kafka_bootstrap_servers)
            .option("topics", ",".join(self.config.topics.all()))
            .option("endingOffsets", json.dumps(ends))
            .load()
            .withColumn("seq", header_column(events.HEADER_SEQ))
            .withColumn("jk", header_column(events.HEADER_JOIN_KEY))
            .drop("headers")
        )
        newest = (
            raw.groupBy("topic", "key")
            .agg(
                F.max_by(
                    F.struct("value", "seq", "jk", "partition", "offset"), F.col("offset")
                ).alias("r")
            )
            .select("topic", "key", "r.*")
        )
        topics = self.config.topics
        decoded = newest.mapInArrow(lambda it: decode_partition(it, topics), DECODED).persist()
        counts = {
            r["kind"]: r["n"]
            for r in decoded.groupBy("kind").agg(F.count("*").alias("n")).collect()
        }
        self.summary.snapshot_seq = int(_first(decoded.agg(F.max("seq")))[0] or 0)
        self.summary.tweets = counts.get("tweet", 0)
        self.summary.follows = counts.get("follow", 0)
        self.summary.bad_records = counts.get("bad", 0)
        if self.summary.bad_records:
            bad = decoded.where("kind = 'bad'").limit(10_000).collect()
            self.store.dead_letter(
                {
                    "topic": r["topic"],
                    "partition": r["partition"],
                    "offset": r["offset"],
                    "error": r["error"],
                    "seen_at": time.time(),
                    "by": "rebuild",
                }
                for r in bad
            )
        self.progress.done(
            f"{sum(counts.values()):,} keys: {self.summary.tweets:,} live tweets, "
            f"{self.summary.follows:,} live follows, {counts.get('gone', 0):,} deleted, "
            f"{self.summary.bad_records:,} bad (dead-lettered); "
            f"snapshot seq {self.summary.snapshot_seq}"
        )
        return decoded

    def join(self, decoded: DataFrame) -> tuple[DataFrame, DataFrame]:
        """(author states, per-owner inputs of the timelines)."""
        self.progress.stage("joining tweets and follows")
        cap, slack = self.config.timeline_size, self.config.timeline_slack
        tweets = decoded.where("kind = 'tweet'").select(
            F.col("a").alias("author"), F.col("b").alias("id")
        )
        follows = decoded.where("kind = 'follow'").select(
            F.col("b").alias("follower"), F.col("a").alias("followee")
        )
        authors = (
            tweets.groupBy("author")
            .agg(F.collect_list("id").alias("tweets"))
            .join(
                follows.groupBy(F.col("followee").alias("author")).agg(
                    F.collect_list("follower").alias("followers")
                ),
                "author",
                "full_outer",
            )
        )
        states = authors.mapInArrow(lambda it: state_partition(it, cap, slack), STATE).persist()
        # Owners: every follower (the self edge makes a user's own timeline) and
        # every author (their own tweets are in their timeline).
        edges = (
            follows.select(F.col("follower").alias("owner"), F.col("followee").alias("author"))
            .union(tweets.select(F.col("author").alias("owner"), "author").distinct())
            .distinct()
        )
        inputs = (
            edges.join(
                states.select(F.col("join_key").alias("author"), "kept", "horizon"),
                "author",
                "left",
            )
            .groupBy("owner")
            .agg(
                F.flatten(F.collect_list(F.coalesce("kept", F.array().cast("array<long>")))).alias(
                    "ids"
                ),
                F.max(F.coalesce("horizon", F.lit(0))).alias("floor"),
            )
        )
        self.summary.authors = states.count()
        self.progress.done(f"{self.summary.authors:,} authors with state")
        return states, inputs

    def write(
        self, generation: int, decoded: DataFrame, states: DataFrame, inputs: DataFrame
    ) -> dict[int, int]:
        self.progress.stage(f"writing generation {generation}")
        config = self.config
        lengths = {
            r["owner"]: r["entries"]
            for r in inputs.mapInArrow(
                lambda it: write_partition(it, config, generation), WRITTEN
            ).collect()
        }
        self.summary.timelines = len(lengths)
        self.summary.entries = sum(lengths.values())
        bodies = _first(
            decoded.where("kind = 'tweet'")
            .select("b", "body")
            .mapInArrow(lambda it: bodies_partition(it, config), "n long")
            .agg(F.sum("n"))
        )[0]
        path = self.state_root / f"gen-{generation}" / "state"
        states.select("join_key", "blob").write.mode("overwrite").parquet(str(path))
        self.store.set_generation_meta(generation, state_path=str(path))
        self.progress.done(
            f"{self.summary.timelines:,} timelines, {self.summary.entries:,} entries, "
            f"{bodies or 0:,} tweet bodies, author state in {path}"
        )
        return lengths

    def verify(self, generation: int, lengths: dict[int, int]) -> None:
        self.progress.stage("verifying")
        owners = sorted(lengths)
        packed = self.store.packed_timelines(generation, owners)
        wrong = [
            o
            for o, raw in zip(owners, packed, strict=True)
            if raw is None or len(raw) // 8 - 1 != lengths[o]
        ]
        if wrong:
            raise RebuildFailed(
                f"{len(wrong)} timelines in Redis do not have the computed length "
                f"(e.g. users {wrong[:5]})"
            )
        self.summary.verified_counts = len(owners)
        self.progress.note(f"lengths: {len(owners):,} timelines as computed")
        if self.oracle is None or not owners or self.sample <= 0:
            self.progress.done("no database oracle given: sample check skipped")
            return
        rnd = random.Random(generation)  # noqa: S311 - a sample, not a secret
        sample = rnd.sample(owners, min(self.sample, len(owners)))
        settled = self.settled(sample, self.summary.snapshot_seq) if self.settled else set(sample)
        checked = [u for u in sample if u in settled]
        expected = self.oracle(checked, self.config.timeline_size)
        raw = dict(zip(owners, packed, strict=True))
        bad = []
        for user in checked:
            have = visible(unpack_timeline(raw[user] or b"")[1], self.config.timeline_size)
            if have != expected.get(user, []):
                bad.append(user)
        self.summary.sample_checked = len(checked)
        self.summary.sample_skipped = len(sample) - len(checked)
        if bad:
            raise RebuildFailed(
                f"{len(bad)} of {len(checked)} sampled timelines differ from the database "
                f"(e.g. users {bad[:5]})"
            )
        self.progress.done(
            f"sample: {len(checked)} timelines equal the database's join "
            f"({self.summary.sample_skipped} skipped: written to after the snapshot)"
        )

    def diff(self, inputs: DataFrame) -> None:
        live = self.store.active_generation()
        self.progress.stage(f"comparing with the live generation {live}")
        if live is None or not self.store.generation_exists(live):
            self.summary.live_missing = -1
            self.progress.done("no live generation: every timeline would be new")
            return
        newest = int(_first(inputs.select(F.max(F.array_max("ids"))))[0] or 0)
        config = self.config
        rows = inputs.mapInArrow(lambda it: diff_partition(it, config, live, newest), DIFF)
        rows = rows.withColumn("delta", F.col("missing") + F.col("extra"))
        totals = _first(
            rows.agg(
                F.count("*").alias("timelines"),
                F.sum(F.when(F.col("delta") > 0, 1).otherwise(0)).alias("differing"),
                F.sum(F.when(F.col("live_missing"), 1).otherwise(0)).alias("live_missing"),
                F.sum("missing").alias("missing"),
                F.sum("extra").alias("extra"),
            )
        )
        buckets = (
            rows.where("delta > 0")
            .withColumn(
                "bucket",
                F.when(F.col("delta") == 1, "1")
                .when(F.col("delta") <= 10, "2-10")
                .when(F.col("delta") <= 100, "11-100")
                .otherwise(">100"),
            )
            .groupBy("bucket")
            .count()
            .collect()
        )
        self.summary.timelines = int(totals["timelines"])
        self.summary.differing = int(totals["differing"] or 0)
        self.summary.live_missing = int(totals["live_missing"] or 0)
        self.summary.missing_entries = int(totals["missing"] or 0)
        self.summary.extra_entries = int(totals["extra"] or 0)
        self.summary.diff_histogram = {r["bucket"]: int(r["count"]) for r in buckets}
        self.progress.done(
            f"{self.summary.differing:,} of {self.summary.timelines:,} timelines differ "
            f"({self.summary.live_missing:,} missing in live); entries missing in live "
            f"{self.summary.missing_entries:,}, wrong in live {self.summary.extra_entries:,}; "
            f"by entries off: {self.summary.diff_histogram}"
        )

    def hand_over(self, generation: int, wait: float) -> None:
        self.progress.stage(f"handing generation {generation} over to the fanout job")
        self.store.request_handover(generation)
        deadline = time.monotonic() + wait
        shown = 0.0
        while time.monotonic() < deadline:
            if self.store.active_generation() == generation:
                self.summary.switched = True
                self.progress.done(
                    f"generation {generation} is active; the old one is being deleted"
                )
                return
            if time.monotonic() - shown > 5:
                wm = self.store.watermark(generation)
                self.progress.note(
                    f"waiting for the job to catch up: generation {generation} at seq "
                    f"{wm.seq if wm else '?'}"
                )
                shown = time.monotonic()
            time.sleep(0.5)
        self.progress.done(
            f"not switched yet after {wait:.0f}s: generation {generation} is verified and handed "
            "over; the fanout job switches to it when it runs and has caught up"
        )

    # --- the whole thing

    def run(self, *, dry_run: bool, wait: float) -> Summary:
        self.summary.dry_run = dry_run
        started = time.monotonic()
        ends = self.snapshot()
        decoded = self.read(ends)
        states, inputs = self.join(decoded)
        if dry_run:
            self.diff(inputs)
        else:
            generation = self.store.new_generation(state="building", snapshot=json.dumps(ends))
            self.summary.generation = generation
            try:
                lengths = self.write(generation, decoded, states, inputs)
                self.store.seed_watermark(generation, seq=self.summary.snapshot_seq, offsets=ends)
                self.verify(generation, lengths)
            except BaseException:
                self.progress.note(f"failed: deleting generation {generation}")
                self.store.drop_generation(generation)
                raise
            self.hand_over(generation, wait)
        self.summary.seconds = time.monotonic() - started
        self.summary.stages = dict(self.progress.durations)
        return self.summary


# --- command line ------------------------------------------------------------------------


def parser(prog: str = "python -m spark.rebuild") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dry-run", action="store_true", help="compare with the live timelines, change nothing"
    )
    p.add_argument("--master", help="Spark master (default: SPARK_MASTER or local[2])")
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
    out: Any = sys.stdout,
) -> int:
    config = StarlingConfig.from_env()
    store = store_for(config, timeout=60)
    progress = Progress(store, out)
    state_root = (
        args.state_dir or Path(os.environ.get("STARLING_VAR_DIR", "var")) / "rebuild"
    ).resolve()
    store.redis.delete(REBUILD_STATUS)
    progress.publish(state="running", dry_run=int(args.dry_run), started_at=time.time())
    try:
        spark = spark or build_session(args.master or config.spark_master, "starling-rebuild")
        rebuild = Rebuild(spark, config, store, progress, state_root, oracle, settled, args.sample)
        summary = rebuild.run(dry_run=args.dry_run, wait=args.wait)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.debug("rebuild failed", exc_info=True)
        print(f"rebuild failed: {reason}", file=out)
        if not isinstance(exc, RebuildFailed):
            traceback.print_exc(file=sys.stderr)
        print("the live timelines are untouched", file=out)
        progress.publish(state="failed", error=reason, finished_at=time.time())
        return 1
    figures = asdict(summary)
    progress.publish(
        state="succeeded" if summary.switched or summary.dry_run else "handed-over",
        finished_at=time.time(),
        summary=orjson.dumps(figures),
    )
    if args.json:
        print(json.dumps(figures, indent=2), file=out)
    else:
        print_summary(summary, out)
    return 0


def print_summary(s: Summary, out: Any) -> None:
    rate = s.records / s.seconds if s.seconds else 0.0
    lines = [
        "rebuild summary" + (" (dry run: nothing changed)" if s.dry_run else ""),
        f"  changelog records read  {s.records:,} ({rate:,.0f}/s)",
        f"  live tweets / follows   {s.tweets:,} / {s.follows:,}; bad records {s.bad_records:,}",
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
            f"  entries                 {s.entries:,}",
            f"  verified                {s.verified_counts:,} lengths, "
            f"{s.sample_checked} sampled against the database",
        ]
    lines.append(f"  took                    {s.seconds:.1f}s")
    print("\n".join(lines), file=out)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parser().parse_args(argv)
    # The sample check asks the system of record (the Django database).
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feed.settings")
    import django

    django.setup()
    from feed.selectors import home_timeline_oracle, settled_since

    return execute(args, oracle=home_timeline_oracle, settled=settled_since)


if __name__ == "__main__":
    sys.exit(main())
