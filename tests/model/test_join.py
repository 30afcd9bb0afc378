"""The join rules, without Spark: each rule, the tricky orders, the refill of
short timelines, and a property test against the SQL join (the oracle)
under random interleavings, ids that disagree with seqs, and resets computed
from the database at random moments. Exact: every timeline's newest ``cap``
entries equal the join's, with no allowance for a short timeline."""

from __future__ import annotations

import itertools
import random

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fanout.model import events, owners
from fanout.model.author_state import AuthorState
from fanout.model.join import (
    Mutation,
    Op,
    coalesce,
    join_events,
    newest,
    newest_entries,
    pulled_at,
    winners,
)
from fanout.store.ops import group_by_timeline
from tests.support.join_sim import (
    Log,
    System,
    World,
    exact,
    interleave,
    random_workload,
    run,
    tables_seen,
    view,
)

A, F, G = 1, 2, 3  # an author and two followers
R = 4  # a reposter


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


def test_author_state_keeps_every_live_tweet() -> None:
    log = Log()
    posts = [log.post(A) for _ in range(30)]
    doomed = [t for t, _ in posts[-10:]]
    _, states = run([[p for _, p in posts], [log.delete(A, t) for t in doomed]], cap=4, slack=2)
    assert states[A].tweets == [t for t, _ in posts[:20]]  # older tweets kept for refills


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


def test_follow_of_an_author_with_more_than_the_cap_is_exact() -> None:
    cap, slack = 5, 2
    log = Log()
    g_t, g_post = log.post(G)  # older than all of A's tweets, by someone else F follows
    posts = [log.post(A) for _ in range(12)]
    model, _ = run(
        [[log.follow(F, G)], [g_post], [p for _, p in posts], [log.follow(F, A)]],
        cap=cap,
        slack=slack,
    )
    a_tweets = [t for t, _ in posts]
    assert view(model, F) == list(reversed(a_tweets))[:cap]
    horizon, _ = model.view(F)  # type: ignore[misc]
    assert horizon == a_tweets[-(cap + slack)] > g_t  # what the merge covers, stated


def test_unfollow_of_an_author_whose_tweets_were_partly_trimmed_away() -> None:
    cap, slack = 4, 2
    log = Log()
    a_posts = [log.post(A) for _ in range(9)]
    g_posts = [log.post(G) for _ in range(2)]
    system = System(cap, slack)
    system.run([[log.follow(F, A), log.follow(F, G)], [p for _, p in a_posts + g_posts]])
    system.run([[log.unfollow(F, A)]])
    shown = system.view(F)
    assert not set(shown) & {t for t, _ in a_posts}  # nothing of A is left, not even from slack


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


def test_a_tweet_posted_again_under_a_new_name_rewrites_its_body_and_nothing_else() -> None:
    """A renamed author's tweets are posted again (services.user_rename): the
    cached body takes the new name; no timeline changes."""
    log = Log()
    t, post = log.post(A)
    renamed = events.Envelope(
        next(log.seq),
        events.TweetPosted(t, A, "renamed", post.event.text),  # type: ignore[union-attr]
    )
    system = System(cap=10, slack=2)
    system.run([[log.follow(F, A)], [post]])
    before = {u: system.view(u) for u in (A, F)}
    system.run([[renamed]])
    assert {u: system.view(u) for u in (A, F)} == before == {A: [t], F: [t]}
    assert system.last_mutations == []
    assert orjson.loads(system.model.bodies[t])["author"] == "renamed"


def test_events_routed_to_the_wrong_key_are_refused() -> None:
    log = Log()
    _, post = log.post(A)
    with pytest.raises(ValueError, match="routed"):
        join_events(G, AuthorState(), [post], cap=10)


