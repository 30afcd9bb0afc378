"""Faults survived by the whole stack (real processes, real services): the
broker stopped, the fanout job killed, Redis restarted empty, the database
locked, poison records on the topics. Each ends with every timeline equal to
the SQL join (the oracle) and figures printed for docs/reliability.md."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import requests
from confluent_kafka import Producer

from fanout.model import events
from spark.stream.supervisor import REPLAYABLE_BATCHES, generation_checkpoint
from tests.conftest import SERVICES
from tests.support.oracle import (
    ORACLE_SQL,
    Workload,
    check_against_oracle,
    outbox_seqs,
    seqs_on_the_topics,
)
from tests.support.stack import BIN, ROOT, Stack

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def test_broker_stopped_writes_succeed_and_every_event_arrives_once(stack: Stack) -> None:
    work = Workload(stack, random.Random(21), prefix="fb")
    work.register(30)
    work.run(100)
    stack.wait_for_seq(work.max_seq)
    first = work.max_seq
    broker = SERVICES["kafka"]
    broker.pause()  # SIGSTOP: connections hang, nothing answers
    try:
        started = time.monotonic()
        work.run(150)  # every write must still succeed (Workload.call asserts 2xx)
        paused_for = time.monotonic() - started
        time.sleep(max(0.0, 8 - paused_for))
    finally:
        broker.resume()
    resumed = time.monotonic()
    stack.wait_for_seq(work.max_seq, timeout=300)
    recovery = time.monotonic() - resumed
    written = outbox_seqs(stack, first)
    on_topics = seqs_on_the_topics(stack)
    assert written and all(on_topics[s] == 1 for s in written), (
        f"lost: {[s for s in written if on_topics[s] == 0][:10]}, "
        f"duplicated: {[s for s in written if on_topics[s] > 1][:10]}"
    )
    stats = check_against_oracle(stack, sorted(work.users))
    print(
        f"\nbroker stopped {max(paused_for, 8):.1f}s: {len(written)} events written, 0 lost, "
        f"0 duplicated; caught up {recovery:.1f}s after SIGCONT; {stats}"
    )


def test_fanout_job_killed_three_times_reaches_the_oracle_without_duplicates(
    stack: Stack,
) -> None:
    work = Workload(stack, random.Random(22), prefix="fk")
    work.register(60)
    rnd = random.Random(5)
    kills = sorted(rnd.sample(range(50, 850), 3))
    restarts: list[float] = []
    # The last restart drains its backlog in micro-batches of at most 25 records. Before
    # that it re-runs the batch a killed job had planned and not committed, with the
    # offsets recorded then (Spark's exactly-once replay): that one batch is exempt.
    progress = stack.logs / "bounded-restart.jsonl"
    replayed: list[int | None] = []

    def chaos(i: int) -> None:
        if i in kills:
            stack.kill("fanout")  # SIGKILL: no chance to finish the micro-batch
        elif i - 40 == kills[-1]:
            replayed.append(planned_not_committed(active_checkpoint(stack)))
            stack.start_fanout("--max-records", "25", "--progress-file", str(progress))
            restarts.append(time.monotonic())
        elif i - 40 in kills:
            stack.start_fanout()
            restarts.append(time.monotonic())

    work.run(900, on_write=chaos)
    stack.wait_for_seq(work.max_seq, timeout=400)
    recovery = time.monotonic() - restarts[-1]
    stats = check_against_oracle(stack, sorted(work.users))  # asserts no duplicate entries
    batches = [json.loads(line) for line in progress.read_text().splitlines()]
    rows = [b["rows"] for b in batches if b["batch"] != replayed[0]]
    assert max(rows) <= 25 and sum(rows) >= 40, batches[:5]  # the 40 writes made meanwhile
    print(f"\nSIGKILL at writes {kills}: {stats}; last restart to caught up {recovery:.1f}s")
    print(f"after the last restart: {len(rows)} micro-batches, at most {max(rows)} records each")


def active_checkpoint(stack: Stack) -> Path:
    """The checkpoint of the active generation (others may lie beside it)."""
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    return generation_checkpoint(store, stack.logs / "checkpoint", generation)


def planned_not_committed(checkpoint: Path) -> int | None:
    """The micro-batch a killed job had planned (offsets log) and not committed."""

    def last(log: str) -> int:
        found = [int(f.name) for f in (checkpoint / log).glob("*") if f.name.isdigit()]
        return max(found, default=-1)

    planned = last("offsets")
    return planned if planned > last("commits") else None


def expected_page(stack: Stack, uid: int, count: int) -> list[int]:
    ids = sorted({t for owner, t in stack.sql(ORACLE_SQL) if owner == uid}, reverse=True)
    return ids[:count]


def test_redis_restarted_empty_reads_fall_back_and_a_rebuild_restores(stack: Stack) -> None:
    work = Workload(stack, random.Random(23), prefix="fr")
    work.register(30)
    work.run(250)
    stack.wait_for_seq(work.max_seq)
    SERVICES["redis"].restart()  # no persistence: it comes back empty
    restarted = time.monotonic()
    ids = dict(stack.sql("SELECT username, id FROM feed_user WHERE username LIKE 'fr%'"))
    http = requests.Session()
    for name in sorted(work.users)[:10]:
        response = http.get(
            f"{stack.base}/api/v1/timeline?count=20",
            headers={"Authorization": f"Bearer {work.users[name]}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        assert response.headers["X-Starling-Source"] == "fallback"
        got = [t["id"] for t in response.json()["tweets"]]
        assert got == expected_page(stack, ids[name], 20)
    time.sleep(10)
    assert stack.procs["fanout"].poll() is None, "the fanout job exited"
    log = (stack.logs / "fanout.log").read_text()
    assert "waiting for a rebuild" in log
    restarts = log.count("fanout query failed")
    proc = subprocess.run(
        [str(BIN / "python"), "manage.py", "rebuild_timelines", "--wait", "240"],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    restored = time.monotonic() - restarted
    stats = check_against_oracle(stack, sorted(work.users))
    work.run(20)  # and the job carries on
    stack.wait_for_seq(work.max_seq)
    check_against_oracle(stack, sorted(work.users))
    print(
        f"\nRedis restarted empty: reads from the fallback; job query restarts while Redis "
        f"was down: {restarts}; restored by one rebuild {restored:.0f}s after the restart; {stats}"
    )


@contextmanager
def lock_database(stack: Stack) -> Iterator[None]:
    """Hold the write lock of the stack's database: SQLite's exclusive
    transaction, or PostgreSQL's exclusive lock on the written tables."""
    if stack.on_postgres:
        with psycopg.connect(stack.database_url) as pg:
            pg.execute("LOCK TABLE feed_tweet, feed_outboxevent IN EXCLUSIVE MODE")
            yield
            pg.rollback()
        return
    lock = sqlite3.connect(stack.database_url.removeprefix("sqlite:///"), timeout=0)
    lock.isolation_level = None
    lock.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        lock.execute("ROLLBACK")
        lock.close()


