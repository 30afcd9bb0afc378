"""A three-node Apache Kafka cluster for the embedded stack and the tests of
broker loss: combined broker and controller nodes (feed.devstack.kafka),
every topic replicated to all three with two in sync for a write; nodes to
kill and restart, partition leaders, in-sync replicas, the active
controller."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from feed.devstack.embedded import EmbeddedError, free_port
from feed.devstack.kafka import (
    CLUSTER_SIZE,
    KafkaNode,
    client_settings,
    node_properties,
    random_id,
    read_properties,
    stop_processes,
    wait_ready,
)


@dataclass
class KafkaCluster:
    """Nodes that are brokers and the metadata quorum at once, replicating
    every topic to three of them (two in sync for a write)."""

    nodes: dict[int, KafkaNode]
    _admin_client: AdminClient | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values())

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def restart(self, node_id: int, timeout: float = 60.0) -> None:
        """Start a killed (or stopped) node again on its ports and log dir,
        and wait until it is registered with the quorum again."""
        node = self.nodes[node_id]
        node.stop()
        node.start()
        node.wait_port(timeout)
        wait_until(lambda: node_id in self.registered(), timeout, f"node {node_id} registered")

    def registered(self) -> set[int]:
        """The brokers the cluster's metadata lists now."""
        metadata = self._admin().list_topics(timeout=5)
        return set(metadata.brokers)

    def leader(self, topic: str, partition: int) -> int:
        """The node that leads ``topic``'s ``partition`` now (-1: none)."""
        metadata = self._admin().list_topics(topic, timeout=5)
        return int(metadata.topics[topic].partitions[partition].leader)

    def in_sync(self, topic: str) -> dict[int, list[int]]:
        """``topic``'s partitions and the nodes of their in-sync replicas."""
        metadata = self._admin().list_topics(topic, timeout=5)
        return {p: sorted(info.isrs) for p, info in metadata.topics[topic].partitions.items()}

    def active_controller(self) -> int | None:
        """The metadata quorum's leader, by the quorum state each running
        node keeps on disk (the newest epoch wins); None while there is none."""
        best: tuple[int, int] | None = None
        for node in self.nodes.values():
            if not node.running:
                continue
            path = node.log_dir / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
            if best is None or epoch > best[1]:
                best = (leader, epoch)
        if best is None or best[0] < 0 or not self.nodes[best[0]].running:
            return None
        return best[0]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every node at once."""
        for node in self.nodes.values():
            if node.proc is not None and node.running:
                node.resume()
        stop_processes([n.proc for n in self.nodes.values() if n.proc is not None], timeout)

    def _admin(self) -> AdminClient:
        if self._admin_client is None:
            self._admin_client = AdminClient(client_settings(self.bootstrap))
        return self._admin_client


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check`` until it is true, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise EmbeddedError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def cluster_nodes(
    directory: Path,
    size: int = CLUSTER_SIZE,
    ports: Sequence[int] = (),
    settings: Mapping[str, str] | None = None,
) -> tuple[list[KafkaNode], list[str]]:
    """The nodes of a ``size``-node cluster in ``directory/node-<id>`` and the
    quorum argument that formats them. A cluster formatted earlier keeps its
    controller ports (they are written in its quorum's records)."""
    ids = range(1, size + 1)
    earlier = [read_properties(directory / f"node-{i}" / "server.properties") for i in ids]
    controllers = [
        int(props["listeners"].rsplit(":", 1)[-1]) if props else free_port() for props in earlier
    ]
    plain = list(ports) or [free_port() for _ in ids]
    nodes = [
        KafkaNode(
            i,
            plain[i - 1],
            controllers[i - 1],
            directory / f"node-{i}",
            node_properties(
                i,
                plain[i - 1],
                controllers[i - 1],
                directory / f"node-{i}" / "data",
                controllers,
                settings or {},
            ),
        )
        for i in ids
    ]
    voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}:{random_id()}" for n in nodes)
    return nodes, ["--initial-controllers", voters]


def start_cluster(
    directory: Path,
    *,
    size: int = CLUSTER_SIZE,
    ports: Sequence[int] = (),
    settings: Mapping[str, str] | None = None,
    timeout: float = 90.0,
) -> KafkaCluster:
    """Start (formatting them on first use) the nodes of a cluster in
    ``directory`` and wait until it takes replicated idempotent writes."""
    nodes, quorum = cluster_nodes(directory, size, ports, settings)
    cluster_id = random_id()
    with ThreadPoolExecutor(len(nodes)) as pool:  # a format is a JVM start: ~2 s
        list(pool.map(lambda n: n.format(cluster_id, quorum), nodes))
    cluster = KafkaCluster({n.node_id: n for n in nodes})
    for node in nodes:
        node.start()
    try:
        wait_ready(cluster.bootstrap, nodes, timeout)
    except BaseException:
        cluster.stop(timeout=5)
        raise
    return cluster
