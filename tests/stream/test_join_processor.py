"""JoinProcessor without a Spark session: a fake state handle stands in for
Spark's state server (these are the pure parts: decoding, rules, bundles)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Row

from fanout.config import TopicNames
from fanout.model import events
from fanout.model.author_state import AuthorState
from fanout.model.engagements import Engagements
from fanout.model.join import Mutation, Op
from spark.rebuild.tasks import ENGAGEMENTS_STATE
from spark.stream.bundles import FIRST, Bundle, decode_bundle
from spark.stream.changelog import MARKS, ChangelogRecord, pack_record, runs
from spark.stream.operator import JoinProcessor

TOPICS = TopicNames("p.")


class FakeMapState(dict[tuple[int, ...], tuple[Any, ...]]):
    def getValue(self, key: tuple[int, ...]) -> tuple[Any, ...] | None:
        return self.get(key)

    def updateValue(self, key: tuple[int, ...], value: tuple[Any, ...]) -> None:
        self[key] = value

    def removeKey(self, key: tuple[int, ...]) -> None:
        self.pop(key, None)


class FakeHandle:
    """The state of one bucket (the processor sees one at a time)."""

    def __init__(self) -> None:
        self.maps: dict[str, FakeMapState] = {}

    def getMapState(self, name: str, key_schema: Any, value_schema: Any) -> FakeMapState:
        return self.maps.setdefault(name, FakeMapState())


def packed(bucket: int, **fields: Any) -> Row:
    """An input row as the job's changelog read makes it (spark.stream.changelog):
    a run of one record."""
    batch = pa.RecordBatch.from_pydict(
        {"bucket": [bucket], "record": [pack_record(ChangelogRecord(**fields))]}
    )
    return Row(**runs(batch).to_pylist()[0])


def row(event: events.Event, seq: int, offset: int = 0) -> Row:
    record = events.encode(event)
    topic = TOPICS.physical(record.topic)
    return packed(
        BUCKET,
        topic=topic,
        partition=0,
        offset=offset,
        timestamp=1_000 + seq,
        key=record.key,
        value=record.value,
        seq=seq,
        jk=record.join_key,
    )


BUCKET = 3


def run(processor: JoinProcessor, bucket: int, rows: list[Row]) -> Bundle:
    """The bucket's bundles as one: its first bundle, then each route's mutations."""
    first, *timelines = processor.handleInputRows((bucket,), iter(rows), None)
    routes = [row.route for row in timelines]
    assert first.route == FIRST
    assert routes == sorted(set(routes), key=processor.routes.index)  # each once, in order
    out = decode_bundle(first.bundle)
    for row in timelines:
        out.mutations += decode_bundle(row.bundle).mutations
    return out


def test_processor_applies_the_rules_with_the_configured_cap_and_slack() -> None:
    processor = JoinProcessor(TOPICS, cap=2, slack=1)
    handle = FakeHandle()
    processor.init(handle)
    posts = [events.TweetPosted(100 + i, 7, "ann", f"t{i}") for i in range(5)]
    bundle = run(
        processor,
        BUCKET,
        [row(events.Followed(8, 7), 1)] + [row(p, i + 2) for i, p in enumerate(posts)],
    )
    state = AuthorState.decode(handle.maps["authors"][(7,)][0])
    assert state.tweets == [100, 101, 102, 103, 104]  # every live tweet
    assert state.followers == {8}
    assert bundle.seq == 6 and bundle.ts == 1_006
    assert set(bundle.bodies) == {100, 101, 102, 103, 104}
    assert bundle.mutations[-1] == Mutation(
        Op.ADD, (7, 8), (100, 101, 102, 103, 104), 0, 6, actor=7
    )
    follow = run(processor, BUCKET, [row(events.Followed(9, 7), 7)])
    # cap 2 + slack 1; the follower's followees gain 7 (replies to 7 show: D29)
    assert follow.mutations == [
        Mutation(Op.FOLLOWED, (9,), (), 0, 7, authors=(7,), actor=7),
        Mutation(Op.ADD, (9,), (102, 103, 104), 102, 7, actor=7),
    ]


def test_a_pulled_authors_followers_live_apart_until_it_is_pushed_again() -> None:
    processor = JoinProcessor(TOPICS, cap=2, slack=1, pull_threshold=2)
    handle = FakeHandle()
    processor.init(handle)
    run(processor, BUCKET, [row(events.Followed(8, 7), 1), row(events.Followed(9, 7), 2)])
    main, audience = handle.maps["authors"], handle.maps["audiences"]
    assert AuthorState.apart(main[(7,)][0]) and (7,) in audience
    size = len(main[(7,)][0])
    post = run(processor, BUCKET, [row(events.TweetPosted(100, 7, "ann", "hi"), 3)])
    assert [m.op for m in post.mutations] == [Op.LIST, Op.ADD]
    assert len(main[(7,)][0]) == size + 8  # one tweet more, no followers
    run(processor, BUCKET, [row(events.Unfollowed(9, 7), 4)])  # 1 < 9/10 of 2: pushed again
    state = AuthorState.decode(main[(7,)][0])
    assert not state.pulled and state.followers == {8} and (7,) not in audience


def test_the_authors_of_a_bucket_keep_states_of_their_own_and_share_one_bundle() -> None:
    processor = JoinProcessor(TOPICS, cap=2, slack=1)
    handle = FakeHandle()
    processor.init(handle)
    # A rebuild's states arrive first (spark.rebuild.stages): author 7 is followed by 8.
    processor.handleInitialState(
        (BUCKET,), Row(join_key=7, blob=AuthorState({8}, [50]).encode(), kind="author"), None
    )
    bundle = run(
        processor,
        BUCKET,
        [
            row(events.TweetPosted(100, 7, "ann", "a"), 4),
            row(events.Followed(9, 263), 2),
            row(events.TweetPosted(101, 263, "bob", "b"), 3),
        ],
    )
    authors = handle.maps["authors"]
    assert AuthorState.decode(authors[(7,)][0]) == AuthorState({8}, [50, 100])
    assert AuthorState.decode(authors[(263,)][0]) == AuthorState({9}, [101])
    assert sorted(bundle.mutations, key=lambda m: m.seq) == [
        Mutation(Op.FOLLOWED, (9,), (), 0, 2, authors=(263,), actor=263),
        Mutation(Op.ADD, (9,), (), 0, 2, actor=263),
        Mutation(Op.ADD, (9, 263), (101,), 0, 3, actor=263),
        Mutation(Op.ADD, (7, 8), (100,), 0, 4, actor=7),
    ]
    assert set(bundle.bodies) == {100, 101} and bundle.seq == 4


def test_bad_records_become_dead_letters_with_their_position() -> None:
    processor = JoinProcessor(TOPICS, cap=10, slack=2)
    processor.init(FakeHandle())
    good = row(events.TweetPosted(100, 7, "ann", "ok"), 5, offset=3)
    bad = packed(
        BUCKET,
        topic=TOPICS.tweets,
        partition=1,
        offset=9,
        timestamp=1,
        key=b"101",
        value=b"{nope",
        seq=6,
        jk=7,
    )
    no_seq = packed(
        BUCKET,
        topic=TOPICS.tweets,
        partition=1,
        offset=10,
        timestamp=1,
        key=b"102",
        value=None,
        seq=None,
        jk=7,
    )
    bundle = run(processor, BUCKET, [good, bad, no_seq])
    assert [(d["partition"], d["offset"]) for d in bundle.dead_letters] == [(1, 9), (1, 10)]
    assert (
        "not JSON" in bundle.dead_letters[0]["error"] and "seq" in bundle.dead_letters[1]["error"]
    )
    assert list(bundle.bodies) == [100] and bundle.seq == 5


def test_timeline_mutations_are_routed_by_owner_and_the_rest_comes_first() -> None:
    """Two sink partitions (routes 7 and 3): even owners go to 7, odd ones to 3;
    bodies, deleted bodies and the batch's seq travel in the first bundle."""
    processor = JoinProcessor(TOPICS, cap=10, slack=2, routes=(7, 3))
    processor.init(FakeHandle())
    rows = processor.handleInputRows(
        (BUCKET,),
        iter(
            [
                row(events.Followed(8, 7), 1),
                row(events.Followed(9, 7), 2),
                row(events.TweetPosted(100, 7, "ann", "a"), 3),
                row(events.TweetDeleted(100, 7), 4),
            ]
        ),
        None,
    )
    by_route = {r.route: decode_bundle(r.bundle) for r in rows}
    assert set(by_route) == {FIRST, 7, 3}
    first = by_route[FIRST]
    assert first.seq == 4 and first.mutations == [Mutation(Op.DELETE_BODY, (), (100,))]
    assert by_route[7].mutations == [
        Mutation(Op.FOLLOWED, (8,), (), 0, 1, authors=(7,), actor=7),
        Mutation(Op.ADD, (8,), (), 0, 1, actor=7),
        Mutation(Op.ADD, (8,), (100,), 0, 3, actor=7),
        Mutation(Op.REMOVE, (8,), (100,), actor=7),
    ]
    assert by_route[3].mutations == [
        Mutation(Op.FOLLOWED, (9,), (), 0, 2, authors=(7,), actor=7),
        Mutation(Op.ADD, (9,), (), 0, 2, actor=7),
        Mutation(Op.ADD, (7, 9), (100,), 0, 3, actor=7),
        Mutation(Op.REMOVE, (7, 9), (100,), actor=7),
    ]
    assert 8 not in {o for m in by_route[3].mutations for o in m.owners}
    assert by_route[7].bodies == {} and by_route[7].seq == 0


