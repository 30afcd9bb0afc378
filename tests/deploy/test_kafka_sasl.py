"""The compose deployment's Kafka start script (deploy/kafka/start.sh), run for real.

The script is what the ``kafka`` service runs: it writes the node's properties, formats
new storage with the SCRAM user and becomes the broker. Here it runs as it does in the
container, except that its ``kafka-storage.sh`` and ``kafka-server-start.sh`` start the
embedded broker's jars (``<venv>/kafka/libs``, the version ``make setup`` pins) and it
listens on free ports of 127.0.0.1 (the container's are fixed). Starling's own clients
(the relay's producer, the admin of ``ensure_topics``, the Spark source's consumer) then
log in with the settings compose gives them; a client without them is refused. Three
nodes started by the script, as compose starts ``kafka-1`` to ``kafka-3`` (here all on
127.0.0.1, each on ports of its own), form one cluster that keeps three replicas of every
topic and takes ``acks=all`` writes with two in sync.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from fanout.config import StarlingConfig
from fanout.kafka import ensure_topics, make_producer
from feed.devstack import kafka
from feed.devstack.embedded import free_port, wait_for_port
from feed.devstack.kafka_cluster import wait_until
from spark.source.kafka_io import consumer_settings, end_offsets

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "kafka" / "start.sh"


def fake_kafka_home(home: Path, logs: Path) -> Path:
    """``bin/kafka-storage.sh`` and ``bin/kafka-server-start.sh`` that run the
    embedded broker's jars, as the image's scripts run its own."""
    (home / "bin").mkdir(parents=True)
    for name, main in (
        ("kafka-storage.sh", "kafka.tools.StorageTool"),
        ("kafka-server-start.sh", "kafka.Kafka"),
    ):
        script = home / "bin" / name
        script.write_text(
            f'#!/bin/sh\nexec {shlex.join(kafka.java_command(main, [], logs))} "$@"\n'
        )
        script.chmod(0o755)
    return home


@dataclass
class Node:
    env: dict[str, str]
    port: int
    password_file: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config_dir(self) -> Path:
        return Path(self.env["KAFKA_CONFIG_DIR"])

    def launch(self) -> None:
        with (self.config_dir.parent / "start.log").open("ab") as out:
            self.proc = subprocess.Popen(
                ["sh", str(SCRIPT)], env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def start(self) -> None:
        self.launch()
        wait_for_port("127.0.0.1", self.port, 60, self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def client_env(self, **extra: str) -> dict[str, str]:
        """What compose gives an application container, on this node."""
        return {
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "KAFKA_SASL_USERNAME": "starling",
            "KAFKA_SASL_PASSWORD_FILE": str(self.password_file),
            "STARLING_TOPIC_PREFIX": f"sasl-{uuid.uuid4().hex[:8]}.",
            "STARLING_PARTITIONS": "2",
            **extra,
        }


def script_env(tmp_path: Path, password: str) -> tuple[dict[str, str], Path]:
    password_file = tmp_path / "kafka_password"
    password_file.write_text(password + "\n")
    env = {
        "PATH": os.environ["PATH"],
        "KAFKA_CLUSTER_ID": kafka.random_id(),
        "KAFKA_SASL_USERNAME": "starling",
        "KAFKA_SASL_PASSWORD_FILE": str(password_file),
        "KAFKA_LOG_DIRS": str(tmp_path / "data"),
        "KAFKA_CONFIG_DIR": str(tmp_path / "conf"),
        "KAFKA_ADVERTISED_HOST": "127.0.0.1",
        "KAFKA_LISTEN_HOST": "127.0.0.1",
        "KAFKA_PORT": str(free_port()),
        "KAFKA_CONTROLLER_PORT": str(free_port()),
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env, password_file


def require_jars() -> None:
    if not list(kafka.LIBS.glob("*.jar")):
        pytest.fail(f"no Apache Kafka jars in {kafka.LIBS}: `make setup` fetches them")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    require_jars()
    env, password_file = script_env(tmp_path, secrets.token_hex(16))
    env["KAFKA_HOME"] = str(fake_kafka_home(tmp_path / "kafka-home", tmp_path))
    started = Node(env, int(env["KAFKA_PORT"]), password_file)
    try:
        started.start()
        yield started
    finally:
        started.stop()


def quiet(settings: dict[str, str]) -> dict[str, object]:
    """librdkafka's complaints about a refused login go to logging, not stderr."""
    return {**settings, "logger": kafka.log, "socket.timeout.ms": 3000}


def refused(settings: dict[str, str]) -> bool:
    try:
        AdminClient(quiet(settings)).list_topics(timeout=2)
    except KafkaException:
        return True
    return False