def test_state_round_trips_and_reads_version_one() -> None:
    import struct
    from array import array

    state = AuthorState(followers={5, 2, 9}, tweets=[10, 20, 30])
    assert AuthorState.decode(state.encode()) == state
    assert AuthorState.decode(None) == AuthorState()
    with pytest.raises(ValueError):
        AuthorState.decode(state.encode()[:-3])
    v1 = struct.pack("<BqII", 1, 10, 1, 2) + array("q", [5, 10, 20]).tobytes()
    assert AuthorState.decode(v1) == AuthorState(followers={5}, tweets=[10, 20])
    full = AuthorState(
        followers={5, 9},
        tweets=[10, 20, 30, 40],
        originals={30: 7},
        original_authors={30: 8},
        quiet={9},
        answers={20: 6, 30: 4},
        notified={20: (3, 6), 40: (2,)},
    )
    assert AuthorState.decode(full.encode()) == full
    for cut in (1, 8, 17):  # into the notified users, the answers, the quiet followers
        with pytest.raises(ValueError):
            AuthorState.decode(full.encode()[:-cut])
    # version 5: no answers nor notified users
    v5 = struct.pack("<BIIBII", 5, 1, 2, 0, 1, 0) + array("q", [5, 10, 30, 30, 7, 8]).tobytes()
    assert AuthorState.decode(v5) == AuthorState(
        followers={5}, tweets=[10, 30], originals={30: 7}, original_authors={30: 8}
    )


def test_coalesce_merges_adjacent_tweet_adds_to_the_same_owners() -> None:
    ms = [
        Mutation(Op.ADD, (1, 2), (10,)),
        Mutation(Op.ADD, (1, 2), (11,)),
        Mutation(Op.REMOVE, (1, 2), (10,)),
        Mutation(Op.ADD, (1, 2), (12,)),
        Mutation(Op.ADD, (3,), (12,)),
        Mutation(Op.ADD, (3,), (5, 6), 5),  # a follow's merge with a horizon stays apart
    ]
    assert coalesce(ms) == [
        Mutation(Op.ADD, (1, 2), (10, 11)),
        Mutation(Op.REMOVE, (1, 2), (10,)),
        Mutation(Op.ADD, (1, 2), (12,)),
        Mutation(Op.ADD, (3,), (12,)),
        Mutation(Op.ADD, (3,), (5, 6), 5),
    ]


def test_newest_says_when_older_tweets_were_left_out() -> None:
    assert newest([1, 2, 3], 5) == ((1, 2, 3), 0)
    assert newest([1, 2, 3, 4, 5, 6], 3) == ((4, 5, 6), 4)


# --- at the cap: shortfalls are refilled ----------------------------------------------


def test_at_the_cap_follow_unfollow_and_a_deleted_history() -> None:
    """STARLING_TIMELINE_SIZE=20, STARLING_TIMELINE_SLACK=4: five friends posted 40 tweets."""
    world = World(Log())
    system = System(cap=20, slack=4)
    friends, f, p, q = [10, 11, 12, 13, 14], 1, 2, 3
    system.batch(world.register(f, p, q, *friends))
    system.batch([e for friend in friends for e in world.post(friend, 8)])
    system.batch([world.follow(f, friend) for friend in friends])
    system.settle(world.log, world.joined())
    exact(system, world)
    system.batch(world.post(p, 40))
    system.batch([world.follow(f, p)])
    system.settle(world.log, world.joined())
    exact(system, world)
    system.batch([world.unfollow(f, p)])
    assert f in system.model.refill  # left short: asked for a refill, not tolerated
    system.settle(world.log, world.joined())
    exact(system, world)
    assert len(system.view(f)) == 20
    q_tweets = world.post(q, 40)
    system.batch(q_tweets)
    system.batch([world.delete(e.event.tweet_id) for e in q_tweets])  # type: ignore[union-attr]
    system.batch([world.follow(f, q)])
    system.settle(world.log, world.joined())
    exact(system, world)
    assert len(system.view(f)) == 20


def test_a_stale_reset_never_brings_back_an_unfollowed_author() -> None:
    world = World(Log())
    system = System(cap=3, slack=2)
    system.batch(world.register(F, A, G))
    system.batch(world.post(A, 6) + world.post(G, 6))
    system.batch([world.follow(F, A), world.follow(F, G)])
    # A reset computed while F still followed A, applied after the unfollow
    # (which committed after the reset's read, with a higher seq: its lock).
    stale = world.log.reset(F, world.joined()[F], 5)
    unfollow = world.unfollow(F, A)
    system.batch([unfollow])
    system.batch([stale])  # later in the log? no: a lower seq, but applied after
    assert not {t for t, a in world.live.items() if a == A} & set(system.view(F))
    system.settle(world.log, world.joined())
    exact(system, world)


