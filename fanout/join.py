"""The join rules: tweets ⋈ follows, maintained incrementally per author.

This is the pure core of the fanout job (no Spark, Kafka or Redis). The job
groups changelog events by their join key (a tweet's author, a follow's
followee) and calls :func:`join_events` with that author's state; the
returned mutations say how home timelines change. The product rule:

| event | effect |
| --- | --- |
| ``a`` posts ``t`` | add ``t`` to the timeline of every follower of ``a`` and to ``a``'s own |
| ``t`` deleted | remove ``t`` from those timelines |
| ``f`` follows ``a`` | merge ``a``'s recent tweets into ``f``'s timeline |
| ``f`` unfollows ``a`` | remove ``a``'s recent tweets from ``f``'s timeline |

``Followed(u, u)`` (the implicit self edge, written when a user registers and
when a timeline is regenerated) materializes ``u``'s own timeline: it merges
``u``'s tweets into it and creates it if missing; it is not a follower.
``Unfollowed(u, u)`` changes nothing.

**State** per author: the set of followers and the author's newest
``cap + SLACK`` live tweet ids, plus a *horizon*: once older tweets have been
evicted from the state, the state is complete only for ids >= horizon.

**Timelines** keep between ``cap`` and ``cap + SLACK`` entries (readers see
the newest ``cap``) and a horizon of their own: when a timeline is trimmed,
its horizon rises to its oldest kept entry, and when it merges an author
whose state has a horizon, it raises its horizon to that too and drops
entries below it. Invariant: a timeline holds exactly the join's tweets
whose ids are >= its horizon (newest ``cap`` shown). The horizon stays 0,
and the timeline is exact, until a timeline or an author passes
``cap + SLACK`` entries; after removals at the cap a timeline can then show
fewer than ``cap`` entries (the documented shortfall), never a wrong one.

Why author state keeps ``cap + SLACK``: an unfollow removes the author's
tweets the state knows. A timeline holds at most ``cap + SLACK`` entries, so
any tweet of the author still in it is among the author's newest
``cap + SLACK`` live tweets: all of them are removed.

Events of one author are applied in ``seq`` (commit) order, whatever the
order they arrived in: within a micro-batch the result does not depend on
how the two topics interleave.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from fanout import events
from fanout.config import DEFAULT_TIMELINE_SLACK

#: Entries kept beyond the cap, in timelines and in author state (TIMELINE_SLACK).
SLACK = DEFAULT_TIMELINE_SLACK
_STATE_VERSION = 1
_HEADER = struct.Struct("<BqII")  # version, horizon, n_followers, n_tweets


class Op(IntEnum):
    """Timeline mutations, in the order the sink applies them."""

    ADD = 1  # add tweets to owners' timelines (creating missing timelines)
    REMOVE = 2  # remove tweets from owners' timelines
    DELETE_BODY = 4  # drop tweet bodies from the tweet cache


@dataclass(frozen=True, slots=True)
class Mutation:
    op: Op
    owners: tuple[int, ...] = ()
    tweets: tuple[int, ...] = ()  # ascending
    horizon: int = 0  # ADD: raise each owner's horizon to this first

    @property
    def deliveries(self) -> int:
        return len(self.owners) * len(self.tweets)


@dataclass
class AuthorState:
    followers: set[int] = field(default_factory=set)
    tweets: list[int] = field(default_factory=list)  # ascending, live
    horizon: int = 0

    def encode(self) -> bytes:
        followers = array("q", sorted(self.followers))
        tweets = array("q", self.tweets)
        header = _HEADER.pack(_STATE_VERSION, self.horizon, len(followers), len(tweets))
        return header + followers.tobytes() + tweets.tobytes()

    @classmethod
    def decode(cls, blob: bytes | None) -> AuthorState:
        if not blob:
            return cls()
        version, horizon, n_followers, n_tweets = _HEADER.unpack_from(blob)
        if version != _STATE_VERSION:
            raise ValueError(f"unknown author-state version {version}")
        numbers = array("q")
        numbers.frombytes(blob[_HEADER.size :])
        if len(numbers) != n_followers + n_tweets:
            raise ValueError("author state is truncated")
        return cls(
            followers=set(numbers[:n_followers]),
            tweets=list(numbers[n_followers:]),
            horizon=horizon,
        )


@dataclass
class JoinResult:
    state: AuthorState
    #: Bodies to put in the tweet cache (before the mutations are applied).
    bodies: dict[int, bytes]
    mutations: list[Mutation]
    changed: bool
    #: Events that changed nothing (duplicates from a relay re-send, self unfollows).
    ignored: int


def join_events(
    author_id: int,
    state: AuthorState,
    envelopes: Iterable[events.Envelope],
    *,
    cap: int,
    slack: int = SLACK,
) -> JoinResult:
    """Apply one author's events (in ``seq`` order) to its state."""
    keep = cap + slack
    followers, tweets, horizon = set(state.followers), list(state.tweets), state.horizon
    bodies: dict[int, bytes] = {}
    out: list[Mutation] = []
    ignored = 0
    changed = False

    def audience() -> tuple[int, ...]:
        return tuple(sorted(followers | {author_id}))

    for envelope in sorted(envelopes, key=lambda e: e.seq):
        ev = envelope.event
        if ev.join_key != author_id:
            raise ValueError(f"event {ev!r} routed to author {author_id}")
        if isinstance(ev, events.TweetPosted):
            at = bisect.bisect_left(tweets, ev.tweet_id)
            if at < len(tweets) and tweets[at] == ev.tweet_id:
                ignored += 1
                continue
            tweets.insert(at, ev.tweet_id)
            if len(tweets) > keep:
                del tweets[: len(tweets) - keep]
                horizon = tweets[0]
            changed = True
            bodies[ev.tweet_id] = events.tweet_json(ev)
            out.append(Mutation(Op.ADD, audience(), (ev.tweet_id,)))
        elif isinstance(ev, events.TweetDeleted):
            at = bisect.bisect_left(tweets, ev.tweet_id)
            if at < len(tweets) and tweets[at] == ev.tweet_id:
                del tweets[at]
                changed = True
            bodies.pop(ev.tweet_id, None)
            out.append(Mutation(Op.REMOVE, audience(), (ev.tweet_id,)))
            out.append(Mutation(Op.DELETE_BODY, (), (ev.tweet_id,)))
        elif isinstance(ev, events.Followed):
            if ev.follower_id != author_id and ev.follower_id not in followers:
                followers.add(ev.follower_id)
                changed = True
            # Also for a known follower: a re-published follow regenerates a timeline.
            out.append(Mutation(Op.ADD, (ev.follower_id,), tuple(tweets), horizon))
        elif isinstance(ev, events.Unfollowed):
            if ev.follower_id == author_id or ev.follower_id not in followers:
                ignored += 1
                continue
            followers.discard(ev.follower_id)
            changed = True
            if tweets:
                out.append(Mutation(Op.REMOVE, (ev.follower_id,), tuple(tweets)))
    return JoinResult(
        state=AuthorState(followers, tweets, horizon),
        bodies=bodies,
        mutations=coalesce(out),
        changed=changed,
        ignored=ignored,
    )


