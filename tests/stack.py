"""The whole stack as real processes (the `stack` fixture): web (granian), Celery worker and beat,
the Spark fanout job; on the session's broker and Redis, with a SQLite file
database the tests read directly for the oracle."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import requests

from fanout import embedded
from fanout.timelines import TimelineStore

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


READ_YOUR_WRITES_WAIT = 4.0


@dataclass
class Stack:
    base: str
    env: dict[str, str]
    db_path: Path
    logs: Path
    redis_url: str
    timeline_size: int
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, *command: str) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        self.procs[name] = proc
        return proc

    def start_fanout(self) -> subprocess.Popen[bytes]:
        return self.start(
            "fanout",
            str(BIN / "python"),
            "-m",
            "spark.fanout",
            "--checkpoint",
            str(self.logs / "checkpoint"),
            "--trigger",
            "200 milliseconds",
        )

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    @property
    def store(self) -> TimelineStore:
        return TimelineStore(redis.Redis.from_url(self.redis_url), cap=self.timeline_size, slack=4)

    def sql(self, query: str, *params: object) -> list[tuple]:
        with sqlite3.connect(self.db_path) as conn:
            return conn.execute(query, params).fetchall()

    def wait_for_seq(self, seq: int, timeout: float = 240) -> None:
        """Until the fanout watermark has applied ``seq`` (the relay and the job caught up)."""
        deadline = time.monotonic() + timeout
        store = self.store
        while time.monotonic() < deadline:
            generation = store.active_generation()
            wm = store.watermark(generation) if generation else None
            if wm is not None and wm.seq >= seq:
                return
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"{name} exited; see {self.logs / name}.log"
            time.sleep(0.5)
        raise AssertionError(f"fanout watermark did not reach seq {seq} in {timeout}s")


@pytest.fixture(scope="session")
def stack(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("e2e-stack")
    port = embedded.free_port()
    # Redis database 1: the integration tests flush database 0.
    stack_redis = redis_url.rsplit("/", 1)[0] + "/1"
    redis.Redis.from_url(stack_redis).flushdb()
    db_path = logs / "e2e.sqlite3"
    timeline_size = 20  # small, so popular follows push timelines past the cap
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": f"sqlite:///{db_path}",
        "REDIS_URL": stack_redis,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "STARLING_TOPIC_PREFIX": f"e2e{uuid.uuid4().hex[:8]}.",
        "STARLING_PARTITIONS": "2",
        "TIMELINE_SIZE": str(timeline_size),
        "TIMELINE_SLACK": "4",
        "STARLING_VAR_DIR": str(logs),
        "STARLING_OUTBOX_SWEEP_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
        # Two cores shared with pytest and the other tests' processes: a
        # min_seq read may wait longer here than the 2 s production default.
        "STARLING_READ_YOUR_WRITES_WAIT": str(READ_YOUR_WRITES_WAIT),
    }
    s = Stack(f"http://127.0.0.1:{port}", env, db_path, logs, stack_redis, timeline_size)
    subprocess.run(
        [str(BIN / "python"), "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [str(BIN / "python"), "manage.py", "ensure_topics"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    s.start(
        "web",
        str(BIN / "granian"),
        "--interface",
        "wsgi",
        "--port",
        str(port),
        "--workers",
        "1",
        "--no-ws",
        "feed.wsgi:application",
    )
    s.start(
        "worker",
        str(BIN / "celery"),
        "-A",
        "feed",
        "worker",
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    )
    s.start(
        "beat", str(BIN / "celery"), "-A", "feed", "beat", "--schedule", str(logs / "beat-schedule")
    )
    s.start_fanout()
    try:
        embedded.wait_for_port("127.0.0.1", port, 60, s.procs["web"])
        deadline = time.monotonic() + 60
        while requests.get(f"{s.base}/api/v1/health", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "the stack did not become healthy"
            time.sleep(0.5)
        yield s
    finally:
        s.stop_all()
