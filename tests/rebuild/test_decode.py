"""The rebuild's read task keeps the newest record of each key of its partition
and decodes it (spark.rebuild.read, spark.rebuild.decode)."""

from __future__ import annotations

import json

import pytest

from fanout.config import TopicNames
from fanout.model import events
from spark.rebuild.decode import DECODED, decode_records
from spark.rebuild.read import (
    NewestRecordReader,
    NewestRecordSource,
    largest_partition,
    newest_per_key,
)
from spark.runtime import arrow
from spark.source.datasource import SourceOptions
from spark.source.offsets import OffsetRange

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
            record(events.Followed(5, 9, reposts=False), 3),
            record(events.Followed(6, 9, muted=True), 4),
            record(events.Followed(7, 9, muted=True, reposts=False), 5),  # muted: out
        ],
    )
    assert [(r["kind"], r["a"], r["b"]) for r in rows] == [
        ("follow", 9, 4),
        ("gone", None, None),
        ("quiet", 9, 5),
        ("muted", 9, 6),
        ("muted", 9, 7),
    ]


def test_a_reposts_original_author_and_an_owners_hidden_users_are_decoded() -> None:
    rows, bodies = decode_all(
        "p.tweets",
        [
            record(events.TweetPosted(80, 3, "ann", "", 77, 5), 1),
            record(events.TweetPosted(81, 3, "ann", "", 77), 2),  # an older record: no author
            record(events.TweetPosted(82, 3, "ann", "hi"), 3),
        ],
    )
    assert [(r["kind"], r["a"], r["b"], r["c"], r["d"]) for r in rows] == [
        ("tweet", 3, 80, 77, 5),
        ("tweet", 3, 81, 77, 0),
        ("tweet", 3, 82, None, None),
    ]
    assert [i for i, _ in bodies] == [82, 80, 81]
    assert [r["e"] for r in rows] == [None, None, None]
    # Whom a reply, or a repost of one, answers (none: its own author's post);
    # the users a post mentions.
    rows = decode(
        "p.tweets",
        [
            record(reply(90, 3, 70, 5), 1),
            record(reply(91, 3, 80, 3), 2),
            record(events.TweetPosted(92, 4, "bo", "", 90, 3, repost_of_reply_to=5), 3),
            record(events.TweetPosted(93, 4, "bo", "", 91, 3, repost_of_reply_to=3), 4),
            record(
                events.TweetPosted(94, 3, "ann", "hi @bo", mentions=(4,), mention_names=("bo",)), 5
            ),
        ],
    )
    assert [(r["b"], r["c"], r["e"], r["ids"]) for r in rows] == [
        (90, None, 5, None),
        (91, None, None, None),
        (92, 90, 5, None),
        (93, 91, None, None),
        (94, None, None, [4]),
    ]
    rows = decode(
        "p.filters",
        [
            record(events.FiltersSet(4, (2, 9)), 1),
            record(events.FiltersSet(5, ()), 2),
            (b"6", None, events.headers(3, 6)),  # a filters record always has a value
        ],
    )
    assert [(r["kind"], r["a"], r["ids"]) for r in rows] == [
        ("filter", 4, [2, 9]),
        ("filter", 5, []),
        ("bad", None, None),
    ]


def reply(tweet_id: int, author_id: int, parent: int, to: int) -> events.TweetPosted:
    """``author_id``'s reply to the post ``parent`` by ``to``."""
    return events.TweetPosted(
        tweet_id, author_id, "ann", "hi", in_reply_to=parent, reply_to=to, reply_to_name="x"
    )


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


def test_one_read_task_per_partition_number_across_topics_the_largest_first() -> None:
    ends = {
        "p.tweets": {"0": 50, "1": 70},
        "p.follows": {"0": 200, "1": 0},
        "p.timelines": {"0": 0, "1": 3},
    }
    raw = {"bootstrap.servers": "x:1", "topics": "p.tweets,p.follows"}
    join = {"partitions": "2", "timelineSize": "3", "timelineSlack": "1", "pullThreshold": "9"}
    reader = NewestRecordReader(
        SourceOptions.parse(raw), {**raw, **join, "endingOffsets": json.dumps(ends)}, TOPICS
    )
    assert (reader.partition_count, reader.cap, reader.slack, reader.pull_threshold) == (2, 3, 1, 9)
    del join["pullThreshold"]
    with pytest.raises(ValueError, match="needs the option 'pullThreshold'"):
        NewestRecordReader(SourceOptions.parse(raw), {**raw, **join, "endingOffsets": "{}"}, TOPICS)
    tasks = reader.partitions()
    assert [(t.partition, t.records) for t in tasks] == [(0, 250), (1, 73)]
    assert [(r.topic, r.start, r.end) for r in tasks[0].ranges] == [
        ("p.tweets", 0, 50),
        ("p.follows", 0, 200),
    ]
    assert {r.partition for t in tasks for r in t.ranges if t.partition == 1} == {1}


