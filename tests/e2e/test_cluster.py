"""The whole stack with its timelines in a real Redis Cluster (three primaries,
three replicas): a random workload equals the SQL join, reads through the API
merge pulled authors' lists from other shards, and a rebuild repairs
corrupted timelines and switches every shard."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from tests.conftest import cluster_client
from tests.support import postgres
from tests.support.oracle import (
    ORACLE_SQL,
    Workload,
    check_against_oracle,
    come_back,
    go_idle,
    pulled_authors,
)
from tests.support.rebuilds import corrupt, finish, rebuild, user_id
from tests.support.redis_cluster import (
    Node,
    primaries,
    replica_of,
    stall_replication,
    wait_for_failover,
    wait_until_ok,
)
from tests.support.stack import Stack, running_stack, stack_database

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster_stack(
    kafka_bootstrap: str,
    redis_url: str,
    redis_cluster: list[Node],
    postgres_server: postgres.Postgres | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """The stack with REDIS_CLUSTER_URLS set (Redis database 3 is Celery's broker)."""
    logs = tmp_path_factory.mktemp("e2e-cluster-stack")
    url = stack_database(postgres_server, logs, "e2e_cluster")
    cluster_client(redis_cluster)  # flushed
    nodes = [node.url for node in redis_cluster]
    with running_stack(kafka_bootstrap, redis_url, logs, url, redis_db=3, redis_cluster=nodes) as s:
        yield s


def test_a_workload_on_a_redis_cluster_equals_the_join_and_survives_a_rebuild(
    cluster_stack: Stack,
) -> None:
    stack = cluster_stack
    assert stack.store.shards.count > 1
    work = Workload(stack, random.Random(2027), prefix="c")
    work.register(100)
    work.run(1000)
    stack.wait_for_seq(work.max_seq)
    idle = sorted(work.users)[1::10]
    go_idle(stack, idle)
    work.run(600)
    stats = check_against_oracle(stack, sorted(set(work.users) - set(idle)))
    assert stats["at_the_cap"] > 0 and stats["with_horizon"] > 0
    come_back(stack, {name: work.users[name] for name in idle})

    # Pulled authors' lists live in their own shards; a read merges them in.
    _, pulled = pulled_authors(stack)
    assert pulled
    ids = dict(stack.sql("SELECT username, id FROM feed_user"))
    names = {uid: name for name, uid in ids.items()}
    readers = sorted(
        {f for f, followee in work.follows if ids[followee] in pulled and f in work.users}
    )
    assert readers
    oracle: dict[int, set[int]] = {}
    for owner, tweet_id in stack.sql(ORACLE_SQL):
        oracle.setdefault(owner, set()).add(tweet_id)
    for name in readers[:10]:
        response = requests.get(
            f"{stack.base}/api/v1/timeline?count={stack.timeline_size}",
            headers={"Authorization": f"Bearer {work.users[name]}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        assert response.headers["X-Starling-Source"] == "redis", name
        page = [t["id"] for t in response.json()["tweets"]]
        newest = sorted(oracle.get(ids[name], ()), reverse=True)[: stack.timeline_size]
        assert page == newest, name

    # A rebuild repairs what a bug broke, shard by shard.
    generation = stack.store.active_generation()
    victims = random.Random(5).sample(sorted(work.users), 8)
    bogus = next(iter(work.live))
    for name in victims:
        corrupt(stack, user_id(stack, name), bogus)
    out = finish(rebuild(stack))
    assert "(active)" in out, out
    assert stack.store.active_generation() != generation
    stats = check_against_oracle(stack, sorted(work.users))
    assert stats["timelines"] == len(work.users)
    print(
        f"\ncluster oracle check: {stats}, writes {work.counts}, "
        f"{len(pulled)} authors pulled, {len(readers)} readers of lists, "
        f"{len(names)} users"
    )


def test_a_failover_and_a_resharding_mid_workload_leave_every_timeline_exact(
    cluster_stack: Stack, redis_cluster: list[Node]
) -> None:
    """A primary is killed (its replica takes over, the last writes it had not
    passed on are lost and run again) and slots move between primaries while
    the job writes: afterwards every timeline equals the join."""
    stack = cluster_stack
    work = Workload(stack, random.Random(31), prefix="f")
    work.register(80)
    work.run(300)
    victim = primaries(redis_cluster)[0]
    mover: list[threading.Thread] = []
    failures: list[BaseException] = []

    def move() -> None:
        try:
            source, target = primaries(redis_cluster)[:2]
            reshard(source, target, 1000)
        except BaseException as exc:  # reported by the test below
            failures.append(exc)

    def chaos(i: int) -> None:
        if i == 100:
            victim.kill()  # SIGKILL: whatever it had not replicated is gone
        elif i == 400:
            wait_for_failover(redis_cluster, victim)  # writes went on meanwhile
            victim.start()  # back as a replica of the primary that took over
            wait_until_ok(redis_cluster)
            assert victim not in primaries(redis_cluster)
        elif i == 500:
            mover.append(threading.Thread(target=move))
            mover[0].start()

    work.run(1000, on_write=chaos)
    for thread in mover:
        thread.join(120)
    assert not failures, failures
    stack.wait_for_seq(work.max_seq)
    stats = check_against_oracle(stack, sorted(work.users))
    assert stats["timelines"] == len(work.users)
    log = (stack.logs / "fanout.log").read_text(errors="replace")
    print(
        f"\nafter a failover and a resharding of 1,000 slots: {stats}; "
        f"the job ran batches again {log.count('Redis lost writes')} times"
    )


def test_writes_a_failover_lost_are_noticed_and_run_again(
    cluster_stack: Stack, redis_cluster: list[Node]
) -> None:
    """A replica that falls behind its primary (stopped here, a slow network or
    machine elsewhere) is promoted when the primary dies: the batches the
    primary had applied and not passed on are gone from that shard. The shard's
    copy of the watermark stays behind even as the job goes on, the job runs
    those batches again, and every timeline ends equal to the join."""
    stack = cluster_stack
    work = Workload(stack, random.Random(47), prefix="l")
    work.register(60)
    work.run(200)
    stack.wait_for_seq(work.max_seq)
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    victim = primaries(redis_cluster)[0]
    replica = replica_of(redis_cluster, victim)
    log_path = stack.logs / "fanout.log"
    log_mark = log_path.stat().st_size
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        stall_replication(victim)
        before = store.applied_batch(generation)
        assert before is not None
        while (store.applied_batch(generation) or 0) < before + 3:
            work.run(10)
            stack.wait_for_seq(work.max_seq)
        last = store.applied_batch(generation)
        victim.kill()  # with the batches it never passed on
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    wait_for_failover(redis_cluster, victim, timeout=60)
    work.run(100)  # the job goes on: the loss must not be hidden by new batches
    deadline = time.monotonic() + 180
    while "running them again" not in log_path.read_text(errors="replace")[log_mark:]:
        assert time.monotonic() < deadline, "the job did not notice the lost writes"
        time.sleep(0.5)
    victim.start()
    wait_until_ok(redis_cluster)
    work.run(100)
    stack.wait_for_seq(work.max_seq)
    stats = check_against_oracle(stack, sorted(work.users))
    assert stats["timelines"] == len(work.users)
    print(f"\nafter a failover that lost batches {before + 1}-{last}: run again, {stats}")


def reshard(source: Node, target: Node, slots: int) -> None:
    """Move ``slots`` slots (and their keys) from one primary to another."""
    ids = [n.client().execute_command("CLUSTER", "MYID") for n in (source, target)]
    source_id, target_id = (i.decode() if isinstance(i, bytes) else i for i in ids)
    subprocess.run(
        [
            "redis-cli", "--cluster", "reshard", f"127.0.0.1:{source.port}",
            "--cluster-from", source_id, "--cluster-to", target_id,
            "--cluster-slots", str(slots), "--cluster-yes",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
