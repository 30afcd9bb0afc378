"""The rebuild's join as Spark plans: the read's authors' states, edges and
owners' filters in (the read joined each author's tweets and followers:
:mod:`spark.rebuild.read`), every timeline's input out (the rule it feeds is
:func:`fanout.model.join.rebuilt_timeline`, screened as the store screens,
run by :mod:`spark.rebuild.tasks`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.rebuild.read import Row
from spark.rebuild.tasks import FILTER_ROW, KeptIds

#: The most kept tweet ids (all authors together, their posts runs included)
#: that go to the write tasks as a broadcast: 5.25 million ids, each with its
#: original, its original's author and the user it answers (32 bytes), 170 MB
#: in the driver and in each Python worker. Above it, Spark joins them to the
#: edges. (The mentions timelines' posts are not in it: they travel in rows
#: of their own, grouped by owner with the edges.)
BROADCAST_KEPT_IDS = 5_250_000


#: What an author's state row carries for the timelines its edges reach: the
#: kept run and its originals, their authors (``by``), the users they answer
#: and their horizon, the posts run of quiet edges with the users its posts
#: answer and its horizon, and whether the author is pulled.
_KEPT_COLUMNS = (
    "kept", "origins", "by", "answers", "horizon", "posts", "posts_answers", "posts_horizon",
    "pulled",
)  # fmt: skip


def states_and_edges(read: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """The authors' states (rows of ``rebuild_tasks.STATE``), the timelines'
    edges (owner, author, quiet: followed with reposts off), the owners'
    filters (owner, hidden) and the posts that notify each user (owner: the
    user, author, mentions: that author's posts) among the read's rows
    (``rebuild_read.READ``)."""
    states = read.where(F.col("kind") == int(Row.STATE)).select(
        F.col("a").alias("join_key"), "blob", *_KEPT_COLUMNS
    )
    edges = read.where(F.col("kind") == int(Row.EDGE)).select(
        F.col("a").alias("owner"),
        F.col("b").alias("author"),
        F.coalesce("quiet", F.lit(False)).alias("quiet"),
    )
    filters = read.where(F.col("kind") == int(Row.FILTER)).select(
        F.col("a").alias("owner"), "hidden"
    )
    mentions = read.where(F.col("kind") == int(Row.MENTIONS)).select(
        F.col("a").alias("owner"), F.col("b").alias("author"), F.col("kept").alias("mentions")
    )
    return states, edges, filters, mentions


def engagement_states(read: DataFrame) -> DataFrame:
    """The tweets' engagements (``join_key``, ``blob``) among the read's rows."""
    return read.where(F.col("kind") == int(Row.ENGAGEMENTS)).select(
        F.col("a").alias("join_key"), "blob"
    )


@dataclass
class TimelineInputs:
    """What the timelines are made from: rows of ``rebuild_tasks.EDGES``, or rows
    of ``rebuild_tasks.OWNED`` and every author's kept tweets as a broadcast
    (:class:`spark.rebuild.tasks.KeptIds`). Either way each owner's rows are
    consecutive within a partition."""

    rows: DataFrame
    kept: Broadcast[KeptIds] | None = None


_IDS = "array<long>"


def timeline_inputs(
    spark: SparkSession,
    edges: DataFrame,
    filters: DataFrame,
    mentions: DataFrame,
    states: DataFrame,
    kept_ids: int,
    broadcast_ids: int,
) -> TimelineInputs:
    """Every owner's ``edges`` with the kept tweets of the authors they follow,
    its filter (``filters``) and the posts that notify it (``mentions``, its
    mentions timeline's); ``kept_ids``: how many kept ids ``states``
    holds in all, broadcast to the write tasks if at most ``broadcast_ids``
    (:data:`BROADCAST_KEPT_IDS`).

    Owners: every follower (the self edge makes a user's own timeline) and
    every author (their own tweets are in their timeline). A user who follows
    themselves and tweets has their self edge twice: their ids are merged as
    distinct ids, so it changes nothing. A pulled author's tweets stay out of
    its followers' timelines: their reads merge its list (fanout.model.join), named
    in their set of pulls. A follower with reposts off (a quiet edge) gets a
    pushed author's newest posts instead of its newest entries. Each owner's
    filter travels as one more row of its own (author
    :data:`~spark.rebuild.tasks.FILTER_ROW`, no entries) through the same
    shuffle: the write task screens the owner's timeline with it and writes
    it beside it, and a dry run's comparison screens with it too. The posts
    that notify the owner travel the same way, one row per author (its id in
    ``author``, the posts in ``mentions``, no entries; null on the other
    rows): the write task makes the owner's mentions timeline of them,
    screened with the same filter. Each owner's rows end up together (hashed
    to one partition, sorted there) and are merged per owner in Python, on
    NumPy views of the kept ids (``rebuild_tasks.owner_inputs``): an
    aggregation here would box every id in the JVM and spill."""
    no_filter = F.lit(None).cast(_IDS).alias("hidden")
    no_mentions = F.lit(None).cast(_IDS).alias("mentions")
    # The rows of no followed author: the owners' filters and mentions.
    entryless = filters.select(
        "owner",
        F.lit(FILTER_ROW).cast("long").alias("author"),
        F.lit(False).alias("quiet"),
        "hidden",
        no_mentions,
    ).unionByName(
        mentions.select("owner", "author", F.lit(False).alias("quiet"), no_filter, "mentions")
    )
    if kept_ids <= broadcast_ids:
        # The authors' kept ids go to every write task, which joins them to the
        # edges itself: a popular author's ids are copied to each follower's
        # row in NumPy instead of being shuffled and sorted in the JVM once per
        # follower (measured: the write 11-12 -> 8 s at 100,000 users and
        # 2,000,000 follows).
        table = states.select("join_key", *_KEPT_COLUMNS).toArrow()
        owned = edges.select("owner", "author", "quiet", no_filter, no_mentions)
        owned = owned.unionByName(entryless)
        return TimelineInputs(
            owned.repartition("owner").sortWithinPartitions("owner"),
            spark.sparkContext.broadcast(KeptIds.of(table)),
        )
    pull = F.coalesce("pulled", F.lit(False)) & (F.col("owner") != F.col("author"))
    # A quiet edge to a pushed author with reposts: its posts run (a post's
    # original is itself, its author 0, the users its replies answer beside
    # it); else the kept run, which is that run.
    posts = F.col("quiet") & ~pull & F.col("posts").isNotNull()
    kept = states.select(F.col("join_key").alias("author"), *_KEPT_COLUMNS)
    joined = edges.join(kept, "author", "left").select(
        "owner",
        "author",
        F.when(posts, F.col("posts")).otherwise(F.col("kept")).alias("kept"),
        F.when(posts, F.col("posts")).otherwise(F.col("origins")).alias("origins"),
        F.when(posts, F.array_repeat(F.lit(0).cast("long"), F.size("posts")))
        .otherwise(F.col("by"))
        .alias("by"),
        F.when(posts, F.col("posts_answers")).otherwise(F.col("answers")).alias("answers"),
        F.when(posts, F.col("posts_horizon"))
        .otherwise(F.coalesce("horizon", F.lit(0)))
        .alias("horizon"),
        pull.alias("pull"),
        "quiet",
        no_filter,
        no_mentions,
    )
    empty = F.array().cast(_IDS)
    entryless = entryless.select(
        "owner",
        "author",
        empty.alias("kept"),
        empty.alias("origins"),
        empty.alias("by"),
        empty.alias("answers"),
        F.lit(0).cast("long").alias("horizon"),
        F.lit(False).alias("pull"),
        "quiet",
        "hidden",
        "mentions",
    )
    rows = joined.unionByName(entryless)
    return TimelineInputs(rows.repartition("owner").sortWithinPartitions("owner"))
