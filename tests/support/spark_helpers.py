"""Producing changelog records straight to Kafka, through the real relay."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from fanout.config import StarlingConfig
from fanout.kafka import ensure_topics, make_producer
from fanout.model import events
from feed.relay import MarkState, OutboxRelay, PendingEvent


class MemoryOutbox:
    """An outbox held in a list (the relay's :class:`~feed.relay.OutboxStore`)."""

    def __init__(self) -> None:
        self.rows: list[PendingEvent] = []
        self.published: list[int] = []

    @classmethod
    def of(cls, rows: list[PendingEvent]) -> MemoryOutbox:
        outbox = cls()
        outbox.rows = rows
        return outbox

    def pending(self, limit: int) -> Sequence[PendingEvent]:
        return [r for r in self.rows if r.seq not in self.published][:limit]

    def mark_published(self, seqs: Sequence[int]) -> None:
        self.published.extend(seqs)

    def published_high(self) -> int:
        return max(self.published, default=0)


class ChangelogWriter:
    """Writes events with increasing seq to the configured topics, and the
    relay's marks after each send, as the relay does (it is the relay)."""

    def __init__(self, config: StarlingConfig, first_seq: int = 1, *, marks: bool = True) -> None:
        self.config = config
        ensure_topics(config)
        self.producer = make_producer(config, **{"linger.ms": 5})
        self.outbox = MemoryOutbox()
        # Without marks (tests of the Kafka source count records): the relay
        # believes it has marked everything already.
        state = MarkState() if marks else MarkState(seq=2**62)
        self.relay = OutboxRelay(
            store=self.outbox, producer=self.producer, config=config, marks=state
        )
        self.seq = itertools.count(first_seq)
        self.last_seq = 0

    def send(self, items: Iterable[events.Event]) -> int:
        for event in items:
            record = events.encode(event)
            self.last_seq = next(self.seq)
            self.outbox.rows.append(
                PendingEvent(self.last_seq, record.topic, record.key, record.value, record.join_key)
            )
        result = self.relay.run()
        assert result.ok, result.error
        return self.last_seq

    def raw(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list, partition: int = 0
    ) -> None:
        """A record exactly as given (for poison-pill tests)."""
        self.producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
        self.producer.flush(10)
