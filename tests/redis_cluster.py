"""A real Redis Cluster for the tests: three primaries, three replicas.

Six ``redis-server --cluster-enabled yes`` processes on free ports, joined by
``redis-cli --cluster create``; nothing on disk but their ``nodes.conf``.
A fault test kills or pauses a node (:class:`Node`) and reads the cluster's
view with :func:`cluster_nodes`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from fanout import embedded

#: What a failover waits for: a primary unreachable this long is failed over.
NODE_TIMEOUT_MS = 2000


@dataclass
class Node:
    port: int
    directory: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return embedded.redis_command(
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
        self.proc = embedded.start(self.command(), self.port, log=self.directory / "redis.log")

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
        if not embedded.port_open("127.0.0.1", port) and _bindable(port + 10000):
            return port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_cluster(directory: Path, *, primaries: int = 3) -> list[Node]:
    """Start ``2 * primaries`` nodes and make them a cluster (one replica each)."""
    nodes: list[Node] = []
    for _ in range(2 * primaries):
        port = _node_port()
        node_dir = directory / str(port)
        node_dir.mkdir(parents=True)
        node = Node(port, node_dir, None)  # type: ignore[arg-type]
        node.start()
        nodes.append(node)
    cli = shutil.which("redis-cli") or "redis-cli"
    subprocess.run(
        [
            cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes),
            "--cluster-replicas", "1", "--cluster-yes",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    wait_until_ok(nodes)
    return nodes


def wait_until_ok(nodes: list[Node], timeout: float = 30.0) -> None:
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


def primaries(nodes: list[Node]) -> list[Node]:
    """The running nodes that are primaries now."""
    out = []
    for node in nodes:
        if node.proc.poll() is not None:
            continue
        role = node.client().execute_command("ROLE")[0]
        if role in (b"master", "master"):
            out.append(node)
    return out


def stop_cluster(nodes: list[Node]) -> None:
    for node in nodes:
        if node.proc.poll() is None:
            embedded.stop(node.proc)
