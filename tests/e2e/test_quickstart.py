"""The README's quickstart as a user runs it: ``make run`` (``manage.py
runstack``: the embedded broker, a Redis of its own, the migrations, web,
Celery worker and beat, the fanout job) on a fresh state directory, then the
README's curl session, whose output must be what the README says it prints;
a random workload through the API whose timelines must equal the join; an
attacker's probe through the API (with the per-address login limit on); and
a stop and start that keeps every timeline without republishing."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from fanout.config import DEFAULT_TIMELINE_SIZE
from feed.devstack import embedded
from tests.support.oracle import Workload, check_against_oracle
from tests.support.stack import BIN, ROOT, Stack

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


@dataclass
class MakeRun:
    """``make run`` on a state directory of its own, started and stopped as a user does."""

    env: dict[str, str]
    var: Path
    log_path: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self) -> None:
        # What `make run` runs once the virtual environment exists: the key, then the stack.
        subprocess.run(
            [str(BIN / "python"), "-m", "feed.devstack.secret"], cwd=ROOT, env=self.env, check=True
        )
        self.runs += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n=== run {self.runs}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [str(BIN / "python"), "manage.py", "runstack"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 300
        while self.this_run().count("Starling is up.") < 1:
            assert self.proc.poll() is None, self.log()[-4000:]
            assert time.monotonic() < deadline, self.log()[-4000:]
            time.sleep(1)

    def this_run(self) -> str:
        return self.log().rsplit(f"=== run {self.runs}\n", 1)[-1]

    def stop(self) -> None:
        run, self.proc = self.proc, None
        if run is None:
            return
        run.send_signal(signal.SIGINT)  # Ctrl-C: honcho stops every process
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)  # anything honcho left behind

    def as_stack(self) -> Stack:
        """This make run as the oracle's helpers see a stack: its API, its
        SQLite database and the Redis it started (its address as announced)."""
        announced = re.search(r"Redis\s+(redis://\S+)", self.this_run())
        assert announced, self.this_run()[-2000:]
        return Stack(
            base=f"http://127.0.0.1:{self.port}",
            env={**self.env, "REDIS_URL": announced.group(1)},
            database_url=f"sqlite:///{self.var / 'starling.sqlite3'}",
            logs=self.var,
            redis_url=announced.group(1),
            timeline_size=DEFAULT_TIMELINE_SIZE,
        )

    def manage(self, *command: str) -> None:
        subprocess.run(
            [str(BIN / "python"), "manage.py", *command], cwd=ROOT, env=self.env, check=True
        )


@pytest.fixture(scope="module")
def make_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MakeRun]:
    root = tmp_path_factory.mktemp("make-run")
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    port = embedded.free_port()
    env.update(
        PORT=str(port),
        STARLING_VAR_DIR=str(root / "var"),  # fresh: a new SQLite database
        # Two cores shared with the rest of the suite: the timeline read of the
        # session may wait longer for its min_seq than the 2 s default.
        STARLING_READ_YOUR_WRITES_WAIT="20",
        # make run leaves the per-address limits off (every local client is
        # 127.0.0.1); the probe turns the login limit on, as a site would.
        STARLING_RATE_LOGIN_IP="30/min",
    )
    makefile = (ROOT / "Makefile").read_text()
    assert "$(BIN)/python -m feed.devstack.secret\n\t$(BIN)/python manage.py runstack" in makefile
    run = MakeRun(env, root / "var", root / "run.log", port)
    try:
        run.start()
        yield run
    finally:
        run.stop()


def test_make_run_then_the_readme_curl_session_prints_what_the_readme_says(
    make_run: MakeRun,
) -> None:
    script, printed = readme_session()
    assert "http://127.0.0.1:8000/api/v1" in script
    assert f"{make_run.base}/" in make_run.log()  # where to point a client
    # It signs with a key of its own, made once for its state directory.
    key = make_run.var / "secret_key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_text().strip()) >= 50
    done = subprocess.run(
        [
            "bash",
            "-euo",
            "pipefail",
            "-c",
            script.replace("127.0.0.1:8000", f"127.0.0.1:{make_run.port}"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed, f"README says:\n{printed}\nthe session printed:\n{done.stdout}"


def test_a_random_workload_through_make_run_equals_the_join(make_run: MakeRun) -> None:
    stack = make_run.as_stack()
    work = Workload(stack, random.Random(43), prefix=f"o{random.randrange(10**6)}")
    work.register(12)
    work.run(150)
    stats = check_against_oracle(stack, sorted(work.users))
    assert stats["timelines"] == 12 and stats["entries"] > 0, stats


class Client:
    """The probe's HTTP calls against make run's API."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.http = requests.Session()

    def call(
        self, method: str, path: str, token: str = "", body: dict | None = None, **headers: str
    ) -> requests.Response:
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self.http.request(method, self.base + path, json=body, headers=headers, timeout=30)

    def ok(self, method: str, path: str, token: str = "", body: dict | None = None) -> dict:
        response = self.call(method, path, token, body)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else {}

    def timeline(self, token: str, min_seq: int) -> list[int]:
        page = self.ok("GET", f"/timeline?count=200&min_seq={min_seq}", token)
        return [t["id"] for t in page["tweets"]]

    def from_redis(self, token: str, min_seq: int, timeout: float = 180) -> list[int]:
        """The timeline once Redis serves it (not the database's fallback)."""
        deadline = time.monotonic() + timeout
        while True:
            response = self.call("GET", f"/timeline?count=200&min_seq={min_seq}", token)
            assert response.status_code == 200, response.text
            if response.headers.get("X-Starling-Source") == "redis":
                return [t["id"] for t in response.json()["tweets"]]
            assert time.monotonic() < deadline, response.headers
            time.sleep(1)


