"""A rebuild's read task joins the authors of its partition itself
(spark.rebuild.read.PartitionJoin): the same states as the join rule, the
timelines' edges, and the figures the driver reads."""

from __future__ import annotations

import pyarrow as pa

from fanout.config import TopicNames
from fanout.model import events
from fanout.model.author_state import AuthorState
from fanout.model.engagements import Engagements
from fanout.model.join import newest, rebuilt_author_state
from fanout.model.partitioning import partition_for
from spark.rebuild.decode import decode_records
from spark.rebuild.read import BAD_KEPT, PartitionJoin, Row
from spark.source.offsets import OffsetRange

TOPICS = TopicNames("p.")
PARTITIONS = 2


def in_partition(p: int, n: int) -> list[int]:
    """The first ``n`` user ids whose join key is in partition ``p``."""
    return [u for u in range(1, 200) if partition_for(u, PARTITIONS) == p][:n]


def decoded(topic: str, items: list, first_offset: int = 0) -> pa.RecordBatch:
    """Rows of DECODED for ``items`` (events, or (key, value, headers) tuples)."""
    records = []
    for seq, item in enumerate(items, start=first_offset + 1):
        if isinstance(item, events.Event):
            r = events.encode(item)
            item = (r.key, r.value, events.headers(seq, r.join_key))
        records.append(item)
    part = OffsetRange(topic, 0, first_offset, first_offset + len(records))
    batch, _ = decode_records(
        part,
        [k for k, _, _ in records],
        [v for _, v, _ in records],
        list(range(first_offset, first_offset + len(records))),
        [h for _, _, h in records],
        topics=TOPICS,
    )
    return batch


def rows_of(join: PartitionJoin) -> list[dict]:
    return [r for batch in join.rows(TOPICS) for r in batch.to_pylist()]


def test_a_partitions_states_and_edges_are_those_of_the_join_rule() -> None:
    ann, bob, cy, dee = in_partition(0, 4)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=2)
    tweets = [events.TweetPosted(1000 + i, ann, "ann", f"t{i}") for i in range(5)]
    tweets += [events.TweetPosted(2000, bob, "bob", "hi")]
    join.add(decoded("p.tweets", tweets))
    follows = [events.Followed(f, ann) for f in (bob, cy, dee, ann)]  # ann: 3 others, pulled
    follows += [events.Followed(ann, cy)]  # cy: followed, no tweets
    join.add(decoded("p.follows", follows, first_offset=10))
    rows = rows_of(join)

    states = {r["a"]: r for r in rows if r["kind"] == Row.STATE}
    assert sorted(states) == [ann, bob, cy]
    expected = {
        ann: rebuilt_author_state(ann, [bob, cy, dee, ann], range(1000, 1005), pull_threshold=2),
        bob: rebuilt_author_state(bob, [], [2000], pull_threshold=2),
        cy: rebuilt_author_state(cy, [ann], [], pull_threshold=2),
    }
    for author, state in expected.items():
        kept, horizon = newest(state.tweets, 3)
        row = states[author]
        assert (row["blob"], row["kept"], row["horizon"], row["pulled"]) == (
            state.encode(),
            list(kept),
            horizon,
            state.pulled,
        )
    assert states[ann]["pulled"] and states[ann]["kept"] == [1002, 1003, 1004]
    assert states[ann]["horizon"] == 1002

    edges = sorted((r["a"], r["b"]) for r in rows if r["kind"] == Row.EDGE)
    # every follow (owner = follower), and each author who tweeted to themselves
    assert edges == sorted(
        [(bob, ann), (cy, ann), (dee, ann), (ann, ann), (ann, cy), (ann, ann), (bob, bob)]
    )
    tally = {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}
    assert tally == {
        "keys": 6 + 5,
        "tweet": 6,
        "follow": 5,
        "authors": 3,
        "kept": 3 + 1,
        "edges": 7,
        "seq": 10 + 5,
    }
    assert not [r for r in rows if r["kind"] == Row.MISPLACED]


