"""Extract: the changelogs as a DataFrame, the same for the streaming job and
the rebuild.

Rows have the columns of the Kafka source (``key``, ``value``, ``topic``,
``partition``, ``offset``, ``timestamp``) plus the record headers parsed once
here: ``seq`` (the outbox seq), ``jk`` (the join key, as the header says) and
``mark`` (set on the relay's marks only), and ``join_key``, what the join
groups by: ``jk``; :data:`MARKS` for the relay's marks; a negative
per-partition key for a record without a usable one (decoding then fails
and dead-letters it). The nested ``headers`` column is dropped: nested
columns are slow to hand to Python.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fanout import events
from fanout.config import StarlingConfig
from spark.kafka_source import NAME as SOURCE
from spark.kafka_source import source_options
from spark.offsets import Offsets


def header_column(name: str) -> Any:
    """A decimal header as a bigint (null when missing or not a number)."""
    return F.expr(
        f"try_cast(cast(get(filter(headers, h -> h.key = '{name}'), 0).value as string) as bigint)"
    )


#: The join key every relay mark is grouped under.
MARKS = 0


def join_key_column() -> Any:
    jk = F.col("jk")
    return (
        F.when(F.col("mark").isNotNull(), F.lit(MARKS))
        .when(jk > 0, jk)
        .otherwise(-(F.col("partition") + 1))
    )


def read_changelogs(
    spark: SparkSession,
    config: StarlingConfig,
    *,
    stream: bool,
    starting: Offsets | None = None,
    ending: Offsets | None = None,
    max_records: int | None = None,
    fail_on_data_loss: bool = True,
    min_partitions: int | None = None,
) -> DataFrame:
    """Both changelogs, from ``starting`` (default: the start of the log).

    A stream reads on, at most ``max_records`` records per micro-batch
    (``starting`` then only applies to a checkpoint that has not committed a
    batch); a batch read stops at ``ending`` (default: the end of the log), in
    at least ``min_partitions`` tasks (offset ranges cut evenly).
    """
    reader = (spark.readStream if stream else spark.read).format(SOURCE)
    options = {
        **source_options(config.kafka_client()),
        "topics": ",".join(config.topics.all()),
        "failOnDataLoss": str(fail_on_data_loss).lower(),
    }
    if starting:
        options["startingOffsets"] = json.dumps(starting)
    if ending:
        options["endingOffsets"] = json.dumps(ending)
    if max_records:
        options["maxRecordsPerTrigger"] = str(max_records)
    if min_partitions:
        options["minPartitions"] = str(min_partitions)
    return (
        reader.options(**options)
        .load()
        .withColumn("seq", header_column(events.HEADER_SEQ))
        .withColumn("jk", header_column(events.HEADER_JOIN_KEY))
        .withColumn("mark", header_column(events.HEADER_MARK))
        .withColumn("join_key", join_key_column())
        .drop("headers")
    )