PASSWORD = "probe-password-1234"


def test_an_attacker_s_probe_of_make_run(make_run: MakeRun) -> None:
    api = Client(make_run.base)
    tag = f"p{random.randrange(10**6)}"
    names = {n: f"{tag}{n}" for n in ("ann", "bob", "eve", "mod")}
    tokens = {
        n: api.ok("POST", "/auth/register", body={"username": u, "password": PASSWORD})["token"]
        for n, u in names.items()
        if n != "mod"
    }

    # Malformed numbers are a 400 naming the parameter, on both read paths.
    for path in ("/timeline?count=%C2%B2", f"/users/{names['ann']}/tweets?max_id=%D9%A3"):
        bad = api.call("GET", path, tokens["ann"])
        assert bad.status_code == 400 and bad.json()["error"]["message"], (path, bad.text)

    # A token issued before a password change is refused on writes and reads.
    stolen = tokens["eve"]
    time.sleep(1.05)  # tokens are timestamped to the second
    api.ok(
        "POST",
        "/auth/password",
        stolen,
        {"old_password": PASSWORD, "new_password": PASSWORD + "-new"},
    )
    assert api.call("POST", "/tweets", stolen, {"text": "still me?"}).status_code == 401
    assert api.call("GET", "/timeline", stolen).status_code == 401

    # A suspended author's tweets leave every timeline exactly, lookups 404,
    # and both come back exactly on reinstatement.
    api.ok("POST", f"/users/{names['bob']}/follow", tokens["ann"])
    bobs = [api.ok("POST", "/tweets", tokens["bob"], {"text": f"bob {i}"})["id"] for i in range(3)]
    last = api.ok("POST", "/tweets", tokens["ann"], {"text": "ann"})
    before = api.timeline(tokens["ann"], last["seq"])
    assert before[:4] == [last["id"], *reversed(bobs)]
    secret = make_run.var / "mod.password"
    secret.write_text(PASSWORD)
    make_run.manage("createmoderator", names["mod"], "--password-file", str(secret))
    mod = api.ok("POST", "/auth/token", body={"username": names["mod"], "password": PASSWORD})
    assert (
        api.call("POST", f"/users/{names['bob']}/suspension", tokens["ann"], {"reason": "x"})
    ).status_code == 403  # not a moderator
    seq = api.ok("POST", f"/users/{names['bob']}/suspension", mod["token"], {"reason": "spam"})
    assert api.timeline(tokens["ann"], seq["seq"]) == [i for i in before if i not in bobs]
    assert api.call("GET", f"/users/{names['bob']}").status_code == 404
    assert api.call("GET", f"/tweets/{bobs[0]}").status_code == 404
    seq = api.ok("DELETE", f"/users/{names['bob']}/suspension", mod["token"])
    assert api.timeline(tokens["ann"], seq["seq"]) == before


def test_stopping_and_starting_make_run_keeps_every_timeline(make_run: MakeRun) -> None:
    api = Client(make_run.base)
    tag = f"r{random.randrange(10**6)}"
    tokens = {
        n: api.ok("POST", "/auth/register", body={"username": tag + n, "password": PASSWORD})[
            "token"
        ]
        for n in ("ann", "bob")
    }
    api.ok("POST", f"/users/{tag}bob/follow", tokens["ann"])
    last = [api.ok("POST", "/tweets", tokens[n], {"text": n}) for n in ("bob", "ann", "bob")][-1]
    before = {n: api.from_redis(t, last["seq"]) for n, t in tokens.items()}
    assert len(before["ann"]) == 3 and len(before["bob"]) == 2

    make_run.stop()
    make_run.start()
    assert "republish" not in make_run.this_run().lower()  # the broker kept its log
    # Its Redis starts empty: the job rebuilds every timeline from the kept log.
    after = {n: api.from_redis(t, last["seq"]) for n, t in tokens.items()}
    assert after == before


def test_a_spoofed_forwarded_for_is_limited_like_any_client(make_run: MakeRun) -> None:
    """Last in the module: it spends the address's login budget for a minute."""
    api = Client(make_run.base)
    tag = f"s{random.randrange(10**6)}"
    names = {"ann": f"{tag}ann"}
    # A spoofed X-Forwarded-For is the client's own header, not its address:
    # the per-address login limit (30/min) counts every guess from 127.0.0.1.
    statuses = [
        api.call(
            "POST",
            "/auth/token",
            body={"username": f"{tag}nobody{i}", "password": "guess-guess-guess"},
            **{"X-Forwarded-For": f"203.0.113.{i}"},
        ).status_code
        for i in range(40)
    ]
    assert 429 in statuses and statuses.index(429) <= 30, statuses
    limited = api.call("POST", "/auth/token", body={"username": names["ann"], "password": "x"})
    assert limited.status_code == 429 and "Retry-After" in limited.headers
    assert "error" in limited.json()
