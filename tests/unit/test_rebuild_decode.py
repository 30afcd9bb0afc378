"""The rebuild's read task keeps the newest record of each key of its partition
and decodes it (spark.rebuild_tasks)."""

from __future__ import annotations

import json

import pytest

from fanout import events
from fanout.config import TopicNames
from spark import arrow
from spark.kafka_source import SourceOptions
from spark.offsets import OffsetRange
from spark.rebuild_tasks import (
    DECODED,
    NewestRecordReader,
    NewestRecordSource,
    decode_records,
    largest_partition,
    newest_per_key,
)

TOPICS = TopicNames("p.")


def decode_all(
    topic: str, records: list[tuple[bytes | None, bytes | None, list | None]]
) -> tuple[list[dict], list[tuple[int, bytes]]]:
    part = OffsetRange(topic, 1, 10, 10 + len(records))
    batch, bodies = decode_records(
        part,
        [k for k, _, _ in records],
        [v for _, v, _ in records],
        list(range(10, 10 + len(records))),
        [h for _, _, h in records],
        topics=TOPICS,
    )
    assert batch.schema.names == arrow.names(DECODED)
    return batch.to_pylist(), bodies


def decode(topic: str, records: list[tuple[bytes | None, bytes | None, list | None]]) -> list[dict]:
    return decode_all(topic, records)[0]


def record(event: events.Event, seq: int) -> tuple[bytes, bytes | None, list]:
    r = events.encode(event)
    return r.key, r.value, events.headers(seq, r.join_key)


def mark(partition: int, seq: int) -> tuple[bytes, None, list]:
    key, headers = events.mark_record(partition, seq)
    return key, None, headers


def test_each_kind_of_record_is_decoded_with_its_position() -> None:
    tweet = events.TweetPosted(tweet_id=77, author_id=3, author="ann", text="hi")
    rows, bodies = decode_all(
        "p.tweets",
        [
            record(tweet, 5),
            record(events.TweetDeleted(tweet_id=78, author_id=3), 6),
            mark(partition=1, seq=6),
        ],
    )
    assert [(r["kind"], r["a"], r["b"], r["seq"]) for r in rows] == [
        ("tweet", 3, 77, 5),
        ("gone", None, None, 6),
        ("mark", 1, 6, None),
    ]
    assert bodies == [(77, events.tweet_json(tweet))]  # the live tweet's, for the cache
    assert {(r["topic"], r["partition"]) for r in rows} == {("p.tweets", 1)}
    assert [r["offset"] for r in rows] == [10, 11, 12]
    assert all(r["error"] is None for r in rows)


def test_follows_and_unfollows_name_the_followee_first() -> None:
    rows = decode(
        "p.follows",
        [
            record(events.Followed(follower_id=4, followee_id=9), 1),
            record(events.Unfollowed(follower_id=4, followee_id=9), 2),
        ],
    )
    assert [(r["kind"], r["a"], r["b"]) for r in rows] == [("follow", 9, 4), ("gone", None, None)]


def test_bad_records_are_rows_naming_the_problem_not_failures() -> None:
    good_key, good_value, _ = record(events.Followed(follower_id=4, followee_id=9), 1)
    rows = decode(
        "p.follows",
        [
            (good_key, b"not json", events.headers(3, 9)),
            (good_key, good_value, [("seq", b"x"), ("jk", b"9")]),
            (None, good_value, events.headers(4, 9)),
        ],
    )
    assert [r["kind"] for r in rows] == ["bad", "bad", "bad"]
    assert "JSON" in rows[0]["error"] and rows[0]["seq"] == 3
    assert "seq" in rows[1]["error"] and rows[1]["seq"] is None
    assert "no key" in rows[2]["error"]
    unknown = decode("other", [record(events.Followed(follower_id=4, followee_id=9), 1)])
    assert unknown[0]["kind"] == "bad" and "unknown topic" in unknown[0]["error"]


def test_the_newest_record_of_each_key_wins_across_consume_calls() -> None:
    def chunk(*records: tuple[bytes | None, bytes | None, int]) -> tuple:
        keys, values, offsets = (list(c) for c in zip(*records, strict=True))
        return keys, values, offsets, [0] * len(keys), [[("seq", str(o).encode())] for o in offsets]

    newest, read = newest_per_key(
        [
            chunk((b"a", b"1", 0), (b"b", b"2", 1), (b"a", b"3", 2)),
            chunk((b"c", b"4", 3), (b"b", None, 4)),  # b's tombstone is its newest
            chunk((None, b"x", 5), (None, b"y", 6)),
        ]
    )
    assert {k: (v, o) for k, (v, o, _) in newest.items()} == {
        b"a": (b"3", 2),
        b"b": (None, 4),
        b"c": (b"4", 3),
        None: (b"y", 6),
    }
    assert newest[b"a"][2] == [("seq", b"2")]
    assert read == 7


def test_one_read_task_per_partition_the_largest_first() -> None:
    ends = {"p.tweets": {"0": 50, "1": 70}, "p.follows": {"0": 200, "1": 0}}
    raw = {"bootstrap.servers": "x:1", "topics": "p.tweets,p.follows"}
    reader = NewestRecordReader(
        SourceOptions.parse(raw), {**raw, "endingOffsets": json.dumps(ends)}, TOPICS
    )
    assert [(r.topic, r.partition, r.start, r.end) for r in reader.partitions()] == [
        ("p.follows", 0, 0, 200),
        ("p.tweets", 1, 0, 70),
        ("p.tweets", 0, 0, 50),
    ]


def test_the_newest_record_source_is_read_as_a_batch_only() -> None:
    with pytest.raises(NotImplementedError, match="batch"):
        NewestRecordSource({}).streamReader(None)


def test_the_largest_partition_and_the_memory_its_read_task_needs() -> None:
    ends = {"p.tweets": {"0": 50, "1": 70}, "p.follows": {"0": 1_491_308, "1": 0}}
    topic, partition, records, gib = largest_partition(ends)
    assert (topic, partition, records) == ("p.follows", 0, 1_491_308)
    assert gib == pytest.approx(1.03, abs=0.01)  # 740 bytes a record
    assert largest_partition({}) == ("", 0, 0, 0.0)
