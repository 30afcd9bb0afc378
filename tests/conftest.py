"""Session fixtures: one real broker and one real Redis per test session.

Each test gets its own namespace on them: a uuid topic prefix and a flushed
Redis database (tests run one at a time).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fanout import embedded
from fanout.config import StarlingConfig, TopicNames


@pytest.fixture(scope="session")
def service_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("service-logs")


@pytest.fixture(scope="session")
def kafka_bootstrap(service_logs: Path) -> Iterator[str]:
    port = embedded.free_port()
    proc = embedded.start(embedded.broker_command(port), port, log=service_logs / "tansu.log")
    yield f"127.0.0.1:{port}"
    embedded.stop(proc, timeout=1)  # Tansu waits for clients on SIGTERM; it keeps nothing anyway


@pytest.fixture(scope="session")
def redis_url(service_logs: Path) -> Iterator[str]:
    port = embedded.free_port()
    proc = embedded.start(embedded.redis_command(port), port, log=service_logs / "redis.log")
    url = f"redis://127.0.0.1:{port}/0"
    from feed.celery import app as celery_app

    celery_app.conf.broker_url = url  # Celery reads its settings once; point it here first
    yield url
    embedded.stop(proc)


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
