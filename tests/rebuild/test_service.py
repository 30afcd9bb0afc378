"""Rebuilds the command asks the fanout job for (spark.rebuild.service), run on
the job's session: a real broker, Redis and Spark (the test session's, as
the job's would be)."""

from __future__ import annotations

import argparse
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fanout.config import StarlingConfig
from fanout.model import events
from fanout.store import keys
from fanout.store.generations import GenerationState
from fanout.store.rebuilds import RebuildState
from fanout.store.timelines import TimelineStore, store_for
from spark.rebuild import command as rebuild_command
from spark.rebuild import request as rebuild_request
from spark.rebuild import service as rebuild_service
from spark.rebuild.finish import RebuildFailed, drop_built
from spark.rebuild.report import Progress
from spark.rebuild.request import ask, run_in_job
from spark.rebuild.service import BUILT_BY_JOB, JOB, RebuildService
from tests.conftest import make_config
from tests.support.spark_helpers import ChangelogWriter

pytestmark = pytest.mark.spark


@pytest.fixture
def config(kafka_bootstrap: str, redis_url: str, redis_client, monkeypatch) -> StarlingConfig:
    """A small network on the changelogs, and the command's environment pointing at it."""
    config = make_config(
        kafka_bootstrap, redis_url, partitions=2, timeline_size=3, timeline_slack=1,
        pull_threshold=3,
    )  # fmt: skip
    network = [events.Followed(u, u) for u in range(1, 7)]
    network += [events.Followed(f, 1) for f in (2, 3, 4, 5)]  # 1 is pulled (> 3 followers)
    network += [events.Followed(2, 3), events.Followed(4, 3), events.Followed(5, 2)]
    tweets = [events.TweetPosted(100 + i, 1 + i % 4, "u", f"t{i}") for i in range(24)]
    ChangelogWriter(config).send(
        network + tweets + [events.TweetDeleted(101, 2), events.Unfollowed(5, 2)]
    )
    for name, value in {
        "REDIS_URL": redis_url,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "STARLING_TOPIC_PREFIX": config.topics.prefix,
        "STARLING_PARTITIONS": "2",
        "STARLING_TIMELINE_SIZE": "3",
        "STARLING_TIMELINE_SLACK": "1",
        "STARLING_PULL_THRESHOLD": "3",
    }.items():
        monkeypatch.setenv(name, value)
    return config


@pytest.fixture
def job(spark, config: StarlingConfig) -> Iterator[RebuildService]:
    """The fanout job's rebuild service on the test session (no query: it
    does not need one), which starts with nothing cached."""
    spark.catalog.clearCache()  # what earlier tests in this session left
    service = RebuildService(spark, config, store_for(config), threading.Event()).start()
    # Announced before the test's command looks (or it would start a Spark of its own).
    wait_for(lambda: service.store.fanout_job() is not None)
    yield service
    service.stop()


def command(tmp_path: Path, **given: object) -> argparse.Namespace:
    options: dict[str, object] = {
        "dry_run": False, "standalone": False, "master": None, "sample": 0, "wait": 0.0,
        "state_dir": tmp_path / "state", "json": False,
    }  # fmt: skip
    return argparse.Namespace(**{**options, **given})


def timelines(store: TimelineStore, generation: int) -> dict[int, list[int] | None]:
    users = list(range(1, 7))
    return {
        u: (t.ids if t else None)
        for u, t in zip(users, store.timelines(generation, users), strict=True)
    }


def nothing_cached(spark) -> bool:  # type: ignore[no-untyped-def]
    return bool(spark._jsparkSession.sharedState().cacheManager().isEmpty())


