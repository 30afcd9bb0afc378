"""Apache Kafka (KRaft) nodes of our own: the embedded broker of ``make run``,
of the test fixtures and of the benchmarks, on the production engine.

The jars come from Maven Central: ``make setup`` copies them into
``<venv>/kafka/libs`` (``feed/devstack/kafka-broker/pom.xml`` pins the
version). A node is broker and controller in one JVM. Its directory, given
by the caller, holds its ``server.properties``, its log dir (``data/``,
formatted once and then kept: topics and records survive a restart) and its
``server.log``. :func:`start_cluster` starts three such nodes, replicated,
for the tests of broker loss: kill a node, restart it, ask which node leads a
partition or the metadata quorum.

``python -m feed.devstack.kafka [--ports P,...] [--nodes N] DIRECTORY`` runs them
in the foreground for the Procfile (one node: the process becomes the JVM).
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from feed.devstack.embedded import EmbeddedError, free_port, port_open, wait_for_port

log = logging.getLogger(__name__)

#: The jars ``make setup`` fetched, inside the virtual environment.
LIBS = Path(sys.prefix) / "kafka" / "libs"
LOG4J_CONFIG = Path(__file__).with_name("kafka-broker") / "log4j2.properties"

#: Measured on a two-core machine: the C1 compiler alone halves the start
#: (about 3 s to the port, 4.5 s to a first delivery); the serial collector
#: and the small heap keep a node at about 160 MB resident.
JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss512k",
    "-XX:MaxMetaspaceSize=128m",
    "-Djava.awt.headless=true",
)

#: Settings of a small local node, whatever the cluster's size.
NODE_SETTINGS: Mapping[str, str] = {
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    # The cleaner allocates its dedupe buffer (128 MiB by default) at start.
    "log.cleaner.dedupe.buffer.size": str(8 << 20),
    "log.cleaner.backoff.ms": "1000",
    # Retention and cleanup start 30 s after boot by default.
    "log.initial.task.delay.ms": "500",
    # A node SIGKILLed and restarted waits for its old session to expire
    # before it registers again: 5.6 s instead of 12.7 s (measured).
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
}

#: The topic the readiness check writes to (each node's first idempotent
#: producer loses about a second to COORDINATOR_LOAD_IN_PROGRESS: the check
#: absorbs it, not the caller's first write).
WARMUP_TOPIC = "starling-warmup"

#: Quorum size and replication of :func:`start_cluster`'s clusters.
CLUSTER_SIZE = 3


def replication_settings(nodes: int) -> dict[str, str]:
    """Replication of every topic (the internal ones too) on ``nodes`` nodes:
    three copies, two in sync for an ``acks=all`` write, once there are three."""
    factor = str(min(nodes, 3))
    in_sync = "1" if nodes == 1 else "2"
    return {
        "default.replication.factor": factor,
        "min.insync.replicas": in_sync,
        "offsets.topic.replication.factor": factor,
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": factor,
        "transaction.state.log.min.isr": in_sync,
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": factor,
        "share.coordinator.state.topic.min.isr": in_sync,
    }


def node_properties(
    node_id: int,
    port: int,
    controller_port: int,
    log_dir: Path,
    controllers: Sequence[int],
    extra: Mapping[str, str],
) -> dict[str, str]:
    """A combined broker and controller node's ``server.properties``;
    ``controllers`` are the controller ports of every node of the quorum."""
    listeners = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in controllers),
        "listeners": listeners,
        "advertised.listeners": listeners,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        **NODE_SETTINGS,
        **replication_settings(len(controllers)),
        **extra,
    }


def read_properties(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def random_id() -> str:
    """A Kafka ``Uuid`` in its text form (cluster and directory ids)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def classpath() -> str:
    """The jars, sorted: a stable order (a class data archive needs one)."""
    jars = sorted(LIBS.glob("*.jar"))
    if not jars:
        raise EmbeddedError(
            f"no Apache Kafka jars in {LIBS}: run `make setup` (it fetches them with Maven)"
        )
    return ":".join(str(jar) for jar in jars)


