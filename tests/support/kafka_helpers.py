"""Reading changelog topics back with a real consumer (assign(), no group)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition


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