def test_a_reset_skips_tweets_deleted_since_it_was_computed() -> None:
    world = World(Log())
    system = System(cap=3, slack=2)
    system.batch(world.register(F, A))
    system.batch(world.post(A, 8))
    system.batch([world.follow(F, A)])
    reset = world.log.reset(F, world.joined()[F], 5)
    newest_t = max(world.live)
    system.batch([world.delete(newest_t)])  # its body goes first
    system.batch([reset])
    assert newest_t not in system.view(F)
    system.settle(world.log, world.joined())
    exact(system, world)


def test_a_timeline_that_saw_an_entry_arrive_below_its_newest_changes_version() -> None:
    log = Log()
    system = System(cap=10, slack=4)
    t1, p1 = log.post(A)
    t2, p2 = log.post(A)
    system.batch([log.follow(F, A), p2])
    assert system.model.timelines[F].version == 0
    system.batch([p1])  # id lower than one a poller already saw
    assert t1 < t2 and system.model.timelines[F].version == 1
    _, p3 = log.post(A)
    system.batch([p3])  # the newest: no change
    assert system.model.timelines[F].version == 1


def test_late_entries_change_the_version_whatever_the_order_of_their_seqs() -> None:
    """A late entry applied after another late one with a higher seq (its
    partition lagged) still changes the version: it is a count, not a seq."""
    log = Log()
    system = System(cap=10, slack=4)
    (t1, p1), (t2, p2), (t3, p3) = log.post(A), log.post(A), log.post(A)
    system.batch([log.follow(F, A), p3])
    system.batch([p2])
    seen = system.model.timelines[F].version
    system.batch([p1])  # lower seq than p2, applied after it, below what was seen
    assert t1 < t2 < t3 and system.model.timelines[F].version != seen


# --- the property: any workload, any interleaving, equals the oracle -------------------


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    cap=st.integers(2, 8),
    slack=st.integers(1, 4),
    jitter=st.sampled_from([0, 25]),
    resets=st.sampled_from([0.0, 0.2, 0.4]),
)
# A trim of what an author's key applied ahead of the trim's own seq: a refill
# read before must not pass the fence (TimelineModel.high_water).
@example(seed=335, cap=4, slack=4, jitter=0, resets=0.4)
def test_any_interleaving_equals_the_oracle_once_refills_are_done(
    seed: int, cap: int, slack: int, jitter: int, resets: float
) -> None:
    rnd = random.Random(seed)
    users = 6
    world, envs = random_workload(rnd, users, steps=120, jitter=jitter, resets=resets)
    system = System(cap, slack)
    system.run(interleave(rnd, envs))
    system.settle(world.log, world.joined())
    full = world.joined()
    for user in range(1, users + 1):
        assert system.model.view(user) is not None
        assert system.view(user) == full[user][:cap], f"user {user}"
    assert set(system.model.bodies) == set(world.live)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    cap=st.integers(2, 8),
    slack=st.integers(1, 4),
    threshold=st.integers(1, 3),
    resets=st.sampled_from([0.0, 0.3]),
)
@example(seed=2917, cap=2, slack=1, threshold=2, resets=0.3)  # as above, with a follow's merge
def test_pulled_authors_crossing_the_threshold_both_ways_keep_every_view_exact(
    seed: int, cap: int, slack: int, threshold: int, resets: float
) -> None:
    """Authors move between push and pull as follows and unfollows cross the
    threshold; reads merge the pulled ones' lists. After every batch the
    version readers get has not gone down; once refills are done, every view
    is the join's newest ``cap``."""
    rnd = random.Random(seed)
    users = 6
    world, envs = random_workload(rnd, users, steps=150, resets=resets, pull_threshold=threshold)
    system = System(cap, slack, pull_threshold=threshold)
    batches = interleave(rnd, envs)
    system.written |= {e.seq for b in batches for e in b}
    seen: dict[int, int] = {}
    crossings = 0
    for b in batches:
        system.batch(b)
        crossings += sum(
            len(m.owners) > 0
            for m in system.last_mutations
            if m.op in (Op.PULL, Op.UNPULL) and len(m.tweets) > 0
        )
        for user in system.model.timelines:
            version = system.model.version(user)
            assert version >= seen.get(user, 0), f"user {user}: the version went down"
            seen[user] = version
    system.settle(world.log, world.joined())
    full = world.joined()
    for user in range(1, users + 1):
        assert system.view(user) == full[user][:cap], f"user {user}"
    pulled = {a for a, state in system.states.items() if state.pulled}
    assert all(
        (len(state.followers) >= threshold) == state.pulled
        for state in system.states.values()
        if not threshold * 9 <= len(state.followers) * 10 < threshold * 10
    ), pulled


