"""The rebuild's join as Spark plans: the read's authors' states and edges
in (the read joined each author's tweets and followers:
:mod:`spark.rebuild.read`), every timeline's input out (the rule it feeds is
:func:`fanout.model.join.rebuilt_timeline`, run by :mod:`spark.rebuild.tasks`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.rebuild.read import Row
from spark.rebuild.tasks import KeptIds

#: The most kept tweet ids (all authors together) that go to the write tasks
#: as a broadcast: 20 million ids, 160 MB in the driver and in each Python
#: worker. Above it, Spark joins them to the edges.
BROADCAST_KEPT_IDS = 20_000_000


def states_and_edges(read: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The authors' states (rows of ``rebuild_tasks.STATE``) and the timelines'
    edges (owner, author) among the read's rows (``rebuild_read.READ``)."""
    states = read.where(F.col("kind") == int(Row.STATE)).select(
        F.col("a").alias("join_key"), "blob", "kept", "origins", "horizon", "pulled"
    )
    edges = read.where(F.col("kind") == int(Row.EDGE)).select(
        F.col("a").alias("owner"), F.col("b").alias("author")
    )
    return states, edges


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


def timeline_inputs(
    spark: SparkSession,
    edges: DataFrame,
    states: DataFrame,
    kept_ids: int,
    broadcast_ids: int,
) -> TimelineInputs:
    """Every owner's ``edges`` with the kept tweets of the authors they follow;
    ``kept_ids``: how many kept ids ``states`` holds in all, broadcast to the
    write tasks if at most ``broadcast_ids`` (:data:`BROADCAST_KEPT_IDS`).

    Owners: every follower (the self edge makes a user's own timeline) and
    every author (their own tweets are in their timeline). A user who follows
    themselves and tweets has their self edge twice: their ids are merged as
    distinct ids, so it changes nothing. A pulled author's tweets stay out of
    its followers' timelines: their reads merge its list (fanout.model.join), named
    in their set of pulls. Each owner's rows end up together (hashed to one
    partition, sorted there) and are merged per owner in Python, on NumPy
    views of the kept ids (``rebuild_tasks.owner_inputs``): an aggregation
    here would box every id in the JVM and spill."""
    if kept_ids <= broadcast_ids:
        # The authors' kept ids go to every write task, which joins them to the
        # edges itself: a popular author's ids are copied to each follower's
        # row in NumPy instead of being shuffled and sorted in the JVM once per
        # follower (measured: the write 11-12 -> 8 s at 100,000 users and
        # 2,000,000 follows).
        table = states.select("join_key", "kept", "origins", "horizon", "pulled").toArrow()
        return TimelineInputs(
            edges.repartition("owner").sortWithinPartitions("owner"),
            spark.sparkContext.broadcast(KeptIds.of(table)),
        )
    pull = F.coalesce("pulled", F.lit(False)) & (F.col("owner") != F.col("author"))
    kept = states.select(F.col("join_key").alias("author"), "kept", "origins", "horizon", "pulled")
    rows = (
        edges.join(kept, "author", "left")
        .select(
            "owner",
            "author",
            "kept",
            "origins",
            F.coalesce("horizon", F.lit(0)).alias("horizon"),
            pull.alias("pull"),
        )
        .repartition("owner")
        .sortWithinPartitions("owner")
    )
    return TimelineInputs(rows)
