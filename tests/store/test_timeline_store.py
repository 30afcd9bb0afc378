"""The Redis timeline store against a real Redis: the same results as the model
(tests/support/timeline_model.py) for any workload, idempotent, refuses a generation
Redis lost, and the timeline header (horizon, fence, top, version) as specified."""

from __future__ import annotations

import random
import time

import orjson
import pytest
import redis
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fanout.model import events, owners
from fanout.model.author_state import AuthorState
from fanout.model.join import Mutation, Op, join_events
from fanout.store import keys
from fanout.store.keys import timeline as timeline_key
from fanout.store.ops import (
    IDLE,
    OP_COST,
    Header,
    by_entry,
    pack_pairs,
    pack_timeline,
    read_header,
    timeline_ids,
    unpack_ids,
    unpack_pairs,
)
from fanout.store.reads import compose
from fanout.store.timelines import GenerationMissing, TimelineStore
from tests.conftest import LAYOUTS, layout_client
from tests.store import repost_workload
from tests.support.join_sim import interleave, random_workload
from tests.support.timeline_model import TimelineModel

GEN = 1


@pytest.fixture
def store(redis_client: redis.Redis) -> TimelineStore:
    s = TimelineStore(redis_client, cap=5, slack=2)
    s.create_generation(GEN)
    return s


def raw(client: redis.Redis, owner: int) -> tuple[Header, list[int]]:
    packed = client.get(timeline_key(GEN, owner))
    assert isinstance(packed, bytes)
    return read_header(packed), timeline_ids(packed)


def test_add_remove_and_the_cap(store: TimelineStore, redis_client: redis.Redis) -> None:
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (1, 2, 3), 0, 1)])
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (i,), 0, i) for i in range(4, 8)])
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [7, 6, 5, 4, 3] and tl.horizon == 0  # 7 kept: cap + slack
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (8,), 0, 8)])  # over cap + slack: trimmed
    header, ids = raw(redis_client, 7)
    assert ids == [3, 4, 5, 6, 7, 8] and header.horizon == 3  # to cap + slack // 2
    assert header.fence == 8  # entries fell below the horizon at seq 8
    stats = store.apply(GEN, {}, [Mutation(Op.REMOVE, (7,), (8, 6), 0, 0)])
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [7, 5, 4, 3] and tl.horizon == 3
    assert stats.short == 1 and store.take_refills(10) == [7]  # 4 < cap above a horizon
    assert raw(redis_client, 7)[0].top == 8  # the newest it held is gone


def test_a_trim_fences_at_the_job_s_high_water_whatever_the_op_s_seq(
    store: TimelineStore,
) -> None:
    """What a trim drops below the horizon may have come from an author's key
    that ran ahead of the op's seq: the fence is the highest seq the job has
    applied, so a refill read before it is stale. Without a trim, no fence."""
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (10, 11, 12), 0, 3)], high_water=500)
    assert raw(store.redis, 7)[0].fence == 0  # nothing fell below: no fence
    # The append path (newer than every entry), over cap + slack: trimmed.
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (13, 14, 15, 16, 17), 0, 4)], high_water=500)
    header, ids = raw(store.redis, 7)
    assert header.horizon == ids[0] > 10 and header.fence == 500
    # A merge below the newest (rewriting the tail): trimmed again, fenced higher.
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (18, 30), 0, 5)], high_water=600)
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (19, 20), 0, 6)], high_water=600)
    header, ids = raw(store.redis, 7)
    assert 19 in ids and header.fence == 600


@pytest.mark.parametrize(
    ("tweets", "view", "horizon"),
    [((17,), [12, 13, 14, 15, 16], 12), ((17, 18), [13, 14, 15, 16, 18], 13)],
)
def test_a_reply_going_aside_trims_a_full_timeline_as_the_model_does(
    store: TimelineStore, tweets: tuple[int, ...], view: list[int], horizon: int
) -> None:
    """The cap counts the replies kept aside: a reply that goes aside from a
    full timeline (cap + slack entries) trims it to its newest cap + slack // 2
    with the aside, whether nothing else of its op is merged or a post is."""
    adds = [
        Mutation(Op.ADD, (7,), tuple(range(10, 17)), 0, 1, actor=2),
        Mutation(Op.ADD, (7,), tweets, 0, 2, actor=2, answers=((17, 9),)),  # 7 follows no 9
    ]
    model = TimelineModel(cap=5, slack=2)
    for m in adds:
        store.apply(GEN, {}, [m])
        model.apply({}, [m])
    header, ids = raw(store.redis, 7)
    assert (header.horizon, ids) == (horizon, view)
    assert (model.timelines[7].horizon, model.timelines[7].ids) == (horizon, view)
    assert unpack_pairs(store.redis.get(keys.aside(GEN, 7)) or b"") == [(9, 17)]


def test_a_merge_with_a_horizon_raises_the_timelines_and_sets_the_fence(
    store: TimelineStore,
) -> None:
    # 8 ids for a timeline of at most 7: the newest 7 are merged, 11 their horizon.
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), tuple(range(10, 18)), 0, 1)])
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.horizon == 11 and tl.ids == [17, 16, 15, 14, 13]
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (10, 20), 0, 2)])  # 10 is below the horizon
    header, ids = raw(store.redis, 7)
    assert header.fence == 2 and ids == [13, 14, 15, 16, 17, 20]  # over 7: trimmed to 6
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.horizon == 13 and tl.ids == [20, 17, 16, 15, 14]
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (16, 30), 16, 3)])
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.horizon == 16 and tl.ids == [30, 20, 17, 16]
    assert store.take_refills(10) == [7]  # only 4 left above the horizon: short


