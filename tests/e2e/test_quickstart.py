"""The README's quickstart as a user runs it: ``make run`` (``manage.py
runstack``: the embedded broker, a Redis of its own, the migrations, web,
Celery worker and beat, the fanout job) on a fresh state directory, then the
README's curl session, whose output must be what the README says it prints."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from feed.devstack import embedded
from tests.support.stack import BIN, ROOT

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

README = ROOT / "README.md"
#: Settings of the test session that must not reach the stack: it makes its own.
NOT_INHERITED = (
    "DJANGO_SETTINGS_MODULE",
    "DJANGO_SECRET_KEY",  # make run generates its own, into its state directory
    "DATABASE_URL",
    "REDIS_URL",
    "KAFKA_BOOTSTRAP_SERVERS",
    "STARLING_TOPIC_PREFIX",
    "STARLING_PARTITIONS",
    "STARLING_TIMELINE_SIZE",
    "PORT",
)


def readme_session() -> tuple[str, str]:
    """The quickstart's curl session and the output it says it prints."""
    text = README.read_text()
    quickstart = text[text.index("A curl session against it") :]
    script = re.search(r"```sh\n(.*?)```", quickstart, re.DOTALL)
    printed = re.search(r"It prints:\n\n```\n(.*?)```", quickstart, re.DOTALL)
    assert script and printed, "README.md: the curl session or its output is missing"
    return script.group(1), printed.group(1)


def test_make_run_then_the_readme_curl_session_prints_what_the_readme_says(
    tmp_path: Path,
) -> None:
    script, printed = readme_session()
    assert "http://127.0.0.1:8000/api/v1" in script
    port = embedded.free_port()
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.update(
        PORT=str(port),
        STARLING_VAR_DIR=str(tmp_path / "var"),  # fresh: a new SQLite database
        # Two cores shared with the rest of the suite: the timeline read of the
        # session may wait longer for its min_seq than the 2 s default.
        STARLING_READ_YOUR_WRITES_WAIT="20",
    )
    log_path = tmp_path / "run.log"
    # What `make run` runs once the virtual environment exists: the key, then the stack.
    makefile = (ROOT / "Makefile").read_text()
    assert "$(BIN)/python -m feed.devstack.secret\n\t$(BIN)/python manage.py runstack" in makefile
    subprocess.run(
        [str(BIN / "python"), "-m", "feed.devstack.secret"], cwd=ROOT, env=env, check=True
    )
    with log_path.open("wb") as log:
        run = subprocess.Popen(
            [str(BIN / "python"), "manage.py", "runstack"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while "Starling is up." not in log_path.read_text(errors="replace"):
            assert run.poll() is None, log_path.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-4000:]
            time.sleep(1)
        assert f"http://127.0.0.1:{port}/api/v1/" in log_path.read_text()  # where to point
        # It signs with a key of its own, made once for its state directory.
        key = tmp_path / "var" / "secret_key"
        assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_text().strip()) >= 50
        done = subprocess.run(
            [
                "bash",
                "-euo",
                "pipefail",
                "-c",
                script.replace("127.0.0.1:8000", f"127.0.0.1:{port}"),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == printed, (
            f"README says:\n{printed}\nthe session printed:\n{done.stdout}"
        )
    finally:
        run.send_signal(signal.SIGINT)  # Ctrl-C: honcho stops every process
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)  # anything honcho left behind