def java_command(main: str, args: Sequence[str], logs: Path) -> list[str]:
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if "JAVA_HOME" in os.environ else "java"
    return [
        str(java),
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        f"-Dkafka.logs.dir={logs}",
        "-cp",
        classpath(),
        main,
        *args,
    ]


@dataclass
class KafkaNode:
    """One node: its ports, its directory and, while it runs, its process."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    properties: dict[str, str]
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_dir(self) -> Path:
        return Path(self.properties["log.dirs"])

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def formatted(self) -> bool:
        return is_formatted(self.directory)

    def format(self, cluster_id: str, quorum: Sequence[str]) -> None:
        """Format the log dir (``quorum``: ``--standalone`` or
        ``--initial-controllers ...``); a log dir formatted already is kept."""
        self.write_properties()
        if self.formatted():
            return
        command = java_command(
            "kafka.tools.StorageTool",
            ["format", "-t", cluster_id, "-c", str(self.config_path), *quorum],
            self.directory,
        )
        done = subprocess.run(  # noqa: S603 - our own java command
            command, capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise EmbeddedError(f"formatting {self.log_dir} failed: {done.stdout}{done.stderr}")

    def write_properties(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{key}={value}\n" for key, value in self.properties.items())
        self.config_path.write_text(text)

    def command(self) -> list[str]:
        return java_command("kafka.Kafka", [str(self.config_path)], self.directory)

    def start(self) -> None:
        """Start the JVM in the background (:meth:`wait_ready` waits for it)."""
        self.write_properties()
        with (self.directory / "stdout.log").open("ab") as out:
            self.proc = subprocess.Popen(  # noqa: S603 - our own java command
                self.command(), stdout=out, stderr=subprocess.STDOUT
            )

    def wait_port(self, timeout: float) -> None:
        try:
            wait_for_port("127.0.0.1", self.port, timeout, self.proc)
        except EmbeddedError as exc:
            raise EmbeddedError(f"Kafka node {self.node_id}: {exc}\n{self.log_tail()}") from exc

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL if it takes longer
        than ``timeout``."""
        if self.proc is None:
            return
        stop_processes([self.proc], timeout)

    def kill(self) -> None:
        """SIGKILL: the node dies with what it had not flushed."""
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: connections hang, nothing answers."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self, timeout: float = 60.0) -> None:
        """Stop and start again on the same ports and log dir: it keeps its data."""
        if self.proc is not None:
            self.resume()  # a stopped process would not see SIGTERM
        self.stop()
        self.start()
        wait_ready(self.bootstrap, [self], timeout)

    def log_tail(self, lines: int = 20) -> str:
        found = [self.directory / "server.log", self.directory / "stdout.log"]
        tails = [p.read_text(errors="replace").splitlines()[-lines:] for p in found if p.exists()]
        return "\n".join(line for tail in tails for line in tail)


def is_formatted(directory: Path) -> bool:
    """Whether the node in ``directory`` has a formatted log dir (its topics
    are there from an earlier start)."""
    return (directory / "data" / "meta.properties").exists()


def has_data(directory: Path) -> bool:
    """Whether the node or cluster in ``directory`` was started there before
    (:func:`start_node`'s or :func:`start_cluster`'s ``directory``)."""
    return is_formatted(directory) or is_formatted(directory / "node-1")


