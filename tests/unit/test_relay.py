"""The relay's ordering and marking rules, with an in-memory store and producer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fanout import events
from fanout.config import StarlingConfig, TopicNames
from fanout.partitioning import partition_for
from fanout.relay import OutboxRelay, PendingEvent

CONFIG = StarlingConfig(topics=TopicNames("p."), partitions=3)


class MemoryStore:
    def __init__(self, rows: list[PendingEvent]) -> None:
        self.rows = rows
        self.published: list[int] = []

    def pending(self, limit: int) -> Sequence[PendingEvent]:
        return [r for r in self.rows if r.seq not in self.published][:limit]

    def mark_published(self, seqs: Sequence[int]) -> None:
        self.published.extend(seqs)


class FakeProducer:
    """Delivers everything except the seqs in ``fail``; reports on flush."""

    def __init__(self, fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.fail = set(fail)
        self.sent: list[dict[str, Any]] = []
        self._reports: list[tuple[Callable[[Any, Any], None], Any]] = []

    def produce(self, topic: str, **kwargs: Any) -> None:
        seq = int(dict(kwargs["headers"])["seq"])
        self.sent.append({"topic": topic, **kwargs})
        err = "broker said no" if seq in self.fail else None
        self._reports.append((kwargs["on_delivery"], err))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        for callback, err in self._reports:
            callback(err, None)
        self._reports.clear()
        return 0


def rows(n: int) -> list[PendingEvent]:
    out = []
    for seq in range(1, n + 1):
        event = (
            events.TweetPosted(tweet_id=100 + seq, author_id=seq % 4 + 1, author="a", text="t")
            if seq % 2
            else events.Followed(follower_id=seq, followee_id=seq % 4 + 1)
        )
        record = events.encode(event)
        out.append(PendingEvent(seq, record.topic, record.key, record.value, record.join_key))
    return out


def test_publishes_in_seq_order_to_the_join_key_partition() -> None:
    store, producer = MemoryStore(rows(7)), FakeProducer()
    result = OutboxRelay(store=store, producer=producer, config=CONFIG, batch_size=3).run()
    assert result.ok and result.published == 7 and not result.more
    assert store.published == [1, 2, 3, 4, 5, 6, 7]
    seqs = [int(dict(m["headers"])["seq"]) for m in producer.sent]
    assert seqs == [1, 2, 3, 4, 5, 6, 7]
    for message, row in zip(producer.sent, store.rows, strict=True):
        assert message["partition"] == partition_for(row.join_key, 3)
        assert message["topic"] == ("p.tweets" if row.topic == "tweets" else "p.follows")
        assert message["key"] == row.key and message["value"] == row.value


def test_a_failure_marks_only_the_delivered_prefix() -> None:
    store, producer = MemoryStore(rows(6)), FakeProducer(fail={3})
    result = OutboxRelay(store=store, producer=producer, config=CONFIG, batch_size=10).run()
    assert not result.ok and "seq 3" in (result.error or "")
    # 4-6 were delivered but stay unpublished: they are sent again after 3.
    assert store.published == [1, 2]
    retry = FakeProducer()
    OutboxRelay(store=store, producer=retry, config=CONFIG).run()
    assert [int(dict(m["headers"])["seq"]) for m in retry.sent] == [3, 4, 5, 6]
    assert store.published == [1, 2, 3, 4, 5, 6]


def test_batch_limit_reports_more_work() -> None:
    store = MemoryStore(rows(10))
    result = OutboxRelay(
        store=store, producer=FakeProducer(), config=CONFIG, batch_size=2, max_batches=3
    ).run()
    assert result.published == 6 and result.more


def test_missing_delivery_report_counts_as_failure() -> None:
    class SilentProducer(FakeProducer):
        def flush(self, timeout: float) -> int:
            return 0  # claims done, never reports

    store = MemoryStore(rows(2))
    result = OutboxRelay(store=store, producer=SilentProducer(), config=CONFIG).run()
    assert not result.ok and store.published == []
