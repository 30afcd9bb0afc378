"""Session fixtures: one real broker (an Apache Kafka node), one real Redis
and one real PostgreSQL per test session; a three-node Kafka cluster for the
tests that need one.

Each test gets its own namespace on them: a uuid topic prefix, a flushed
Redis database (tests run one at a time), and pytest-django's test database
(rolled back per test) on the session's PostgreSQL server.

``STARLING_TEST_DATABASE=sqlite`` runs the database tests on SQLite instead
(the embedded default of ``make run``); ``TEST_DATABASE_URL`` points them at a
PostgreSQL server that is already running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from fanout.config import DEFAULT_CLUSTER_SHARDS, StarlingConfig, TopicNames
from fanout.store.keys import Shards
from feed.devstack import embedded, kafka
from feed.devstack.kafka_cluster import KafkaCluster
from feed.devstack.kafka_cluster import start_cluster as start_kafka_cluster
from tests.support import postgres
from tests.support.redis_cluster import Node, start_cluster, stop_cluster, wait_until_ok
from tests.support.stack import sqlite_stack, stack  # noqa: F401  (the whole stack, for e2e and faults)

DATABASE_KIND = postgres.database_kind()
#: The session's PostgreSQL server, started once collection shows a test needs it.
_POSTGRES = postgres.SESSION
_DATABASE_FIXTURES = {"django_db_setup", "db", "transactional_db", "stack"}


_SLOW_FIXTURES = {"spark", "stack", "sqlite_stack", "cluster_stack", "kafka_cluster"}
#: The fixtures that start or use a real service: a test that needs none is a unit test.
_SERVICE_FIXTURES = {
    *_SLOW_FIXTURES,
    *_DATABASE_FIXTURES,
    "kafka_bootstrap",
    "kafka_cluster",
    "redis_url",
    "redis_cluster",
    "postgres_server",
}


def pytest_collection_modifyitems(session: pytest.Session, items: list[pytest.Item]) -> None:
    """Mark what needs Spark or the whole stack as ``slow`` (``make test-quick``
    leaves them out) and what needs no service at all as ``unit`` (``make
    test-unit``), and start PostgreSQL if any test needs the database."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("spark") or _SLOW_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        services = _SERVICE_FIXTURES & fixtures or item.get_closest_marker("spark")
        if not (services or _needs_database(item) or _uses_layouts(item)):
            item.add_marker(pytest.mark.unit)
    if DATABASE_KIND != "postgres" or _POSTGRES:
        return
    if any(_needs_database(item) for item in items):
        _POSTGRES.append(postgres.start())


def _uses_layouts(item: pytest.Item) -> bool:
    """Whether the test asks :func:`layout_client` for a store's services."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "layout" in callspec.params


def _needs_database(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return bool(item.get_closest_marker("django_db") or _DATABASE_FIXTURES & fixtures)


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    if DATABASE_KIND == "sqlite":
        return ["database: SQLite (STARLING_TEST_DATABASE=sqlite)"]
    if not _POSTGRES:
        return []
    server = _POSTGRES[0]
    where = "throwaway cluster" if server.datadir else "TEST_DATABASE_URL"
    return [f"database: {server.version} ({where} at {server.url.split('@')[-1]})"]


def pytest_unconfigure(config: pytest.Config) -> None:
    while _POSTGRES:
        _POSTGRES.pop().stop()


@pytest.fixture(scope="session")
def postgres_server() -> postgres.Postgres | None:
    """The session's PostgreSQL server (None when the suite runs on SQLite)."""
    if DATABASE_KIND != "postgres":
        return None
    if not _POSTGRES:  # a run collected without a database test, then asked for one
        _POSTGRES.append(postgres.start())
    return _POSTGRES[0]


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None,
    postgres_server: postgres.Postgres | None,
) -> None:
    """Point Django's default database at the session's PostgreSQL server
    (pytest-django then creates its test database there)."""
    if postgres_server is None:
        return
    import dj_database_url
    from django.conf import settings
    from django.db import connections

    db = settings.DATABASES["default"]
    url = postgres_server.database_url("starling")
    db.update(dj_database_url.parse(url, conn_max_age=db["CONN_MAX_AGE"]))
    db["OPTIONS"] = {}
    connections["default"].close()
    del connections["default"]  # the next use connects with the new settings