def test_the_newest_record_source_is_read_as_a_batch_only() -> None:
    with pytest.raises(NotImplementedError, match="batch"):
        NewestRecordSource({}).streamReader(None)


def test_the_largest_partition_and_the_memory_its_read_task_needs() -> None:
    ends = {"p.tweets": {"0": 50, "1": 70}, "p.follows": {"0": 1_491_308, "1": 0}}
    topic, partition, records, gib = largest_partition(ends)
    assert (topic, partition, records) == ("p.follows", 0, 1_491_308)
    assert gib == pytest.approx(1.03, abs=0.01)  # 740 bytes a record
    assert largest_partition({}) == ("", 0, 0, 0.0)


# --- the canonical records' fast path against the Python decode ---------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fanout.model import ids  # noqa: E402
from spark.rebuild.decode import _decode, _recognise  # noqa: E402


def one_by_one(topic: str, records: list[tuple]) -> tuple[list[tuple], list[tuple[int, bytes]]]:
    """What decode_records must give: each record through events.decode_record."""
    rows, bodies = [], []
    for key, value, headers in records:
        r = _decode(topic, 1, key, value, headers)
        rows.append((r.kind, r.a, r.b, r.c, r.d, r.e, r.ids, r.seq, r.error))
        if r.body is not None:
            bodies.append((r.b, r.body))
    return rows, bodies


def assert_same_as_one_by_one(topic: str, records: list[tuple]) -> None:
    got, bodies = decode_all(f"p.{topic}", records)
    want_rows, want_bodies = one_by_one(topic, records)
    names = ("kind", "a", "b", "c", "d", "e", "ids", "seq", "error")
    assert [tuple(r[k] for k in names) for r in got] == want_rows
    assert sorted(bodies) == sorted(want_bodies)


texts = st.text(
    st.characters(codec="utf-8", exclude_characters="\ud800"), max_size=40
) | st.sampled_from(['say "hi"', "back\\slash", "tab\there", "\x7f\u2028/é😀", "", "a\nb"])
id_ = st.integers(1, ids.MAX_ID)


@st.composite
def tweet_records(draw: st.DrawFn, reposts: bool = False, replies: bool = False) -> tuple:
    tweet_id, author_id, seq = draw(id_), draw(id_), draw(st.integers(0, 2**40))
    if reposts and tweet_id > 1 and draw(st.booleans()):
        # A repost: its original's author when the record carries it, else 0;
        # of a reply, whom the reply answers (its author too, sometimes).
        original = draw(st.integers(1, tweet_id - 1))
        by = draw(st.sampled_from([0, author_id]) | id_)
        to = draw(st.sampled_from([0, by]) | id_) if replies else 0
        event: events.Event = events.TweetPosted(
            tweet_id, author_id, draw(texts), "", original, by, repost_of_reply_to=to
        )
    elif replies and tweet_id > 1 and draw(st.booleans()):
        # A reply (to its author's own post, sometimes), mentioning users or not.
        to = draw(st.sampled_from([author_id]) | id_)
        mentions = tuple(sorted(set(draw(st.lists(id_, max_size=3))) - {author_id}))
        event = events.TweetPosted(
            tweet_id,
            author_id,
            draw(texts),
            draw(texts),
            in_reply_to=draw(st.integers(1, tweet_id - 1)),
            reply_to=to,
            reply_to_name="x",
            mentions=mentions,
            mention_names=tuple("m" for _ in mentions),
        )
    elif draw(st.booleans()):
        event = events.TweetPosted(tweet_id, author_id, draw(texts), draw(texts))
    else:
        event = events.TweetDeleted(tweet_id, author_id)
    return record(event, seq)


@st.composite
def follow_records(draw: st.DrawFn, flags: bool = False) -> tuple:
    follower, followee, seq = draw(id_), draw(id_), draw(st.integers(0, 2**40))
    live = draw(st.booleans())
    muted, reposts = (draw(st.booleans()), draw(st.booleans())) if flags else (False, True)
    event = (
        events.Followed(follower, followee, muted, reposts)
        if live
        else events.Unfollowed(follower, followee)
    )
    return record(event, seq)


@st.composite
def filter_records(draw: st.DrawFn) -> tuple:
    owner, seq = draw(id_), draw(st.integers(0, 2**40))
    hidden = draw(st.lists(id_, max_size=5))
    return record(events.FiltersSet(owner, tuple(sorted(set(hidden)))), seq)


