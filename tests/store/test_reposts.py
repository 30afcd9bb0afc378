"""Reposts in the timeline store: winners and pairs, promotion on undo, resets
with pairs, counts, tweet objects on reads, the rebuild's bulk writes. The
property tests against the model are in test_timeline_store.py."""

from __future__ import annotations

import orjson
import pytest
import redis

from fanout.model import events
from fanout.model.join import Mutation, Op
from fanout.store import keys
from fanout.store.ops import pack_pairs, read_header, timeline_ids
from fanout.store.reads import compose
from fanout.store.timelines import TimelineStore
from tests.conftest import LAYOUTS, layout_client
from tests.support.timeline_model import TimelineModel

GEN = 1
ZERO = {"likes": 0, "reposts": 0, "replies": 0}


@pytest.fixture
def store(redis_client: redis.Redis) -> TimelineStore:
    s = TimelineStore(redis_client, cap=5, slack=2)
    s.create_generation(GEN)
    return s


def state(store: TimelineStore, owner: int) -> tuple[list[int], list[tuple[int, int]], int, int]:
    """(winners, pairs, top, version) of a timeline."""
    packed = store.redis.get(keys.timeline(GEN, owner))
    assert isinstance(packed, bytes)
    header = read_header(packed)
    pairs = store.timeline_reposts(GEN, [owner])[0]
    return timeline_ids(packed), pairs, header.top, header.version


def add(store: TimelineStore, tweets: tuple[int, ...], reposts: dict[int, int], seq: int) -> None:
    pairs = tuple((t, reposts[t], 0) for t in tweets if t in reposts)
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), tweets, 0, seq, reposts=pairs)])


def test_a_repost_displaces_its_original_and_an_undo_brings_it_back(store: TimelineStore) -> None:
    add(store, (10, 20, 30), {}, 1)
    assert not store.redis.exists(keys.timeline_reposts(GEN, 7))  # posts only: no pairs
    add(store, (40,), {40: 20}, 2)  # newer than every winner: the short path
    assert state(store, 7) == ([10, 30, 40], [(20, 20), (20, 40)], 0, 0)
    add(store, (50,), {50: 20}, 3)  # a second repost of it
    assert state(store, 7) == ([10, 30, 50], [(20, 20), (20, 40), (20, 50)], 0, 0)
    add(store, (50,), {50: 20}, 3)  # replayed: nothing changes
    assert state(store, 7) == ([10, 30, 50], [(20, 20), (20, 40), (20, 50)], 0, 0)
    add(store, (45,), {45: 30}, 4)  # late: a repost of 30, below the newest
    assert state(store, 7) == (
        [10, 45, 50],
        [(20, 20), (20, 40), (20, 50), (30, 30), (30, 45)],
        0,
        1,
    )
    # Undo of the winner 50: 40 is the winner of 20 again, below what readers saw.
    store.apply(GEN, {}, [Mutation(Op.REMOVE, (7,), (50,), 0, 5)])
    assert state(store, 7) == ([10, 40, 45], [(20, 20), (20, 40), (30, 30), (30, 45)], 50, 2)
    store.apply(GEN, {}, [Mutation(Op.REMOVE, (7,), (40, 45), 0, 6)])
    assert state(store, 7) == ([10, 20, 30], [], 50, 3)
    assert not store.redis.exists(keys.timeline_reposts(GEN, 7))
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [30, 20, 10]


def test_reposts_of_originals_the_timeline_does_not_hold(store: TimelineStore) -> None:
    add(store, (10,), {}, 1)
    add(store, (20, 21), {20: 5, 21: 6}, 2)  # reposts of older tweets
    add(store, (22,), {22: 5}, 3)  # 5's newer repost wins
    assert state(store, 7) == ([10, 21, 22], [(5, 20), (5, 22), (6, 21)], 0, 0)
    add(store, (30, 31), {31: 30}, 4)  # a post and its repost in one add
    assert state(store, 7)[:2] == (
        [10, 21, 22, 31],
        [(5, 20), (5, 22), (6, 21), (30, 30), (30, 31)],
    )