def produce_and_read(config: StarlingConfig, value: bytes) -> list[bytes]:
    """Through Starling's clients: the topics, one record as the relay produces it,
    the Spark source's end offsets, and the record read back."""
    assert set(ensure_topics(config, timeout=60)) == set(config.topics.all())
    producer = make_producer(config)
    producer.produce(config.topics.tweets, key=b"1", value=value, partition=0)
    assert producer.flush(30) == 0
    ends = end_offsets(config.kafka_client(), (config.topics.tweets,))
    assert sum(ends[config.topics.tweets].values()) == 1
    consumer = Consumer(consumer_settings(config.kafka_client()))
    consumer.assign([TopicPartition(config.topics.tweets, 0, 0)])
    try:
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None
        return [msg.value()]
    finally:
        consumer.close()


def test_starlings_clients_log_in_and_nothing_else_does(node: Node) -> None:
    config = StarlingConfig.from_env(node.client_env())
    assert produce_and_read(config, b"hello") == [b"hello"]
    # Without credentials, with a wrong password, or as a user the broker does not know.
    assert refused({"bootstrap.servers": node.bootstrap})
    client = dict(config.kafka_client())
    assert refused({**client, "sasl.password": "wrong"})
    assert refused({**client, "sasl.username": "mallory"})
    assert refused({**client, "sasl.mechanism": "PLAIN"})


def test_another_user_gets_nothing_without_acls(node: Node) -> None:
    config = StarlingConfig.from_env(node.client_env())
    ensure_topics(config, timeout=60)
    client = dict(config.kafka_client())
    add_user(client, "reader", "reader-password")
    reader = AdminClient(
        quiet({**client, "sasl.username": "reader", "sasl.password": "reader-password"})
    )
    assert reader.list_topics(timeout=10).topics == {}  # logged in, but sees no topic
    consumer = Consumer(
        quiet(
            {
                **consumer_settings(config.kafka_client()),
                "sasl.username": "reader",
                "sasl.password": "reader-password",
            }
        )
    )
    consumer.assign([TopicPartition(config.topics.tweets, 0, 0)])
    try:
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is not None
        assert "authoriz" in msg.error().str().lower()
    finally:
        consumer.close()


def add_user(client: dict[str, str], name: str, password: str) -> None:
    """What ``kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[password=...]'`` does."""
    admin = AdminClient(quiet(client))  # kept until the answer: its futures need it
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
            )
        ]
    )
    for future in futures.values():
        future.result(30)


def test_the_health_checks_credentials_are_the_users(node: Node) -> None:
    props = kafka.read_properties(node.config_dir / "client.properties")
    assert props["security.protocol"] == "SASL_PLAINTEXT"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    jaas = shlex.split(props["sasl.jaas.config"].rstrip(";"))
    assert jaas[:2] == ["org.apache.kafka.common.security.scram.ScramLoginModule", "required"]
    options = dict(word.split("=", 1) for word in jaas[2:])
    assert options == {"username": "starling", "password": node.password_file.read_text().strip()}
    assert not refused(
        {
            "bootstrap.servers": node.bootstrap,
            "security.protocol": props["security.protocol"],
            "sasl.mechanism": props["sasl.mechanism"],
            "sasl.username": options["username"],
            "sasl.password": options["password"],
        }
    )
    # The password is in files of the broker's user only, and on no lasting command line.
    server = node.config_dir / "server.properties"
    for path in (server, node.config_dir / "client.properties"):
        assert path.stat().st_mode & 0o077 == 0, path
    assert node.proc is not None
    cmdline = Path(f"/proc/{node.proc.pid}/cmdline").read_bytes()
    assert options["password"].encode() not in cmdline
    # The controller listens on the loopback only.
    listeners = kafka.read_properties(server)["listeners"].split(",")
    assert f"CONTROLLER://127.0.0.1:{node.env['KAFKA_CONTROLLER_PORT']}" in listeners


def test_rotating_the_password_then_restarting(node: Node) -> None:
    """docs/deploy.md's rotation: change the user's credential through the broker
    (kafka-configs.sh --alter does this), then restart with the new secret file."""
    old = StarlingConfig.from_env(node.client_env())
    new_password = secrets.token_hex(16)
    add_user(dict(old.kafka_client()), "starling", new_password)
    node.stop()
    node.password_file.write_text(new_password + "\n")
    node.start()  # formatted storage: kept, not formatted again
    config = StarlingConfig.from_env(node.client_env())
    assert produce_and_read(config, b"after") == [b"after"]
    assert refused(dict(old.kafka_client()))


