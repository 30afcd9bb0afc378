"""The Redis timeline store against a real Redis: same results as the model,
idempotent, refuses a generation Redis lost."""

from __future__ import annotations

import random

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.join import AuthorState, Mutation, Op, join_events
from fanout.timelines import GenerationMissing, TimelineStore, pack_timeline, timeline_key
from tests.timeline_model import TimelineModel
from tests.unit.test_join import interleave, random_workload

GEN = 1


@pytest.fixture
def store(redis_client: redis.Redis) -> TimelineStore:
    s = TimelineStore(redis_client, cap=5, slack=2)
    s.create_generation(GEN)
    return s


def test_add_remove_and_cap(store: TimelineStore) -> None:
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (1, 2, 3))])
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (i,)) for i in range(4, 8)])
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [7, 6, 5, 4, 3] and tl.horizon == 0  # 7 kept: cap + slack
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (8,))])  # 8 > cap + slack: trimmed to the cap
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [8, 7, 6, 5, 4] and tl.horizon == 4
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (9,))])
    store.apply(GEN, {}, [Mutation(Op.REMOVE, (7,), (8,)), Mutation(Op.REMOVE, (7,), (6, 9))])
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [7, 5, 4] and tl.horizon == 4


def test_add_below_the_horizon_is_dropped_and_merge_raises_it(store: TimelineStore) -> None:
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), tuple(range(10, 18)))])  # 8 > 7: trimmed to 13..17
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (11, 20))])
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.horizon == 13 and tl.ids == [20, 17, 16, 15, 14]
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (16, 30), horizon=16)])
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.horizon == 16 and tl.ids == [30, 20, 17, 16]


def test_out_of_order_inserts_rewrite_only_the_tail(
    store: TimelineStore, redis_client: redis.Redis
) -> None:
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (10, 20, 30))])
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (15, 25, 30, 40))])  # interleaved, one duplicate
    assert redis_client.get(timeline_key(GEN, 7)) == pack_timeline(0, [10, 15, 20, 25, 30, 40])
    stats = store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (15, 25))])
    assert stats.added == 0
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (1, 2, 3, 4))])  # 10 > cap + slack: trimmed
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [40, 30, 25, 20, 15] and tl.horizon == 15
    store.apply(GEN, {}, [Mutation(Op.ADD, (7,), (12, 16))])  # 12 is below the horizon
    tl = store.timeline(GEN, 7)
    assert tl is not None and tl.ids == [40, 30, 25, 20, 16] and 12 not in tl.ids


def test_empty_add_materializes_an_empty_timeline(store: TimelineStore) -> None:
    assert store.timeline(GEN, 42) is None
    stats = store.apply(GEN, {}, [Mutation(Op.ADD, (42,), ())])
    assert stats.created == 1
    assert store.timeline(GEN, 42) == type(store.timeline(GEN, 42))(horizon=0, ids=[])  # type: ignore[misc]


def test_bodies_are_put_and_deleted(store: TimelineStore, redis_client: redis.Redis) -> None:
    store.apply(GEN, {5: b'{"id":5}', 6: b'{"id":6}'}, [Mutation(Op.DELETE_BODY, (), (5,))])
    assert redis_client.get("tw:5") is None and redis_client.get("tw:6") == b'{"id":6}'


def test_replaying_a_batch_changes_nothing(store: TimelineStore, redis_client: redis.Redis) -> None:
    batch = [
        Mutation(Op.ADD, (1, 2, 3), (10, 11)),
        Mutation(Op.REMOVE, (2,), (10,)),
        Mutation(Op.ADD, (4,), tuple(range(1, 12)), horizon=3),
    ]
    store.apply(GEN, {10: b"x"}, batch)
    before = {k: redis_client.get(k) for k in redis_client.keys("tl:*")}
    store.apply(GEN, {10: b"x"}, batch)
    assert {k: redis_client.get(k) for k in redis_client.keys("tl:*")} == before


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
    assert stats.added == 10_000 and stats.calls == 10_000 * 2 // TimelineStore.CHUNK
    assert redis_client.get(timeline_key(GEN, 10_000)) == pack_timeline(0, [99])


def test_watermark_moves_once_per_batch(store: TimelineStore) -> None:
    assert store.record_watermark(
        GEN, batch_id=0, seq=10, event_time=1.5, offsets={"t": {"0": 3}}, counters={"deliveries": 5}
    )
    assert not store.record_watermark(
        GEN, batch_id=0, seq=10, event_time=1.5, offsets={}, counters={"deliveries": 5}
    )
    store.record_watermark(
        GEN, batch_id=1, seq=8, event_time=0, offsets={"t": {"0": 4}}, counters={"deliveries": 2}
    )
    wm = store.watermark(GEN)
    assert wm is not None
    assert (wm.seq, wm.batch_id, wm.event_time, wm.offsets) == (10, 1, 1.5, {"t": {"0": 4}})
    assert wm.counters == {"deliveries": 7}


def test_dead_letters_are_keyed_by_position(store: TimelineStore) -> None:
    record = {"topic": "t", "partition": 1, "offset": 7, "error": "bad"}
    store.dead_letter([record, record])
    store.dead_letter([record])
    assert store.dead_letter_count() == 1 and store.dead_letters() == [record]


def test_generations(store: TimelineStore, redis_client: redis.Redis) -> None:
    assert store.active_generation() is None
    assert store.ensure_active_generation() == 1
    with pytest.raises(GenerationMissing):
        store.activate(5)
    store.create_generation(5)
    store.activate(5)
    assert store.active_generation() == 5


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), cap=st.integers(2, 6), slack=st.integers(1, 3))
def test_the_lua_store_does_what_the_model_does(
    redis_url: str, seed: int, cap: int, slack: int
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    store = TimelineStore(client, cap=cap, slack=slack)
    store.create_generation(GEN)
    model = TimelineModel(cap=cap, slack=slack)
    rnd = random.Random(seed)
    envs, _, _ = random_workload(rnd, 6, steps=80)
    states: dict[int, AuthorState] = {}
    for batch in interleave(rnd, envs):
        by_key: dict[int, list] = {}
        for env in batch:
            by_key.setdefault(env.event.join_key, []).append(env)
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for author, group in by_key.items():
            result = join_events(
                author, states.get(author, AuthorState()), group, cap=cap, slack=slack
            )
            states[author] = result.state
            bodies.update(result.bodies)
            mutations += result.mutations
        model.apply(bodies, mutations)
        store.apply(GEN, bodies, mutations)
    for user in range(1, 7):
        tl = store.timeline(GEN, user)
        expected = model.view(user)
        assert (tl.horizon, tl.ids) == expected if tl else expected is None
    assert {int(k[3:]) for k in client.keys("tw:*")} == set(model.bodies)
