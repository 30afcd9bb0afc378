"""A plain-Python model of the packed timelines, for checking the join and the Lua.

``TimelineModel.apply`` does what the Redis script does, with lists; and
:func:`oracle` computes the join the way the SQL of DESIGN.md does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fanout.join import Mutation, Op
from fanout.timelines import group_by_timeline


@dataclass
class ModelTimeline:
    horizon: int = 0
    ids: list[int] = field(default_factory=list)  # ascending


@dataclass
class TimelineModel:
    cap: int
    slack: int
    timelines: dict[int, ModelTimeline] = field(default_factory=dict)
    bodies: dict[int, bytes] = field(default_factory=dict)

    def apply(self, bodies: Mapping[int, bytes], mutations: Iterable[Mutation]) -> None:
        """Apply a batch the way the store does: bodies, then per-timeline ops."""
        self.bodies.update(bodies)
        ops, deleted = group_by_timeline(mutations)
        for op in ops:
            if op.op is Op.ADD:
                self._add(op.owner, op.tweets, op.horizon)
            elif op.owner in self.timelines:
                tl = self.timelines[op.owner]
                tl.ids = [i for i in tl.ids if i not in set(op.tweets)]
        for t in deleted:
            self.bodies.pop(t, None)

    def _add(self, owner: int, tweets: Iterable[int], h: int) -> None:
        tl = self.timelines.setdefault(owner, ModelTimeline())
        if h > tl.horizon:
            tl.horizon = h
            tl.ids = [i for i in tl.ids if i >= h]
        tl.ids = sorted(set(tl.ids) | {t for t in tweets if t >= tl.horizon})
        if len(tl.ids) > self.cap + self.slack:
            tl.ids = tl.ids[-self.cap :]
            tl.horizon = tl.ids[0]

    def view(self, owner: int) -> tuple[int, list[int]] | None:
        tl = self.timelines.get(owner)
        if tl is None:
            return None
        return tl.horizon, list(reversed(tl.ids[-self.cap :]))


def oracle(
    tweets: Mapping[int, int], follows: Iterable[tuple[int, int]], users: Iterable[int]
) -> dict[int, list[int]]:
    """Each user's timeline by the join: own tweets plus followees', newest first.

    ``tweets`` maps live tweet id → author; ``follows`` are (follower, followee).
    """
    followees: dict[int, set[int]] = {u: {u} for u in users}
    for follower, followee in follows:
        followees.setdefault(follower, {follower}).add(followee)
    by_author: dict[int, list[int]] = {}
    for tweet_id, author in tweets.items():
        by_author.setdefault(author, []).append(tweet_id)
    return {
        u: sorted((t for a in fs for t in by_author.get(a, ())), reverse=True)
        for u, fs in followees.items()
    }


def expected_view(full: list[int], horizon: int, cap: int) -> list[int]:
    """What a timeline with ``horizon`` must show, given the oracle's full list."""
    return [t for t in full if t >= horizon][:cap]
