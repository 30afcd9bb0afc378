"""The rebuild command's contract with scripts when it cannot even start."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.stack import BIN, ROOT


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
    from fanout.timelines import store_for
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
