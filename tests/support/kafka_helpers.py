"""Reading changelog topics back with a real consumer (assign(), no group);
losing them on purpose."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient


@dataclass(frozen=True)
class Read:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes | None
    headers: dict[str, bytes]


def read_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    expect: int,
    timeout: float = 15.0,
    settle: float = 0.5,
    marks: bool = False,
) -> list[Read]:
    """Every record of ``topic``: waits for ``expect`` records, then ``settle`` s for
    strays. The relay's marks are left out unless ``marks``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "starling-tests", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Read] = []
    deadline = time.monotonic() + timeout
    quiet_until: float | None = None
    try:
        while time.monotonic() < deadline:
            if len(out) >= expect:
                quiet_until = quiet_until or time.monotonic() + settle
                if time.monotonic() >= quiet_until:
                    break
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error():
                    continue
                if not marks and "mark" in dict(msg.headers() or []):
                    continue
                out.append(
                    Read(
                        msg.topic(),
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        {k: v for k, v in (msg.headers() or [])},
                    )
                )
    finally:
        consumer.close()
    return out


def delete_topics(bootstrap: str, topics: Sequence[str], timeout: float = 30.0) -> None:
    """Delete ``topics`` and wait until the broker no longer lists them: a
    broker that lost their data, made on purpose (Apache Kafka keeps its
    log across restarts)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(topics), operation_timeout=timeout).values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    while set(topics) & set(admin.list_topics(timeout=5).topics):
        assert time.monotonic() < deadline, f"{topics} still listed after {timeout:.0f}s"
        time.sleep(0.1)
