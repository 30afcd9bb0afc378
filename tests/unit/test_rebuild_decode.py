"""The rebuild's read task decodes every record it reads (spark.rebuild_tasks)."""

from __future__ import annotations

import pytest

from fanout import events
from fanout.config import TopicNames
from spark import arrow
from spark.offsets import OffsetRange
from spark.rebuild_tasks import RECORDS, DecodedChangelogSource, decode_records

TOPICS = TopicNames("p.")


def decode(topic: str, records: list[tuple[bytes | None, bytes | None, list | None]]) -> list[dict]:
    part = OffsetRange(topic, 1, 10, 10 + len(records))
    batch = decode_records(
        part,
        [k for k, _, _ in records],
        [v for _, v, _ in records],
        list(range(10, 10 + len(records))),
        [0] * len(records),
        [h for _, _, h in records],
        topics=TOPICS,
    )
    assert batch.schema.names == arrow.names(RECORDS)
    return batch.to_pylist()


def record(event: events.Event, seq: int) -> tuple[bytes, bytes | None, list]:
    r = events.encode(event)
    return r.key, r.value, events.headers(seq, r.join_key)


def mark(partition: int, seq: int) -> tuple[bytes, None, list]:
    key, headers = events.mark_record(partition, seq)
    return key, None, headers


def test_each_kind_of_record_is_decoded_with_its_position() -> None:
    tweet = events.TweetPosted(tweet_id=77, author_id=3, author="ann", text="hi")
    rows = decode(
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
    assert rows[0]["body"] == events.tweet_json(tweet)
    assert [r["key"] for r in rows] == [b"77", b"78", b"mark:1"]
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


def test_the_decoded_source_is_read_as_a_batch_only() -> None:
    with pytest.raises(NotImplementedError, match="batch"):
        DecodedChangelogSource({}).streamReader(None)
