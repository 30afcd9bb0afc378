"""A throwaway PostgreSQL server for the test session.

``initdb`` + ``pg_ctl`` from the system's PostgreSQL binaries (Debian's
``postgresql`` package; ``make`` installs it when missing) start a cluster in
a temporary directory on a free port, with durability off (the data is
thrown away anyway). ``initdb`` refuses to run as root, so as root the
cluster belongs to the ``postgres`` user (or ``nobody``).

Set ``TEST_DATABASE_URL=postgres://user@host:port/db`` to use a server that
is already running instead; nothing is started then.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

from feed.devstack import embedded

#: Fast and throwaway: nothing here needs to survive a crash.
SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "128MB",
}


class PostgresUnavailable(RuntimeError):
    pass


def database_kind() -> str:
    """Which database the suite runs on: ``STARLING_TEST_DATABASE``, "postgres"
    (the default: the production database) or "sqlite" (``make run``'s)."""
    kind = os.environ.get("STARLING_TEST_DATABASE", "postgres").strip().lower()
    if kind not in {"postgres", "sqlite"}:
        raise PostgresUnavailable("STARLING_TEST_DATABASE must be 'postgres' or 'sqlite'")
    return kind


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if candidates:
        return candidates[-1]
    raise PostgresUnavailable(
        f"{name} not found: install PostgreSQL's server binaries (Debian/Ubuntu: "
        "apt-get install postgresql; `make test` does it) or set TEST_DATABASE_URL"
    )


def _owner() -> str | None:
    """The user the cluster runs as: initdb refuses root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and there is no 'postgres' or 'nobody' user")


@dataclass
class Postgres:
    """A server and how to reach it (``url`` names its maintenance database)."""

    url: str
    version: str
    datadir: Path | None = None  # set when this session started the server
    owner: str | None = None

    def database_url(self, name: str) -> str:
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def create_database(self, prefix: str = "starling") -> str:
        """A new empty database; returns its URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # a name we made, not input
        return self.database_url(name)

    def stop(self) -> None:
        if self.datadir is None:
            return
        command = [_binary("pg_ctl"), "-D", str(self.datadir / "data"), "-m", "immediate", "stop"]
        _run(command, self.owner, check=False)
        shutil.rmtree(self.datadir, ignore_errors=True)
        self.datadir = None


#: The session's server (at most one), shared by conftest and the stack fixtures.
SESSION: list[Postgres] = []


def _run(command: list[str], owner: str | None, *, check: bool = True) -> None:
    if owner is not None:
        command = ["runuser", "-u", owner, "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise PostgresUnavailable(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")


def _server_version(url: str) -> str:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT version()").fetchone()
    return str(row[0]).split(" on ")[0] if row else "unknown"


def start() -> Postgres:
    """The given server (``TEST_DATABASE_URL``) or a throwaway one of our own."""
    given = os.environ.get("TEST_DATABASE_URL")
    if given:
        return Postgres(url=given, version=_server_version(given))
    owner = _owner()
    root = Path(tempfile.mkdtemp(prefix="starling-pg-"))
    if owner is not None:
        shutil.chown(root, user=owner)
    data = root / "data"
    _run(
        [
            _binary("initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ],
        owner,
    )
    port = embedded.free_port()
    options = " ".join(f"-c {k}={v}" for k, v in SERVER_SETTINGS.items())
    options += f" -c listen_addresses=127.0.0.1 -c port={port} -k {root}"
    _run(
        [
            _binary("pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        ],
        owner,
    )
    url = f"postgres://postgres@127.0.0.1:{port}/postgres"
    deadline = time.monotonic() + 30
    while True:
        try:
            version = _server_version(url)
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return Postgres(url=url, version=version, datadir=root, owner=owner)