def wait_for(what, seconds: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_the_command_has_the_running_job_rebuild_with_the_standalone_result(
    spark, config: StarlingConfig, job: RebuildService, tmp_path: Path, capsys
) -> None:
    store = store_for(config)
    assert rebuild_command.execute(command(tmp_path), oracle=None, settled=None) == 0
    out = capsys.readouterr().out
    assert "the job runs it" in out and "reading the changelogs" in out  # its lines, here
    in_job = int(store.redis.get(keys.HANDOVER))
    assert store.rebuild_status()["state"] == "handed-over"  # no query here to switch
    assert store.generation_meta(in_job)["state"] == "ready"
    assert nothing_cached(spark)  # the job's session goes on: the rebuild's rows are gone

    code = rebuild_command.execute(
        command(tmp_path, standalone=True), oracle=None, settled=None, spark=spark
    )
    assert code == 0 and "the job runs it" not in capsys.readouterr().out
    standalone = int(store.redis.get(keys.HANDOVER))
    assert standalone != in_job
    assert timelines(store, in_job) == timelines(store, standalone)
    assert timelines(store, in_job)[2] == [122, 121, 120]  # 3's, its own and the pulled 1's
    assert store.timeline_lengths(in_job, [1, 2, 3, 4, 5, 6]) == store.timeline_lengths(
        standalone, [1, 2, 3, 4, 5, 6]
    )


def test_a_withdrawn_request_leaves_no_generation_and_the_job_takes_the_next(
    spark, config: StarlingConfig, job: RebuildService, tmp_path: Path
) -> None:
    store = store_for(config)
    before = int(store.redis.get(keys.GENERATION_COUNTER) or 0)
    request = {"id": "r1", "dry_run": False, "sample": 0, "state_dir": str(tmp_path)}
    assert store.request_rebuild(request, ttl=30)
    assert not store.request_rebuild({**request, "id": "r2"}, ttl=30)  # one at a time
    wait_for(lambda: store.rebuild_status().get("request") == "r1")
    store.end_rebuild_request("r1")  # the command stopped, at whatever stage it was
    wait_for(lambda: job.built is None and not (job.worker and job.worker.is_alive()))
    after = int(store.redis.get(keys.GENERATION_COUNTER) or 0)
    wait_for(lambda: not any(store.generation_exists(g) for g in range(before + 1, after + 1)))
    assert not list(store.redis.scan_iter(match="tl:*", count=1000))
    assert nothing_cached(spark)

    # A rebuild that fails (its state directory is a file) leaves the job taking requests.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert store.request_rebuild({**request, "id": "r3", "state_dir": str(blocker)}, ttl=30)
    wait_for(
        lambda: (
            store.rebuild_status().get("request") == "r3"
            and store.rebuild_status().get("state") == RebuildState.FAILED
        ),
        seconds=60,
    )
    error = store.rebuild_status()["error"]
    assert "parquet" in error and "not a directory" in error  # the write, and why
    wait_for(lambda: not store.generation_exists(int(store.redis.get(keys.GENERATION_COUNTER))))
    store.end_rebuild_request("r3")
    assert store.fanout_job() is not None
    assert rebuild_command.execute(command(tmp_path, dry_run=True), oracle=None, settled=None) == 0
    assert store.rebuild_status()["state"] == "succeeded"


def test_with_no_job_announced_the_command_runs_the_rebuild_itself(
    spark, config: StarlingConfig, tmp_path: Path
) -> None:
    store = store_for(config)
    out = io.StringIO()
    assert store.fanout_job() is None
    args = command(tmp_path, dry_run=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdout", out)
        assert rebuild_command.execute(args, oracle=None, settled=None, spark=spark) == 0
    assert "asking the fanout job" not in out.getvalue()
    assert store.rebuild_status()["state"] == "succeeded"


def test_a_sample_the_database_disagrees_with_deletes_the_generation_and_its_author_state(
    spark, config: StarlingConfig, job: RebuildService, tmp_path: Path, capsys
) -> None:
    store = store_for(config)

    def wrong(users: list[int], cap: int) -> dict[int, list[int]]:
        return {u: [1] for u in users}

    args = command(tmp_path, sample=6)
    assert rebuild_command.execute(args, oracle=wrong, settled=None) == 1
    assert "differ from the database" in capsys.readouterr().out
    generation = orjson.loads(store.rebuild_status()["summary"])["generation"]
    # The job deletes it once the command's request has ended: the author
    # state is on the job's disk, not necessarily the command's.
    wait_for(lambda: not store.generation_exists(generation))
    assert not (tmp_path / "state" / f"gen-{generation}").exists()
    assert store.redis.get(keys.HANDOVER) is None


def test_one_rebuild_at_a_time_also_against_a_standalone_command(
    spark, config: StarlingConfig, job: RebuildService, tmp_path: Path, capsys
) -> None:
    store = store_for(config)
    request = {"id": "r1", "dry_run": True, "sample": 0, "state_dir": str(tmp_path)}
    assert store.request_rebuild(request, ttl=30)
    wait_for(lambda: store.rebuild_status().get("request") == "r1")
    args = command(tmp_path, standalone=True, dry_run=True)
    prepared: list[str] = []
    code = rebuild_command.execute(
        args, oracle=None, settled=None, spark=spark, prepare=lambda: prepared.append("!") or ""
    )
    assert code == 1 and "another rebuild is running" in capsys.readouterr().out
    assert not prepared  # a refused command does nothing else
    # The refused command left the running rebuild's status alone.
    assert "error" not in store.rebuild_status()
    assert store.rebuild_status()["state"] != RebuildState.FAILED
    wait_for(lambda: store.rebuild_status().get("state") == RebuildState.SUCCEEDED, seconds=60)
    assert store.rebuild_status()["request"] == "r1"
    store.end_rebuild_request("r1")


def test_a_command_whose_job_restarted_gives_up_and_the_new_job_deletes_what_was_left(
    spark, config: StarlingConfig, tmp_path: Path
) -> None:
    store = store_for(config)
    # What a job stopped (kill -9) during a rebuild leaves: the request it had
    # claimed, and a generation half-built, with part of its author state.
    left = store.new_generation(
        state=GenerationState.BUILDING, built_by=BUILT_BY_JOB, instance="an earlier run"
    )
    state = tmp_path / f"gen-{left}" / "state"
    state.mkdir(parents=True)
    store.set_generation_meta(left, state_path=str(state))
    standalone = store.new_generation(state=GenerationState.BUILDING)  # a command's own
    # A deletion that stopped half-way (Redis went away, the job stopped).
    halfway = store.new_generation(state=GenerationState.DROPPING)
    store.write_timelines(halfway, [(7, b"x")])
    renewal = ask(store, dry_run=False, sample=0, state_dir=tmp_path, for_job=True)
    assert store.claim_rebuild_request(renewal.request_id, JOB)

    restarted = RebuildService(spark, config, store_for(config), threading.Event()).start()
    try:
        started = time.monotonic()
        with renewal, pytest.raises(RebuildFailed, match="no longer running the rebuild"):
            progress = Progress(store, io.StringIO())
            run_in_job(store, config, progress, renewal, dry_run=False, wait=0, oracle=None,
                       settled=None)  # fmt: skip
        assert time.monotonic() - started < rebuild_service.ANNOUNCE_TTL
        assert not store.generation_exists(left) and not state.parent.exists()
        wait_for(lambda: not store.generation_exists(halfway))
        assert not list(store.redis.scan_iter(match=keys.timeline_prefix(halfway) + "*"))
        assert store.generation_meta(standalone)["state"] == GenerationState.BUILDING
    finally:
        restarted.stop()
        drop_built(store, standalone)


def test_a_job_started_beside_another_keeps_off_its_rebuild_until_that_job_is_gone(
    spark, config: StarlingConfig, monkeypatch
) -> None:
    store = store_for(config)
    # A rolling restart: the old job still runs, and builds a generation.
    store.announce_fanout_job({"instance": "the old job"}, ttl=5.0)
    theirs = store.new_generation(
        state=GenerationState.BUILDING, built_by=BUILT_BY_JOB, instance="the old job"
    )
    monkeypatch.setattr(rebuild_service, "SWEEP_EVERY", 0.5)
    new = RebuildService(spark, config, store_for(config), threading.Event()).start()
    try:
        wait_for(lambda: new.sweep_due > 0)  # its first sweep has run
        assert store.generation_meta(theirs)["state"] == GenerationState.BUILDING
        # The old job has stopped announcing itself (it died): a later sweep deletes it.
        wait_for(lambda: not store.generation_exists(theirs))
    finally:
        new.stop()


def test_the_request_lives_as_long_as_its_command_and_never_ends_another(
    config: StarlingConfig, monkeypatch
) -> None:
    store = store_for(config)
    monkeypatch.setattr(rebuild_request, "REQUEST_TTL", 1.0)
    monkeypatch.setattr(rebuild_request, "RENEW_EVERY", 0.2)
    with ask(store, dry_run=False, sample=0, state_dir=None, for_job=False) as renewal:
        time.sleep(2.5)  # a sample check, a hand-over's wait: well past the TTL
        assert store.rebuild_request()["id"] == renewal.request_id
        assert not renewal.lost.is_set()
        with pytest.raises(rebuild_request.RebuildBusy):
            ask(store, dry_run=True, sample=0, state_dir=None, for_job=False)
    assert store.rebuild_request() is None

    assert store.request_rebuild({"id": "another"}, ttl=5)
    assert not store.renew_rebuild_request(renewal.request_id, 60)
    store.end_rebuild_request(renewal.request_id)
    assert store.rebuild_request() == {"id": "another"}
    assert 0 < store.redis.pttl(keys.REBUILD_REQUEST) <= 5000
    store.end_rebuild_request("another")


def test_a_generation_is_either_handed_over_or_deleted_never_both(config: StarlingConfig) -> None:
    store = store_for(config)
    dropped = store.new_generation(state=GenerationState.BUILDING)
    assert drop_built(store, dropped)
    assert not store.generation_exists(dropped)
    assert not store.request_handover(dropped)
    assert store.redis.get(keys.HANDOVER) is None

    # Being deleted, not gone yet: the hand-over loses all the same.
    dropping = store.new_generation(state=GenerationState.BUILDING)
    assert store.move_generation(
        dropping, GenerationState.DROPPING, expect=GenerationState.BUILDING
    )
    assert not store.request_handover(dropping)
    assert store.generation_meta(dropping)["state"] == GenerationState.DROPPING
    assert store.redis.get(keys.HANDOVER) is None and store.pending_handover() is None
    store.drop_generation(dropping)

    handed = store.new_generation(state=GenerationState.BUILDING)
    assert store.request_handover(handed)
    assert store.pending_handover() == handed
    assert not drop_built(store, handed)
    assert store.generation_meta(handed)["state"] == GenerationState.READY
    store.drop_generation(handed)
    store.redis.delete(keys.HANDOVER)