@pytest.mark.parametrize(
    ("password", "message"),
    [
        ("", "is empty: set KAFKA_PASSWORD"),
        ('with"quote', "may hold only letters, digits"),
        ("with space", "may hold only letters, digits"),
        ("a,b]", "may hold only letters, digits"),
    ],
)
def test_a_password_the_files_cannot_carry_is_refused(
    tmp_path: Path, password: str, message: str
) -> None:
    env, _ = script_env(tmp_path, password)
    done = subprocess.run(
        ["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode != 0 and message in done.stderr
    assert not (tmp_path / "data").exists()


def test_storage_formatted_without_the_user_is_refused(tmp_path: Path) -> None:
    env, _ = script_env(tmp_path, secrets.token_hex(16))
    data = Path(env["KAFKA_LOG_DIRS"])
    data.mkdir()
    (data / "meta.properties").write_text("version=1\n")
    env["KAFKA_HOME"] = str(tmp_path / "no-kafka")  # never reached
    done = subprocess.run(
        ["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 1
    assert "formatted without the SCRAM user" in done.stderr


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[list[Node]]:
    """The script run three times as compose runs kafka-1, kafka-2 and kafka-3: node ids
    1-3, one cluster id, one password, the quorum of the three controllers; here each
    node has ports of its own on 127.0.0.1 (in compose, the same ports on addresses of
    their own)."""
    require_jars()
    cluster_id = kafka.random_id()
    password = secrets.token_hex(16)
    controllers = [free_port() for _ in range(3)]
    voters = ",".join(f"{i}@127.0.0.1:{port}" for i, port in enumerate(controllers, 1))
    nodes = []
    for i, controller_port in enumerate(controllers, 1):
        directory = tmp_path / f"kafka-{i}"
        directory.mkdir()
        env, password_file = script_env(directory, password)
        env.update(
            KAFKA_CLUSTER_ID=cluster_id,
            KAFKA_NODE_ID=str(i),
            KAFKA_CONTROLLER_HOST="127.0.0.1",
            KAFKA_CONTROLLER_PORT=str(controller_port),
            KAFKA_CONTROLLER_QUORUM_VOTERS=voters,
            KAFKA_HOME=str(fake_kafka_home(directory / "kafka-home", directory)),
        )
        nodes.append(Node(env, int(env["KAFKA_PORT"]), password_file))
    try:
        for started in nodes:  # together: none is ready before a quorum is
            started.launch()
        for started in nodes:
            wait_for_port("127.0.0.1", started.port, 60, started.proc)
        yield nodes
    finally:
        # SIGKILL: a node left without a quorum would wait for it in a controlled
        # shutdown, and the data is thrown away.
        for started in nodes:
            if started.proc is not None and started.proc.poll() is None:
                started.proc.kill()
                started.proc.wait(10)


def delivered(config: StarlingConfig, value: bytes, timeout_ms: int) -> bool:
    """Whether an acks=all write of the relay's producer is acknowledged in time."""
    producer = make_producer(config, **{"message.timeout.ms": timeout_ms})
    reports: list[object] = []
    producer.produce(
        config.topics.tweets,
        key=b"1",
        value=value,
        partition=0,
        on_delivery=lambda err, _msg: reports.append(err),
    )
    producer.flush(timeout_ms / 1000 + 10)
    # (Identity: comparing a KafkaError with None raises TypeError.)
    return len(reports) == 1 and reports[0] is None


def test_three_nodes_keep_three_replicas_and_take_acks_all_writes(
    three_nodes: list[Node],
) -> None:
    bootstrap = ",".join(n.bootstrap for n in three_nodes)
    config = StarlingConfig.from_env(three_nodes[0].client_env(KAFKA_BOOTSTRAP_SERVERS=bootstrap))
    client = dict(config.kafka_client())
    admin = AdminClient(quiet(client))
    # All three brokers registered (what migrate waits for, through their health checks).
    wait_until(lambda: set(admin.list_topics(timeout=5).brokers) == {1, 2, 3}, 60, "3 brokers")
    # Each broker's replication settings: the test suite's three-node cluster's.
    tested = kafka.replication_settings(3)
    for broker in ("1", "2", "3"):
        resource = ConfigResource(ResourceType.BROKER, broker)
        entries = admin.describe_configs([resource])[resource].result(30)
        for key in (k for k in tested if "replication" in k or "isr" in k or "insync" in k):
            assert entries[key].value == tested[key], (broker, key)
    # The changelogs as ensure_topics creates them (the brokers' defaults), and a record
    # produced by the relay's producer (acks=all, idempotent) and read back.
    assert produce_and_read(config, b"replicated") == [b"replicated"]
    for topic in config.topics.all():
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        assert all(sorted(p.replicas) == [1, 2, 3] for p in partitions), topic
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = admin.describe_configs([resource])[resource].result(30)
        assert entries["min.insync.replicas"].value == "2", topic
    # Nothing gets in without the user's credentials, on any node.
    for started in three_nodes:
        assert refused({"bootstrap.servers": started.bootstrap})
    # One node lost: once the quorum has fenced it, two replicas are in sync and writes
    # go on. Two lost: no write is acknowledged.
    tweets = config.topics.tweets
    assert three_nodes[2].proc is not None
    three_nodes[2].proc.kill()
    wait_until(lambda: set(admin.list_topics(timeout=5).brokers) == {1, 2}, 60, "fenced")
    wait_until(lambda: all(len(isr) == 2 for isr in in_sync(admin, tweets)), 60, "ISR of 2")
    assert delivered(config, b"two in sync", 30_000)
    assert three_nodes[1].proc is not None
    three_nodes[1].proc.kill()
    assert not delivered(config, b"one left", 5_000)


def in_sync(admin: AdminClient, topic: str) -> list[list[int]]:
    partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions.values()
    return [list(p.isrs) for p in partitions]