def test_marks_and_bad_records_are_handed_over_and_tombstones_counted() -> None:
    (ann,) = in_partition(0, 1)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    key, headers = events.mark_record(0, 41)
    join.add(
        decoded(
            "p.tweets",
            [
                (key, None, headers),
                (b"7", None, events.headers(3, ann)),
                (b"8", b"not json", events.headers(4, ann)),
            ],
        )
    )
    rows = rows_of(join)
    (mark,) = [r for r in rows if r["kind"] == Row.MARK]
    assert (mark["name"], mark["a"], mark["b"]) == ("p.tweets", 0, 41)
    (bad,) = [r for r in rows if r["kind"] == Row.BAD]
    assert (bad["name"], bad["offset"], bad["seq"]) == ("p.tweets", 2, 4)
    assert "JSON" in bad["error"]
    tally = {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}
    assert tally["gone"] == 1 and tally["bad"] == 1 and tally["mark"] == 1
    assert tally["keys"] == 3
    assert not [r for r in rows if r["kind"] in (Row.STATE, Row.EDGE)]


def test_only_so_many_bad_records_are_handed_over_but_all_are_counted() -> None:
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    bad = [(str(i).encode(), b"{", events.headers(i + 1, 5)) for i in range(BAD_KEPT + 3)]
    join.add(decoded("p.tweets", bad))
    rows = rows_of(join)
    assert sum(r["kind"] == Row.BAD for r in rows) == BAD_KEPT
    assert {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}["bad"] == BAD_KEPT + 3


def test_a_record_outside_its_join_keys_partition_is_named() -> None:
    (ann,) = in_partition(0, 1)
    stray = in_partition(1, 1)[0]
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    join.add(decoded("p.tweets", [events.TweetPosted(1, ann, "a", "x")]))
    join.add(
        decoded(
            "p.follows",
            [events.Followed(ann, ann), events.Followed(ann, stray), events.Followed(3, stray)],
            first_offset=20,
        )
    )
    rows = rows_of(join)
    named = sorted(
        (r["name"], r["offset"], r["a"], r["b"]) for r in rows if r["kind"] == Row.MISPLACED
    )
    assert named == [("p.follows", 21, stray, 1), ("p.follows", 22, stray, 1)]
    assert {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}["misplaced"] == 2


def test_reposts_keep_their_originals_and_engagements_become_states_and_counts() -> None:
    ann, bob = in_partition(0, 2)
    liked = next(t for t in range(3000, 3100) if partition_for(t, PARTITIONS) == 0)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    posts = [events.TweetPosted(liked, ann, "ann", "hi")]
    posts += [events.TweetPosted(liked + 10, bob, "bob", "", liked)]  # bob reposts it
    posts += [events.TweetPosted(liked + 20, ann, "ann", "", liked)]  # and so does ann
    join.add(decoded("p.tweets", posts))
    engaged = [
        events.Engaged(events.LIKE, bob, liked),
        events.Engaged(events.LIKE, ann, liked),
        events.Engaged(events.REPOST, bob, liked),
        events.Engaged(events.REPOST, ann, liked),
    ]
    join.add(decoded("p.engagements", engaged, first_offset=10))
    rows = rows_of(join)
    states = {r["a"]: r for r in rows if r["kind"] == Row.STATE}
    assert states[ann]["kept"] == [liked, liked + 20]
    assert states[ann]["origins"] == [liked, liked]
    assert states[bob]["origins"] == [liked]
    assert AuthorState.decode(states[ann]["blob"]).originals == {liked + 20: liked}
    (counted,) = [r for r in rows if r["kind"] == Row.ENGAGEMENTS]
    assert counted["a"] == liked
    assert Engagements.decode(counted["blob"]).counts == (2, 2)
    assert join.counts == {liked: (2, 2)}
    assert not [r for r in rows if r["kind"] == Row.MISPLACED]
