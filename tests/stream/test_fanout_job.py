"""The streaming fanout job in-process: real broker, real Redis, real Spark."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from fanout.model import events
from fanout.store.timelines import TimelineStore
from spark.stream.progress import ProgressLogger
from tests.conftest import make_config
from tests.support.spark_helpers import ChangelogWriter, Job

pytestmark = pytest.mark.spark
ANN, BOB, CAT = 1, 2, 3


@pytest.fixture
def job(
    spark: Any, kafka_bootstrap: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> Iterator[Job]:
    config = make_config(kafka_bootstrap, redis_url, partitions=2, timeline_size=800)
    store = TimelineStore(redis_client, cap=config.timeline_size)
    running = Job(
        config, store, store.ensure_active_generation(), ChangelogWriter(config), tmp_path / "cp"
    )
    running.start(spark)
    yield running
    running.stop()


def post(tweet_id: int, author: int) -> events.TweetPosted:
    return events.TweetPosted(tweet_id, author, f"user{author}", f"tweet {tweet_id}")


def test_the_four_rules_end_to_end(job: Job, redis_client: redis.Redis) -> None:
    job.writer.send([events.Followed(u, u) for u in (ANN, BOB, CAT)])
    job.writer.send(
        [events.Followed(BOB, ANN), events.Followed(CAT, ANN), post(101, ANN), post(102, BOB)]
    )
    job.wait_for(job.writer.last_seq)
    assert job.timeline(ANN) == [101]
    assert job.timeline(BOB) == [102, 101]
    assert job.timeline(CAT) == [101]
    assert redis_client.get("tw:101") == events.tweet_json(post(101, ANN))

    last = job.writer.send(
        [events.TweetDeleted(101, ANN), events.Unfollowed(CAT, ANN), post(103, ANN)]
    )
    job.wait_for(last)
    assert job.timeline(BOB) == [103, 102]
    assert job.timeline(CAT) == []
    assert redis_client.get("tw:101") is None

    last = job.writer.send([events.Followed(CAT, BOB)])
    job.wait_for(last)
    assert job.timeline(CAT) == [102]
    wm = job.store.watermark(job.generation)
    # 101 to three timelines, 102 to one, 103 to two, then 102 merged into CAT's
    assert wm is not None and wm.seq == last and wm.counters["deliveries"] == 7
    assert set(wm.offsets) == set(job.config.topics.all())


def test_poison_records_are_dead_lettered_and_the_job_carries_on(job: Job) -> None:
    topics = job.config.topics
    good = post(201, ANN)
    record = events.encode(good)
    job.writer.send([events.Followed(ANN, ANN)])
    job.writer.raw(topics.tweets, b"202", b"{not json", [("seq", b"90"), ("jk", b"1")])
    job.writer.raw(topics.tweets, b"203", record.value, [("jk", b"1")])  # no seq
    job.writer.raw(topics.follows, b"nonsense", b'{"v":1}', [("seq", b"91"), ("jk", b"x")])
    job.writer.raw(
        topics.tweets,
        b"204",
        record.value.replace(b'"v":1', b'"v":7'),
        [("seq", b"92"), ("jk", b"1")],
    )
    last = job.writer.send([good])
    job.wait_for(last)
    assert job.timeline(ANN) == [201]
    dead = {d["error"].split(":")[0]: d for d in job.store.dead_letters()}
    assert job.store.dead_letter_count() == 4
    assert any("not JSON" in e for e in dead) and any("seq" in e for e in dead)
    assert all({"topic", "partition", "offset", "key", "value"} <= set(d) for d in dead.values())
    assert job.store.watermark(job.generation).counters["dead_letters"] == 4  # type: ignore[union-attr]
    assert job.query.isActive


def test_restart_from_the_checkpoint_neither_loses_nor_repeats(spark: Any, job: Job) -> None:
    job.writer.send([events.Followed(u, u) for u in (ANN, BOB)] + [events.Followed(BOB, ANN)])
    last = job.writer.send([post(300 + i, ANN) for i in range(5)])
    job.wait_for(last)
    job.stop()
    job.writer.send([post(310, ANN), events.TweetDeleted(300, ANN)])  # while the job is down
    job.start(spark)
    last = job.writer.send([post(311, ANN)])
    job.wait_for(last)
    expected = [311, 310, 304, 303, 302, 301]
    assert job.timeline(ANN) == job.timeline(BOB) == expected


def test_each_micro_batch_gets_a_progress_line(spark: Any, job: Job, tmp_path: Path) -> None:
    """The listener, handed Spark's progress as JSON, writes a line per batch with
    rows, Spark's phases, the sink's counters and the newest record's lag."""
    progress = tmp_path / "progress.jsonl"
    listener = ProgressLogger(job.sink, progress)
    spark.streams.addListener(listener)
    try:
        job.writer.send([events.Followed(u, u) for u in (ANN, BOB)] + [events.Followed(BOB, ANN)])
        sent = time.time()
        last = job.writer.send([post(401, ANN)])
        job.wait_for(last)
        deadline = time.monotonic() + 30
        lines: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not any(r.get("seq") == last for r in lines):
            time.sleep(0.2)
            text = progress.read_text() if progress.exists() else ""
            lines = [json.loads(line) for line in text.splitlines()]
    finally:
        spark.streams.removeListener(listener)
    final = next(r for r in lines if r.get("seq") == last)
    assert final["rows"] >= 1 and final["deliveries"] == 2  # 401 to ANN and BOB
    assert final["phases"]["addBatch"] > 0 and final["duration"] >= final["phases"]["addBatch"]
    assert 0 < final["lag"] < time.time() - sent + 1