def test_a_trim_keeps_the_winners_and_prunes_the_pairs_below_the_horizon(
    store: TimelineStore,
) -> None:
    add(store, (1, 2, 3), {}, 1)
    add(store, (4, 5), {4: 1, 5: 2}, 2)  # 1 and 2 are hidden: winners 3, 4, 5
    add(store, (6, 7, 8, 9), {}, 3)
    assert state(store, 7)[0] == [3, 4, 5, 6, 7, 8, 9]  # cap + slack = 7 winners
    add(store, (10,), {}, 4)  # 8 winners: trimmed to the newest 6, horizon 5
    ids, pairs, _, _ = state(store, 7)
    assert ids == [5, 6, 7, 8, 9, 10] and pairs == [(2, 5)]
    assert store.timeline(GEN, 7).horizon == 5  # type: ignore[union-attr]


def test_a_reset_carries_its_pairs_and_leaves_out_reposts_of_deleted_originals(
    store: TimelineStore,
) -> None:
    bodies = {t: b'{"id":%d}' % t for t in (1, 2, 3, 4, 11, 12, 13)}
    store.apply(GEN, bodies, [Mutation(Op.ADD, (7,), (4,), 0, 1)])
    reset = Mutation(
        Op.RESET, (7,), (1, 2, 3, 11, 12, 13), 0, 9, 8, reposts=((11, 1, 0), (12, 2, 0), (13, 3, 0))
    )
    store.apply(GEN, {}, [reset])
    store.apply(GEN, {}, [Mutation(Op.DELETE_BODY, (), (2,))])  # 2 deleted meanwhile
    store.release_resets(GEN, 9)
    # 12 (a repost of 2) goes with 2; 11 and 13 hide their originals.
    assert state(store, 7)[:2] == ([4, 11, 13], [(1, 1), (1, 11), (3, 3), (3, 13)])


def test_counts_are_written_absolute_and_read_by_id(store: TimelineStore) -> None:
    store.apply(GEN, {}, [], counts={5: (2, 1, 4), 6: (0, 3, 0), 8: (0, 0, 2)})
    assert store.counts([5, 6, 7, 8]) == [
        b'{"likes":2,"reposts":1,"replies":4}',
        b'{"likes":0,"reposts":3,"replies":0}',
        None,
        b'{"likes":0,"reposts":0,"replies":2}',
    ]
    store.apply(GEN, {}, [], counts={5: (0, 0, 0), 8: (0, 0, 1)})  # all 0: no key
    assert store.counts([5]) == [None] and not store.redis.exists(keys.counts(5))
    assert store.counts([8]) == [b'{"likes":0,"reposts":0,"replies":1}']


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_page_composes_reposts_with_their_originals_and_counts(
    request: pytest.FixtureRequest, layout: str
) -> None:
    """The script's tweet objects (entries.lua, one shard) and the Python ones
    (fanout.store.reads.compose, shards): the same, byte for byte where the
    script composes them."""
    client, shards = layout_client(request, layout)
    store = TimelineStore(client, cap=10, slack=2, shards=shards)
    assert store.ensure_active_generation() == GEN
    post = orjson.dumps(events.tweet_fields(1000, "ann", 'a "quoted", \\ text ✓, "created_at":'))
    other = orjson.dumps(events.tweet_fields(1001, "bob", "gone soon"))
    bodies = {
        1000: post,
        1001: other,
        1002: events.repost_json(1002, "cy", 1000),
        1003: events.repost_json(1003, "dee", 1001),  # its original is deleted below
        1004: b'{"id":1004,"author":"eve","text":"","created_at":"x"}',
    }
    reposts = ((1002, 1000, 0), (1003, 1001, 0))
    store.apply(
        GEN,
        bodies,
        [Mutation(Op.ADD, (7,), tuple(bodies), 0, 1, reposts=reposts)],
        counts={1000: (3, 1, 2), 1004: (1, 0, 0)},
    )
    store.apply(GEN, {}, [Mutation(Op.DELETE_BODY, (), (1001,))])
    page = store.read_page(7, count=10)
    assert page.status == "ok"
    tweets = orjson.loads(page.body)["tweets"]
    original = orjson.loads(post)
    assert tweets == [
        {
            "id": 1004,
            "author": "eve",
            "text": "",
            "created_at": "x",
            "repost_of": None,
            "counts": {"likes": 1, "reposts": 0, "replies": 0},
        },
        {
            "id": 1002,
            "author": "cy",
            "text": original["text"],
            # The original's, as its text: what it answers and whom it mentions.
            "in_reply_to": None,
            "mentions": [],
            "created_at": events.created_at_iso(1002),
            "repost_of": {"id": 1000, "author": "ann", "created_at": original["created_at"]},
            "counts": {"likes": 3, "reposts": 1, "replies": 2},
        },
    ]  # 1003's original is gone, and 1000 is hidden by its repost
    counts = b'{"likes":3,"reposts":1,"replies":2}'
    expected = [compose(bodies[1004], None, b'{"likes":1,"reposts":0,"replies":0}')]
    expected.append(compose(bodies[1002], post, counts))
    assert (
        page.body
        == b'{"tweets":[' + b",".join(e or b"" for e in expected) + b'],"next_max_id":null}'
    )
    assert compose(bodies[1003], None, None) is None
    assert orjson.loads(compose(b"{}", None, None) or b"") == {"repost_of": None, "counts": ZERO}


