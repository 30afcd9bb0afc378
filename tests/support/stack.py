"""The whole stack as real processes: web (granian), Celery worker and beat,
the Spark fanout job; on the session's broker and Redis, and on a database
the tests read directly for the oracle.

``stack`` (session-wide) uses the suite's database (PostgreSQL unless
``STARLING_TEST_DATABASE=sqlite``); ``sqlite_stack`` (per module) runs on a
SQLite file, the embedded default ``make run`` uses.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import redis
import requests

from fanout.config import StarlingConfig
from fanout.store.timelines import TimelineStore, store_for
from feed.devstack import embedded
from tests.support import postgres

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


READ_YOUR_WRITES_WAIT = 4.0


@dataclass
class Stack:
    base: str
    env: dict[str, str]
    database_url: str
    logs: Path
    redis_url: str
    timeline_size: int
    #: A ``spark-submit`` command line up to its application file (the recipe
    #: of docs/deploy.md): the fanout job is started through it instead of
    #: ``python -m spark.stream.job``.
    submit: tuple[str, ...] = ()
    #: Where ``submit`` runs: the relative interpreter path it gives Spark is
    #: resolved there on the driver.
    submit_dir: Path = ROOT
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, *command: str, cwd: Path = ROOT) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(
            command, cwd=cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        self.procs[name] = proc
        return proc

    def start_web(self, name: str, port: int) -> subprocess.Popen[bytes]:
        """A web process (granian, one worker) on ``port``."""
        return self.start(
            name,
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

    def start_fanout(self, *options: str) -> subprocess.Popen[bytes]:
        job = (
            (*self.submit, "job")
            if self.submit
            else (str(BIN / "python"), "-m", "spark.stream.job")
        )
        return self.start(
            "fanout",
            *job,
            "--checkpoint",
            str(self.logs / "checkpoint"),
            "--trigger",
            "200 milliseconds",
            # Every micro-batch through the shuffle by owner (the backlog path),
            # however small: the oracle tests cover the path with more parts.
            "--route-from",
            "0",
            *options,
            cwd=self.submit_dir if self.submit else ROOT,
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
        """The stack's timeline store (on its Redis, or its Redis Cluster)."""
        return store_for(StarlingConfig.from_env(self.env))

    @property
    def on_postgres(self) -> bool:
        return self.database_url.startswith("postgres")

    def sql(self, query: str, *params: object) -> list[tuple]:
        """Run a query on the stack's database (``?`` placeholders)."""
        if self.on_postgres:
            with psycopg.connect(self.database_url) as pg:
                sql = query.replace("%", "%%").replace("?", "%s")
                cursor = pg.execute(sql, params)  # type: ignore[arg-type]
                return cursor.fetchall() if cursor.description else []
        with closing(sqlite3.connect(self.database_url.removeprefix("sqlite:///"))) as conn:
            rows = conn.execute(query, params).fetchall()
            conn.commit()
            return rows

    def manage(self, *command: str) -> str:
        """Run a management command against the stack; its standard output."""
        return subprocess.run(
            [str(BIN / "python"), "manage.py", *command],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def wait_for_seq(self, seq: int, timeout: float = 240) -> None:
        """Until every write up to ``seq`` is applied (the contiguous watermark:
        the relay and the job caught up)."""
        deadline = time.monotonic() + timeout
        store = self.store
        while time.monotonic() < deadline:
            generation = store.active_generation()
            if generation and store.contiguous_watermark(generation) >= seq:
                return
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"{name} exited; see {self.logs / name}.log"
            time.sleep(0.5)
        raise AssertionError(
            f"fanout watermark did not reach seq {seq} in {timeout}s\n{self.diagnosis()}"
        )

    def diagnosis(self, lines: int = 40) -> str:
        """Where the pipeline stands, and the end of the job's and the worker's
        logs: what a failed wait prints (a CI run keeps nothing else)."""
        store = self.store
        active, handover = store.active_generation(), store.pending_handover()
        out = [f"active generation {active}, handover {handover}"]
        for generation in {g for g in (active, handover) if g is not None}:
            wm = store.watermark(generation)
            out.append(
                f"generation {generation}: "
                + (
                    f"seq {wm.seq}, contiguous {wm.contiguous}, batch {wm.batch_id}"
                    if wm
                    else "no watermark"
                )
            )
        pending = self.sql(
            "SELECT COUNT(*), MIN(id) FROM feed_outboxevent WHERE published_at IS NULL"
        )
        out.append(f"outbox: {pending[0][0]} unpublished (oldest seq {pending[0][1]})")
        for name in ("fanout", "worker"):
            path = self.logs / f"{name}.log"
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            tail = [line for line in text if not line.startswith("\tat ")][-lines:]  # no JVM frames
            out += [f"--- {name}.log (last {lines} lines)", *tail]
        return "\n".join(out)

    def settle(self, timeout: float = 240) -> None:
        """Until the job has caught up: every write in the outbox applied, and no
        timeline waiting for a refill (refills are writes too: repeat until quiet).

        Quiet means so for :data:`QUIET` seconds on end: a refill run takes its
        users off the queue before it writes their resets to the outbox, so for
        the length of a run the queue is empty and the outbox unchanged while a
        refill is still coming."""
        deadline = time.monotonic() + timeout
        store = self.store
        quiet_since: float | None = None
        last = -1
        while True:
            high = self.sql("SELECT COALESCE(MAX(id), 0) FROM feed_outboxevent")[0][0]
            self.wait_for_seq(high, max(1.0, deadline - time.monotonic()))
            generation = store.active_generation()
            waiting = store.pending_refills() + (
                store.pending_resets(generation) if generation else 0
            )
            again = self.sql("SELECT COALESCE(MAX(id), 0) FROM feed_outboxevent")[0][0]
            if waiting == 0 and again == high == last:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= QUIET:
                    return
            else:
                quiet_since = None
            last = again
            assert time.monotonic() < deadline, f"not settled in {timeout}s ({waiting} waiting)"
            time.sleep(0.5)


#: How long the stack must stay quiet to be settled: longer than a refill run
#: (the stack's worker runs one every second, over a few users at most).
QUIET = 3.0


#: Followers from which the stack's authors are pulled at read time.
PULL_THRESHOLD = 12


@contextmanager
def running_stack(
    kafka_bootstrap: str,
    redis_url: str,
    logs: Path,
    database_url: str,
    redis_db: int,
    *,
    submit: Sequence[str] = (),
    submit_dir: Path = ROOT,
    extra_env: Mapping[str, str] | None = None,
    redis_cluster: Sequence[str] = (),
) -> Iterator[Stack]:
    """Start the stack's processes on ``database_url``; stop them afterwards.
    With ``submit`` the fanout job is started by that ``spark-submit`` command
    in ``submit_dir`` (:attr:`Stack.submit`); ``extra_env`` goes to every process.
    With ``redis_cluster`` (flushed nodes' URLs) the timelines live in that Redis
    Cluster; the Redis database stays Celery's broker."""
    port = embedded.free_port()
    stack_redis = redis_url.rsplit("/", 1)[0] + f"/{redis_db}"
    redis.Redis.from_url(stack_redis).flushdb()
    timeline_size = 20  # small, so popular follows push timelines past the cap
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.support.settings",
        "DATABASE_URL": database_url,
        "REDIS_URL": stack_redis,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "STARLING_TOPIC_PREFIX": f"e2e{uuid.uuid4().hex[:8]}.",
        "STARLING_PARTITIONS": "2",
        "STARLING_TIMELINE_SIZE": str(timeline_size),
        "STARLING_TIMELINE_SLACK": "4",
        # Low, so the most followed authors are pulled and some cross it both ways.
        "STARLING_PULL_THRESHOLD": str(PULL_THRESHOLD),
        # Every micro-batch's timelines written after the shuffle by owner (the
        # backlog path); the in-process job tests run the default, small batches' path.
        "STARLING_VAR_DIR": str(logs),
        "DATABASE_LOCK_TIMEOUT": "5",
        "PYTHONUNBUFFERED": "1",
        # Two cores shared with pytest and the other tests' processes: a
        # min_seq read may wait longer here than the 2 s production default.
        "STARLING_READ_YOUR_WRITES_WAIT": str(READ_YOUR_WRITES_WAIT),
        "REDIS_CLUSTER_URLS": ",".join(redis_cluster),
        **(extra_env or {}),
    }
    s = Stack(
        f"http://127.0.0.1:{port}",
        env,
        database_url,
        logs,
        stack_redis,
        timeline_size,
        submit=tuple(submit),
        submit_dir=submit_dir,
    )
    for command in (["migrate", "--noinput"], ["ensure_topics"]):
        subprocess.run(
            [str(BIN / "python"), "manage.py", *command],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
    s.start_web("web", port)
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


def stack_database(postgres_server: postgres.Postgres | None, logs: Path, name: str) -> str:
    """A new database for a stack: on the session's PostgreSQL server, or a
    SQLite file in ``logs`` when the suite runs on SQLite."""
    if postgres_server is not None:
        return postgres_server.create_database(name)
    return f"sqlite:///{logs / (name + '.sqlite3')}"


@pytest.fixture(scope="session")
def stack(
    kafka_bootstrap: str,
    redis_url: str,
    postgres_server: postgres.Postgres | None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """The stack on the suite's database (Redis database 1: the integration
    tests flush database 0)."""
    logs = tmp_path_factory.mktemp("e2e-stack")
    url = stack_database(postgres_server, logs, "e2e")
    with running_stack(kafka_bootstrap, redis_url, logs, url, redis_db=1) as s:
        yield s


@pytest.fixture(scope="module")
def sqlite_stack(
    kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A stack on a SQLite file, as ``make run`` has it (Redis database 2)."""
    logs = tmp_path_factory.mktemp("e2e-sqlite-stack")
    url = f"sqlite:///{logs / 'e2e.sqlite3'}"
    with running_stack(kafka_bootstrap, redis_url, logs, url, redis_db=2) as s:
        yield s
