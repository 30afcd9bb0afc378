"""Rebuilds the command asks the fanout job for (spark.rebuild_service), run on
the job's session: a real broker, Redis and Spark (the test session's, as
the job's would be)."""

from __future__ import annotations

import argparse
import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fanout import events, keys
from fanout.config import StarlingConfig
from fanout.timelines import TimelineStore, store_for
from spark import rebuild_command
from spark.rebuild_service import FAILED, RebuildService
from tests.conftest import make_config
from tests.spark_helpers import ChangelogWriter

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
        "TIMELINE_SIZE": "3",
        "TIMELINE_SLACK": "1",
        "FANOUT_PULL_THRESHOLD": "3",
    }.items():
        monkeypatch.setenv(name, value)
    return config


@pytest.fixture
def job(spark, config: StarlingConfig) -> Iterator[RebuildService]:
    """The fanout job's rebuild service on the test session (no query: it
    does not need one), which starts with nothing cached."""
    spark.catalog.clearCache()  # what earlier tests in this session left
    service = RebuildService(spark, config, store_for(config), threading.Event()).start()
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
    assert not any(store.generation_exists(g) for g in range(before + 1, after + 1))
    assert not list(store.redis.scan_iter(match="tl:*", count=1000))
    assert nothing_cached(spark)

    # A rebuild that fails (its state directory is a file) leaves the job taking requests.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert store.request_rebuild({**request, "id": "r3", "state_dir": str(blocker)}, ttl=30)
    wait_for(lambda: store.rebuild_status().get("state") == FAILED, seconds=60)
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
