"""The rebuild command's contract with scripts when it cannot even start."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from fanout.store.generations import GenerationState
from spark.rebuild.command import left_behind
from tests.support.stack import BIN, ROOT


@pytest.mark.parametrize("mode", [[], ["--dry-run"]], ids=["rebuild", "dry-run"])
def test_a_json_rebuild_without_redis_prints_the_failure_as_one_json_document(
    mode: list[str],
) -> None:
    env = {**os.environ, "REDIS_URL": "redis://127.0.0.1:1/0"}  # nothing listens on port 1
    proc = subprocess.run(
        [str(BIN / "python"), "manage.py", "rebuild_timelines", "--json", *mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(proc.stdout)  # the whole of standard output, nothing else
    assert proc.returncode == 1
    assert report["ok"] is False and report["live_untouched"] is True
    assert "connecting to 127.0.0.1:1" in report["error"]
    assert "Traceback" not in proc.stderr  # an unreachable Redis is reported, not dumped


@pytest.mark.django_db
def test_an_admin_rebuild_refused_while_another_runs_says_why_and_leaves_that_one_alone(
    starling, redis_url: str, settings, tmp_path, monkeypatch
) -> None:
    from fanout.store.timelines import store_for
    from feed.models import TimelineRebuild
    from feed.tasks import rebuild_timelines

    monkeypatch.setenv("REDIS_URL", redis_url)  # the command's, a process of its own
    settings.VAR_DIR = tmp_path
    store = store_for(starling)
    assert store.request_rebuild({"id": "running"}, ttl=60)
    store.publish_rebuild_status(state="running", request="running", stage="reading")

    run = TimelineRebuild.objects.create(dry_run=True)
    assert rebuild_timelines(run.pk) == "failed"
    run.refresh_from_db()
    assert "another rebuild is running" in run.error
    assert store.rebuild_status()["state"] == "running"  # the other one's, untouched
    assert store.rebuild_request() == {"id": "running"}
    store.end_rebuild_request("running")


def test_a_stopped_rebuild_says_whether_it_left_a_generation_live_or_handed_over(
    starling,
) -> None:
    from fanout.store.timelines import store_for

    store = store_for(starling)
    live = store.ensure_active_generation()
    before = store.newest_generation()
    assert left_behind(store, None).untouched is True  # stopped before it looked
    assert left_behind(store, before).untouched is True

    built = store.new_generation(state=GenerationState.BUILDING)
    assert left_behind(store, before).untouched is True  # deleted on the way out, never live

    assert store.request_handover(built)
    handed = left_behind(store, before)
    assert (handed.untouched, handed.generation) == (False, built)
    assert f"generation {built} was handed over" in handed.said

    store.switch(built, live)
    switched = left_behind(store, before)
    assert (switched.untouched, switched.generation) == (False, built)
    assert f"generation {built} is live" in switched.said
    assert left_behind(store, store.newest_generation()).untouched is True  # a later command


def test_a_stopped_rebuild_that_cannot_reach_redis_does_not_claim_anything(starling) -> None:
    from dataclasses import replace

    from fanout.store.timelines import store_for

    unreachable = store_for(replace(starling, redis_url="redis://127.0.0.1:1/0"))
    live = left_behind(unreachable, 3)
    assert live.untouched is None and "unknown" in live.said


def test_the_admin_row_of_a_rebuild_stopped_after_its_hand_over_names_the_live_generation(
    tmp_path,
) -> None:
    from feed.tasks import failure_text

    log = tmp_path / "run-1.log"
    stopped = {"ok": False, "error": "interrupted (SIGTERM)", "live_untouched": True}
    assert failure_text(stopped, 130, log) == "interrupted (SIGTERM)"
    live = "generation 7 is live: the rebuild had switched to it"
    after = {**stopped, "live_untouched": False, "generation": 7, "live": live}
    assert failure_text(after, 130, log) == f"interrupted (SIGTERM); {live}"
    assert failure_text({}, 1, log) == f"exit status 1; see {log}"  # no document at all
