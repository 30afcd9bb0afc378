"""The rebuild's rules (fanout.join.rebuilt_*) against the incremental ones."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from fanout import events
from fanout.join import AuthorState, join_events, rebuilt_author_state, rebuilt_timeline

CAP, SLACK = 5, 2


def test_a_short_timeline_is_exact() -> None:
    assert rebuilt_timeline([3, 1, 2, 2], cap=CAP, slack=SLACK) == (0, [1, 2, 3])


def test_a_long_timeline_keeps_cap_plus_slack_and_gets_a_horizon() -> None:
    horizon, ids = rebuilt_timeline(range(1, 21), cap=CAP, slack=SLACK)
    assert ids == list(range(14, 21)) and horizon == 14


def test_an_author_horizon_is_a_floor() -> None:
    # Below an author's horizon its older tweets are unknown: the timeline is
    # exact only from there, and says so.
    assert rebuilt_timeline([1, 2, 8, 9], cap=CAP, slack=SLACK, floor=8) == (8, [8, 9])


def test_author_state_leaves_out_the_self_edge() -> None:
    state = rebuilt_author_state(7, [7, 1, 2], [30, 10, 20], cap=CAP, slack=SLACK)
    assert state == AuthorState(followers={1, 2}, tweets=[10, 20, 30], horizon=0)
    assert AuthorState.decode(state.encode()) == state


@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["post", "delete", "follow", "unfollow"]), st.integers(1, 6)),
        max_size=60,
    ),
    seed=st.integers(0, 1000),
)
def test_without_deletions_at_the_cap_the_incremental_state_is_the_rebuilt_one(
    ops: list[tuple[str, int]], seed: int
) -> None:
    """Replaying an author's history through join_events gives the state the
    rebuild computes from the final tables (exactly, while no tweet has been
    evicted; above the horizon otherwise)."""
    rnd = random.Random(seed)
    author, next_id, seq = 100, 1, 0
    live: set[int] = set()
    followers: set[int] = set()
    state = AuthorState()
    for op, who in ops:
        seq += 1
        ev: events.Event
        if op == "post":
            ev, next_id = events.TweetPosted(next_id, author, "a", "t"), next_id + 1
            live.add(ev.tweet_id)
        elif op == "delete" and live:
            ev = events.TweetDeleted(rnd.choice(sorted(live)), author)
            live.discard(ev.tweet_id)
        elif op == "follow":
            ev = events.Followed(who, author)
            followers.add(who)
        elif op == "unfollow":
            ev = events.Unfollowed(who, author)
            followers.discard(who)
        else:
            continue
        state = join_events(author, state, [events.Envelope(seq, ev)], cap=CAP, slack=SLACK).state
    rebuilt = rebuilt_author_state(author, followers, live, cap=CAP, slack=SLACK)
    assert state.followers == rebuilt.followers
    if state.horizon == 0:
        assert state.tweets == rebuilt.tweets
    else:  # tweets were evicted: the state is exact above its horizon
        assert state.tweets == sorted(t for t in live if t >= state.horizon)
        assert set(state.tweets) <= set(rebuilt.tweets)