def test_database_locked_writes_fail_with_503_and_warm_reads_go_on(stack: Stack) -> None:
    assert_locked_database_refuses_writes_and_serves_reads(stack)


def assert_locked_database_refuses_writes_and_serves_reads(stack: Stack) -> None:
    work = Workload(stack, random.Random(24), prefix="fd")
    work.register(5)
    work.run(30)
    stack.wait_for_seq(work.max_seq)
    name = sorted(work.users)[0]
    headers = {"Authorization": f"Bearer {work.users[name]}"}
    before = stack.sql("SELECT COUNT(*) FROM feed_outboxevent")[0][0]
    with lock_database(stack):  # no one else can write until we let go
        started = time.monotonic()
        write = requests.post(
            f"{stack.base}/api/v1/tweets", json={"text": "blocked"}, headers=headers, timeout=60
        )
        failed_after = time.monotonic() - started
        read = requests.get(f"{stack.base}/api/v1/timeline", headers=headers, timeout=10)
    assert write.status_code == 503, write.text
    assert write.json()["error"]["code"] == "database_unavailable"
    assert "Retry-After" in write.headers
    assert read.status_code == 200 and read.headers["X-Starling-Source"] == "redis"
    # Nothing half-written: no tweet, no outbox row.
    assert stack.sql("SELECT COUNT(*) FROM feed_tweet WHERE text = 'blocked'")[0][0] == 0
    assert stack.sql("SELECT COUNT(*) FROM feed_outboxevent")[0][0] == before
    again = requests.post(
        f"{stack.base}/api/v1/tweets", json={"text": "after"}, headers=headers, timeout=30
    )
    assert again.status_code == 201
    lock_timeout = float(stack.env["DATABASE_LOCK_TIMEOUT"])
    assert lock_timeout <= failed_after < lock_timeout + 10
    print(f"\ndatabase locked: write refused with 503 after {failed_after:.1f}s; reads served")


