"""The tests' Redis Cluster (fanout.embedded starts it: three primaries, three
replicas), and what fault tests need to know of its nodes."""

from __future__ import annotations

import time

from fanout.embedded import RedisNode as Node
from fanout.embedded import start_redis_cluster as start_cluster
from fanout.embedded import stop_redis_cluster as stop_cluster
from fanout.embedded import wait_cluster_ok as wait_until_ok

__all__ = [
    "Node",
    "primaries",
    "start_cluster",
    "stop_cluster",
    "wait_for_failover",
    "wait_until_ok",
]


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


def wait_for_failover(nodes: list[Node], dead: Node, timeout: float = 30.0) -> None:
    """Wait until a replica of the stopped primary ``dead`` has taken over (as
    many primaries running as before) and the cluster is ok again."""
    deadline = time.monotonic() + timeout
    while len(primaries(nodes)) < len(nodes) // 2:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no replica took over from port {dead.port}")
        time.sleep(0.2)
    wait_until_ok(nodes, max(1.0, deadline - time.monotonic()))
