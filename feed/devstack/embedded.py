"""The embedded default stack's servers: a redis-server of our own, and the
helpers every embedded server uses (free ports, waiting for one, stopping).

Used by ``make run`` (through the Procfile), by the test fixtures and by the
benchmarks; the broker is Apache Kafka (:mod:`feed.devstack.kafka`).
``redis-server`` comes from the system (``make`` installs it with apt-get
when missing). :func:`start_redis_cluster` starts a Redis Cluster of six
such servers, for the tests and benchmarks of cluster mode.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis


class EmbeddedError(RuntimeError):
    pass


def free_port(preferred: int | None = None) -> int:
    """``preferred`` if nothing listens there, else a free port from the OS."""
    if preferred is not None and not port_open("127.0.0.1", preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(
    host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not port_open(host, port):
        if proc is not None and proc.poll() is not None:
            raise EmbeddedError(
                f"process exited with code {proc.returncode} before port {port} opened"
            )
        if time.monotonic() > deadline:
            raise EmbeddedError(f"nothing listens on {host}:{port} after {timeout:.0f}s")
        time.sleep(0.05)


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise EmbeddedError(
            "redis-server not found: install it (Debian/Ubuntu: apt-get install redis-server, "
            "macOS: brew install redis) or set REDIS_URL to a running Redis"
        )
    return found


#: Timelines are rebuilt from the changelogs, so the embedded Redis keeps nothing on disk.
REDIS_ARGS = ("--save", "", "--appendonly", "no", "--bind", "127.0.0.1")


def redis_command(port: int, extra: Sequence[str] = ()) -> list[str]:
    return [redis_binary(), "--port", str(port), *REDIS_ARGS, *extra]


def start(
    command: Sequence[str], port: int, *, log: Path | None = None, timeout: float = 15.0
) -> subprocess.Popen[bytes]:
    """Start ``command`` in the background and wait until ``port`` accepts connections."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
    try:
        wait_for_port("127.0.0.1", port, timeout, proc)
    except EmbeddedError:
        proc.kill()
        raise
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: What a failover waits for: a primary unreachable this long is failed over.
NODE_TIMEOUT_MS = 2000


@dataclass
class RedisNode:
    """A node of a Redis Cluster started here (tests, benchmarks)."""

    port: int
    directory: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return redis_command(
            self.port,
            [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.directory / "nodes.conf"),
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                # A slot whose primary is down fails its keys only, not the cluster.
                "--cluster-require-full-coverage", "no",
                "--cluster-allow-reads-when-down", "no",
                "--dir", str(self.directory),
            ],
        )  # fmt: skip

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def start(self) -> None:
        self.proc = start(self.command(), self.port, log=self.directory / "redis.log")

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)


def _node_port() -> int:
    """A free port whose cluster bus port (10000 above it) is free too."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port > 55535:  # its bus port would be past 65535
            port = 20000 + port % 30000
        if not port_open("127.0.0.1", port) and _bindable(port + 10000):
            return port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_redis_cluster(directory: Path, *, primaries: int = 3) -> list[RedisNode]:
    """Start ``2 * primaries`` nodes and make them a cluster (one replica each)."""
    nodes: list[RedisNode] = []
    for _ in range(2 * primaries):
        port = _node_port()
        node_dir = directory / str(port)
        node_dir.mkdir(parents=True)
        node = RedisNode(port, node_dir, None)  # type: ignore[arg-type]
        node.start()
        nodes.append(node)
    cli = shutil.which("redis-cli") or "redis-cli"
    subprocess.run(  # noqa: S603 - redis-cli with our own ports
        [
            cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
            "--cluster-replicas", "1", "--cluster-yes",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    wait_cluster_ok(nodes)
    return nodes


def wait_cluster_ok(nodes: list[RedisNode], timeout: float = 30.0) -> None:
    """Wait until every running node says the cluster is ok and knows every slot."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for node in nodes:
            if node.proc.poll() is not None:
                continue
            try:
                info = node.client().cluster("info")
            except redis.RedisError:
                states.append(False)
                continue
            states.append(info.get("cluster_state") == "ok")
        if all(states):
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the Redis Cluster did not become ok")
        time.sleep(0.1)


def stop_redis_cluster(nodes: list[RedisNode]) -> None:
    for node in nodes:
        if node.proc.poll() is None:
            stop(node.proc)


def main(argv: Sequence[str]) -> None:
    """``python -m feed.devstack.embedded redis PORT``: become that server
    (for the Procfile; the broker is ``python -m feed.devstack.kafka``)."""
    import os

    if len(argv) != 2 or argv[0] != "redis" or not argv[1].isdigit():
        raise SystemExit("usage: python -m feed.devstack.embedded redis PORT")
    command = redis_command(int(argv[1]))
    os.execv(command[0], command)  # noqa: S606


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