def test_out_of_order_inserts_rewrite_only_the_tail_and_change_the_version(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (10, 20, 30), 0, 1)])
    assert store.timeline(GEN, 7).version == 0  # type: ignore[union-attr]
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (15, 25, 30, 40), 0, 2)])  # one duplicate
    assert timeline_ids(redis_client.get(timeline_key(GEN, 7)) or b"") == [10, 15, 20, 25, 30, 40]
    assert store.timeline(GEN, 7).version == 1  # type: ignore[union-attr]  # one late write
    assert store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (15, 25), 0, 3)]).added == 0
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (50,), 0, 4)])  # the newest: an append
    assert store.timeline(GEN, 7).version == 1  # type: ignore[union-attr]
    store.apply(GEN, {}, [Mutation(Op.REMOVE, (7,), (50,), 0, 0)])
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (45,), 0, 5)])  # below the newest it held
    assert store.timeline(GEN, 7).version == 2  # type: ignore[union-attr]


@settings(max_examples=40, deadline=None)
@pytest.mark.usefixtures("redis_url")
@given(seed=st.integers(0, 2**32), cap=st.integers(20, 60), shares=st.integers(2, 3))
def test_executors_shares_of_a_batch_land_among_each_other_as_the_model_says(
    request: pytest.FixtureRequest, seed: int, cap: int, shares: int
) -> None:
    """Each executor of a micro-batch writes its share of a follower's new
    tweets, so every share after the first lands among the entries the
    others just wrote (the script reads only the newest entries, or the
    whole timeline when a share reaches further back): headers and ids stay
    the model's, trims included, with duplicates, tweets older than the
    whole timeline, and re-sent shares."""
    redis_client, _ = layout_client(request, "single")
    store = TimelineStore(redis_client, cap=cap, slack=cap // 4)
    store.create_generation(GEN)
    model = TimelineModel(cap=cap, slack=cap // 4)
    rnd = random.Random(seed)
    owners, seq, newest = (7, 8), 0, 1000
    for _ in range(rnd.randint(3, 12)):
        batch = sorted(rnd.sample(range(newest, newest + 400), rnd.randint(1, 120)))
        newest += 400
        if rnd.random() < 0.3:  # a few old tweets arriving late, some already there
            batch = sorted({*batch, *rnd.sample(range(900, newest), 5)})
        parts: list[list[int]] = [[] for _ in range(shares)]
        for tweet in batch:
            parts[rnd.randrange(shares)].append(tweet)
        if rnd.random() < 0.2:
            parts.append(list(parts[0]))  # a share sent again
        for part in parts:
            seq += 1
            mutations = [Mutation(Op.ADD, owners, tuple(part), 0, seq)]
            model.apply({}, mutations)
            store.apply(GEN, {}, mutations)
    for owner in owners:
        expected = model.timelines[owner]
        header, ids = raw(redis_client, owner)
        assert (header.horizon, header.fence, header.top, header.version) == (
            expected.horizon,
            expected.fence,
            expected.top,
            expected.version,
        )
        assert ids == expected.ids


def test_a_long_share_lands_among_a_long_timeline_as_the_model_says(
    redis_client: redis.Redis,
) -> None:
    """Hundreds of ids on both sides of an insert (the script decodes and
    packs them 500 at a time): the same timeline as the model's."""
    store = TimelineStore(redis_client, cap=1200, slack=300)
    store.create_generation(GEN)
    model = TimelineModel(cap=1200, slack=300)
    first = [Mutation(Op.ADD, (7,), tuple(range(1000, 15000, 20)), 0, 1)]  # 700 ids
    second = [Mutation(Op.ADD, (7,), tuple(range(1010, 13010, 20)), 0, 2)]  # 600 among them
    for mutations in (first, second):
        model.apply({}, mutations)
        store.apply(GEN, {}, mutations)
    header, ids = raw(redis_client, 7)
    expected = model.timelines[7]
    assert len(ids) == 1300 and ids == expected.ids
    assert (header.horizon, header.version) == (expected.horizon, expected.version) == (0, 1)


def test_an_add_below_the_horizon_of_an_empty_timeline_is_left_out(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    # What a refill leaves when every tweet it held was deleted since.
    redis_client.set(timeline_key(GEN, 7), pack_timeline(100, []))
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (50,), 0, 3)])
    header, ids = raw(redis_client, 7)
    assert ids == [] and header.horizon == 100 and header.fence == 3
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (150,), 0, 4)])
    assert raw(redis_client, 7)[1] == [150]


def test_empty_add_materializes_an_empty_timeline(store: TimelineStore) -> None:
    assert store.timeline(GEN, 42) is None
    stats = store.apply(GEN, {}, [Mutation(Op.ADD, (42,), ())])
    assert stats.created == 1
    tl = store.timeline(GEN, 42)
    assert tl is not None and tl.ids == [] and tl.horizon == 0