def test_relay_marks_become_the_newest_mark_per_partition() -> None:
    processor = JoinProcessor(TOPICS, cap=10, slack=2)
    processor.init(FakeHandle())

    def mark(topic: str, partition: int, seq: int) -> Row:
        key, _ = events.mark_record(partition, seq)
        return packed(
            MARKS,
            topic=topic,
            partition=partition,
            offset=seq,
            timestamp=5,
            key=key,
            value=None,
            seq=None,
            jk=None,
            mark=seq,
        )

    rows = [mark(TOPICS.tweets, 0, 4), mark(TOPICS.tweets, 0, 9), mark(TOPICS.follows, 1, 7)]
    bundle = run(processor, MARKS, rows)
    assert bundle.marks == {f"{TOPICS.tweets}/0": 9, f"{TOPICS.follows}/1": 7}
    assert bundle.mutations == [] and bundle.dead_letters == []


def test_a_timeline_reset_becomes_a_reset_of_its_owner() -> None:
    processor = JoinProcessor(TOPICS, cap=10, slack=2)
    processor.init(FakeHandle())
    reset = events.TimelineReset(8, (100, 200), 100, 11)
    record = events.encode(reset)
    bundle = run(
        processor,
        BUCKET,
        [
            packed(
                BUCKET,
                topic=TOPICS.timelines,
                partition=0,
                offset=0,
                timestamp=1,
                key=record.key,
                value=record.value,
                seq=12,
                jk=8,
            )
        ],
    )
    assert bundle.mutations == [Mutation(Op.RESET, (8,), (100, 200), 100, 12, 11)]