def test_a_crossing_moves_every_follower_between_the_timeline_and_the_list() -> None:
    """Pulled at the third follower, pushed again below it, pulled again: every
    view stays the join's, and the followers' timelines hold the author's
    tweets only while it is pushed."""
    world = World(Log())
    system = System(cap=4, slack=2, pull_threshold=3)
    f1, f2, f3 = 5, 6, 7
    system.batch(world.register(A, f1, f2, f3))
    system.batch(world.post(A, 3) + world.post(f1, 2))
    system.batch([world.follow(f1, A), world.follow(f2, A)])
    assert not system.states[A].pulled
    assert set(world.joined()[f1][:4]) <= set(system.model.timelines[f1].ids)
    system.batch([world.follow(f3, A)])  # the third follower: pulled
    assert system.states[A].pulled
    exact(system, world)
    a_tweets = {t for t, author in world.live.items() if author == A}
    for f in (f1, f2, f3):
        assert not a_tweets & set(system.model.timelines[f].ids), f
        assert system.model.pulls[f] == {A}
    system.batch(world.post(A, 2))  # one list write, no timeline write but A's own
    assert [(m.op, m.owners) for m in system.last_mutations] == [(Op.LIST, (A,)), (Op.ADD, (A,))]
    exact(system, world)
    system.batch([world.unfollow(f3, A)])  # 2 of 3 followers: pushed again
    assert not system.states[A].pulled and not any(system.model.pulls.values())
    system.settle(world.log, world.joined())
    exact(system, world)
    a_tweets = {t for t, author in world.live.items() if author == A}
    assert a_tweets & set(system.model.timelines[f1].ids)
    system.batch([world.follow(f3, A), *world.post(A, 1), world.delete(max(a_tweets))])
    assert system.states[A].pulled
    system.settle(world.log, world.joined())
    exact(system, world)


def test_pulled_authors_go_back_to_push_below_nine_tenths_of_the_threshold() -> None:
    assert not pulled_at(9_999, 10_000, False) and pulled_at(10_000, 10_000, False)
    assert pulled_at(9_000, 10_000, True) and not pulled_at(8_999, 10_000, True)
    assert not pulled_at(10**6, 0, True)  # a threshold of 0: nobody is pulled


def test_a_reset_read_with_other_pulled_authors_than_at_its_release_is_dropped() -> None:
    """A refill's read left out the authors the timeline pulled then; if those
    changed before the job applies it, it is dropped (here it would claim F
    holds all of A's tweets: horizon 0)."""
    world = World(Log())
    system = System(cap=2, slack=1, pull_threshold=2)
    system.batch(world.register(A, F))
    system.batch(world.post(A, 6))
    system.batch([world.follow(F, A)])  # A is pushed: F holds A's newest 3
    before = repr(system.model.timelines[F])
    assert system.model.timelines[F].horizon > 0
    system.batch([world.log.reset(F, [], 3, pulled=(A,))])  # read while A seemed pulled
    assert repr(system.model.timelines[F]) == before
    system.batch([world.log.reset(F, world.joined()[F], 3)])  # the same read, right
    assert system.model.timelines[F].horizon > 0 and system.model.timelines[F].fence > 0
    exact(system, world)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_below_the_cap_timelines_are_exact_without_any_refill(seed: int) -> None:
    rnd = random.Random(seed)
    world, envs = random_workload(rnd, 5, steps=60)
    system = System(cap=1000, slack=64)
    system.run(interleave(rnd, envs))
    full = world.joined()
    assert not system.model.refill
    assert {u: system.model.view(u) for u in full} == {u: (0, ts) for u, ts in full.items()}


