"""The join rules, without Spark: each rule, the tricky orders, and a property
test against the SQL join (the oracle) under random interleavings."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout import events
from fanout.join import AuthorState, Mutation, Op, coalesce, join_events
from tests.timeline_model import TimelineModel, expected_view, oracle

A, F, G = 1, 2, 3  # an author and two followers


class Log:
    """Builds envelopes with increasing seq, like the outbox does."""

    def __init__(self) -> None:
        self.seq = itertools.count(1)
        self.tweet_ids = itertools.count(1000)

    def post(self, author: int) -> tuple[int, events.Envelope]:
        t = next(self.tweet_ids)
        return t, events.Envelope(
            next(self.seq), events.TweetPosted(t, author, f"u{author}", f"tweet {t}")
        )

    def delete(self, author: int, t: int) -> events.Envelope:
        return events.Envelope(next(self.seq), events.TweetDeleted(t, author))

    def follow(self, follower: int, followee: int) -> events.Envelope:
        return events.Envelope(next(self.seq), events.Followed(follower, followee))

    def unfollow(self, follower: int, followee: int) -> events.Envelope:
        return events.Envelope(next(self.seq), events.Unfollowed(follower, followee))


def run(
    batches: list[list[events.Envelope]], *, cap: int = 800, slack: int = 64
) -> tuple[TimelineModel, dict[int, AuthorState]]:
    """Apply batches through the join (grouped by join key) into a timeline model."""
    model = TimelineModel(cap=cap, slack=slack)
    states: dict[int, AuthorState] = {}
    for batch in batches:
        by_key: dict[int, list[events.Envelope]] = {}
        for env in batch:
            by_key.setdefault(env.event.join_key, []).append(env)
        for author, envs in by_key.items():
            state = (
                AuthorState.decode(states[author].encode()) if author in states else AuthorState()
            )
            result = join_events(author, state, envs, cap=cap, slack=slack)
            states[author] = result.state
            model.apply(result.bodies, result.mutations)
    return model, states


def view(model: TimelineModel, user: int) -> list[int]:
    found = model.view(user)
    return found[1] if found else []


# --- the four rules -----------------------------------------------------------------


def test_post_reaches_every_follower_and_the_author() -> None:
    log = Log()
    t, post = log.post(A)
    model, states = run([[log.follow(F, A), log.follow(G, A)], [post]])
    assert view(model, A) == view(model, F) == view(model, G) == [t]
    assert states[A].followers == {F, G} and states[A].tweets == [t]
    assert model.bodies[t].startswith(b'{"id":%d' % t)


def test_tweet_deleted_after_it_was_fanned_out() -> None:
    log = Log()
    t1, p1 = log.post(A)
    t2, p2 = log.post(A)
    model, states = run([[log.follow(F, A)], [p1, p2], [log.delete(A, t1)]])
    assert view(model, F) == view(model, A) == [t2]
    assert t1 not in model.bodies and states[A].tweets == [t2]


def test_follow_merges_the_authors_recent_tweets() -> None:
    log = Log()
    posts = [log.post(A) for _ in range(3)]
    model, _ = run([[p for _, p in posts], [log.follow(F, A)]])
    assert view(model, F) == [t for t, _ in reversed(posts)]


def test_unfollow_removes_the_authors_tweets() -> None:
    log = Log()
    _, pa = log.post(A)
    tg, pg = log.post(G)
    model, states = run([[log.follow(F, A), log.follow(F, G)], [pa, pg], [log.unfollow(F, A)]])
    assert view(model, F) == [tg]
    assert F not in states[A].followers


# --- tricky orders -------------------------------------------------------------------


def test_follow_then_unfollow_in_one_micro_batch() -> None:
    log = Log()
    _, post = log.post(A)
    model, states = run([[post], [log.follow(F, A), log.unfollow(F, A)]])
    assert view(model, F) == [] and states[A].followers == set()


def test_events_of_a_batch_apply_in_seq_order_whatever_their_arrival_order() -> None:
    log = Log()
    t, post = log.post(A)
    batch = [log.follow(F, A), post, log.unfollow(F, A), log.follow(F, A)]
    expected, _ = run([batch])
    for perm in itertools.permutations(batch):
        model, _ = run([list(perm)])
        assert view(model, F) == view(expected, F) == [t]


def test_follow_of_an_author_with_more_than_the_cap() -> None:
    cap, slack = 5, 2
    log = Log()
    g_t, g_post = log.post(G)  # older than all of A's tweets, by someone else F follows
    posts = [log.post(A) for _ in range(12)]
    model, states = run(
        [[log.follow(F, G)], [g_post], [p for _, p in posts], [log.follow(F, A)]],
        cap=cap,
        slack=slack,
    )
    a_tweets = [t for t, _ in posts]
    assert states[A].tweets == a_tweets[-(cap + slack) :]
    assert states[A].horizon == a_tweets[-(cap + slack)]
    assert view(model, F) == list(reversed(a_tweets))[:cap]
    horizon, _ = model.view(F)  # type: ignore[misc]
    assert horizon >= states[A].horizon > g_t  # F's view is exact above the merge horizon


def test_unfollow_of_an_author_whose_tweets_were_partly_trimmed_away() -> None:
    cap, slack = 4, 2
    log = Log()
    a_posts = [log.post(A) for _ in range(9)]
    g_posts = [log.post(G) for _ in range(2)]
    batches = [[log.follow(F, A), log.follow(F, G)], [p for _, p in a_posts + g_posts]]
    model, _ = run([*batches, [log.unfollow(F, A)]], cap=cap, slack=slack)
    shown = view(model, F)
    assert not set(shown) & {t for t, _ in a_posts}  # nothing of A is left, not even from the slack
    assert shown == [t for t, _ in reversed(g_posts)]


def test_self_follow_materializes_the_own_timeline_and_is_not_a_follower() -> None:
    log = Log()
    model, _ = run([[log.follow(A, A)]])
    assert model.view(A) == (0, [])  # exists, empty: a new user's timeline
    t, post = log.post(A)
    model2, states2 = run([[log.follow(A, A)], [post], [log.follow(A, A)], [log.unfollow(A, A)]])
    assert view(model2, A) == [t]  # delivered once, kept after a self "unfollow"
    assert states2[A].followers == set()


def test_relay_duplicates_change_nothing() -> None:
    log = Log()
    t, post = log.post(A)
    follow = log.follow(F, A)
    unfollow = log.unfollow(F, A)
    once, _ = run([[follow], [post], [unfollow]])
    twice, _ = run([[follow, follow], [post, post], [unfollow], [follow, unfollow]])
    assert view(once, F) == view(twice, F) == []
    assert view(once, A) == view(twice, A) == [t]


def test_events_routed_to_the_wrong_author_are_refused() -> None:
    log = Log()
    _, post = log.post(A)
    with pytest.raises(ValueError, match="routed"):
        join_events(G, AuthorState(), [post], cap=10)


def test_state_round_trips() -> None:
    state = AuthorState(followers={5, 2, 9}, tweets=[10, 20, 30], horizon=10)
    assert AuthorState.decode(state.encode()) == state
    assert AuthorState.decode(None) == AuthorState()
    with pytest.raises(ValueError):
        AuthorState.decode(state.encode()[:-3])


def test_coalesce_merges_adjacent_adds_to_the_same_owners() -> None:
    ms = [
        Mutation(Op.ADD, (1, 2), (10,)),
        Mutation(Op.ADD, (1, 2), (11,)),
        Mutation(Op.REMOVE, (1, 2), (10,)),
        Mutation(Op.ADD, (1, 2), (12,)),
        Mutation(Op.ADD, (3,), (12,)),
    ]
    assert coalesce(ms) == [
        Mutation(Op.ADD, (1, 2), (10, 11)),
        Mutation(Op.REMOVE, (1, 2), (10,)),
        Mutation(Op.ADD, (1, 2), (12,)),
        Mutation(Op.ADD, (3,), (12,)),
    ]


# --- the property: any workload, any interleaving, equals the oracle above the horizon ----


def random_workload(
    rnd: random.Random, users: int, steps: int
) -> tuple[list[events.Envelope], dict[int, int], set[tuple[int, int]]]:
    log = Log()
    envs = [log.follow(u, u) for u in range(1, users + 1)]  # registration: the self edge
    live: dict[int, int] = {}
    follows: set[tuple[int, int]] = set()
    for _ in range(steps):
        roll = rnd.random()
        a, b = rnd.randint(1, users), rnd.randint(1, users)
        if roll < 0.45:
            t, env = log.post(a)
            live[t] = a
            envs.append(env)
        elif roll < 0.6 and live:
            t = rnd.choice(sorted(live))
            envs.append(log.delete(live.pop(t), t))
        elif roll < 0.85 and a != b and (a, b) not in follows:
            follows.add((a, b))
            envs.append(log.follow(a, b))
        elif follows:
            pair = rnd.choice(sorted(follows))
            follows.discard(pair)
            envs.append(log.unfollow(*pair))
    return envs, live, follows


def interleave(rnd: random.Random, envs: list[events.Envelope]) -> list[list[events.Envelope]]:
    """Cut each topic into its own order, then merge them into random micro-batches:
    one topic can run several batches ahead of the other."""
    streams = [
        [e for e in envs if isinstance(e.event, events.TweetPosted | events.TweetDeleted)],
        [e for e in envs if isinstance(e.event, events.Followed | events.Unfollowed)],
    ]
    batches = []
    while any(streams):
        batch = []
        for s in streams:
            take = rnd.randint(0, max(1, len(s) // 3))
            batch += s[:take]
            del s[:take]
        batches.append(batch)
    return batches


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), cap=st.integers(2, 8), slack=st.integers(1, 4))
def test_any_interleaving_matches_the_oracle_above_each_horizon(
    seed: int, cap: int, slack: int
) -> None:
    rnd = random.Random(seed)
    users = 6
    envs, live, follows = random_workload(rnd, users, steps=120)
    model, _ = run(interleave(rnd, envs), cap=cap, slack=slack)
    full = oracle(live, follows, range(1, users + 1))
    for user in range(1, users + 1):
        found = model.view(user)
        assert found is not None
        horizon, shown = found
        assert shown == expected_view(full[user], horizon, cap), f"user {user}"
    assert set(model.bodies) == set(live)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_below_the_cap_timelines_are_exact(seed: int) -> None:
    rnd = random.Random(seed)
    envs, live, follows = random_workload(rnd, 5, steps=60)
    model, _ = run(interleave(rnd, envs), cap=1000, slack=64)
    full = oracle(live, follows, range(1, 6))
    assert {u: model.view(u) for u in full} == {u: (0, ts) for u, ts in full.items()}
