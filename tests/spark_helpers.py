"""Producing changelog records straight to Kafka, as the relay would."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from fanout import events
from fanout.config import StarlingConfig
from fanout.kafka import ensure_topics, make_producer
from fanout.partitioning import partition_for


class ChangelogWriter:
    """Writes events with increasing seq to the configured topics."""

    def __init__(self, config: StarlingConfig, first_seq: int = 1) -> None:
        self.config = config
        ensure_topics(config)
        self.producer = make_producer(config, **{"linger.ms": 5})
        self.seq = itertools.count(first_seq)
        self.last_seq = 0

    def send(self, items: Iterable[events.Event]) -> int:
        topics = {
            events.TWEETS: self.config.topics.tweets,
            events.FOLLOWS: self.config.topics.follows,
        }
        for event in items:
            record = events.encode(event)
            self.last_seq = next(self.seq)
            self.producer.produce(
                topics[record.topic],
                key=record.key,
                value=record.value,
                partition=partition_for(record.join_key, self.config.partitions),
                headers=events.headers(self.last_seq, record.join_key),
            )
        self.producer.flush(10)
        return self.last_seq

    def raw(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list, partition: int = 0
    ) -> None:
        """A record exactly as given (for poison-pill tests)."""
        self.producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
        self.producer.flush(10)