def test_a_follow_that_leaves_out_older_tweets_fences_even_at_the_same_horizon() -> None:
    """A reset read before a re-follow must not lower the horizon over the
    tweets that follow's merge left out (they are not in the reset either)."""
    world = World(Log())
    system = System(cap=3, slack=2)
    system.batch(world.register(F, A))
    system.batch(world.post(A, 7))
    system.batch([world.follow(F, A)])  # merges A's newest 5: the horizon is A's 3rd tweet
    system.batch([world.unfollow(F, A)])  # F is left empty above that horizon: short
    system.model.refill.remove(F)  # taken by the refill task, which reads the database:
    as_of = max(system.applied)
    stale_read = world.joined()[F]  # the reset's read: F follows nobody now
    system.batch([world.follow(F, A)])  # the same merge, the same horizon
    system.batch([world.log.reset(F, stale_read, 5, as_of)])
    for t in sorted(world.live)[-3:]:  # the newest three go: older ones must show
        system.batch([world.delete(t)])
    system.settle(world.log, world.joined())
    exact(system, world)


def test_many_follows_in_one_batch_are_one_write_of_at_most_what_the_cap_needs() -> None:
    cap, slack = 20, 4
    # A user follows 300 authors at once, each with 30 tweets: 9,000 ids.
    adds = [
        Mutation(Op.ADD, (F,), tuple(range(a * 1000, a * 1000 + 30)), a * 1000 + 6, a)
        for a in range(1, 301)
    ]
    (op,), _ = group_by_timeline(adds, keep=cap + slack)
    newest = sorted(t for m in adds for t in m.tweets)[-(cap + slack) :]
    assert op.tweets == tuple(newest) and op.horizon == newest[0] and op.seq == 300


# --- idle users: dropped timelines, regenerated when they come back ----------------------


def test_no_fanout_to_a_dropped_timeline_not_even_a_republished_self_edge() -> None:
    log = Log()
    system = System()
    system.run([[log.follow(A, A), log.follow(F, F), log.follow(F, A)]])
    system.model.drop(F)  # F went idle: the sweep left a tombstone
    t, post = log.post(A)
    system.run([[post], [log.follow(F, F)], [log.follow(F, A)]])  # re-sent edges too
    assert system.model.view(F) is None and system.model.skipped == 3
    assert system.view(A) == [t]


def test_a_returning_user_gets_the_join_through_the_placeholder() -> None:
    """F comes back: the read claims a regeneration (placeholder mode), the
    database's reset is computed, and writes made meanwhile land beside it."""
    world = World(Log())
    system = System(cap=3, slack=2)
    system.run([world.register(A, F, G), world.post(A, 6), [world.follow(F, A)]])
    system.model.drop(F)
    system.model.regenerating.add(F)  # a cold read claims the regeneration
    reset = world.log.reset(F, world.joined()[F], 5)
    later = world.post(A, 1)  # after the database's read: only in the placeholder
    system.run([later, [reset]])
    assert F not in system.model.regenerating  # the reset ended the regeneration
    exact(system, world)


