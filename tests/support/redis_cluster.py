"""The tests' Redis Cluster (feed.devstack.embedded starts it: three primaries, three
replicas), and what fault tests need to know of its nodes."""

from __future__ import annotations

import time

from redis.cluster import RedisCluster

from feed.devstack.embedded import RedisNode as Node
from feed.devstack.embedded import start_redis_cluster as start_cluster
from feed.devstack.embedded import stop_redis_cluster as stop_cluster
from feed.devstack.embedded import wait_cluster_ok as wait_until_ok

__all__ = [
    "Node",
    "primaries",
    "replica_of",
    "stall_replication",
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


def replica_of(nodes: list[Node], primary: Node) -> Node:
    """The running node that replicates ``primary``."""
    for node in nodes:
        if node.proc.poll() is None and node is not primary:
            role = node.client().execute_command("ROLE")
            if role[0] in (b"slave", "slave") and int(role[2]) == primary.port:
                return node
    raise LookupError(f"no replica of port {primary.port}")


def stall_replication(primary: Node, megabytes: int = 32) -> None:
    """Write a value bigger than the socket buffers between ``primary`` and its
    (stopped) replica: every write after it stays in the primary's own memory,
    so a primary killed now takes those writes with it."""
    slots = RedisCluster(host="127.0.0.1", port=primary.port)
    try:
        key = next(
            k
            for k in (f"stall:{i}" for i in range(100_000))
            if slots.get_node_from_key(k).port == primary.port
        )
    finally:
        slots.close()
    primary.client().set(key, b"x" * (megabytes << 20))
