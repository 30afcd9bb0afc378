"""Thin plumbing around confluent-kafka: topic set-up and client factories.

No network happens at import or construction time; every function takes the
:class:`~fanout.config.StarlingConfig` it needs.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from fanout.config import KafkaClient, StarlingConfig

log = logging.getLogger(__name__)


def topic_configs(config: StarlingConfig) -> dict[str, dict[str, str]]:
    """Each topic's settings. The changelogs are tables: the latest value per
    key, and tombstones for ``STARLING_TOMBSTONE_RETENTION_HOURS`` (a consumer
    down longer may miss a delete: the fanout job refuses to resume then).
    The ``timelines`` topic carries commands, not rows: it expires, in half
    that time, so no replay can meet a reset without the unfollows after it."""
    tombstones = config.tombstone_retention_hours * 3600 * 1000
    table = {"cleanup.policy": "compact", "delete.retention.ms": str(tombstones)}
    commands = {"cleanup.policy": "delete", "retention.ms": str(tombstones // 2)}
    t = config.topics
    return {
        t.tweets: table,
        t.follows: table,
        t.engagements: table,
        t.filters: table,
        t.timelines: commands,
    }


#: librdkafka settings of the outbox producer (docs/decisions.md D7).
PRODUCER_CONFIG: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 2,
    "compression.type": "none",
    # Bound the life of a message in the producer: once this passes without an
    # ack the delivery report says it failed, so a relay run always ends with
    # every message either acknowledged or reported failed (never in limbo).
    "message.timeout.ms": 30_000,
    "socket.connection.setup.timeout.ms": 5_000,
}


class TopicMismatch(RuntimeError):
    """An existing topic does not match the configured partition count."""


class BrokerUnavailable(RuntimeError):
    pass


def admin_settings(client: KafkaClient) -> dict[str, Any]:
    return {**dict(client), "socket.connection.setup.timeout.ms": 3_000, "logger": log}


def admin_client(config: StarlingConfig) -> AdminClient:
    return AdminClient(admin_settings(config.kafka_client()))


def producer_settings(client: KafkaClient, **overrides: Any) -> dict[str, Any]:
    return {**dict(client), "logger": log, **PRODUCER_CONFIG, **overrides}


def make_producer(config: StarlingConfig, **overrides: Any) -> Producer:
    return Producer(producer_settings(config.kafka_client(), **overrides))


def topic_partitions(admin: AdminClient, timeout: float) -> dict[str, int]:
    """Partition count of every topic the broker knows."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnavailable(str(exc)) from exc
    return {name: len(t.partitions) for name, t in metadata.topics.items() if not t.error}


def changelog_retention_ms(config: StarlingConfig, *, timeout: float = 5.0) -> int | None:
    """The shortest ``delete.retention.ms`` of the changelogs as the broker has
    them now (an operator may have altered a topic since it was made); None
    if the broker cannot tell within ``timeout`` seconds."""
    admin = admin_client(config)
    topics = config.topics.tables()
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    try:
        found = [
            future.result(timeout)
            for future in admin.describe_configs(resources, request_timeout=timeout).values()
        ]
    except (KafkaException, TimeoutError) as exc:
        log.warning("could not read the changelogs' delete.retention.ms: %s", exc)
        return None
    return min(int(entries["delete.retention.ms"].value) for entries in found)


def ensure_topics(config: StarlingConfig, *, timeout: float = 30.0) -> list[str]:
    """Create the changelog topics if missing; return the names created.

    Waits up to ``timeout`` seconds for the broker. An existing topic with a
    partition count other than ``STARLING_PARTITIONS`` is an error: records
    would land on partitions the join does not expect.
    """
    admin = admin_client(config)
    deadline = time.monotonic() + timeout
    while True:
        try:
            existing = topic_partitions(
                admin, timeout=min(5.0, max(0.5, deadline - time.monotonic()))
            )
            break
        except BrokerUnavailable as exc:
            if time.monotonic() >= deadline:
                raise BrokerUnavailable(
                    f"Kafka at {config.kafka_bootstrap_servers} did not answer within "
                    f"{timeout:.0f}s: {exc}"
                ) from exc
            time.sleep(0.5)
    for name in config.topics.all():
        if name in existing and existing[name] != config.partitions:
            raise TopicMismatch(
                f"topic {name!r} has {existing[name]} partitions but STARLING_PARTITIONS="
                f"{config.partitions}; set STARLING_PARTITIONS={existing[name]} or use a new "
                f"STARLING_TOPIC_PREFIX"
            )
    missing = [name for name in config.topics.all() if name not in existing]
    if not missing:
        return []
    settings = topic_configs(config)
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=config.partitions,
                replication_factor=-1,
                config=settings[name],
            )
            for name in missing
        ],
        operation_timeout=10,
        request_timeout=15,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
            log.info(
                "created topic %s (%d partitions, %s)", name, config.partitions, settings[name]
            )
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    return created