def test_a_stale_regeneration_is_asked_for_again_and_completes() -> None:
    world = World(Log())
    system = System(cap=3, slack=2)
    system.run([world.register(A, F), world.post(A, 4), [world.follow(F, A)]])
    system.model.drop(F)
    system.model.regenerating.add(F)
    reset = world.log.reset(F, world.joined()[F], 5)  # read before the unfollow below
    system.run([[world.unfollow(F, A)], [reset]])  # the unfollow fences it: stale
    assert F in system.model.regenerating and F in system.model.refill  # cold, asked again
    system.settle(world.log, world.joined())
    assert F not in system.model.regenerating
    exact(system, world)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    cap=st.integers(2, 6),
    slack=st.integers(1, 3),
    jitter=st.sampled_from([0, 25]),
)
def test_idle_users_dropped_and_coming_back_equal_the_oracle(
    seed: int, cap: int, slack: int, jitter: int
) -> None:
    """Writes, micro-batches, sweeps that drop timelines and returning users
    (a claimed regeneration, then the database's reset) interleave at random;
    every timeline that exists ends equal to the join, and every user who
    reads again gets one."""
    rnd = random.Random(seed)
    users = range(1, 6)
    world = World(Log(rnd=rnd, jitter=jitter))
    system = System(cap, slack)
    written = world.register(*users)
    queue = list(written)

    def apply_some(everything: bool = False) -> None:
        by_topic: dict[bool, list[events.Envelope]] = {}
        for env in queue:
            by_topic.setdefault(isinstance(env.event, events.TimelineReset), []).append(env)
        batch = []
        for envs in by_topic.values():
            batch += envs if everything else envs[: rnd.randint(0, len(envs))]
        for env in batch:
            queue.remove(env)
        system.written |= {e.seq for e in written}
        system.batch(batch)

    def come_back(user: int) -> None:
        """A cold read: claim, then the database's read (as the service does)."""
        system.model.regenerating.add(user)
        as_of = max(0, written[-1].seq - rnd.randint(0, 3))
        seen = tables_seen(rnd, written, user, as_of, system.applied)
        joined = seen.joined(world.users)
        env = world.log.reset(
            user, joined[user], cap + slack, as_of, raw=joined.raw[user], originals=seen.originals
        )
        written.append(env)
        queue.append(env)

    for _ in range(120):
        roll, a, b = rnd.random(), rnd.choice(users), rnd.choice(users)
        new: list[events.Envelope] = []
        if roll < 0.35:
            new = world.post(a)
        elif roll < 0.45 and world.live:
            new = world.delete_post(rnd.choice(sorted(world.live)))
        elif roll < 0.6 and a != b and (a, b) not in world.follows:
            new = [world.follow(a, b)]
        elif roll < 0.7 and world.follows:
            new = [world.unfollow(*rnd.choice(sorted(world.follows)))]
        elif roll < 0.8:
            system.model.drop(a)  # the sweep found a idle
        elif roll < 0.9 and system.model.view(a) is None and a not in system.model.regenerating:
            come_back(a)
        else:
            apply_some()
        written += new
        queue += new
    for _ in range(10):  # catch up; then every user reads again until it has a timeline
        apply_some(everything=True)
        system.settle(world.log, world.joined())
        missing = [u for u in users if system.model.view(u) is None]
        if not missing:
            break
        for u in missing:
            if u not in system.model.regenerating:
                come_back(u)
    exact(system, world)
    assert not system.model.regenerating


def test_a_repost_is_an_entry_of_the_reposter_that_names_its_original() -> None:
    state = AuthorState(followers={5, 6})
    posted = events.Envelope(1, events.TweetPosted(50, R, "r", "", 40))
    result = join_events(R, state, [posted], cap=10)
    (add,) = result.mutations
    assert (add.op, add.owners, add.tweets, add.reposts) == (
        Op.ADD,
        (R, 5, 6),
        (50,),
        ((50, 40, 0),),  # the original's author: unknown in this event
    )
    assert result.state.originals == {50: 40}
    assert orjson.loads(result.bodies[50])["repost_of"] == 40
    gone = join_events(R, result.state, [events.Envelope(2, events.TweetDeleted(50, R))], cap=10)
    assert [m.reposts for m in gone.mutations if m.op is Op.REMOVE] == [((50, 40, 0),)]
    assert gone.state.originals == {}
    assert AuthorState.decode(result.state.encode()) == result.state


def test_a_follow_merges_the_entries_showing_cap_plus_slack_originals() -> None:
    """An author who reposted their own posts has two entries for those
    originals: a follow brings enough of them to show cap + slack originals."""
    posts = list(range(10, 70, 10))  # 6 posts
    own = {p + 1: p for p in posts[-3:]}  # the newest 3 reposted by their author
    state = AuthorState(tweets=sorted(posts + list(own)), originals=own)
    kept, horizon, pairs = newest_entries(state.tweets, state.originals, 4)
    assert kept == (30, 40, 41, 50, 51, 60, 61)  # originals 30..60: four
    assert horizon == 30
    assert pairs == ((41, 40, 0), (51, 50, 0), (61, 60, 0))
    follow = join_events(R, state, [events.Envelope(1, events.Followed(5, R))], cap=3, slack=1)
    followed, add = follow.mutations
    assert (followed.op, followed.owners, followed.authors) == (Op.FOLLOWED, (5,), (R,))
    assert (add.tweets, add.horizon, add.reposts) == (kept, horizon, pairs)
    assert winners(add.tweets, {e: o for e, o, _ in add.reposts}) == [30, 41, 51, 61]