def test_poison_records_are_dead_lettered_and_the_job_carries_on(stack: Stack) -> None:
    store = stack.store
    before = store.dead_letter_count()
    prefix = stack.env["STARLING_TOPIC_PREFIX"]
    producer = Producer({"bootstrap.servers": stack.env["KAFKA_BOOTSTRAP_SERVERS"]})
    poison = [
        (prefix + events.TWEETS, b"1", b"not json", [("seq", b"1"), ("jk", b"1")]),
        (prefix + events.TWEETS, b"2", b'{"v": 99}', [("seq", b"2"), ("jk", b"2")]),
        (prefix + events.FOLLOWS, b"nocolon", b'{"v": 1}', [("seq", b"3"), ("jk", b"3")]),
        (prefix + events.FOLLOWS, b"4:5", b'{"v": 1}', []),  # no headers
        (prefix + events.TWEETS, b"\xff\xfe", b"\x00" * 10, [("seq", b"x"), ("jk", b"y")]),
    ]
    for topic, key, value, headers in poison:
        producer.produce(topic, key=key, value=value, headers=headers, partition=0)
    producer.flush(30)
    work = Workload(stack, random.Random(25), prefix="fp")
    work.register(5)
    work.run(30)
    stack.wait_for_seq(work.max_seq)  # later writes are applied: the job carried on
    deadline = time.monotonic() + 60
    while store.dead_letter_count() < before + len(poison):
        assert time.monotonic() < deadline, f"{store.dead_letter_count() - before} dead letters"
        time.sleep(0.5)
    assert stack.procs["fanout"].poll() is None
    listed = stack.manage("deadletters", "--json", "--limit", "1000")
    assert listed.count('"error"') >= len(poison)
    check_against_oracle(stack, sorted(work.users))
    print(f"\npoison: {len(poison)} records dead-lettered, job running, timelines exact")


def test_a_redis_that_lost_its_last_writes_is_noticed_and_they_are_run_again(
    stack: Stack,
) -> None:
    """What AOF ``everysec`` leaves after a crash: the timelines, bodies and
    watermark of the last batches gone, while Spark's checkpoint has them."""
    work = Workload(stack, random.Random(31), prefix="lw")
    work.register(20)
    work.run(120)
    stack.settle()
    client = stack.store.redis
    fanout_keys = ("tl:*", "tw:*", "starling:wm:*", "starling:gen:*", "starling:resets:*")
    snapshot = {
        key: (client.dump(key), max(0, int(client.pttl(key))))
        for pattern in fanout_keys
        for key in client.scan_iter(match=pattern, count=1000)
    }
    generation = stack.store.active_generation()
    assert generation is not None
    batch_before = stack.store.watermark(generation).batch_id  # type: ignore[union-attr]
    # A few batches to lose: fewer than Spark keeps the state to run again
    # (REPLAYABLE_BATCHES), however fast this machine makes micro-batches.
    while stack.store.watermark(generation).batch_id < batch_before + 3:  # type: ignore[union-attr]
        work.run(10)
        stack.settle()
    lost = stack.store.watermark(generation).batch_id - batch_before  # type: ignore[union-attr]
    assert 3 <= lost <= REPLAYABLE_BATCHES, lost
    log_mark = (stack.logs / "fanout.log").stat().st_size
    for pattern in fanout_keys:  # back to the state before those batches
        for key in list(client.scan_iter(match=pattern, count=1000)):
            client.delete(key)
    for key, (dumped, ttl) in snapshot.items():
        client.restore(key, ttl, dumped, replace=True)
    deadline = time.monotonic() + 120
    while "running them again" not in (stack.logs / "fanout.log").read_text()[log_mark:]:
        assert time.monotonic() < deadline, "the job did not notice Redis lost writes"
        time.sleep(0.5)
    stats = check_against_oracle(stack, sorted(work.users))
    print(f"\nRedis lost the writes after batch {batch_before}: noticed and run again; {stats}")
