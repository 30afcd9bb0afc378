"""Extract: the changelogs as the streaming job reads them (the rebuild
decodes them in its read tasks instead: spark.rebuild_tasks).

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


def changelog_options(
    config: StarlingConfig,
    starting: Offsets | None = None,
    ending: Offsets | None = None,
    max_records: int | None = None,
    fail_on_data_loss: bool = True,
) -> dict[str, str]:
    """The Kafka source's options for this deployment's topics (spark.kafka_source)."""
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
    return options


def read_changelogs(
    spark: SparkSession,
    config: StarlingConfig,
    *,
    starting: Offsets | None = None,
    max_records: int | None = None,
    fail_on_data_loss: bool = True,
) -> DataFrame:
    """Both changelogs as a stream, from ``starting`` (default: the start of the
    log; it applies only to a checkpoint that has not committed a batch), at
    most ``max_records`` records per micro-batch."""
    options = changelog_options(config, starting, None, max_records, fail_on_data_loss)
    return (
        spark.readStream.format(SOURCE)
        .options(**options)
        .load()
        .withColumn("seq", header_column(events.HEADER_SEQ))
        .withColumn("jk", header_column(events.HEADER_JOIN_KEY))
        .withColumn("mark", header_column(events.HEADER_MARK))
        .withColumn("join_key", join_key_column())
        .drop("headers")
    )