@settings(max_examples=500, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    cap=st.integers(2, 8),
    slack=st.integers(1, 4),
    jitter=st.sampled_from([0, 25]),
    resets=st.sampled_from([0.0, 0.3]),
    threshold=st.sampled_from([0, 2, 3]),
    relations=st.sampled_from([0.0, 0.3]),
    replies=st.sampled_from([0.0, 0.4]),
)
def test_reposts_undos_likes_and_deletes_under_any_interleaving_equal_the_oracle(
    seed: int,
    cap: int,
    slack: int,
    jitter: int,
    resets: float,
    threshold: int,
    relations: float,
    replies: float,
) -> None:
    """Reposts (of tweets and of reposts, of one's own tweets too), undone
    reposts, likes and unlikes, deletes of reposted tweets, suspensions that
    hide a user's reposts and the reposts of their tweets, pulled authors
    crossing the threshold, refills, and (``relations``) blocks (which take
    the follows both ways), unblocks, mutes of followees and of others,
    unmutes, reposts turned off and on, each table's changelog in its own
    order: once done, every view is the join's newest ``cap`` (one entry per
    original, the newest), leaving out what each user's blocks and mutes hide
    (reposts of hidden users' tweets included) and the reposts of followees
    followed with reposts off, and every count is the tables'. With
    ``replies``, answers to random entries: a reply to someone else shows
    only to its author, to whom it answers, and to that user's followers
    (docs/decisions.md D29), and follows and unfollows of the user answered
    bring such replies in and take them out."""
    rnd = random.Random(seed)
    world, envs = random_workload(
        rnd,
        6,
        steps=150,
        jitter=jitter,
        resets=resets,
        pull_threshold=threshold,
        engagements=0.35,
        suspensions=0.03,
        relations=relations,
        replies=replies,
    )
    system = System(cap, slack, pull_threshold=threshold)
    system.run(interleave(rnd, envs))
    system.settle(world.log, world.joined())
    exact(system, world)


def test_a_view_shows_each_original_once_as_its_newest_entry() -> None:
    """The deterministic case the property above relies on: two followees
    repost one tweet, the newer repost shows; undone, the older one shows;
    undone too, the post itself."""
    world = World(Log())
    envs = world.register(A, F, G, R)
    envs += [world.follow(F, A), world.follow(F, G), world.follow(F, R)]
    envs += world.post(A)
    (t,) = [e.event.tweet_id for e in envs if isinstance(e.event, events.TweetPosted)]
    envs += world.repost(G, t)
    envs += world.repost(R, t)
    system = System(cap=5, slack=2)
    system.run([envs])
    r_g, r_r = sorted(r for r, (_, o) in world.rows.items() if o == t)
    assert system.view(F) == [r_r] and system.view(A) == [t] and system.view(G) == [r_g]
    system.run([world.unrepost(r_r)])
    assert system.view(F) == [r_g]
    system.run([world.unrepost(r_g)])
    assert system.view(F) == [t]
    exact(system, world)


def test_a_reply_shows_to_followers_of_whom_it_answers_and_a_follow_of_them_brings_it() -> None:
    """docs/decisions.md D29: A answers U's post; F follows A but not U, so the
    reply is kept aside in F's timeline; following U shows it (and U's post),
    unfollowing U takes both out again; a reply to F itself always shows, and
    A's own timeline always has A's replies."""
    U = 4
    world = World(Log())
    system = System(cap=4, slack=2)
    system.run([[*world.register(A, F, U), world.follow(F, A), *world.post(U)]])
    post = max(world.rows)
    system.run([world.reply(A, post)])
    reply = max(world.rows)
    assert system.view(F) == [] and system.view(A) == [reply]
    assert system.model.timelines[F].aside == {reply: U}
    system.run([[world.follow(F, U)]])
    assert system.view(F) == [reply, post]
    system.run([[world.unfollow(F, U)]])
    assert system.view(F) == [] and system.model.timelines[F].aside == {reply: U}
    system.run([world.post(F)])
    mine = max(world.rows)
    system.run([world.reply(A, mine)])
    to_f = max(world.rows)
    assert system.view(F) == [to_f, mine]
    exact(system, world)
    # The unfollow of A takes its replies out, the aside one included.
    system.run([[world.unfollow(F, A)]])
    assert system.view(F) == [mine] and system.model.timelines[F].aside == {}
    exact(system, world)


