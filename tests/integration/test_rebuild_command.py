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