def coalesce(mutations: list[Mutation]) -> list[Mutation]:
    """Merge adjacent ADDs to the same owners (an author posting several tweets
    in one micro-batch becomes one write per follower)."""
    out: list[Mutation] = []
    for m in mutations:
        prev = out[-1] if out else None
        if (
            prev is not None
            and m.op is Op.ADD
            and prev.op is Op.ADD
            and prev.owners == m.owners
            and prev.horizon == m.horizon
        ):
            out[-1] = Mutation(
                Op.ADD, m.owners, tuple(sorted({*prev.tweets, *m.tweets})), m.horizon
            )
        else:
            out.append(m)
    return out


# --- the same view computed in one pass (the rebuild) ----------------------------------


def rebuilt_timeline(
    ids: Iterable[int], *, cap: int, slack: int = SLACK, floor: int = 0
) -> tuple[int, list[int]]:
    """(horizon, ids ascending) of a timeline computed from scratch.

    ``ids`` are the tweets the join puts in it, as far as they are known:
    ``floor`` is the highest horizon of the authors they came from (below it
    an author's older tweets are not in its state). Kept: the newest
    ``cap + slack`` ids at or above ``floor``; the horizon is ``floor``, or
    the oldest kept id when older ones were cut. This is what the incremental
    rules converge to, with the slack refilled.
    """
    kept = sorted({i for i in ids if i >= floor})
    keep = cap + slack
    if len(kept) <= keep:
        return floor, kept
    kept = kept[-keep:]
    return kept[0], kept


def rebuilt_author_state(
    author_id: int,
    followers: Iterable[int],
    live_tweets: Iterable[int],
    *,
    cap: int,
    slack: int = SLACK,
) -> AuthorState:
    """An author's join state computed from the current tables: what
    :func:`join_events` would hold after replaying the author's history."""
    horizon, tweets = rebuilt_timeline(live_tweets, cap=cap, slack=slack)
    return AuthorState(
        followers={f for f in followers if f != author_id}, tweets=tweets, horizon=horizon
    )