@settings(max_examples=250, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    cap=st.integers(2, 8),
    slack=st.integers(1, 4),
    jitter=st.sampled_from([0, 25]),
    resets=st.sampled_from([0.0, 0.3]),
    threshold=st.sampled_from([0, 2, 3]),
)
def test_lists_under_any_interleaving_equal_the_list_view(
    seed: int, cap: int, slack: int, jitter: int, resets: float, threshold: int
) -> None:
    """Lists (docs/design.md, List) made, filled, emptied and deleted among
    posts, reposts, replies, mentions, blocks, mutes and suspensions, their
    refills too: once done, every list's timeline is the newest ``cap`` of
    its view (its members' entries, replies to non-members aside, the
    owner's hidden users screened but for the owner's own entries), members
    count towards the pull threshold, and a deleted list leaves no timeline."""
    rnd = random.Random(seed)
    world, envs = random_workload(
        rnd,
        6,
        steps=150,
        jitter=jitter,
        resets=resets,
        pull_threshold=threshold,
        engagements=0.3,
        suspensions=0.03,
        relations=0.25,
        replies=0.35,
        lists=0.3,
    )
    assert world.lists or world.deleted_lists
    system = System(cap, slack, pull_threshold=threshold)
    system.run(interleave(rnd, envs))
    system.settle(world.log, world.joined())
    exact(system, world)


def test_a_list_shows_its_members_and_only_the_replies_to_members() -> None:
    """O's list holds A: A's posts show, A's reply to U is aside until U is a
    member; O's own entries show only once O is a member, and O's own reply
    to U is then aside the same way (a list has no owner's exception)."""
    O, U = 5, 6  # noqa: E741 - the owner
    world = World(Log())
    system = System(cap=6, slack=2)
    list_, made = world.make_list(O)
    lst = owners.list_owner(list_)
    system.run([[*world.register(A, O, U), *made, world.add_member(list_, A), *world.post(U)]])
    post = max(world.rows)
    system.run([world.post(A) + world.post(O)])
    mine, o_post = sorted(world.rows)[-2:]
    system.run([world.reply(A, post) + world.reply(O, post)])
    by_a, by_o = sorted(world.rows)[-2:]
    assert system.view(lst) == [mine]
    assert system.model.timelines[lst].aside == {by_a: U}
    system.run([[world.add_member(list_, U)]])
    assert system.view(lst) == [by_a, mine, post]
    system.run([[world.add_member(list_, O)]])
    assert system.view(lst) == [by_o, by_a, o_post, mine, post]
    exact(system, world)
    system.run([[world.remove_member(list_, U)]])
    assert system.view(lst) == [o_post, mine]
    assert system.model.timelines[lst].aside == {by_a: U, by_o: U}
    exact(system, world)


def test_a_list_hides_what_its_owner_hides_but_the_owner_s_own_entries() -> None:
    """O mutes X: X's membership hides X, a member's repost of X's post is
    screened, but O's own repost of X's post (made before the mute) stays, as
    does O's own reply to X while X is a member; unmuting brings X back."""
    O, X = 5, 6  # noqa: E741 - the owner
    world = World(Log())
    system = System(cap=6, slack=2)
    list_, made = world.make_list(O)
    lst = owners.list_owner(list_)
    envs = [*world.register(A, O, X), *made, *world.post(X)]
    post = max(world.rows)
    envs += world.repost(O, post) + world.repost(A, post)
    envs += [world.add_member(list_, m) for m in (A, O, X)]
    system.run([envs])
    system.run([world.mute(O, X)])
    system.settle(world.log, world.joined())  # the filter's change refills the list
    system.run([world.reply(O, post)])
    reply = max(world.rows)
    view = system.view(lst)
    by_o = min(t for t, (a, o) in world.rows.items() if a == O and o == post)
    assert reply in view and by_o in view and post not in view
    assert all(world.rows[t][0] != X for t in view)
    exact(system, world)
    system.run([world.mute(O, X, False)])
    system.settle(world.log, world.joined())
    exact(system, world)


def test_a_deleted_list_leaves_nothing_once_the_watermark_passes_its_drop() -> None:
    O = 5  # noqa: E741 - the owner
    world = World(Log())
    system = System(cap=4, slack=2)
    list_, made = world.make_list(O)
    system.run([[*world.register(A, O), *made, world.add_member(list_, A), *world.post(A)]])
    assert system.view(owners.list_owner(list_)) == [max(world.rows)]
    gone = world.delete_list(list_)
    system.written |= {e.seq for e in gone}
    system.run([gone[-1:]])  # the drop, before the membership's removal: held
    assert owners.list_owner(list_) in system.model.timelines
    system.run([gone[:-1]])
    exact(system, world)
