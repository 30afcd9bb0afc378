"""The broker compacts the changelogs while the fanout job reads them: the
job's timelines stay equal to the join, a replay of the compacted log from
offset 0 builds the same timelines, as does the batch rebuild, and a
job stopped longer than the broker keeps tombstones refuses to resume."""

from __future__ import annotations

import io
import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from fanout.config import StarlingConfig
from fanout.model import events
from fanout.store.timelines import TimelineStore
from spark.rebuild.report import Progress
from spark.rebuild.stages import Rebuild
from spark.source.kafka_io import end_offsets
from spark.stream.supervisor import Supervisor, Target
from tests.conftest import make_config
from tests.support.join_sim import World, random_workload
from tests.support.spark_helpers import ChangelogWriter, Job

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

USERS = 8

#: Topic settings under which the broker compacts within a second or two
#: (with the test broker's quick cleaner, tests/conftest.py): a segment rolls
#: on the first append 100 ms after it was opened, any dirty share is worth
#: cleaning, and tombstones go 1 s after a cleaning keeps them.
QUICK_COMPACTION = {
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
    "min.compaction.lag.ms": "0",
    "file.delete.delay.ms": "0",
}


def compact_quickly(bootstrap: str, topics: tuple[str, ...]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in QUICK_COMPACTION.items()
            ],
        )
        for topic in topics
    ]
    for future in admin.incremental_alter_configs(resources).values():
        future.result(30)


def records_from_zero(bootstrap: str, topics: tuple[str, ...]) -> int:
    """How many records a reader starting at offset 0 gets, up to today's end."""
    ends = end_offsets(bootstrap, topics)
    wanted = {(t, int(p)): end for t, parts in ends.items() for p, end in parts.items() if end}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(t, p, 0) for t, p in wanted])
    count, done = 0, set()
    deadline = time.monotonic() + 30
    try:
        while len(done) < len(wanted):
            assert time.monotonic() < deadline, "the topics were not read to their end in 30 s"
            for msg in consumer.consume(1000, timeout=0.2):
                tp = (msg.topic(), msg.partition())
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and msg.offset() >= wanted[tp]:
                        done.add(tp)
                    continue
                if msg.offset() < wanted[tp]:
                    count += 1
    finally:
        consumer.close()
    return count


def exact(job: Job, world: World) -> None:
    joined = world.joined()
    for user in sorted(world.users):
        assert job.timeline(user) == joined[user][: job.config.timeline_size], f"user {user}"


@pytest.fixture
def job(
    spark: Any, kafka_bootstrap: str, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> Iterator[Job]:
    config: StarlingConfig = make_config(kafka_bootstrap, redis_url, partitions=2)
    writer = ChangelogWriter(config)
    compact_quickly(kafka_bootstrap, (config.topics.tweets, config.topics.follows))
    store = TimelineStore(redis_client, cap=config.timeline_size)
    running = Job(config, store, store.ensure_active_generation(), writer, tmp_path / "cp")
    running.start(spark)
    yield running
    running.stop()


def test_compaction_under_the_running_job_and_a_replay_of_the_compacted_log(
    spark: Any, job: Job, tmp_path: Path
) -> None:
    rnd = random.Random(7)
    # Few users, many steps: the same follows made and unmade, tweets posted
    # and deleted, so that compaction has superseded records and tombstones.
    world, envs = random_workload(rnd, USERS, 600)
    topics = (job.config.topics.tweets, job.config.topics.follows)
    bootstrap = job.config.kafka_bootstrap_servers
    for start in range(0, len(envs), 20):
        job.writer.send([e.event for e in envs[start : start + 20]])
        time.sleep(0.15)  # past segment.ms: the next append rolls the segment
    written = sum(sum(parts.values()) for parts in end_offsets(bootstrap, topics).values())
    job.wait_for(job.writer.last_seq)
    exact(job, world)

    deadline = time.monotonic() + 60
    while (remaining := records_from_zero(bootstrap, topics)) > written * 3 // 4:
        assert time.monotonic() < deadline, f"not compacted: {remaining} of {written} records left"
        job.writer.send([events.Followed(1, 1)])  # an append rolls the active segment
        time.sleep(0.5)
    print(f"\ncompacted: {remaining} of {written} records left, read from offset 0")

    # More of the same keys after the compaction; the job goes on, exact.
    more = [world.follow(1, 2) if (1, 2) not in world.follows else world.unfollow(1, 2)]
    more += world.post(min(world.users - world.suspended), 5)
    more.append(world.delete(sorted(world.live)[0]))
    last = job.writer.send([e.event for e in more])
    job.wait_for(last)
    exact(job, world)

    # A replay from offset 0 of the compacted log into a new generation (the
    # job's query stopped first: one query of that name per session).
    job.stop()
    store = job.store
    generation = store.new_generation(reason="replay")
    replay = Job(job.config, store, generation, job.writer, tmp_path / "replay")
    replay.start(spark)
    try:
        replay.wait_for(last)
        exact(replay, world)
        replay.wait_committed()  # else a stop may leave a checkpoint with no batch to resume
    finally:
        replay.stop()

    # The batch rebuild reads the same compacted log (offset gaps, tombstones
    # gone): as a dry run it compares what it computes with the live
    # timelines, which equal the join.
    rebuild = Rebuild(
        spark, job.config, store, Progress(store, out=io.StringIO()), tmp_path / "rebuild"
    )
    summary = rebuild.run(dry_run=True, wait=0)
    assert summary.timelines >= len(world.users), summary
    assert (summary.differing, summary.live_missing) == (0, 0), summary

    # Stopped longer than the broker keeps tombstones (1 s on these topics),
    # the job refuses to resume its checkpoint: deletes it never read may be
    # gone from the log. (It resumes when stopped for less: test_supervisor.)
    time.sleep(1.5)
    supervisor = Supervisor(store, job.config, tmp_path, lambda target: None, threading.Event())
    refusal = supervisor.check_resumable(Target(generation, tmp_path / "replay"))
    assert refusal is not None and "tombstones (1 s)" in refusal, refusal
