"""The relay's ordering, publishing and marks, with an in-memory store and producer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fanout.config import StarlingConfig, TopicNames
from fanout.model import events
from fanout.model.partitioning import partition_for
from feed.relay import MarkState, OutboxRelay, PendingEvent
from tests.support.spark_helpers import MemoryOutbox

CONFIG = StarlingConfig(topics=TopicNames("p."), partitions=3)


class FakeProducer:
    """Delivers everything except the seqs in ``fail``; reports on flush."""

    def __init__(self, fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.fail = set(fail)
        self.sent: list[dict[str, Any]] = []
        self._reports: list[tuple[Callable[[Any, Any], None], Any]] = []

    def produce(self, topic: str, **kwargs: Any) -> None:
        headers = dict(kwargs["headers"])
        seq = int(headers.get("seq") or headers["mark"])
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

    def events(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if "mark" not in dict(m["headers"])]

    def marks(self) -> dict[tuple[str, int], int]:
        return {
            (m["topic"], m["partition"]): int(dict(m["headers"])["mark"])
            for m in self.sent
            if "mark" in dict(m["headers"])
        }


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
    store, producer = MemoryOutbox.of(rows(7)), FakeProducer()
    result = OutboxRelay(store=store, producer=producer, config=CONFIG, batch_size=3).run()
    assert result.ok and result.published == 7 and not result.more
    assert store.published == [1, 2, 3, 4, 5, 6, 7]
    seqs = [int(dict(m["headers"])["seq"]) for m in producer.events()]
    assert seqs == [1, 2, 3, 4, 5, 6, 7]
    for message, row in zip(producer.events(), store.rows, strict=True):
        assert message["partition"] == partition_for(row.join_key, 3)
        assert message["topic"] == ("p.tweets" if row.topic == "tweets" else "p.follows")
        assert message["key"] == row.key and message["value"] == row.value


def test_a_failure_marks_only_the_delivered_prefix() -> None:
    store, producer = MemoryOutbox.of(rows(6)), FakeProducer(fail={3})
    result = OutboxRelay(store=store, producer=producer, config=CONFIG, batch_size=10).run()
    assert not result.ok and "seq 3" in (result.error or "")
    # 4-6 were delivered but stay unpublished: they are sent again after 3.
    assert store.published == [1, 2]
    retry = FakeProducer()
    OutboxRelay(store=store, producer=retry, config=CONFIG).run()
    assert [int(dict(m["headers"])["seq"]) for m in retry.events()] == [3, 4, 5, 6]
    assert store.published == [1, 2, 3, 4, 5, 6]


def test_batch_limit_reports_more_work() -> None:
    store = MemoryOutbox.of(rows(10))
    result = OutboxRelay(
        store=store, producer=FakeProducer(), config=CONFIG, batch_size=2, max_batches=3
    ).run()
    assert result.published == 6 and result.more


def test_missing_delivery_report_counts_as_failure() -> None:
    class SilentProducer(FakeProducer):
        def flush(self, timeout: float) -> int:
            return 0  # claims done, never reports

    store = MemoryOutbox.of(rows(2))
    result = OutboxRelay(store=store, producer=SilentProducer(), config=CONFIG).run()
    assert not result.ok and store.published == []


def test_every_partition_of_every_topic_gets_the_mark_of_what_is_published() -> None:
    marks = MarkState()
    store, producer = MemoryOutbox.of(rows(7)), FakeProducer()
    OutboxRelay(store=store, producer=producer, config=CONFIG, marks=marks).run()
    expected = {(t, p): 7 for t in CONFIG.topics.all() for p in range(3)}
    assert producer.marks() == expected
    # A mark comes after the events it covers, in each partition.
    last_event = max(i for i, m in enumerate(producer.sent) if "mark" not in dict(m["headers"]))
    first_mark = min(i for i, m in enumerate(producer.sent) if "mark" in dict(m["headers"]))
    assert last_event < first_mark
    # Nothing new: no mark again from this process.
    again = FakeProducer()
    OutboxRelay(store=store, producer=again, config=CONFIG, marks=marks).run()
    assert again.sent == []


def test_a_failed_run_marks_only_its_delivered_prefix() -> None:
    store, producer = MemoryOutbox.of(rows(6)), FakeProducer(fail={3})
    OutboxRelay(store=store, producer=producer, config=CONFIG, marks=MarkState()).run()
    assert set(producer.marks().values()) == {2}


def test_a_new_process_marks_what_earlier_ones_published() -> None:
    store = MemoryOutbox.of(rows(4))
    store.published = [1, 2, 3, 4]
    producer = FakeProducer()
    OutboxRelay(store=store, producer=producer, config=CONFIG, marks=MarkState()).run()
    assert set(producer.marks().values()) == {4} and producer.events() == []


def test_a_mark_that_failed_is_written_by_the_next_run_even_with_nothing_new() -> None:
    class MarksRefused(FakeProducer):
        def produce(self, topic: str, **kwargs: Any) -> None:
            super().produce(topic, **kwargs)
            if "mark" in dict(kwargs["headers"]):
                callback, _ = self._reports[-1]
                self._reports[-1] = (callback, "broker said no")

    marks = MarkState(seq=2)  # this process marked 2 earlier
    store = MemoryOutbox.of(rows(6))
    store.published = [1, 2]
    first = OutboxRelay(store=store, producer=MarksRefused(), config=CONFIG, marks=marks).run()
    assert not first.ok and "mark 6" in (first.error or "")
    assert store.published == [1, 2, 3, 4, 5, 6]
    retry = FakeProducer()
    assert OutboxRelay(store=store, producer=retry, config=CONFIG, marks=marks).run().ok
    assert retry.events() == [] and set(retry.marks().values()) == {6}
    assert len(retry.marks()) == len(CONFIG.topics.all()) * CONFIG.partitions