def test_a_tweets_likes_reposts_and_replies_are_counted_once_per_batch_beside_the_authors() -> None:
    processor = JoinProcessor(TOPICS, cap=2, slack=1)
    handle = FakeHandle()
    processor.init(handle)
    none = np.zeros(0, dtype=np.int64)
    liked = Engagements(np.array([8], dtype=np.int64), none, none)
    processor.handleInitialState(
        (BUCKET,), Row(join_key=50, blob=liked.encode(), kind=ENGAGEMENTS_STATE), None
    )
    bundle = run(
        processor,
        BUCKET,
        [
            row(events.Engaged(events.LIKE, 9, 50), 2),
            row(events.Engaged(events.LIKE, 8, 50), 3),  # a re-sent like
            row(events.Engaged(events.REPOST, 9, 50), 4),
            row(events.TweetPosted(60, 9, "bob", "", 50), 5),
            row(events.Engaged(events.LIKE, 9, 313), 6),
            row(events.Disengaged(events.LIKE, 9, 313), 7),  # undone in the same batch
            # Two replies to 50 (one sent twice), one to 314: members are the replies.
            row(events.Engaged(events.REPLY, 70, 50), 8),
            row(events.Engaged(events.REPLY, 71, 50), 9),
            row(events.Engaged(events.REPLY, 70, 50), 10),
            row(events.Engaged(events.REPLY, 400, 314), 11),
        ],
    )
    assert bundle.counts == {50: (2, 1, 2), 314: (0, 0, 1)}
    # The re-sent like and the like of 313 undone (a reply sent twice in one
    # batch is one member's last event).
    assert bundle.ignored == 2
    assert Engagements.decode(handle.maps["engagements"][(50,)][0]).counts == (2, 1, 2)
    assert (313,) not in handle.maps["engagements"]
    assert [m.reposts for m in bundle.mutations if m.op is Op.ADD] == [
        ((60, 50, 0),)
    ]  # (its original's author not given)
    gone = run(
        processor,
        BUCKET,
        [
            row(events.Disengaged(events.LIKE, 8, 50), 12),
            row(events.Disengaged(events.REPLY, 70, 50), 13),
            row(events.Disengaged(events.REPLY, 400, 314), 14),  # its only reply: no state
        ],
    )
    assert gone.counts == {50: (1, 1, 1), 314: (0, 0, 0)}
    assert (314,) not in handle.maps["engagements"]