def test_bodies_are_put_and_deleted(store: TimelineStore, redis_client: redis.Redis) -> None:
    store.apply(GEN, {5: b'{"id":5}', 6: b'{"id":6}'}, [])
    store.apply(GEN, {7: b'{"id":7}'}, [Mutation(Op.DELETE_BODY, (), (5,))])
    assert redis_client.get("tw:5") is None and redis_client.get("tw:6") == b'{"id":6}'
    assert redis_client.get("tw:7") == b'{"id":7}'


def test_a_reset_waits_for_the_watermark_and_skips_deleted_tweets(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    store.apply(GEN, {t: b"{}" for t in (1, 2, 3)}, [Mutation(Op.ADD, (7,), (3,), 0, 1)])
    store.apply(GEN, {}, [Mutation(Op.RESET, (7,), (1, 2, 3), 0, 9, 8)])
    assert store.timeline(GEN, 7).ids == [3]  # type: ignore[union-attr]
    store.release_resets(GEN, 8)
    assert store.timeline(GEN, 7).ids == [3]  # type: ignore[union-attr]  # not yet: seq 9
    redis_client.delete("tw:2")  # deleted meanwhile
    store.release_resets(GEN, 9)
    assert store.timeline(GEN, 7).ids == [3, 1]  # type: ignore[union-attr]
    assert not redis_client.exists(keys.resets(GEN))


def test_a_mentions_timeline_is_refilled_screened_and_dropped_with_its_user(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    """-5 is user 5's mentions timeline: a refill lands there (not at 5), a
    mention by a user 5 hides is left out, and the idle sweep of 5 takes both."""
    bodies = {t: b"{}" for t in (1, 2, 3, 4)}
    store.apply(GEN, bodies, [Mutation(Op.ADD, (5,), (4,), 0, 1)])
    store.apply(GEN, {}, [Mutation(Op.RESET, (-5,), (1, 2), 0, 2, 1)])
    store.release_resets(GEN, 2)
    assert store.timeline(GEN, -5).ids == [2, 1]  # type: ignore[union-attr]
    assert store.timeline(GEN, 5).ids == [4]  # type: ignore[union-attr]
    store.apply(GEN, {}, [Mutation(Op.FILTER, (5,), (8,), 0, 3)])  # 5 hides 8: emptied
    assert sorted(store.take_refills(10)) == [-5, 5]
    store.apply(GEN, {}, [Mutation(Op.RESET, (-5,), (1, 2), 0, 4, 3)])
    store.release_resets(GEN, 4)
    store.apply(
        GEN,
        {},
        [
            Mutation(Op.MENTION, (-5,), (3,), 0, 5, authors=(8,), actor=8),
            Mutation(Op.MENTION, (-5,), (4,), 0, 5, authors=(9,), actor=9),
        ],
    )
    assert store.timeline(GEN, -5).ids == [4, 2, 1]  # type: ignore[union-attr]
    assert store.drop_idle(GEN, [5]) == 1  # counted once: users
    assert redis_client.get(timeline_key(GEN, -5)) == redis_client.get(timeline_key(GEN, 5)) == IDLE


def test_a_reset_older_than_the_fence_is_dropped(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    redis_client.set(timeline_key(GEN, 7), pack_timeline(5, [5, 6], Header(fence=20)))
    store.apply(GEN, {1: b"{}"}, [Mutation(Op.RESET, (7,), (1,), 0, 30, 19)])
    store.release_resets(GEN, 30)
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [6, 5] and tl.horizon == 5
    assert store.take_refills(10) == [7]  # still short: asked for again


def test_replaying_a_batch_changes_nothing(store: TimelineStore, redis_client: redis.Redis) -> None:
    batch = [
        Mutation(Op.ADD, (1, 2, 3), (10, 11), 0, 1),
        Mutation(Op.REMOVE, (2,), (10,), 0, 2),
        Mutation(Op.ADD, (4,), tuple(range(1, 12)), 3, 3),
    ]

    def timelines() -> dict[bytes, tuple[int, int, int, list[int]]]:
        out = {}
        for key in redis_client.keys("tl:*"):
            packed = redis_client.get(key) or b""
            h = read_header(packed)
            out[key] = (h.horizon, h.fence, h.top, timeline_ids(packed))
        return out

    store.apply(GEN, {10: b"x"}, batch)
    before = timelines()
    store.apply(GEN, {10: b"x"}, batch)
    # Only the version may move: the replay re-adds 10 below 11 before removing it
    # again, which a poller sees as one more reason to re-read (harmless).
    assert timelines() == before


def test_a_missing_generation_is_refused_and_nothing_is_written(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    with pytest.raises(GenerationMissing, match="generation 2"):
        store.apply(2, {1: b"x"}, [Mutation(Op.ADD, (1,), (1,))])
    assert redis_client.get("tw:1") is None and store.timeline(2, 1) is None


def test_huge_fanout_is_split_into_bounded_script_calls(redis_client: redis.Redis) -> None:
    store = TimelineStore(redis_client, cap=800)
    store.create_generation(GEN)
    owners = tuple(range(1, 10_001))
    stats = store.apply(GEN, {}, [Mutation(Op.ADD, owners, (99,))])
    per_call = -(-TimelineStore.CHUNK // (OP_COST + 1))  # single-id adds in one call
    assert stats.added == 10_000 and stats.calls == -(-10_000 // per_call) == 23
    assert redis_client.get(timeline_key(GEN, 10_000)) == pack_timeline(0, [99])


def test_watermark_moves_once_per_batch(store: TimelineStore) -> None:
    def record(batch: int, seq: int, contiguous: int, **counters: int) -> bool:
        return store.record_watermark(
            GEN,
            batch_id=batch,
            seq=seq,
            marks={"t/0": contiguous},
            contiguous=contiguous,
            event_time=1.5 if batch == 0 else 0,
            offsets={"t": {"0": batch + 3}},
            counters=counters,
        )

    assert record(0, 10, 6, deliveries=5)
    assert not record(0, 10, 6, deliveries=5)
    record(1, 8, 9, deliveries=2)
    wm = store.watermark(GEN)
    assert wm is not None
    assert (wm.seq, wm.contiguous, wm.batch_id, wm.event_time) == (10, 9, 1, 1.5)
    assert wm.offsets == {"t": {"0": 4}} and wm.marks == {"t/0": 9}
    assert wm.counters == {"deliveries": 7}
    assert store.contiguous_watermark(GEN) == 9


@pytest.mark.parametrize("layout", ["sharded", "cluster"])
def test_a_shard_that_lost_a_batch_holds_the_applied_batch_back(
    request: pytest.FixtureRequest, layout: str
) -> None:
    """Each shard's copy of the watermark names its batch; a shard whose primary
    failed over before it had the last batch's writes brings the applied batch
    back to its own (the supervisor then runs the batches since again), and
    its reads see the watermark its copy has. The next batch does not hide the
    loss: that shard's copy stays behind until the lost batches run again."""
    client, shards = layout_client(request, layout)
    store = TimelineStore(client, cap=5, slack=2, shards=shards)
    assert store.ensure_active_generation() == GEN
    store.seed_watermark(GEN, seq=0, marks={}, contiguous=0, offsets={})
    assert store.applied_batch(GEN) == -1

    def run_batch(batch: int) -> None:
        store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (100 + batch,), 0, batch + 1)])
        store.record_watermark(
            GEN,
            batch_id=batch,
            seq=batch + 1,
            marks={},
            contiguous=batch + 1,
            event_time=0,
            offsets={},
            counters={},
        )

    for batch in range(3):
        run_batch(batch)
    assert store.applied_batch(GEN) == 2
    page = store.read_page(7, count=5)
    assert (page.status, page.watermark_seq) == ("ok", 3)
    # What a replica two batches behind becomes once promoted.
    tag = shards.tag_of(7)
    client.hset(keys.watermark(GEN, tag), mapping={"batch_id": 0, "contiguous": 1})
    assert store.applied_batch(GEN) == 0
    assert store.read_page(7, count=5).watermark_seq == 1
    run_batch(3)  # the job went on before the supervisor looked
    assert store.applied_batch(GEN) == 0
    assert store.read_page(7, count=5).watermark_seq == 1
    for batch in (1, 2, 3):  # run again from the shard's batch on (the supervisor's rewind)
        run_batch(batch)
    assert store.applied_batch(GEN) == 3
    assert store.read_page(7, count=5).watermark_seq == 4


@pytest.mark.parametrize("layout", ["sharded", "cluster"])
def test_a_batch_run_again_with_more_records_moves_every_watermark(
    request: pytest.FixtureRequest, layout: str
) -> None:
    """The supervisor's rewind drops the offsets of the batches it runs again,
    so Spark plans them anew: the first one run again takes what the log holds
    by then, more than it first had. What it applied shows at once, in the
    watermark and in every shard's copy, the copies past that batch (the shards
    that kept their writes) too; not only once a batch past the old last one
    runs, which may be never if the writes stop."""
    client, shards = layout_client(request, layout)
    store = TimelineStore(client, cap=5, slack=2, shards=shards)
    assert store.ensure_active_generation() == GEN
    store.seed_watermark(GEN, seq=0, marks={}, contiguous=0, offsets={})
    users = list({shards.tag_of(u): u for u in range(1, 5000)}.values())
    assert len(users) == shards.count
    start = time.time()  # after the seed's event time

    def run_batch(batch: int, seq: int) -> bool:
        store.apply(GEN, {}, [Mutation(Op.ADD, tuple(users), (100 + seq,), 0, seq)])
        return store.record_watermark(
            GEN,
            batch_id=batch,
            seq=seq,
            marks={"t/0": seq},
            contiguous=seq,
            event_time=start + seq,
            offsets={"t": {"0": seq}},
            counters={"deliveries": len(users)},
        )

    for batch in range(3):
        assert run_batch(batch, seq=batch + 1)
    lost = users[0]  # its shard's primary failed over to a replica two batches behind
    client.hset(keys.watermark(GEN, shards.tag_of(lost)), mapping={"batch_id": 0, "contiguous": 1})
    assert store.applied_batch(GEN) == 0
    assert not run_batch(1, seq=9)  # run again, planned anew: everything up to seq 9
    wm = store.watermark(GEN)
    assert wm is not None
    assert (wm.batch_id, wm.seq, wm.contiguous, wm.event_time) == (2, 9, 9, start + 9)
    assert wm.marks == {"t/0": 9} and wm.offsets == {"t": {"0": 3}}
    assert wm.counters == {"deliveries": 3 * len(users)}  # a batch run again counts once
    assert store.applied_batch(GEN) == 1  # the lost shard's copy moved one batch on
    assert [store.read_page(u, count=5).watermark_seq for u in users] == [9] * len(users)


def test_dead_letters_are_keyed_by_position(store: TimelineStore) -> None:
    record = {"topic": "t", "partition": 1, "offset": 7, "error": "bad"}
    store.dead_letter([record, record])
    store.dead_letter([record])
    assert store.dead_letter_count() == 1 and store.dead_letters() == [record]


def test_timeline_lengths_come_from_sizes_and_tell_dropped_and_missing_apart(
    store: TimelineStore,
) -> None:
    store.write_timelines(GEN, [(1, pack_timeline(0, [])), (2, pack_timeline(5, [7, 8, 9]))])
    store.write_timelines(GEN, [(3, pack_timeline(0, list(range(10, 1010))))])
    store.write_dropped(GEN, [4])
    assert store.timeline_lengths(GEN, [1, 2, 3, 4, 5]) == [0, 3, 1000, -1, None]


def test_generations(store: TimelineStore, redis_client: redis.Redis) -> None:
    assert store.active_generation() is None
    assert store.ensure_active_generation() == 1
    store.create_generation(5)
    store.switch(5, 1)
    assert store.active_generation() == 5
    assert store.generation_meta(1)["state"] == "retired"


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=30, deadline=None)
# A stale reset of a regenerating idle user: its tombstone stays until replaced.
@example(seed=760212, cap=2, slack=1, jitter=0, threshold=2, replies=0.0)
@given(
    seed=st.integers(0, 2**32),
    cap=st.integers(2, 6),
    slack=st.integers(1, 3),
    jitter=st.sampled_from([0, 25]),
    threshold=st.sampled_from([0, 2]),
    replies=st.sampled_from([0.0, 0.3]),
)
def test_the_lua_store_does_what_the_model_does(
    request: pytest.FixtureRequest,
    layout: str,
    seed: int,
    cap: int,
    slack: int,
    jitter: int,
    threshold: int,
    replies: float,
) -> None:
    """Any workload, pulled authors crossing the threshold or not, with replies
    or without: the same timelines, lists, pulls, replies aside and shown,
    followees and merged views as the model, on a single Redis (its keys in one
    shard or several) and on a Redis Cluster."""
    client, shards = layout_client(request, layout)
    tag = shards.tag_of
    store = TimelineStore(client, cap=cap, slack=slack, shards=shards)
    assert store.ensure_active_generation() == GEN
    model = TimelineModel(cap=cap, slack=slack)
    rnd = random.Random(seed)
    world, envs = random_workload(
        rnd,
        6,
        steps=80,
        jitter=jitter,
        resets=0.2,
        pull_threshold=threshold,
        replies=replies,
        relations=replies,
        lists=replies,
    )
    every_list = [owners.list_owner(x) for x in sorted({*world.lists, *world.deleted_lists})]
    states: dict[int, AuthorState] = {}
    applied: set[int] = set()
    written = {e.seq for e in envs}
    skipped = 0
    for batch in interleave(rnd, envs):
        # Between batches, the idle sweep drops a timeline or a returning user's
        # read claims its regeneration (the resets of the workload then complete it).
        user = rnd.randint(1, 6)
        if rnd.random() < 0.15:
            mine = [o for o in every_list if owners.user_of(o) == user]
            model.drop(user, mine)
            store.drop_idle(GEN, [user], lists=mine)
        elif rnd.random() < 0.15 and user not in model.timelines:
            model.regenerating.add(user)
            store.claim_regeneration(GEN, user, window=600)
        by_key: dict[int, list] = {}
        for env in batch:
            if not isinstance(env.event, events.Engaged | events.Disengaged):  # counted apart
                by_key.setdefault(env.event.join_key, []).append(env)
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for author, group in by_key.items():
            result = join_events(
                author,
                states.get(author, AuthorState()),
                group,
                cap=cap,
                slack=slack,
                pull_threshold=threshold,
            )
            states[author] = result.state
            bodies.update(result.bodies)
            mutations += result.mutations
        model.apply(bodies, mutations)
        skipped += store.apply(GEN, bodies, mutations).skipped
        applied |= {e.seq for e in batch}
        missing = sorted(written - applied)
        watermark = missing[0] - 1 if missing else max(written)
        model.release(watermark)
        skipped += store.release_resets(GEN, watermark).skipped
    assert skipped == model.skipped
    for user in [*range(1, 7), *every_list]:
        assert unpack_ids(client.get(keys.followees(GEN, user, tag(user))) or b"") == sorted(
            model.follows.get(user, ())
        ), f"user {user}"
        expected = model.timelines.get(user)
        aside, shown = (expected.aside, expected.cond) if expected else ({}, {})
        for key, held in (
            (keys.aside(GEN, user, tag(user)), aside),
            (keys.shown_replies(GEN, user, tag(user)), shown),
        ):
            records = unpack_pairs(client.get(key) or b"")
            assert records == by_entry((u, e) for e, u in held.items()), f"user {user} {key}"
    for owner in [*range(1, 7), *range(-6, 0), *every_list]:  # home, mentions, lists
        expected = model.timelines.get(owner)
        packed = client.get(timeline_key(GEN, owner, tag(owner)))
        pending = client.exists(keys.regeneration(GEN, owner, tag(owner)))
        assert bool(pending) == (owner in model.regenerating), f"owner {owner}"
        if expected is None:
            assert packed == (IDLE if owner in model.idle else None), f"owner {owner}"
            continue
        assert isinstance(packed, bytes)
        header = read_header(packed)
        assert (header.horizon, header.fence, header.top, header.version) == (
            expected.horizon,
            expected.fence,
            expected.top,
            expected.version,
        ), f"owner {owner}"
        assert timeline_ids(packed) == expected.ids
        assert store.pulled_authors(owner) == tuple(sorted(model.pulls.get(owner, ())))
        view, merged = model.view(owner), store.timeline(GEN, owner)
        assert view is not None and merged is not None
        assert (merged.horizon, merged.ids, merged.version) == (*view, model.version(owner))
    for author, expected in model.lists.items():
        packed = client.get(keys.author_list(GEN, author, tag(author)))
        assert isinstance(packed, bytes)
        header = read_header(packed)
        assert (header.horizon, header.top, header.version) == (
            expected.horizon,
            expected.top,
            expected.version,
        ), f"author {author}"
        assert timeline_ids(packed) == expected.ids
    assert {int(k[3:].split(b"}")[-1]) for k in client.scan_iter("tw:*")} == set(model.bodies)
    assert set(store.take_refills(100)) == model.refill


def test_a_script_error_names_the_lua_file_and_line(store: TimelineStore) -> None:
    from importlib import resources

    from fanout.store.scripts import Script

    apply = Script(store.redis, "apply")
    # an add with a bad horizon
    with pytest.raises(redis.ResponseError) as failure:
        apply(args=[GEN, 5, 2, 32, 0, 1, 7, "not a number", 1, b"", b"", b""])
    message = str(failure.value)
    assert "fanout/store/lua/apply.lua:" in message and "user_script" not in message
    line = int(message.split("fanout/store/lua/apply.lua:")[1].split(":")[0])
    in_file = resources.files("fanout.store").joinpath("lua", "apply.lua").read_text().splitlines()
    assert "if hm > h.horizon then" in in_file[line - 1]  # where the bad horizon is compared


def reference_page(
    visible: list[int], older: bool, count: int, max_id: int, since_id: int
) -> tuple[str, list[int], int | None, bool]:
    """What a page is, from the visible entries (newest first) and whether the
    join has older ones: (status, ids, next_max_id, partial)."""
    window = [i for i in visible if not max_id or i <= max_id]
    if max_id and not window and older:
        return "beyond", [], None, False
    below = older and (not visible or since_id < visible[-1])
    after = [i for i in window if i > since_id]
    page = after[:count]
    more = len(after) > count
    nxt = page[-1] - 1 if page and (more or below) else None
    partial = below and len(page) < count and not more
    if partial and not page:
        nxt = max_id or 2**53 - 1
    return "ok", page, nxt, partial


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    lists=st.integers(0, 4),
    cap=st.integers(1, 12),
)
def test_a_merged_read_pages_like_the_merged_view(
    request: pytest.FixtureRequest, layout: str, seed: int, lists: int, cap: int
) -> None:
    """A timeline and the lists of the pulled authors its owner follows, each
    with its own horizon: every page (any count, max_id, since_id) is the one
    the merged view gives (in one script call on one shard)."""
    client, shards = layout_client(request, layout)
    tag = shards.tag_of
    store = TimelineStore(client, cap=cap, slack=2, shards=shards)
    assert store.ensure_active_generation() == GEN
    rnd = random.Random(seed)
    pool = rnd.sample(range(1000, 1400), 120)
    owner, sources = 7, []
    for i in range(lists + 1):
        ids = sorted(pool[i :: lists + 1][: rnd.randint(0, 20)])
        horizon = rnd.choice([0, *ids[:3]]) if ids else 0
        ids = [t for t in ids if t >= horizon]
        sources.append((horizon, ids))
        packed = pack_timeline(horizon, ids, Header(version=i * 10 + 1))
        if i == 0:
            client.set(timeline_key(GEN, owner, tag(owner)), packed)
        else:
            client.set(keys.author_list(GEN, 100 + i, tag(100 + i)), packed)
            client.sadd(keys.pulls(GEN, owner, tag(owner)), 100 + i)
    store.write_bodies((t, b'{"id":%d}' % t) for t in pool)
    floor = max(h for h, _ in sources)
    entries = sorted((t for _, ids in sources for t in ids if t >= floor), reverse=True)
    visible, older = entries[:cap], len(entries) > cap or floor > 0
    merged = store.timeline(GEN, owner)
    assert merged is not None and (merged.horizon, merged.ids) == (floor, visible)
    assert merged.version == sum(i * 10 + 1 for i in range(lists + 1))
    for _ in range(25):
        count = rnd.randint(1, 6)
        max_id = rnd.choice([0, rnd.randint(990, 1410), *visible[:3]])
        since_id = rnd.choice([0, rnd.randint(990, 1410), *visible[-3:]])
        page = store.read_page(owner, count=count, max_id=max_id, since_id=since_id)
        status, ids, nxt, partial = reference_page(visible, older, count, max_id, since_id)
        assert page.status == status, (count, max_id, since_id)
        if status == "ok":
            body = orjson.loads(page.body)
            assert [t["id"] for t in body["tweets"]] == ids, (count, max_id, since_id)
            assert (body["next_max_id"], page.partial) == (nxt, partial), (count, max_id, since_id)
        assert page.version == merged.version


def _state(client: redis.Redis, shards: keys.Shards, model: TimelineModel) -> None:
    """Redis holds what the model does: timelines and lists (winners, headers,
    pairs), pulled sets, merged views, bodies, counts, refills."""
    tag = shards.tag_of
    store_view = TimelineStore(client, cap=model.cap, slack=model.slack, shards=shards)
    for user in repost_workload.OWNERS:
        expected = model.timelines.get(user)
        packed = client.get(timeline_key(GEN, user, tag(user)))
        pairs = client.get(keys.timeline_reposts(GEN, user, tag(user)))
        pending = client.exists(keys.regeneration(GEN, user, tag(user)))
        assert bool(pending) == (user in model.regenerating), f"user {user}"
        if expected is None:
            assert packed == (IDLE if user in model.idle else None), f"user {user}"
            assert pairs is None, f"user {user}"
            continue
        assert isinstance(packed, bytes)
        header = read_header(packed)
        assert (header.horizon, header.fence, header.top, header.version) == (
            expected.horizon,
            expected.fence,
            expected.top,
            expected.version,
        ), f"user {user}"
        assert timeline_ids(packed) == expected.ids, f"user {user}"
        assert (pairs or None) == (pack_pairs(expected.pairs) or None), f"user {user}"
        assert store_view.pulled_authors(user) == tuple(sorted(model.pulls.get(user, ())))
        view, merged = model.view(user), store_view.timeline(GEN, user)
        assert view is not None and merged is not None
        assert (merged.horizon, merged.ids, merged.version) == (*view, model.version(user))
    for author, expected in model.lists.items():
        packed = client.get(keys.author_list(GEN, author, tag(author)))
        assert isinstance(packed, bytes)
        header = read_header(packed)
        assert (header.horizon, header.top, header.version) == (
            expected.horizon,
            expected.top,
            expected.version,
        ), f"author {author}"
        assert timeline_ids(packed) == expected.ids
        pairs = client.get(keys.list_reposts(GEN, author, tag(author)))
        assert (pairs or None) == (pack_pairs(expected.list_pairs) or None), f"author {author}"
    assert {int(k[3:].split(b"}")[-1]) for k in client.scan_iter("tw:*")} == set(model.bodies)
    counts = {int(k[3:].split(b"}")[-1]): client.get(k) for k in client.scan_iter("ct:*")}
    assert counts == model.counts


def _pages(store: TimelineStore, model: TimelineModel, rnd: random.Random, rounds: int = 4) -> None:
    """Pages (any count, max_id, since_id, at hidden duplicates too; ``rounds``
    of them per user) are the model's merged view's, each entry composed with
    its original and counts as fanout.store.reads.compose does (entries.lua
    inside a one-shard read)."""
    for user in repost_workload.OWNERS:
        merged = model.merged(user)
        if merged is None or user in model.regenerating:
            assert store.read_page(user, count=3).status == "cold", f"user {user}"
            continue
        floor, entries = merged
        visible, older = entries[: model.cap], len(entries) > model.cap or floor > 0
        tl = model.timelines[user]
        lists = [model.lists[a] for a in model.pulls.get(user, ()) if a in model.lists]
        raw = sorted({t for s in (tl, *lists) for t in s.raw})  # hidden entries too
        for _ in range(rounds):
            count = rnd.randint(1, 4)
            near = [t + d for t in rnd.sample(raw, min(2, len(raw))) for d in (-1, 0, 1)]
            max_id = rnd.choice([0, *near, *visible[:2]])
            since_id = rnd.choice([0, 0, *near, *visible[-2:]])
            page = store.read_page(user, count=count, max_id=max_id, since_id=since_id)
            status, ids, nxt, partial = reference_page(visible, older, count, max_id, since_id)
            where = (user, count, max_id, since_id)
            assert page.status == status, where
            if status != "ok":
                continue
            expected = []
            for t in ids:
                if t not in model.bodies:
                    continue
                o = model.original(user, t)
                tweet = compose(model.bodies[t], model.bodies.get(o), model.counts.get(o))
                if tweet is not None:
                    expected.append(orjson.loads(tweet))
            body = orjson.loads(page.body)
            assert body["tweets"] == expected, where
            assert (body["next_max_id"], page.partial) == (nxt, partial), where
            assert page.version == model.version(user), where


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    cap=st.integers(2, 6),
    slack=st.integers(1, 3),
    window=st.integers(1, 4),
)
def test_the_lua_store_does_what_the_model_does_with_reposts(
    request: pytest.FixtureRequest, layout: str, seed: int, cap: int, slack: int, window: int
) -> None:
    """Random mutations with reposts (new and late ones, undos, deletes of
    reposted originals, merges and removals, horizons, resets with pairs,
    pulled lists with reposts, pulls and unpulls, counts), to home timelines
    and to lists' (owners -L: filters, the owner's own reposts, drops), idle drops and
    regenerations between batches: Redis holds what the model says after
    every batch, and the merged views dedup per original across sources. The
    script's window (the newest winners and pairs it reads first for a
    repost) is smaller than the timelines, so both its reads are taken."""
    client, shards = layout_client(request, layout)
    store = TimelineStore(client, cap=cap, slack=slack, shards=shards, window=window)
    assert store.ensure_active_generation() == GEN
    model = TimelineModel(cap=cap, slack=slack)
    rnd = random.Random(seed)
    workload = repost_workload.RepostWorkload(rnd)
    skipped = 0
    for _ in range(rnd.randint(10, 40)):
        user = rnd.choice(repost_workload.OWNERS)
        if rnd.random() < 0.05:  # a user goes idle, with its lists
            user = owners.user_of(user)
            mine = [x for x in repost_workload.LISTS if owners.user_of(x) == user]
            model.drop(user, mine)
            store.drop_idle(GEN, [user], lists=mine)
        elif rnd.random() < 0.05 and user not in model.timelines:
            model.regenerating.add(user)
            store.claim_regeneration(GEN, user, window=600)
        batch = workload.batch()
        model.apply(batch.bodies, batch.mutations, batch.counts)
        skipped += store.apply(GEN, batch.bodies, batch.mutations, counts=batch.counts).skipped
        if rnd.random() < 0.5:
            model.release(workload.seq)
            skipped += store.release_resets(GEN, workload.seq).skipped
        _state(client, shards, model)
        _pages(store, model, rnd)
    assert skipped == model.skipped
    assert set(store.take_refills(100)) == model.refill


