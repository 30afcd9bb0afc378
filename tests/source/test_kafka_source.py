"""The Python Kafka data source against a real Apache Kafka broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fanout.config import StarlingConfig
from fanout.model import events
from spark.source.datasource import NAME, KafkaChangelogSource
from spark.source.kafka_io import EndOffsetReader
from tests.conftest import make_config
from tests.support.kafka_helpers import delete_topics
from tests.support.spark_helpers import ChangelogWriter

pytestmark = pytest.mark.spark


@pytest.fixture
def config(kafka_bootstrap: str, redis_url: str) -> StarlingConfig:
    return make_config(kafka_bootstrap, redis_url, partitions=2)


@pytest.fixture(autouse=True)
def source(spark) -> None:
    """The source, registered as the jobs register it before they read."""
    spark.dataSource.register(KafkaChangelogSource)


def fill(config: StarlingConfig, n: int) -> ChangelogWriter:
    writer = ChangelogWriter(config, marks=False)
    for start in range(0, n, 10):  # several produce calls: several record batches per partition
        writer.send(
            events.TweetPosted(1000 + i, i % 5 + 1, "u", f"t{i}")
            for i in range(start, min(n, start + 10))
        )
    writer.send([events.TweetDeleted(1000, 1)])  # a tombstone
    return writer


def test_end_offsets_are_the_real_end_of_the_log(config: StarlingConfig) -> None:
    fill(config, 95)
    ends = EndOffsetReader(config.kafka_bootstrap_servers).end_offsets(config.topics.all())
    assert sum(ends[config.topics.tweets].values()) == 96
    assert ends[config.topics.follows] == {"0": 0, "1": 0}


@pytest.mark.parametrize("min_partitions", [0, 13])
def test_batch_read_returns_every_record_with_tombstones_as_null(
    spark, config: StarlingConfig, min_partitions: int
) -> None:
    """Also cut into more read tasks than topic-partitions (offset ranges that
    start and end inside the broker's record batches): the same records, once."""
    fill(config, 40)
    df = (
        spark.read.format(NAME)
        .option("bootstrap.servers", config.kafka_bootstrap_servers)
        .option("topics", ",".join(config.topics.all()))
        .option("minPartitions", str(min_partitions))
        .load()
    )
    assert df.rdd.getNumPartitions() >= (10 if min_partitions else 2)  # ranges of <= 4 offsets
    rows = df.collect()
    assert len(rows) == 41
    tombstones = [r for r in rows if r.value is None]
    assert len(tombstones) == 1 and tombstones[0].key == b"1000"
    assert {h.key for h in tombstones[0].headers} == {"seq", "jk"}
    for partition in {r.partition for r in rows}:
        offsets = sorted(r.offset for r in rows if r.partition == partition)
        assert offsets == list(range(len(offsets)))


def test_streaming_read_respects_max_records_and_reads_each_record_once(
    spark, config: StarlingConfig, tmp_path: Path
) -> None:
    fill(config, 95)
    seen: list[int] = []
    sizes: list[int] = []

    def collect(batch, batch_id: int) -> None:
        offsets = [(r.partition, r.offset) for r in batch.select("partition", "offset").collect()]
        sizes.append(len(offsets))
        seen.extend(hash(o) for o in offsets)

    query = (
        spark.readStream.format(NAME)
        .option("bootstrap.servers", config.kafka_bootstrap_servers)
        .option("topics", ",".join(config.topics.all()))
        .option("maxRecordsPerTrigger", "30")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while sum(sizes) < 96 and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        query.stop()
    assert sum(sizes) == 96 and len(set(seen)) == 96
    assert max(sizes) <= 30 and len(sizes) >= 4


def test_a_checkpoint_ahead_of_the_log_fails_with_a_clear_message(
    spark, config: StarlingConfig, tmp_path: Path
) -> None:
    """A broker that lost its data: the topics deleted and made again, empty."""
    fill(config, 20)
    checkpoint = tmp_path / "cp"

    def run(fail_on_data_loss: bool) -> object:
        return (
            spark.readStream.format(NAME)
            .option("bootstrap.servers", config.kafka_bootstrap_servers)
            .option("topics", ",".join(config.topics.all()))
            .option("failOnDataLoss", str(fail_on_data_loss).lower())
            .load()
            .writeStream.foreachBatch(lambda df, i: df.count())
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    query = run(True)
    query.processAllAvailable()
    query.stop()

    delete_topics(config.kafka_bootstrap_servers, config.topics.all())
    ChangelogWriter(config)  # same topics, nothing in them
    failing = run(True)
    with pytest.raises(Exception, match="lost data") as info:
        failing.awaitTermination(60)
    assert "--reset" in str(info.value) and "failOnDataLoss=false" in str(info.value)
    tolerant = run(False)
    tolerant.processAllAvailable()
    assert tolerant.isActive
    tolerant.stop()