#: Ways a record can differ from what the relay writes.
ALTERATIONS = [
    lambda k, v, h: (b"0" + k, v, h),  # a leading zero in the key
    lambda k, v, h: (k, v and v.replace(b",", b", ", 1), h),  # JSON with a space
    lambda k, v, h: (k, v and v.replace(b'"v":1', b'"v":2'), h),
    lambda k, v, h: (k, v and v[:-1], h),  # not JSON
    lambda k, v, h: (k, v and v + b"\xff", h),  # not UTF-8
    lambda k, v, h: (k, b"{}", h),
    lambda k, v, h: (k, v, h[::-1]),  # headers in the other order
    lambda k, v, h: (k, v, [*h, ("x", b"1")]),
    lambda k, v, h: (k, v, h[:1]),  # no jk
    lambda k, v, h: (k, v, [("seq", b"+5"), h[1]]),
    lambda k, v, h: (k, v, [("seq", b" 7 "), h[1]]),
    lambda k, v, h: (k, v, [("seq", b"-1"), h[1]]),
    lambda k, v, h: (k, v, [("seq", b"007"), h[1]]),
    lambda k, v, h: (k, v, [h[0], ("jk", b"0")]),
    lambda k, v, h: (k, v, [h[0], ("jk", b"12")]),  # another join key
    lambda k, v, h: (k, v, [h[0], ("jk", h[1][1] + b"0")]),
    lambda k, v, h: (k, v, None),
    lambda k, v, h: (None, v, h),
    lambda k, v, h: (b"x" + k, v, h),
    lambda k, v, h: (str(ids.MAX_ID + 1).encode(), v, h),
]


@st.composite
def altered(draw: st.DrawFn, records: st.SearchStrategy[tuple]) -> tuple:
    key, value, headers = draw(records)
    return draw(st.sampled_from(ALTERATIONS))(key, value, headers)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        tweet_records()
        | altered(tweet_records())
        | st.builds(mark, st.integers(0, 3), st.integers(0, 99)),
        max_size=30,
    )
)
def test_tweets_decode_as_one_by_one(records: list[tuple]) -> None:
    assert_same_as_one_by_one("tweets", records)


@settings(max_examples=150, deadline=None)
@given(st.lists(tweet_records(reposts=True) | altered(tweet_records(reposts=True)), max_size=30))
def test_reposts_decode_as_one_by_one(records: list[tuple]) -> None:
    assert_same_as_one_by_one("tweets", records)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        tweet_records(reposts=True, replies=True)
        | altered(tweet_records(reposts=True, replies=True)),
        max_size=30,
    )
)
def test_replies_and_their_reposts_decode_as_one_by_one(records: list[tuple]) -> None:
    assert_same_as_one_by_one("tweets", records)


@settings(max_examples=150, deadline=None)
@given(st.lists(follow_records() | altered(follow_records()), max_size=30))
def test_follows_decode_as_one_by_one(records: list[tuple]) -> None:
    assert_same_as_one_by_one("follows", records)


@settings(max_examples=150, deadline=None)
@given(st.lists(follow_records(flags=True) | altered(follow_records(flags=True)), max_size=30))
def test_muted_and_quiet_follows_decode_as_one_by_one(records: list[tuple]) -> None:
    assert_same_as_one_by_one("follows", records)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        filter_records()
        | altered(filter_records())
        | st.builds(mark, st.integers(0, 3), st.integers(0, 99)),
        max_size=20,
    )
)
def test_filters_decode_as_one_by_one(records: list[tuple]) -> None:
    assert_same_as_one_by_one("filters", records)


def test_unknown_topics_and_timeline_resets_decode_as_one_by_one() -> None:
    reset = record(events.TimelineReset(5, (7, 9), 3, 11, ()), 4)
    assert_same_as_one_by_one("timelines", [reset, (*reset[:2], [])])


@given(st.lists(tweet_records(), min_size=1, max_size=20), st.lists(follow_records(), max_size=20))
def test_what_the_relay_writes_takes_the_fast_path(
    tweets: list[tuple], follows: list[tuple]
) -> None:
    """Every canonical record is recognised, but for a tweet whose text or
    author needs a JSON escape (those take the Python path)."""
    for topic, records in ((events.TWEETS, tweets), (events.FOLLOWS, follows)):
        keys, values, headers = (
            (list(c) for c in zip(*records, strict=True)) if records else ([], [], [])
        )
        fast = _recognise(topic, keys, values, headers)
        recognised = [
            lv or g for lv, g in zip(fast.live.to_pylist(), fast.gone.to_pylist(), strict=True)
        ]
        escaped = [v is not None and b"\\" in v for v in values]
        assert recognised == [not e for e in escaped]


def test_flagged_follows_and_filters_take_the_python_path() -> None:
    """A follow that mutes or turns reposts off is not in the canonical form
    (its record names the flag), nor is a filter: events.decode_record
    decodes them, the rules' one home."""
    for topic, event in (
        (events.FOLLOWS, events.Followed(4, 9, muted=True)),
        (events.FOLLOWS, events.Followed(4, 9, reposts=False)),
        (events.FILTERS, events.FiltersSet(4, (9,))),
    ):
        key, value, headers = record(event, 3)
        fast = _recognise(topic, [key], [value], [headers])
        assert fast.live.to_pylist() == [False] and fast.gone.to_pylist() == [False]
    key, value, headers = record(events.Followed(4, 9), 3)
    assert _recognise(events.FOLLOWS, [key], [value], [headers]).live.to_pylist() == [True]