@pytest.mark.parametrize(("originals", "everywhere"), [(3, True), (4, True), (8, True), (8, False)])
def test_a_merged_view_whose_entries_hide_each_other_pages_as_the_model_says(
    request: pytest.FixtureRequest, originals: int, everywhere: bool
) -> None:
    """A timeline and two pulled lists holding posts and reposts of the same
    originals (each reposted in every source, or every other one in one): most
    of the sources' entries hide each other. A read computes the hidden
    entries above a bound with twice cap + 1 entries, and from the floor when
    fewer than cap + 1 of those stay visible: pages and counts are the
    model's for views shorter than the cap, at it, and longer."""
    client, shards = layout_client(request, "single")
    cap = 3
    store = TimelineStore(client, cap=cap, slack=30, shards=shards)  # nothing trimmed
    assert store.ensure_active_generation() == GEN
    model = TimelineModel(cap=cap, slack=30)
    owners = (1, 101, 102)  # the timeline of user 1, and the lists of 101 and 102
    held: dict[int, list[int]] = {owner: [] for owner in owners}
    bodies: dict[int, bytes] = {}
    of: dict[int, int] = {}  # repost -> original
    t = 1000
    for k in range(originals):
        t += 10
        o = t
        bodies[o] = b'{"id":%d,"author":"a","text":"t%d","created_at":"c"}' % (o, o)
        held[owners[k % 3]].append(o)
        for owner in owners if everywhere or k % 2 else owners[:1]:
            t += 1
            of[t] = o
            bodies[t] = events.repost_json(t, f"r{owner}", o)
            held[owner].append(t)

    def add(owner: int, seq: int) -> Mutation:
        ids = tuple(sorted(held[owner]))
        pairs = tuple((e, of[e], 0) for e in ids if e in of)
        if owner == 1:
            return Mutation(Op.ADD, (1,), ids, 0, seq, reposts=pairs)
        return Mutation(Op.LIST, (owner,), ids, 0, reposts=pairs)

    mutations = [
        *(add(owner, 1) for owner in owners),
        *(Mutation(Op.PULL, (1,), (), 0, 2 + i, 0, (a,)) for i, a in enumerate(owners[1:])),
    ]
    model.apply(bodies, mutations, {})
    store.apply(GEN, bodies, mutations)
    _state(client, shards, model)
    _pages(store, model, random.Random(originals), rounds=100)
    merged = model.merged(1)
    assert merged is not None and len(merged[1]) == originals  # one entry per original


