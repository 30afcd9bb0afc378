"""Producing changelog records straight to Kafka, through the real relay;
the streaming fanout job run in the test's own Spark session."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fanout.config import StarlingConfig
from fanout.kafka import ensure_topics, make_producer
from fanout.model import events
from fanout.store.timelines import TimelineStore
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


@dataclass
class Job:
    """The streaming fanout job's query on ``generation``, from ``checkpoint``."""

    config: StarlingConfig
    store: TimelineStore
    generation: int
    writer: ChangelogWriter
    checkpoint: Path
    query: Any = None
    sink: Any = None

    def start(self, spark: Any) -> None:
        from spark.stream.checkpoint import mark_layout
        from spark.stream.job import build_query

        mark_layout(self.checkpoint)  # as the job's supervisor does before a start
        self.query, self.sink = build_query(
            spark,
            self.config,
            generation=self.generation,
            checkpoint=self.checkpoint,
            trigger="100 milliseconds",
        )

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()

    def wait_for(self, seq: int, timeout: float = 90) -> None:
        """Until every seq up to ``seq`` is applied (the contiguous watermark:
        a micro-batch may hold one topic's records and not yet another's, and
        the highest seq applied says nothing of those below it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            wm = self.store.watermark(self.generation)
            if wm is not None and wm.contiguous >= seq:
                return
            assert self.query.isActive, self.query.exception()
            time.sleep(0.2)
        raise AssertionError(
            f"watermark did not reach {seq}: {self.store.watermark(self.generation)}"
        )

    def wait_committed(self, timeout: float = 30) -> None:
        """Until the checkpoint's commit log holds the batch Redis applied last
        (the sink writes Redis before Spark commits the batch: a query stopped
        in between leaves a checkpoint that has not committed it)."""
        from spark.stream.checkpoint import committed_batches

        deadline = time.monotonic() + timeout
        applied = self.store.applied_batch(self.generation)
        while time.monotonic() < deadline:
            batches = committed_batches(self.checkpoint)
            if batches and (applied is None or batches[-1] >= applied):
                return
            time.sleep(0.1)
        raise AssertionError(f"the checkpoint did not commit batch {applied}")

    def timeline(self, user: int) -> list[int] | None:
        found = self.store.timeline(self.generation, user)
        return None if found is None else found.ids