@dataclass
class Service:
    """A service process of the session, which fault tests pause and restart."""

    command: list[str]
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Stop it and start it again on the same port (Redis comes back empty)."""
        embedded.stop(self.proc, timeout=1)
        self.proc = embedded.start(self.command, self.port, log=self.log)


#: The session's services by name ("kafka", "redis"). The Kafka node pauses,
#: resumes and restarts the same way, and keeps its data across a restart.
SERVICES: dict[str, Service | kafka.KafkaNode] = {}


def _start(name: str, command: list[str], port: int, log: Path) -> Service:
    SERVICES[name] = Service(command, port, log, embedded.start(command, port, log=log))
    return SERVICES[name]


@pytest.fixture(scope="session")
def service_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("service-logs")


#: Broker settings of the test session's nodes: the log cleaner looks for
#: work every 200 ms and deletes what it replaced at once, so a test of
#: compaction sees it within a second.
TEST_BROKER_SETTINGS = {"log.cleaner.backoff.ms": "200", "log.segment.delete.delay.ms": "0"}


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Apache Kafka node for the session (its log dir in a temporary
    directory); each test makes its own topics."""
    node = kafka.start_node(tmp_path_factory.mktemp("kafka"), settings=TEST_BROKER_SETTINGS)
    SERVICES["kafka"] = node
    yield node.bootstrap
    if node.running:
        node.resume()  # in case a fault test left it stopped
    node.stop()


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three Apache Kafka nodes, each a broker and a controller, every topic
    on all three (two in sync for a write), for the module of broker loss and
    stopped after it (three JVMs would slow every later test on two cores);
    :func:`healed` gives it back with every node running."""
    cluster = start_kafka_cluster(
        tmp_path_factory.mktemp("kafka-cluster"), settings=TEST_BROKER_SETTINGS
    )
    yield cluster
    cluster.stop()


def healed(cluster: KafkaCluster) -> KafkaCluster:
    """``cluster`` with any node a test killed started again."""
    for node_id, node in cluster.nodes.items():
        if not node.running:
            cluster.restart(node_id)
    return cluster


@pytest.fixture(scope="session")
def redis_url(service_logs: Path) -> Iterator[str]:
    port = embedded.free_port()
    service = _start("redis", embedded.redis_command(port), port, service_logs / "redis.log")
    url = f"redis://127.0.0.1:{port}/0"
    from feed.celery import app as celery_app

    celery_app.conf.broker_url = url  # Celery reads its settings once; point it here first
    yield url
    embedded.stop(service.proc)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    """A real Redis Cluster (three primaries, three replicas), started once."""
    nodes = start_cluster(tmp_path_factory.mktemp("redis-cluster"))
    yield nodes
    stop_cluster(nodes)


def cluster_client(nodes: list[Node]) -> RedisCluster:
    """A client of the session's cluster, every node flushed (restarted, and
    the cluster healed, if a fault test left one stopped)."""
    for node in nodes:
        if node.proc.poll() is not None:
            node.start()
    wait_until_ok(nodes)
    client = _cluster_clients.get(nodes[0].url) or RedisCluster.from_url(nodes[0].url)
    _cluster_clients[nodes[0].url] = client
    client.nodes_manager.initialize()  # a fault test may have moved slots or primaries
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    return client


_cluster_clients: dict[str, RedisCluster] = {}


@pytest.fixture
def redis_cluster_client(redis_cluster: list[Node]) -> RedisCluster:
    return cluster_client(redis_cluster)


#: The timeline store's layouts the store tests run on: one Redis with one
#: shard (the default), one Redis with keys in 8 shards, a Redis Cluster.
LAYOUTS = ("single", "sharded", "cluster")


def layout_client(request: pytest.FixtureRequest, layout: str) -> tuple[Any, Shards]:
    """A flushed client of ``layout`` and its shards."""
    if layout == "cluster":
        nodes = request.getfixturevalue("redis_cluster")
        return cluster_client(nodes), Shards(DEFAULT_CLUSTER_SHARDS)
    client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    client.flushdb()
    return client, Shards(8 if layout == "sharded" else 1)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


def make_config(kafka_bootstrap: str, redis_url: str, **overrides: object) -> StarlingConfig:
    values: dict[str, object] = {
        "redis_url": redis_url,
        "kafka_bootstrap_servers": kafka_bootstrap,
        "topics": TopicNames(f"t{uuid.uuid4().hex[:12]}."),
        "partitions": 4,
        "timeline_size": 800,
        "spark_master": "local[2]",
    }
    values.update(overrides)
    return StarlingConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
def starling(
    settings, kafka_bootstrap: str, redis_client: redis.Redis, redis_url: str
) -> StarlingConfig:
    """A fresh namespace on the session's broker and Redis, installed in Django settings."""
    config = make_config(kafka_bootstrap, redis_url)
    settings.STARLING = config
    return config


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession for the whole test session (it takes ~20 s to start)."""
    from spark.runtime.session import build_session

    session = build_session("local[2]", "starling-tests")
    yield session
    session.stop()