@settings(max_examples=30, deadline=None)
@pytest.mark.usefixtures("redis_url")
@given(seed=st.integers(0, 2**32), cap=st.integers(2, 6), window=st.integers(1, 4))
@example(seed=2871743, cap=2, window=1)  # an add, then a filter change, in one batch
def test_replaying_a_batch_with_reposts_changes_nothing(
    request: pytest.FixtureRequest, seed: int, cap: int, window: int
) -> None:
    """Every batch applied twice: the second time leaves the timelines, lists and
    pairs as they were (only a version may move, as without reposts). A batch
    that adds and removes is left out of the check: its replay adds again what
    it removed, which may trim the timeline before the removal comes again
    (with or without reposts), and fences a timeline it created. So is one
    that adds and changes a filter: its replay screens the add with the new
    filter (a repost the old one left out now goes in, as the view says)."""
    client, _ = layout_client(request, "single")
    store = TimelineStore(client, cap=cap, slack=2, window=window)
    store.create_generation(GEN)
    rnd = random.Random(seed)
    workload = repost_workload.RepostWorkload(rnd)

    def snapshot() -> dict[bytes, object]:
        out: dict[bytes, object] = {}
        for key in client.scan_iter("*"):
            if key.startswith((b"tl:", b"al:")):
                packed = client.get(key) or b""
                h = read_header(packed)
                out[key] = (h.horizon, h.fence, h.top, timeline_ids(packed))
            elif key.startswith((b"tr:", b"ar:", b"tw:", b"ct:")):
                out[key] = client.get(key)
        return out

    for _ in range(rnd.randint(5, 25)):
        batch = workload.batch()
        store.apply(GEN, batch.bodies, batch.mutations, counts=batch.counts)
        before = snapshot()
        store.apply(GEN, batch.bodies, batch.mutations, counts=batch.counts)
        kinds = {m.op for m in batch.mutations}
        if not kinds & {Op.ADD, Op.RESET, Op.UNPULL} or not kinds & {Op.REMOVE, Op.PULL, Op.FILTER}:
            assert snapshot() == before
