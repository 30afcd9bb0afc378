"""Rebuild every home, mentions and list timeline from the changelogs, verify, switch atomically.

    manage.py rebuild_timelines [--dry-run] [--sample 200] [--wait 600] [--json]

What an operator runs after fixing a bug in the fanout logic, and what
brings Redis back after it lost its data. This module holds the Spark
stages (the driver); :mod:`spark.rebuild.read` the read, which joins the
authors in its tasks; :mod:`spark.rebuild.join` the timelines' Spark plans;
:mod:`spark.rebuild.tasks` what they run on the executors;
:mod:`spark.rebuild.finish` the steps after them that need no Spark;
:mod:`spark.rebuild.command` the command line around them. The stages run
on the running fanout job's session when there is one
(:mod:`spark.rebuild.service`), else on the command's own.

1. **snapshot**: the end offsets of the topics (the changelogs, the
   owners' filters and the refills);
2. **read and join**: the compacted changelogs from offset 0 to the
   snapshot as a Spark batch job, one task per partition number reading
   that partition of every topic and keeping the newest record of each key
   (a tombstone removes the row): the current ``tweets``, ``follows`` and
   ``filters`` tables. The topics are partitioned by the join key, so each
   task joins its own authors' tweets and followers there, with no shuffle:
   every author's join state (the fanout job's ``AuthorState``, by
   :func:`fanout.model.join.rebuilt_author_state`: a follow that mutes the
   author is none, one with reposts off a quiet follower), the timelines'
   edges and the owners' filters (:mod:`spark.rebuild.read`). The read tasks
   put the live tweets' bodies in the tweet cache (the same bytes the job
   writes; not in a dry run);
3. **the timelines' input**: every timeline is the newest ``STARLING_TIMELINE_SIZE``
   (+ slack) entries of the user and of the users they follow, one per
   original (the view's SQL, computed per follower with Spark: the edges and
   the filters grouped by owner, the authors' kept entries broadcast;
   :func:`fanout.model.join.rebuilt_timeline`), as the job's merges make it:
   of a user followed with reposts off its posts only, without the
   reposts whose original's author the owner's filter hides and the entries
   whose original answers a user it hides, and the replies to users the
   owner does not follow kept aside, counted by the cap with the view
   (docs/decisions.md D29; :mod:`spark.rebuild.tasks`); and each user u's
   mentions timeline (owner ``-u``, D30): the newest ``STARLING_TIMELINE_SIZE``
   (+ slack) posts that notify u, by authors u does not hide;
4. **write** them into a new generation (``tl:{g}:*``), which no reader
   sees yet, with the replies kept aside and shown beside each, the owners'
   filters, followees and pulled authors, and the pulled authors' lists
   with their replies; a timeline its filter left short (fewer than
   ``STARLING_TIMELINE_SIZE`` entries, view and aside together, above a
   horizon) is queued for a refill from the database, as the job queues
   one;
5. **verify**: every timeline's length in Redis against the computed one,
   and a sample against the oracle query on the database (the command
   does that part, :mod:`spark.rebuild.finish`);
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

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fanout.config import Env, StarlingConfig
from fanout.model import owners
from fanout.model.watermark import contiguous, mark_name
from fanout.store.generations import GenerationState
from fanout.store.timelines import TimelineStore
from spark.rebuild.decode import FOLLOWS, MUTED, QUIET
from spark.rebuild.finish import Conclusion, Oracle, RebuildFailed, Settled, drop_built
from spark.rebuild.join import (
    BROADCAST_KEPT_IDS,
    TimelineInputs,
    engagement_states,
    states_and_edges,
    timeline_inputs,
)
from spark.rebuild.read import BAD_KEPT, NewestRecordSource, Row, largest_partition
from spark.rebuild.report import Progress, Summary
from spark.rebuild.tasks import (
    AUTHOR_STATE,
    COUNT,
    DIFF,
    ENGAGEMENTS_STATE,
    WRITTEN,
    diff_partition,
    write_lists_partition,
    write_timelines_partition,
)
from spark.source.datasource import changelog_options
from spark.source.kafka_io import end_offsets
from spark.source.offsets import Offsets


def default_state_root() -> Path:
    """Where rebuilt author states go unless told (``--state-dir``): the fanout
    job reads them when it takes a generation over."""
    return (Path(Env().text("STARLING_VAR_DIR", "var")) / "rebuild").resolve()


def _first(df: DataFrame) -> Any:
    """The first row of a one-row (aggregate) result."""
    row = df.first()
    assert row is not None
    return row


# --- the driver ------------------------------------------------------------------------


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
    #: The most kept tweet ids that go to the write tasks as a broadcast.
    broadcast_ids: int = BROADCAST_KEPT_IDS
    #: Called once Spark is no longer needed (before the hand-over's wait): the
    #: command stops its session, so no idle Python worker is reaped (and
    #: prints a BrokenPipeError) while it waits.
    release: Callable[[], None] | None = None
    #: Stop at a verified generation, leaving the sample check and the
    #: hand-over to the command (a rebuild run by the fanout job).
    build_only: bool = False
    summary: Summary = field(default_factory=Summary)
    #: The relay marks at the snapshot, per topic/partition (fanout.model.watermark).
    marks: dict[str, int] = field(default_factory=dict)
    #: The users whose timelines are compared with the database (:meth:`verify`).
    sampled: list[int] = field(default_factory=list)
    #: How many tweet ids the authors' states keep in all (a follow merges them).
    kept_ids: int = 0
    #: Why the rebuild was cancelled (:meth:`cancel`); empty while it goes on.
    cancelled: str = ""
    #: More of the new generation's metadata (who builds it).
    generation_meta: dict[str, str] = field(default_factory=dict)
    #: The tweets' engagements (:meth:`join`), handed over with the authors' states.
    engaged: DataFrame | None = None

    # --- stages

    def snapshot(self) -> Offsets:
        self.progress.stage("snapshot of the changelog end offsets")
        ends = end_offsets(self.config.kafka_client(), self.config.topics.all())
        self.summary.records = sum(o for parts in ends.values() for o in parts.values())
        topic, part, largest, gib = largest_partition(ends)
        self.progress.done(
            f"{self.summary.records:,} records up to {json.dumps(ends)}; the largest "
            f"partition, {topic}/{part}, holds {largest:,}: its read task needs about "
            f"{gib:.1f} GiB of Python memory"
        )
        return ends

    def read(self, ends: Offsets) -> DataFrame:
        records = self.summary.records
        self.progress.stage(
            "reading the changelogs (newest record per key)",
            records=records,
            counted=self.store.records_read,
        )
        self.spark.dataSource.register(NewestRecordSource)
        options = changelog_options(self.config, ending=ends)
        options |= {
            "topicPrefix": self.config.topics.prefix,
            "redisUrl": self.config.redis_url,
            "redisClusterUrls": ",".join(self.config.redis_cluster_urls),
            "redisShards": str(self.config.shards.count),
            "writeBodies": str(not self.summary.dry_run).lower(),
            "partitions": str(self.config.partitions),
            "timelineSize": str(self.config.timeline_size),
            "timelineSlack": str(self.config.timeline_slack),
            "pullThreshold": str(self.config.pull_threshold),
        }
        decoded = (
            self.spark.read.format(NewestRecordSource.name()).options(**options).load().persist()
        )
        try:
            self._tally(decoded)
        except BaseException:
            decoded.unpersist()  # what was cached of it, in a session that may go on
            raise
        return decoded

    def _tally(self, decoded: DataFrame) -> None:
        """The read's figures: its tasks' counts, the snapshot's seq and marks;
        bad records dead-lettered; misplaced records fail the rebuild."""
        bulk = (int(Row.STATE), int(Row.EDGE), int(Row.ENGAGEMENTS))
        rows = decoded.where(~F.col("kind").isin(*bulk)).collect()
        counts: Counter[str] = Counter()
        seq = 0
        for r in rows:
            if r["kind"] == Row.TALLY and r["name"] == "seq":
                seq = max(seq, r["a"])
            elif r["kind"] == Row.TALLY:
                counts[r["name"]] += r["a"]
        self._misplaced(counts["misplaced"], [r for r in rows if r["kind"] == Row.MISPLACED])
        self.summary.snapshot_seq = seq
        self.marks = {
            mark_name(r["name"], r["a"]): int(r["b"]) for r in rows if r["kind"] == Row.MARK
        }
        self.summary.snapshot_contiguous = contiguous(
            self.marks, self.config.topics.all(), self.config.partitions
        )
        self.summary.tweets = counts["tweet"]
        self.summary.follows = sum(counts[kind] for kind in FOLLOWS)
        self.summary.filters = counts["filter"]
        self.summary.bad_records = counts["bad"]
        self.summary.authors = counts["authors"]
        self.kept_ids = counts["kept"]
        bad = [r for r in rows if r["kind"] == Row.BAD][:BAD_KEPT]
        if bad:
            self.store.dead_letter(
                {
                    "topic": r["name"],
                    "partition": r["partition"],
                    "offset": r["offset"],
                    "error": r["error"],
                    "seen_at": time.time(),
                    "by": "rebuild",
                }
                for r in bad
            )
        self.progress.done(
            f"{counts['keys']:,} keys: {self.summary.tweets:,} live tweets"
            f"{'' if self.summary.dry_run else ' (their bodies put in the tweet cache)'}, "
            f"{self.summary.follows:,} live follows ({counts[MUTED]:,} muting, "
            f"{counts[QUIET]:,} with reposts off), {self.summary.filters:,} filters, "
            f"{counts['gone']:,} deleted, {counts['notified']:,} notifications (mentions "
            "and replies), "
            f"{self.summary.bad_records:,} bad (dead-lettered); "
            f"{self.summary.authors:,} authors joined, {counts['edges']:,} edges; "
            f"snapshot seq {self.summary.snapshot_seq} (complete up to "
            f"{self.summary.snapshot_contiguous})"
        )

    def _misplaced(self, count: int, named: list[Any]) -> None:
        """Fail on records outside the partition of their join key: the read
        joined each partition on its own, which they would have left short."""
        if not count:
            return
        where = ", ".join(
            f"{r['name']}/{r['partition']} offset {r['offset']} (join key {r['a']}, of "
            f"partition {r['b']})"
            for r in sorted(named, key=lambda r: (r["name"], r["partition"], r["offset"]))[:5]
        )
        raise RebuildFailed(
            f"the read found {count:,} live records outside the partition of their join "
            f"key, e.g. {where}: "
            f"the changelogs were not written by the relay with STARLING_PARTITIONS="
            f"{self.config.partitions}. Set it to the partition count the relay used."
        )

    def join(self, decoded: DataFrame) -> tuple[DataFrame, TimelineInputs]:
        """(author states, the timelines' input)."""
        self.progress.stage("joining tweets and follows")
        states, edges, filters, mentions = states_and_edges(decoded)
        self.engaged = engagement_states(decoded)
        inputs = timeline_inputs(
            self.spark, edges, filters, mentions, states, self.kept_ids, self.broadcast_ids
        )
        self.progress.done(
            f"{self.summary.authors:,} authors with state, {self.kept_ids:,} kept tweet ids "
            + ("(broadcast)" if inputs.kept is not None else "(joined in Spark)")
        )
        return states, inputs

    def write(self, generation: int, states: DataFrame, inputs: TimelineInputs) -> dict[int, int]:
        self.progress.stage(f"writing generation {generation}")
        config, kept = self.config, inputs.kept
        written = inputs.rows.mapInArrow(
            lambda it: write_timelines_partition(it, config, generation, kept), WRITTEN
        ).collect()
        lengths = {r["owner"]: r["entries"] for r in written}
        self.summary.short = sum(bool(r["short"]) for r in written)
        self._go_on()  # between a stage's actions too: a cancel stops only the running ones
        pulled_lists = _first(
            states.where("pulled")
            .mapInArrow(lambda it: write_lists_partition(it, config, generation), COUNT)
            .agg(F.sum("n"))
        )[0]
        homes = [n for o, n in lengths.items() if owners.is_home(o)]
        mentions = [n for o, n in lengths.items() if owners.is_mentions(o)]
        lists = [n for o, n in lengths.items() if owners.is_list(o)]
        self.summary.timelines = sum(n >= 0 for n in homes)
        self.summary.dropped = len(homes) - self.summary.timelines
        self.summary.entries = sum(n for n in homes if n >= 0)
        self.summary.mentions = sum(n >= 0 for n in mentions)
        self.summary.mention_entries = sum(n for n in mentions if n >= 0)
        self.summary.lists = sum(n >= 0 for n in lists)
        self.summary.lists_dropped = len(lists) - self.summary.lists
        self.summary.list_entries = sum(n for n in lists if n >= 0)
        path = self.state_root / f"gen-{generation}" / "state"
        # Recorded first, so that deleting the generation deletes a half-written state too.
        self.store.set_generation_meta(generation, state_path=str(path))
        self._go_on()
        handed = states.select("join_key", "blob", F.lit(AUTHOR_STATE).alias("kind"))
        if self.engaged is not None:
            engaged = self.engaged.select(
                "join_key", "blob", F.lit(ENGAGEMENTS_STATE).alias("kind")
            )
            handed = handed.unionByName(engaged)
        handed.write.mode("overwrite").parquet(str(path))
        self.progress.done(
            f"{self.summary.timelines:,} timelines ({self.summary.dropped:,} idle users' kept "
            f"dropped, with their mentions, {self.summary.short:,} short: refills queued), "
            f"{self.summary.entries:,} entries, {self.summary.mentions:,} mentions timelines "
            f"({self.summary.mention_entries:,} entries), {self.summary.lists:,} lists' "
            f"timelines ({self.summary.list_entries:,} entries, "
            f"{self.summary.lists_dropped:,} of idle owners dropped), {pulled_lists or 0:,} "
            f"pulled authors' lists, author state in {path}"
        )
        return lengths

    def verify(self, generation: int, lengths: dict[int, int]) -> list[int]:
        """Every timeline's length in Redis against the computed one, mentions
        timelines too; returns the sample of users whose home timelines are
        compared with the database (:meth:`Conclusion.check_sample`)."""
        self.progress.stage("verifying")
        every = sorted(lengths)
        stored = self.store.timeline_lengths(generation, every)  # -1: dropped, as computed
        wrong = [o for o, n in zip(every, stored, strict=True) if n != lengths[o]]
        if wrong:
            raise RebuildFailed(
                f"{len(wrong)} timelines in Redis do not have the computed length "
                f"(e.g. users {wrong[:5]})"
            )
        self.summary.verified_counts = len(every)
        rnd = random.Random(generation)  # noqa: S311 - a sample, not a secret
        kept = [o for o in every if owners.is_home(o) and lengths[o] >= 0]
        mentions = sum(owners.is_mentions(o) for o in every)
        lists = sum(owners.is_list(o) for o in every)
        self.progress.done(
            f"lengths: {len(every) - mentions - lists:,} timelines, {mentions:,} mentions "
            f"timelines and {lists:,} lists' timelines as computed"
        )
        return rnd.sample(kept, min(max(self.sample, 0), len(kept)))

    def diff(self, states: DataFrame, inputs: TimelineInputs) -> None:
        live = self.store.active_generation()
        self.progress.stage(f"comparing with the live generation {live}")
        if live is None or not self.store.generation_exists(live):
            self.summary.live_missing = -1
            self.progress.done("no live generation: every timeline would be new")
            return
        newest = int(_first(states.select(F.max(F.array_max("kept"))))[0] or 0)
        config, kept = self.config, inputs.kept
        rows = inputs.rows.mapInArrow(
            lambda it: diff_partition(it, config, live, newest, kept), DIFF
        )
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

    # --- the whole thing

    def run(self, *, dry_run: bool, wait: float) -> Summary:
        self.summary.dry_run = dry_run
        started = time.monotonic()
        self.progress.watch(self.spark)
        try:
            self._run(dry_run=dry_run, wait=wait)
        finally:
            self.progress.close()
        self.summary.seconds = time.monotonic() - started
        self.summary.stages = dict(self.progress.durations)
        return self.summary

    def cancel(self, why: str) -> None:
        """Stop the rebuild (from another thread): the Spark jobs of the stage
        running now are cancelled, and no further action starts. An action
        about to start when this is called may start all the same: call it
        again until the rebuild has ended (spark.rebuild.service does)."""
        self.cancelled = why
        self.spark.sparkContext.cancelJobGroup(self.progress.current)

    def _go_on(self) -> None:
        if self.cancelled:
            raise RebuildFailed(f"cancelled: {self.cancelled}")

    def _run(self, *, dry_run: bool, wait: float) -> None:
        ends = self.snapshot()
        self._go_on()
        decoded = self.read(ends)
        states: DataFrame | None = None
        inputs: TimelineInputs | None = None
        try:
            self._go_on()
            states, inputs = self.join(decoded)
            self._go_on()
            if dry_run:
                self.diff(states, inputs)
                return
            generation = self.store.new_generation(
                state=GenerationState.BUILDING, snapshot=json.dumps(ends), **self.generation_meta
            )
            self.summary.generation = generation
            try:
                lengths = self.write(generation, states, inputs)
                self._go_on()
                self.store.seed_watermark(
                    generation,
                    seq=self.summary.snapshot_seq,
                    marks=self.marks,
                    contiguous=self.summary.snapshot_contiguous,
                    offsets=ends,
                )
                self.sampled = self.verify(generation, lengths)
                self._go_on()
            except BaseException:
                self.progress.note(f"failed: deleting generation {generation}")
                drop_built(self.store, generation)
                raise
        finally:
            # A session that goes on (the fanout job's) must not keep the
            # snapshot's rows in memory.
            decoded.unpersist()
            if inputs is not None and inputs.kept is not None:
                inputs.kept.destroy()
        if self.build_only:
            return
        if self.release is not None:
            self.progress.close()  # no Spark from here on
            self.release()
        finish = Conclusion(
            self.config, self.store, self.progress, self.summary, self.oracle, self.settled
        )
        finish.conclude(generation, self.sampled, wait)