def test_the_rebuilds_bulk_writes_pack_winners_and_pairs(store: TimelineStore) -> None:
    raw = {10: 10, 20: 20, 30: 10, 40: 40, 50: 20}
    assert store.write_views(GEN, [(7, 0, raw), (8, 0, {1: 1})]) == 2
    assert state(store, 7)[:2] == ([30, 40, 50], [(10, 10), (10, 30), (20, 20), (20, 50)])
    assert not store.redis.exists(keys.timeline_reposts(GEN, 8))
    # A pulled author's list with reposts of the timeline's originals: per
    # original the greatest entry of both, above the highest horizon.
    # Its pairs carry each repost's original's author.
    store.write_list_views(GEN, [(9, 25, {35: 10, 45: 45, 60: 20, 5: 5}, {35: 3, 60: 4})])
    assert store.redis.get(keys.list_reposts(GEN, 9)) == pack_pairs([(10, 35, 3), (20, 60, 4)])
    store.redis.sadd(keys.pulls(GEN, 7), 9)
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [60, 45, 40, 35] and tl.horizon == 25
    store.redis.set(keys.active_generation(), GEN)
    page = store.read_page(7, count=2, max_id=59)
    assert page.status == "ok"
    assert [t["id"] for t in orjson.loads(page.body)["tweets"]] == []  # no bodies written
    assert page.body.endswith(b'"next_max_id":39}')  # 45, 40: two entries past 50's hiding


def test_the_rebuilds_counts_are_written_where_one_is_not_0(store: TimelineStore) -> None:
    assert store.write_counts({5: (1, 0, 0), 6: (0, 0, 3), 7: (0, 0, 0)}) == 2
    assert store.counts([5, 6, 7]) == [
        b'{"likes":1,"reposts":0,"replies":0}',
        b'{"likes":0,"reposts":0,"replies":3}',
        None,
    ]


@pytest.mark.parametrize("window", [3, 32])
def test_long_runs_and_many_originals_in_one_add_as_the_model_says(
    redis_client: redis.Redis, window: int
) -> None:
    """The short path's cases beyond the property test's usual sizes: a run of
    pairs longer than the window it reads first, several originals (old ones,
    posts it holds, a post and its repost) in one add, each batch's result
    the model's."""
    store = TimelineStore(redis_client, cap=40, slack=10, window=window)
    store.create_generation(GEN)
    model = TimelineModel(cap=40, slack=10)
    originals = {300 + k: 5 for k in range(12)}  # twelve reposts of 5
    originals |= {400: 50, 401: 7, 403: 402, 404: 60, 405: 150, 612: 5}
    batches = [
        (1, 2, 3, 5, 7, 50, 60, 150),
        tuple(range(300, 312)),  # a run of 12 pairs of 5
        (400, 401, 402, 403, 404, 405),  # reposts of posts it holds, a post and its repost
        (500,),
        (612,),  # one more repost of 5, newer than every winner: its run is 12 long
    ]
    for seq, tweets in enumerate(batches, 1):
        pairs = tuple((t, originals[t], 0) for t in tweets if t in originals)
        mutations = [Mutation(Op.ADD, (7,), tweets, 0, seq, reposts=pairs)]
        model.apply({}, mutations)
        store.apply(GEN, {}, mutations)
        expected = model.timelines[7]
        assert state(store, 7) == (expected.ids, expected.pairs, expected.top, expected.version)
    assert 311 not in model.timelines[7].ids and 612 in model.timelines[7].ids
