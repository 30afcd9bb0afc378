"""Session fixtures: one real broker and one real Redis per test session.

Each test gets its own namespace on them: a uuid topic prefix and a flushed
Redis database (tests run one at a time).
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from fanout import embedded
from fanout.config import StarlingConfig, TopicNames
from tests.stack import stack  # noqa: F401  (the whole stack, for tests/e2e and tests/faults)


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


#: The session's services by name ("kafka", "redis").
SERVICES: dict[str, Service] = {}


def _start(name: str, command: list[str], port: int, log: Path) -> Service:
    SERVICES[name] = Service(command, port, log, embedded.start(command, port, log=log))
    return SERVICES[name]


@pytest.fixture(scope="session")
def service_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("service-logs")


@pytest.fixture(scope="session")
def kafka_bootstrap(service_logs: Path) -> Iterator[str]:
    port = embedded.free_port()
    service = _start("kafka", embedded.broker_command(port), port, service_logs / "tansu.log")
    yield f"127.0.0.1:{port}"
    service.resume()  # in case a fault test left it stopped
    embedded.stop(service.proc, timeout=1)  # Tansu waits for clients on SIGTERM


@pytest.fixture(scope="session")
def redis_url(service_logs: Path) -> Iterator[str]:
    port = embedded.free_port()
    service = _start("redis", embedded.redis_command(port), port, service_logs / "redis.log")
    url = f"redis://127.0.0.1:{port}/0"
    from feed.celery import app as celery_app

    celery_app.conf.broker_url = url  # Celery reads its settings once; point it here first
    yield url
    embedded.stop(service.proc)


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
    from spark.session import build_session

    session = build_session("local[2]", "starling-tests")
    yield session
    session.stop()
