"""Likes, reposts and replies counted per tweet (fanout.model.engagements)."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from fanout.model import events
from fanout.model.engagements import Engagements, count_events, counts_json
from tests.support.join_sim import System, World, interleave, random_workload

T = 40


def env(seq: int, kind: str, member: int, on: bool = True) -> events.Envelope:
    event = (events.Engaged if on else events.Disengaged)(kind, member, T)
    return events.Envelope(seq, event)


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_a_users_last_event_of_a_batch_wins_whatever_the_arrival_order() -> None:
    batch = [env(3, events.LIKE, 1, False), env(1, events.LIKE, 1), env(2, events.LIKE, 2)]
    result = count_events(T, Engagements.empty(), batch)
    assert result.state.counts == (1, 0, 0)
    assert result.state.likes.tolist() == [2]
    assert result.changed


def test_a_resent_like_and_an_unlike_of_nothing_change_nothing() -> None:
    state = count_events(T, Engagements.empty(), [env(1, events.LIKE, 5)]).state
    again = count_events(T, state, [env(2, events.LIKE, 5), env(3, events.REPOST, 9, False)])
    assert again.state.counts == (1, 0, 0)
    assert not again.changed
    assert again.ignored == 2


def test_likes_reposts_and_replies_are_counted_apart() -> None:
    batch = [
        env(1, events.LIKE, 5),
        env(2, events.REPOST, 5),
        env(3, events.REPOST, 6),
        # Replies are counted by the reply (one user may answer many times):
        # two of user 5's, one of them sent again, and one undone.
        env(4, events.REPLY, T + 1),
        env(5, events.REPLY, T + 2),
        env(6, events.REPLY, T + 1),
        env(7, events.REPLY, T + 3),
        env(8, events.REPLY, T + 3, False),
    ]
    result = count_events(T, Engagements.empty(), batch)
    assert result.state.counts == (1, 2, 2)
    assert result.state.replies.tolist() == [T + 1, T + 2]
    assert counts_json(*result.state.counts) == b'{"likes":1,"reposts":2,"replies":2}'
    # A reply's tombstone takes it out; a reply of another tweet's id is no like.
    later = [env(9, events.REPLY, T + 2, False), env(10, events.LIKE, T + 1, False)]
    gone = count_events(T, result.state, later)
    assert gone.state.counts == (1, 2, 1) and gone.changed and gone.ignored == 1


def test_the_state_round_trips_and_refuses_a_truncated_value() -> None:
    state = Engagements(ids(1, 5, 9), ids(2), ids(41, 47))
    blob = state.encode()
    back = Engagements.decode(blob)
    assert back.likes.tolist() == [1, 5, 9] and back.reposts.tolist() == [2]
    assert back.replies.tolist() == [41, 47]
    assert Engagements.decode(None).counts == (0, 0, 0)
    with pytest.raises(ValueError, match="truncated"):
        Engagements.decode(blob[:-8])
    with pytest.raises(ValueError, match="version"):
        Engagements.decode(b"\x09" + blob[1:])


def test_a_state_written_before_replies_were_counted_has_none() -> None:
    """Version 1: a header of (version, likes, reposts), then the two arrays."""
    v1 = struct.pack("<BII", 1, 3, 1) + ids(1, 5, 9).astype("<i8").tobytes() + ids(2).tobytes()
    old = Engagements.decode(v1)
    assert old.likes.tolist() == [1, 5, 9] and old.reposts.tolist() == [2]
    assert old.counts == (3, 1, 0)
    with pytest.raises(ValueError, match="truncated"):
        Engagements.decode(v1[:-8])
    # A reply counted into it is written in the current version.
    result = count_events(T, old, [env(1, events.REPLY, T + 1)])
    assert result.changed and Engagements.decode(result.state.encode()).counts == (3, 1, 1)
    assert result.state.encode()[0] != 1


def test_an_event_of_another_tweet_is_refused() -> None:
    with pytest.raises(ValueError, match="routed"):
        count_events(T + 1, Engagements.empty(), [env(1, events.LIKE, 5)])


def test_a_viral_tweets_batch_of_likes_merges_in_bulk() -> None:
    """600,000 likers already, 5,000 more in one batch (some of them again)."""
    rnd = np.random.default_rng(0)
    likers = np.unique(rnd.integers(1, 10**9, size=600_000))
    state = Engagements(likers, ids(), ids())
    new = [int(u) for u in rnd.integers(1, 10**9, size=5_000)] + [int(likers[0])]
    batch = [env(i + 1, events.LIKE, u) for i, u in enumerate(new)]
    result = count_events(T, state, batch)
    assert result.state.counts[0] == len(np.union1d(likers, np.array(new)))
    assert np.all(np.diff(result.state.likes) > 0)


def _workload(seed: int) -> tuple[random.Random, World, list[events.Envelope]]:
    rnd = random.Random(seed)
    world, envs = random_workload(
        rnd, 8, 300, engagements=0.4, suspensions=0.05, replies=0.3, relations=0.05
    )
    return rnd, world, envs


def test_the_workloads_answer_replies_and_tweets_that_go() -> None:
    """What the property below covers, over its seeds: tweets with replies
    at the end, replies to replies, and replies whose parent is gone (they
    stay, counted nowhere)."""
    to_replies = to_gone = answered = 0
    for seed in range(6):
        _, world, _ = _workload(seed)
        parents = {r: parent for r, (parent, _) in world.replied.items()}
        to_replies += any(parent in parents for parent in parents.values())
        to_gone += any(
            r in world.rows and parent not in world.rows for r, parent in parents.items()
        )
        answered += any(replies for _, _, replies in world.counts().values())
    assert to_replies and to_gone and answered


@pytest.mark.parametrize("seed", range(6))
def test_counts_equal_the_tables_under_any_interleaving(seed: int) -> None:
    """Reposts, undone reposts, likes, unlikes, replies (to replies and
    through reposts too), deletes of liked, reposted and answered tweets and
    of replies, suspensions and reinstatements: once everything is applied,
    every tweet's counts are those of the tables (active users' likes,
    reposts and live direct replies)."""
    rnd, world, envs = _workload(seed)
    system = System(cap=50, slack=8)
    system.run(interleave(rnd, envs))
    assert system.counts == world.counts()
    kinds = {e.event.kind for e in envs if isinstance(e.event, events.Disengaged)}
    assert kinds == set(events.KINDS)  # likes, reposts and replies came and went