def stop_processes(procs: Sequence[subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
    """SIGTERM to all at once, then SIGKILL to what is still running after
    ``timeout``. (Stopped one by one, the last nodes of a cluster lose their
    quorum and hang in their controlled shutdown.)"""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def wait_ready(bootstrap: str, nodes: Sequence[KafkaNode], timeout: float) -> None:
    """Wait until every node's port is open and an idempotent ``acks=all``
    producer gets a delivery report for a record on :data:`WARMUP_TOPIC`."""
    deadline = time.monotonic() + timeout
    for node in nodes:
        node.wait_port(max(0.1, deadline - time.monotonic()))
    admin = AdminClient(client_settings(bootstrap))
    while True:
        future = admin.create_topics([NewTopic(WARMUP_TOPIC, 1, -1)], request_timeout=5)
        try:
            future[WARMUP_TOPIC].result(timeout=10)
            break
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" in str(exc):
                break
            _check_alive(nodes, deadline, f"creating {WARMUP_TOPIC}: {exc}")
            time.sleep(0.1)
    producer = Producer({**client_settings(bootstrap), "enable.idempotence": True, "acks": "all"})
    reports: list[object] = []
    producer.produce(WARMUP_TOPIC, b"ready", on_delivery=lambda err, _msg: reports.append(err))
    while not reports:
        producer.poll(0.05)
        _check_alive(nodes, deadline, "no delivery report for the warm-up record")
    if reports[0] is not None:
        raise EmbeddedError(f"Kafka at {bootstrap}: the warm-up record failed: {reports[0]}")


def client_settings(bootstrap: str) -> dict[str, Any]:
    """librdkafka settings of the launcher's own clients: its complaints
    while a node starts or is down go to logging, not to stderr."""
    return {"bootstrap.servers": bootstrap, "logger": log}


def _check_alive(nodes: Sequence[KafkaNode], deadline: float, doing: str) -> None:
    for node in nodes:
        if not node.running:
            raise EmbeddedError(f"Kafka node {node.node_id} exited\n{node.log_tail()}")
    if time.monotonic() > deadline:
        raise EmbeddedError(f"Kafka not ready in time ({doing})\n{nodes[0].log_tail()}")


def single_node(
    directory: Path, port: int | None = None, settings: Mapping[str, str] | None = None
) -> KafkaNode:
    """The node of a one-node cluster in ``directory``. Its ports may change
    from one start to the next (measured: a formatted node comes back on
    others); the controller port of an earlier start is reused when free."""
    earlier = read_properties(directory / "server.properties").get("listeners", "")
    kept = earlier.rsplit(":", 1)[-1] if "CONTROLLER://" in earlier else ""
    controller = int(kept) if kept.isdigit() else None
    controller_port = free_port(preferred=controller)
    port = port or free_port()
    props = node_properties(
        1, port, controller_port, directory / "data", [controller_port], settings or {}
    )
    return KafkaNode(1, port, controller_port, directory, props)


def start_node(
    directory: Path,
    *,
    port: int | None = None,
    settings: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> KafkaNode:
    """Start a one-node cluster in ``directory`` (formatted on first use,
    kept afterwards) and wait until it takes idempotent writes."""
    node = single_node(directory, port, settings)
    if not node.formatted():
        node.format(random_id(), ["--standalone"])
    node.start()
    try:
        wait_ready(node.bootstrap, [node], timeout)
    except BaseException:
        node.kill()
        raise
    return node


def _foreground(directory: Path, ports: Sequence[int], nodes: int) -> None:
    """Run the broker(s) until SIGTERM or SIGINT (the Procfile's ``broker``)."""
    if nodes == 1:
        node = single_node(directory, ports[0] if ports else None)
        if not node.formatted():
            node.format(random_id(), ["--standalone"])
        node.write_properties()
        command = node.command()
        os.execvp(command[0], command)  # noqa: S606 - honcho's signals reach the JVM
    from feed.devstack.kafka_cluster import start_cluster  # it builds on this module

    cluster = start_cluster(directory, size=nodes, ports=ports)
    print(f"Kafka cluster of {nodes} nodes at {cluster.bootstrap}", flush=True)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        cluster.stop()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while all(node.running for node in cluster.nodes.values()):
        time.sleep(1)
    cluster.stop()
    raise SystemExit("a Kafka node exited")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m feed.devstack.kafka", description=__doc__)
    parser.add_argument("directory", type=Path, help="the node's (or nodes') directory")
    parser.add_argument("--ports", default="", help="the nodes' client ports, comma-separated")
    parser.add_argument("--nodes", type=int, default=1, choices=(1, CLUSTER_SIZE))
    args = parser.parse_args(argv)
    ports = [int(p) for p in args.ports.split(",") if p.strip()]
    if ports and len(ports) != args.nodes:
        raise SystemExit(f"--ports names {len(ports)} ports for {args.nodes} nodes")
    busy = [p for p in ports if port_open("127.0.0.1", p)]
    if busy:
        raise SystemExit(f"ports in use: {busy}")
    _foreground(args.directory.resolve(), ports, args.nodes)


if __name__ == "__main__":
    main()
