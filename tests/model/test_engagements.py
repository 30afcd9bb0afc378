"""Likes and reposts counted per tweet (fanout.model.engagements)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fanout.model import events
from fanout.model.engagements import Engagements, count_events, counts_json
from tests.support.join_sim import System, interleave, random_workload

T = 40


def env(seq: int, kind: str, user: int, on: bool = True) -> events.Envelope:
    event = (events.Engaged if on else events.Disengaged)(kind, user, T)
    return events.Envelope(seq, event)


def test_a_users_last_event_of_a_batch_wins_whatever_the_arrival_order() -> None:
    batch = [env(3, events.LIKE, 1, False), env(1, events.LIKE, 1), env(2, events.LIKE, 2)]
    result = count_events(T, Engagements.empty(), batch)
    assert result.state.counts == (1, 0)
    assert result.state.likes.tolist() == [2]
    assert result.changed


def test_a_resent_like_and_an_unlike_of_nothing_change_nothing() -> None:
    state = count_events(T, Engagements.empty(), [env(1, events.LIKE, 5)]).state
    again = count_events(T, state, [env(2, events.LIKE, 5), env(3, events.REPOST, 9, False)])
    assert again.state.counts == (1, 0)
    assert not again.changed
    assert again.ignored == 2


def test_likes_and_reposts_are_counted_apart() -> None:
    batch = [env(1, events.LIKE, 5), env(2, events.REPOST, 5), env(3, events.REPOST, 6)]
    result = count_events(T, Engagements.empty(), batch)
    assert result.state.counts == (1, 2)
    assert counts_json(*result.state.counts) == b'{"likes":1,"reposts":2,"replies":0}'


def test_the_state_round_trips_and_refuses_a_truncated_value() -> None:
    state = Engagements(np.array([1, 5, 9], dtype=np.int64), np.array([2], dtype=np.int64))
    blob = state.encode()
    back = Engagements.decode(blob)
    assert back.likes.tolist() == [1, 5, 9] and back.reposts.tolist() == [2]
    assert Engagements.decode(None).counts == (0, 0)
    with pytest.raises(ValueError, match="truncated"):
        Engagements.decode(blob[:-8])


def test_an_event_of_another_tweet_is_refused() -> None:
    with pytest.raises(ValueError, match="routed"):
        count_events(T + 1, Engagements.empty(), [env(1, events.LIKE, 5)])


def test_a_viral_tweets_batch_of_likes_merges_in_bulk() -> None:
    """600,000 likers already, 5,000 more in one batch (some of them again)."""
    rnd = np.random.default_rng(0)
    likers = np.unique(rnd.integers(1, 10**9, size=600_000))
    state = Engagements(likers, np.zeros(0, dtype=np.int64))
    new = [int(u) for u in rnd.integers(1, 10**9, size=5_000)] + [int(likers[0])]
    batch = [env(i + 1, events.LIKE, u) for i, u in enumerate(new)]
    result = count_events(T, state, batch)
    assert result.state.counts[0] == len(np.union1d(likers, np.array(new)))
    assert np.all(np.diff(result.state.likes) > 0)


@pytest.mark.parametrize("seed", range(6))
def test_counts_equal_the_tables_under_any_interleaving(seed: int) -> None:
    """Reposts, undone reposts, likes, unlikes, deletes of liked and reposted
    tweets, suspensions and reinstatements: once everything is applied, every
    tweet's counts are those of the tables (active users' likes and reposts)."""
    rnd = random.Random(seed)
    world, envs = random_workload(rnd, 8, 300, engagements=0.4, suspensions=0.05)
    system = System(cap=50, slack=8)
    system.run(interleave(rnd, envs))
    assert system.counts == world.counts()
    kinds = {e.event.kind for e in envs if isinstance(e.event, events.Disengaged)}
    assert kinds == set(events.KINDS)  # likes and reposts came and went
