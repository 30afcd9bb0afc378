"""Broker loss on a three-node Apache Kafka cluster (every topic on all three,
two in sync for a write): the whole stack runs a random workload while the
leader of a busy partition is SIGKILLed and later brought back, then the
active controller is. Nothing is lost or duplicated: every outbox event is
on the changelogs exactly once, and every timeline equals the oracle."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fanout.config import TopicNames
from feed.devstack.kafka_cluster import KafkaCluster, wait_until
from tests.conftest import healed
from tests.support import postgres
from tests.support.oracle import (
    Workload,
    check_against_oracle,
    outbox_seqs,
    seqs_on_the_topics,
)
from tests.support.stack import Stack, running_stack, stack_database

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster_kafka_stack(
    kafka_cluster: KafkaCluster,
    redis_url: str,
    postgres_server: postgres.Postgres | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """The stack on the three-node cluster (its own database and Redis database)."""
    logs = tmp_path_factory.mktemp("broker-loss")
    url = stack_database(postgres_server, logs, "brokerloss")
    bootstrap = healed(kafka_cluster).bootstrap
    with running_stack(bootstrap, redis_url, logs, url, redis_db=4) as s:
        yield s


def _all_in_sync(cluster: KafkaCluster, topics: TopicNames) -> bool:
    return all(
        len(isr) == len(cluster.nodes)
        for topic in (topics.tweets, topics.follows)
        for isr in cluster.in_sync(topic).values()
    )


def _log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_killed_leader_and_a_killed_controller_lose_and_duplicate_nothing(
    cluster_kafka_stack: Stack, kafka_cluster: KafkaCluster
) -> None:
    stack, cluster = cluster_kafka_stack, kafka_cluster
    topics = TopicNames(stack.env["STARLING_TOPIC_PREFIX"])
    work = Workload(stack, random.Random(40), prefix="bl")
    work.register(16)
    first = max(outbox_seqs(stack, 0), default=0)
    killed: dict[str, int] = {}

    def fault(i: int) -> None:
        if i == 40:
            # The leader of the tweets' busiest partition (the workload's writes
            # spread over both): SIGKILL, mid-workload.
            killed["leader"] = cluster.leader(topics.tweets, 0)
            assert killed["leader"] in cluster.nodes, "no node led the partition"
            cluster.kill(killed["leader"])
            wait_until(
                lambda: cluster.leader(topics.tweets, 0) not in (-1, killed["leader"]),
                30,
                "a new leader",
            )
        elif i == 100:
            cluster.restart(killed["leader"])
        elif i == 130:
            controller = cluster.active_controller()
            assert controller is not None, "no active controller"
            killed["controller"] = controller
            cluster.kill(controller)

    started = time.monotonic()
    work.run(200, on_write=fault)
    assert set(killed) == {"leader", "controller"}, killed
    stats = check_against_oracle(stack, sorted(work.users))
    cluster.restart(killed["controller"])
    wait_until(lambda: _all_in_sync(cluster, topics), 60, "every replica back in sync")

    # The relay's idempotent producer carried on through the leader change:
    # every event the outbox holds is on the changelogs exactly once.
    written = outbox_seqs(stack, first)
    on_topics = seqs_on_the_topics(stack)
    assert sorted(s for s in on_topics if s > first) == written
    assert not [s for s, n in on_topics.items() if n > 1], "duplicated events"
    # And the timelines are still the join after the controller came back.
    work.run(20)
    check_against_oracle(stack, sorted(work.users))

    job, worker = _log(stack.logs / "fanout.log"), _log(stack.logs / "worker.log")
    # The job's query read on through both: it never failed and restarted.
    assert "terminated with error" not in job, job[job.find("terminated with error") - 2000 :]
    print(
        f"broker loss: leader node {killed['leader']} and controller node "
        f"{killed['controller']} killed during {sum(work.counts.values())} writes "
        f"({time.monotonic() - started:.0f} s); {stats}; the job's warnings of a leader "
        f"that does not answer: {job.count('its leader does not answer')}, the relay's "
        f"failed connections: {worker.count('Connection refused')}"
    )
