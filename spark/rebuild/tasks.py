"""The rebuild's executor side after the read (:mod:`spark.rebuild.read`):
pure Python over Arrow batches (see :mod:`spark.rebuild.stages` for the stages
that use them). Each function here is run by ``mapInArrow``: it takes an
iterator of Arrow batches and yields batches of the schema named beside it
(a Spark DDL string).

A timeline is made as the fanout job's merges make it (fanout.model.join,
fanout/store/lua/apply.lua): each followed author's newest entries (of an
author followed with reposts off, its newest posts), without the reposts
whose original's author the owner's filter hides and the entries whose
original answers a user it hides (but for the owner's own entries), one
entry per original. Replies (docs/decisions.md D29): a post of a followee
answering a user the owner does not follow (nor is) is kept *aside*, beside
the view (``ta:``), the other replies to someone else are recorded as shown
(``tc:``), and the owner's followees are written for every owner who has
some (``tf:``, idle ones too): :func:`reply_sides` is the rule. The timeline
keeps the newest ``cap + slack`` of view and aside together at or above the
highest of the authors' horizons, its horizon the oldest of them when older
ones were cut. A timeline whose view and aside together hold fewer than
``cap`` entries above a horizon (its filter left some out) is *short*: the
write queues a refill, as the job does. Beside each timeline its owner's
*mentions timeline* (owner ``-u``, docs/decisions.md D30): the newest
``cap + slack`` posts that notify the owner by authors its filter does not
hide (:meth:`OwnerInput.mentions_timeline`). A pulled author's list keeps beside
it the users its entries' originals answer (``ac:``). What readers see
merges the pulled authors' lists in, screened as
``fanout/store/lua/merged.lua`` screens them (a list's reply to a user the
reader does not follow is not seen).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Broadcast

from fanout.config import StarlingConfig
from fanout.model import owners as timeline_owners
from fanout.model.join import distinct_timeline
from fanout.store.ops import pack_pairs, pack_timeline, visible
from fanout.store.timelines import TimelineStore, store_for
from spark.runtime import arrow
from spark.runtime.worker_heap import spark_task

#: The ``kind`` of a row of the state a rebuild hands over (the fanout job's
#: initial state, spark.stream.operator): an author's join state, or a tweet's
#: engagements (fanout.model.engagements).
AUTHOR_STATE = "author"
ENGAGEMENTS_STATE = "engagements"
#: The authors' states (read by :mod:`spark.rebuild.read`): an author's join
#: state, and what of it timelines are made from.
STATE = (
    "join_key long, blob binary, kept array<long>, origins array<long>, by array<long>, "
    "answers array<long>, horizon long, posts array<long>, posts_answers array<long>, "
    "posts_horizon long, pulled boolean"
)
#: The timelines' input: one row per owner and author they follow (the self
#: edge included), with the author's kept entries (of a quiet edge, ``quiet``,
#: to a pushed author: its newest posts), their originals, their originals'
#: authors, the users their originals answer (0: none) and their horizon, and
#: whether the author is pulled; one row per owner with a filter (``author``
#: 0, no entries, ``hidden`` its hidden users; null on the other rows); and
#: one row per author of posts that notify the owner (``mentions`` those
#: posts, no entries; null on the other rows: :data:`spark.rebuild.read.Row`
#: ``MENTIONS``); each owner's rows consecutive (:func:`owner_inputs`).
EDGES = (
    "owner long, author long, kept array<long>, origins array<long>, by array<long>, "
    "answers array<long>, horizon long, pull boolean, quiet boolean, hidden array<long>, "
    "mentions array<long>"
)
#: The ``author`` of an owner's filter's row among the edges (no user's id).
FILTER_ROW = 0
#: write_timelines_partition: each timeline written (a mentions timeline's
#: owner ``-u``), its length, and whether it is short (queued for a refill).
WRITTEN = "owner long, entries int, short boolean"
#: diff_partition: how a rebuilt timeline differs from the live one.
DIFF = "owner long, live_missing boolean, missing int, extra int"
#: write_lists_partition: how many pulled authors' lists were written.
COUNT = "n long"


@spark_task
def write_lists_partition(
    batches: Iterator[pa.RecordBatch], config: StarlingConfig, generation: int
) -> Iterator[pa.RecordBatch]:
    """Write the pulled authors' lists (``join_key``, ``kept``, ``origins``,
    ``by``, ``answers``, ``horizon``) into ``generation``: one entry per
    original, the others aside, each repost with its original's author (which
    readers' filters check), and beside each list its entries whose original
    answers a user (``ac:``, (entry, user): readers see a reply to a user they
    do not follow, or hide, no more than their timelines do; the join's
    ``Op.LIST`` carries the same)."""
    store = store_for(config, timeout=120)
    for batch in batches:
        rows = batch.to_pylist()
        store.write_list_answers(
            generation,
            (
                (r["join_key"], [(e, u) for e, u in zip(r["kept"], r["answers"], strict=True) if u])
                for r in rows
            ),
        )
        n = store.write_list_views(
            generation,
            (
                (
                    r["join_key"],
                    r["horizon"],
                    dict(zip(r["kept"], r["origins"], strict=True)),
                    {
                        e: b
                        for e, o, b in zip(r["kept"], r["origins"], r["by"], strict=True)
                        if e != o
                    },
                )
                for r in rows
            ),
        )
        yield arrow.batch({"n": [n]}, COUNT)


#: The edges a write task joins with the broadcast :class:`KeptIds`: one row
#: per owner and author they follow (``quiet``: with reposts off), and the
#: owners' filters' and mentions' rows (see :data:`EDGES`), each owner's rows
#: consecutive.
OWNED = "owner long, author long, quiet boolean, hidden array<long>, mentions array<long>"


def _flat(column: pa.ChunkedArray) -> pa.Array:
    """A list column's values, from the first list's first id whatever the
    array's offset (a null list holds none)."""
    empty = [pa.array([], pa.list_(pa.int64()))]
    return pc.list_flatten(pa.concat_arrays(column.chunks or empty))


@dataclass(frozen=True)
class KeptIds:
    """Every author's kept entries (rows of :data:`STATE`), as NumPy arrays
    ordered by author: the side of the timelines' join that is small enough
    to broadcast (see :func:`spark.rebuild.stages.Rebuild.join`). ``values``
    holds each author's kept entries, then the posts runs of the authors that
    have one (``origins``, ``by`` and ``answers`` beside them: a post's original
    is itself, its author 0); an author's kept run is
    ``values[offsets[i]:offsets[i + 1]]``, the run a quiet follower merges
    ``values[posts_starts[i]:posts_ends[i]]`` (its kept run again where it has
    no posts run of its own)."""

    authors: np.ndarray
    values: np.ndarray
    origins: np.ndarray  # each value's original (a post's is itself)
    by: np.ndarray  # each value's original's author (0 for a post)
    answers: np.ndarray  # the user each value's original answers (0: none)
    offsets: np.ndarray
    horizons: np.ndarray
    posts_starts: np.ndarray
    posts_ends: np.ndarray
    posts_horizons: np.ndarray
    pulled: np.ndarray

    @classmethod
    def of(cls, table: pa.Table) -> KeptIds:
        """From ``join_key, kept, origins, by, answers, horizon, posts,
        posts_answers, posts_horizon, pulled`` columns, one row per author."""
        table = table.sort_by("join_key").combine_chunks()
        kept = _flat(table.column("kept"))
        origins = _flat(table.column("origins"))
        by = _flat(table.column("by"))
        answers = _flat(table.column("answers"))
        if table.column("kept").null_count or kept.null_count or origins.null_count:
            raise ValueError("an author's kept tweets hold a null")
        if len(origins) != len(kept) or len(by) != len(kept) or len(answers) != len(kept):
            raise ValueError("an author's kept tweets and their originals differ in length")
        lengths = pc.list_value_length(table.column("kept")).to_numpy(zero_copy_only=False)
        offsets = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
        horizons = table.column("horizon").to_numpy()
        posts_column = table.column("posts")
        posts = _flat(posts_column).to_numpy()
        posts_answers = _flat(table.column("posts_answers")).to_numpy()
        if len(posts_answers) != len(posts):
            raise ValueError("an author's posts and the users they answer differ in length")
        has_posts = posts_column.is_valid().to_numpy(zero_copy_only=False)
        posts_lengths = pc.list_value_length(posts_column).fill_null(0).to_numpy()
        posts_at = len(kept) + np.cumsum(posts_lengths, dtype=np.int64) - posts_lengths
        posts_starts = np.where(has_posts, posts_at, offsets[:-1])
        posts_horizons = pc.fill_null(table.column("posts_horizon"), 0).to_numpy()
        return cls(
            authors=table.column("join_key").to_numpy(),
            values=np.concatenate((kept.to_numpy(), posts)),
            origins=np.concatenate((origins.to_numpy(), posts)),
            by=np.concatenate((by.to_numpy(), np.zeros(len(posts), dtype=np.int64))),
            answers=np.concatenate((answers.to_numpy(), posts_answers)),
            offsets=offsets,
            horizons=horizons,
            posts_starts=posts_starts,
            posts_ends=np.where(has_posts, posts_starts + posts_lengths, offsets[1:]),
            posts_horizons=np.where(has_posts, posts_horizons, horizons),
            pulled=table.column("pulled").to_numpy(zero_copy_only=False),
        )

    def join(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Rows of :data:`OWNED` in, rows of :data:`EDGES` out, in the same order
        (an author without state has no tweets, horizon 0, and is not pulled;
        a quiet edge to a pushed author gets its posts run; a row of mentions
        gets no entries). The ids are gathered in NumPy: a popular author's
        tweets are copied to each follower's row in C."""
        owners = batch.column("owner").to_numpy()
        authors = batch.column("author").to_numpy()
        quiet = batch.column("quiet").fill_null(False).to_numpy(zero_copy_only=False)
        at = np.searchsorted(self.authors, authors)
        found = (at < len(self.authors)) & batch.column("mentions").is_null().to_numpy(
            zero_copy_only=False
        )
        found[found] = self.authors[at[found]] == authors[found]
        at = at[found]
        pull = np.zeros(len(authors), dtype=bool)
        pull[found] = self.pulled[at]
        pull &= owners != authors
        posts = (quiet & ~pull)[found]
        starts = np.zeros(len(authors), dtype=np.int64)
        starts[found] = np.where(posts, self.posts_starts[at], self.offsets[at])
        ends = np.zeros(len(authors), dtype=np.int64)
        ends[found] = np.where(posts, self.posts_ends[at], self.offsets[at + 1])
        horizons = np.zeros(len(authors), dtype=np.int64)
        horizons[found] = np.where(posts, self.posts_horizons[at], self.horizons[at])
        lengths = ends - starts
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        columns = [
            batch.column("owner"),
            batch.column("author"),
            pa.LargeListArray.from_arrays(offsets, self.values[gather]),
            pa.LargeListArray.from_arrays(offsets, self.origins[gather]),
            pa.LargeListArray.from_arrays(offsets, self.by[gather]),
            pa.LargeListArray.from_arrays(offsets, self.answers[gather]),
            pa.array(horizons),
            pa.array(pull),
            pa.array(quiet),
            batch.column("hidden"),
            batch.column("mentions"),
        ]
        return pa.RecordBatch.from_arrays(columns, names=arrow.names(EDGES))


def joined(
    batches: Iterable[pa.RecordBatch], kept: Broadcast[KeptIds] | None
) -> Iterable[pa.RecordBatch]:
    """Rows of :data:`EDGES`: ``batches`` as they are without ``kept``, else
    rows of :data:`OWNED` joined with it."""
    if kept is None:
        return batches
    ids = kept.value
    return (ids.join(batch) for batch in batches)


_NO_IDS = np.empty(0, dtype=np.int64)


def owner_answers(answers: np.ndarray, mine: np.ndarray, owner: int) -> np.ndarray:
    """The users an owner's entries answer as the owner's timeline sees them
    (``answers``: the user each entry's original answers, 0 for none): none
    for the owner's own entries (``mine``) and for those that answer the
    owner, which always show. The join's store names them so
    (``fanout.store.ops._with_answers``)."""
    if not answers.any():
        return answers
    return np.where(mine | (answers == owner), 0, answers)


def reply_sides(
    entries: np.ndarray, origins: np.ndarray, answers: np.ndarray, followees: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Which of an owner's entries are replies its timeline keeps aside, and
    which are replies that show (docs/decisions.md D29), as two masks: a post
    (not a repost: reposts of replies are entries like any repost) whose
    ``answers`` (:func:`owner_answers`) names a user is aside if the owner
    does not follow that user (``followees``, ascending: ``tf:``), else it
    shows (``tc:``). A pulled author's list's reply that would be aside is one
    its reader does not see.

    The one home of this rule in the rebuild. The same rule lives in
    ``fanout/store/lua/apply.lua`` (``sort_replies``, ``followed``,
    ``unfollowed``), ``fanout/store/lua/merged.lua`` (a list's replies),
    ``tests/support/timeline_model.py`` (``_place``, ``_reveal``, ``_hide``,
    ``_lists_of``) and the view's SQL (docs/design.md): they change together."""
    replies = (answers != 0) & (entries == origins)
    if not replies.any():
        return replies, replies
    followed = np.isin(answers, followees)
    return replies & ~followed, replies & followed


class Made(NamedTuple):
    """A rebuilt timeline: its horizon, its view's entries ascending (one per
    original, the newest), the store's pairs (``tr:``: (original, entry),
    sorted: :func:`fanout.model.join.aside`), and its replies kept aside
    (``ta:``) and shown (``tc:``), as (user answered, entry) records, sorted;
    all at or above the horizon."""

    horizon: int
    ids: list[int]
    pairs: list[tuple[int, int]]
    aside: list[tuple[int, int]] = []
    shown: list[tuple[int, int]] = []

    def short(self, cap: int) -> bool:
        """Whether the store would queue it for a refill: fewer than ``cap``
        entries, view and aside together, above a horizon."""
        return self.horizon > 0 and len(self.ids) + len(self.aside) < cap


def _records(users: np.ndarray, entries: np.ndarray, horizon: int) -> list[tuple[int, int]]:
    """(user, entry) records of the entries at or above ``horizon``, sorted."""
    if not len(entries):
        return []
    keep = entries >= horizon
    return sorted(set(zip(users[keep].tolist(), entries[keep].tolist(), strict=True)))


@dataclass
class OwnerInput:
    """What one owner's timeline is made from: the kept entries of the authors
    they follow (and their own), as arrays of ids in any order, duplicates
    allowed, each beside an array of their originals and one of the users
    they answer; what of them the owner's filter and its quiet follows screen
    out; whom the owner follows."""

    owner: int
    #: The pushed authors' kept entries, their originals, and the highest of their horizons.
    ids: list[np.ndarray] = field(default_factory=list)
    floor: int = 0
    #: The pulled authors followed (their entries are merged at read time).
    pulls: list[int] = field(default_factory=list)
    #: Every followed author's kept entries, pulled ones included (what readers
    #: see), and the highest horizon among them.
    seen: list[np.ndarray] = field(default_factory=list)
    seen_floor: int = 0
    origins: list[np.ndarray] = field(default_factory=list)
    seen_origins: list[np.ndarray] = field(default_factory=list)
    #: Beside :attr:`ids` and :attr:`seen`: the user each entry's original
    #: answers, as the owner sees it (:func:`owner_answers`; 0: none).
    answers: list[np.ndarray] = field(default_factory=list)
    seen_answers: list[np.ndarray] = field(default_factory=list)
    #: Of :attr:`pulls`, those followed with reposts off (read without their reposts).
    quiet_pulls: list[int] = field(default_factory=list)
    #: The reposts other authors' rows bring whose original's author is known:
    #: the entries, those authors, and whether the row is a pulled author's.
    reposts: list[np.ndarray] = field(default_factory=list)
    reposts_by: list[np.ndarray] = field(default_factory=list)
    reposts_pulled: list[np.ndarray] = field(default_factory=list)
    #: The reposts of the lists of :attr:`quiet_pulls` (readers do not see them).
    quiet_reposts: list[np.ndarray] = field(default_factory=list)
    #: The owner's hidden users (its filter), ascending.
    hidden: np.ndarray = field(default_factory=lambda: _NO_IDS)
    #: Whom the owner follows (not itself, not those it mutes: the join's
    #: followees, ``tf:``), ascending.
    followees: np.ndarray = field(default_factory=lambda: _NO_IDS)
    #: Whether the owner follows anyone (itself included) or tweeted: it has a
    #: timeline, and a mentions timeline (an owner with a filter or mentions
    #: only has neither).
    followed: bool = True
    #: The posts that notify the owner (its mentions timeline's), in any
    #: order, and each one's author.
    mentions: list[np.ndarray] = field(default_factory=list)
    mentioners: list[np.ndarray] = field(default_factory=list)
    #: A list's entries whose actor is its owner's user (a member's own:
    #: ``owners.user_of``), pulled ones included: its filter never hides them,
    #: though its owner's replies stay conditional (for a home owner its own
    #: entries answer no one: :func:`owner_answers`, so none are needed).
    exempt: list[np.ndarray] = field(default_factory=list)

    def merge(self, other: OwnerInput) -> None:
        """Add ``other``, more rows of the same owner."""
        self.ids += other.ids
        self.origins += other.origins
        self.answers += other.answers
        self.floor = max(self.floor, other.floor)
        self.pulls += other.pulls
        self.seen += other.seen
        self.seen_origins += other.seen_origins
        self.seen_answers += other.seen_answers
        self.seen_floor = max(self.seen_floor, other.seen_floor)
        self.quiet_pulls += other.quiet_pulls
        self.reposts += other.reposts
        self.reposts_by += other.reposts_by
        self.reposts_pulled += other.reposts_pulled
        self.quiet_reposts += other.quiet_reposts
        if len(other.hidden):
            self.hidden = other.hidden
        if len(other.followees):
            self.followees = np.union1d(self.followees, other.followees)
        self.followed = self.followed or other.followed
        self.mentions += other.mentions
        self.mentioners += other.mentioners
        self.exempt += other.exempt

    def screened(self, seen: bool = False) -> np.ndarray:
        """The entries the timeline leaves out (with ``seen``: that readers do
        not see) for the owner's filter or its quiet pulls: the reposts of
        other authors whose original's author the owner's filter holds
        (docs/decisions.md D28; the owner's own are never hidden) and, read
        from the lists, the reposts of the pulled authors followed with
        reposts off. (The entries whose original answers a hidden user are
        left out too: :meth:`timeline`.)"""
        out: list[np.ndarray] = []
        if len(self.hidden) and self.reposts:
            entries, by = _joined(self.reposts), _joined(self.reposts_by)
            hit = np.isin(by, self.hidden)
            if not seen:  # the pulled authors' lists are merged at read time
                hit &= ~np.concatenate(self.reposts_pulled)
            out.append(entries[hit])
        if seen:
            out += self.quiet_reposts
        return _joined(out)

    def timeline(self, cap: int, slack: int, *, seen: bool = False) -> Made:
        """The rebuilt timeline (:class:`Made`): one entry per original, the
        newest (:func:`fanout.model.join.rebuilt_timeline` on the view's
        entries, without those :meth:`screened` leaves out or whose original
        answers a hidden user), its replies to users the owner does not
        follow kept aside and counted by the cap with the view
        (:func:`reply_sides`), and the entries it hides at or above its
        horizon as the store keeps them; with ``seen``, of what readers see,
        the pulled authors' lists merged in (and screened as
        ``fanout/store/lua/merged.lua`` screens them: a list's reply the
        reader would keep aside is left out). Screening changes no horizon:
        the timeline may then be short (:meth:`Made.short`), as the store's
        screened merges leave it."""
        parts, floor = (self.seen, self.seen_floor) if seen else (self.ids, self.floor)
        ids = _joined(parts)
        origins = _joined(self.seen_origins if seen else self.origins)
        answers = _joined(self.seen_answers if seen else self.answers)
        gone = self.screened(seen)
        drop = np.isin(ids, gone) if len(gone) else None
        aside = aside_users = shown = shown_users = _NO_IDS
        if answers.any():
            if len(self.hidden):  # an entry whose original answers a hidden user
                hit = (answers != 0) & np.isin(answers, self.hidden)
                if self.exempt:  # but for a list owner's own (docs/rebuild.md)
                    hit &= ~np.isin(ids, _joined(self.exempt))
                drop = hit if drop is None else drop | hit
            away, showing = reply_sides(ids, origins, answers, self.followees)
            if drop is not None:
                away &= ~drop
                showing &= ~drop
            if seen and away.any():  # the lists' replies aside are not seen
                pushed = _joined(self.ids)
                kept_aside, _ = reply_sides(
                    pushed, _joined(self.origins), _joined(self.answers), self.followees
                )
                unseen = away & ~np.isin(ids, pushed[kept_aside])
                away &= ~unseen
                drop = unseen if drop is None else drop | unseen
            aside, aside_users = ids[away], answers[away]
            shown, shown_users = ids[showing], answers[showing]
            drop = away if drop is None else drop | away
        if drop is not None:
            ids, origins = ids[~drop], origins[~drop]
        if not np.any(ids != origins):  # no repost: every entry is its own original
            counted = np.concatenate((ids, aside)) if len(aside) else ids
            horizon, kept = distinct_timeline(
                newest_distinct(counted, floor, cap + slack + 1), cap=cap, slack=slack, floor=floor
            )
            if len(aside):
                away_ids = set(aside.tolist())
                kept = [i for i in kept if i not in away_ids]
            pairs: list[tuple[int, int]] = []
        else:
            horizon, kept, pairs = view_of(ids, origins, floor, cap, slack, aside)
        return Made(
            horizon,
            kept,
            pairs,
            _records(aside_users, aside, horizon),
            _records(shown_users, shown, horizon),
        )

    def mentions_timeline(self, cap: int, slack: int) -> Made:
        """The owner's mentions timeline (owner ``-owner``, docs/decisions.md
        D30): the newest ``cap + slack`` of the posts that notify the owner
        whose authors its filter does not hold, its horizon the oldest of
        them when older ones were cut (the rule of a timeline of posts,
        :func:`fanout.model.join.rebuilt_timeline`, with no floor: each
        author's newest ``cap + slack + 1`` posts that notify the owner are
        there, :func:`spark.rebuild.read.notified_runs`). Reposts are never
        entries; screened before it is cut, it is never short."""
        posts = _joined(self.mentions)
        if len(self.hidden) and len(posts):
            posts = posts[~np.isin(_joined(self.mentioners), self.hidden)]
        horizon, ids = distinct_timeline(
            newest_distinct(posts, 0, cap + slack + 1), cap=cap, slack=slack
        )
        return Made(horizon, ids, [])


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else _NO_IDS


def view_of(
    ids: np.ndarray,
    origins: np.ndarray,
    floor: int,
    cap: int,
    slack: int,
    aside: np.ndarray = _NO_IDS,
) -> tuple[int, list[int], list[tuple[int, int]]]:
    """:meth:`OwnerInput.timeline` of entries with reposts among them, in NumPy:
    the newest entry of each original (at or above ``floor``), the newest
    ``cap + slack`` of those and of the replies kept ``aside`` together
    (:func:`fanout.model.join.distinct_timeline`: the cap counts the aside),
    the view's of them, and every other entry at or above their horizon, as
    (original, entry)."""
    keep = ids >= floor
    entries, first = np.unique(ids[keep], return_index=True)
    originals = origins[keep][first]
    order = np.lexsort((entries, originals))  # by original, then entry
    by_original, by_entry = originals[order], entries[order]
    last = np.append(by_original[1:] != by_original[:-1], len(by_original) > 0)[: len(by_original)]
    winners = np.sort(by_entry[last])
    counted = np.union1d(winners, aside[aside >= floor]) if len(aside) else winners
    horizon, _ = distinct_timeline(
        counted[-(cap + slack + 1) :].tolist(), cap=cap, slack=slack, floor=floor
    )
    kept = winners[winners >= horizon].tolist()
    shown = np.zeros(len(by_entry), dtype=bool)
    shown[last] = True
    hidden = (by_entry >= horizon) & ((by_entry != by_original) | ~shown)
    return (
        horizon,
        kept,
        list(zip(by_original[hidden].tolist(), by_entry[hidden].tolist(), strict=True)),
    )


def owner_inputs(batches: Iterable[pa.RecordBatch]) -> Iterator[OwnerInput]:
    """One :class:`OwnerInput` per owner, from rows of :data:`EDGES` where each
    owner's rows are consecutive (they may run on into the next batch).

    The ids stay NumPy views of the batches' buffers: a popular author's
    tweets, repeated for each follower, never become Python ints."""
    current: OwnerInput | None = None
    for batch in batches:
        if not batch.num_rows:
            continue
        for part in _batch_inputs(batch):
            if current is not None and current.owner == part.owner:
                current.merge(part)
                continue
            if current is not None:
                yield current
            current = part
    if current is not None:
        yield current


def _lists(column: pa.Array) -> pa.Array:
    """A list column with an author without state (null: no entries) made empty."""
    if column.null_count:
        column = pa.array([ids or [] for ids in column.to_pylist()], pa.list_(pa.int64()))
    if column.values.null_count:
        raise ValueError("a timeline's input holds a null tweet id")
    return column


def _aligned(column: pa.Array, offsets: np.ndarray) -> np.ndarray:
    """The values of a list column whose lists are as long as those of the
    ``kept`` column (of ``offsets``), at the same places as its values."""
    column = _lists(column)
    own = column.offsets.to_numpy()
    if not np.array_equal(np.diff(own), np.diff(offsets)):
        raise ValueError("a timeline's input has entries and originals of other lengths")
    values = column.values.to_numpy()
    shift = int(own[0]) - int(offsets[0]) if len(own) else 0
    if not shift:
        return values
    return np.concatenate((np.zeros(max(0, -shift), np.int64), values[max(0, shift) :]))


def _batch_inputs(batch: pa.RecordBatch) -> Iterator[OwnerInput]:
    """Each run of one owner's rows in ``batch``, as an :class:`OwnerInput`."""
    owners = batch.column("owner").to_numpy()
    horizons = batch.column("horizon").to_numpy()
    pulled = batch.column("pull").to_numpy(zero_copy_only=False)
    quiet = batch.column("quiet").fill_null(False).to_numpy(zero_copy_only=False)
    hidden = batch.column("hidden")
    filtered = hidden.is_valid().to_numpy(zero_copy_only=False)
    mentions = batch.column("mentions")
    notified = mentions.is_valid().to_numpy(zero_copy_only=False)
    kept = _lists(batch.column("kept"))
    values = kept.values.to_numpy()
    offsets = kept.offsets.to_numpy()
    origin_values = _aligned(batch.column("origins"), offsets)
    by_values = _aligned(batch.column("by"), offsets)
    answer_values = _aligned(batch.column("answers"), offsets)
    starts = np.flatnonzero(np.concatenate(([True], owners[1:] != owners[:-1])))
    ends = np.append(starts[1:], len(owners))
    seen_floors = np.maximum.reduceat(horizons, starts)
    floors = np.maximum.reduceat(np.where(pulled, 0, horizons), starts)
    any_pulled = np.logical_or.reduceat(pulled, starts)
    authors = batch.column("author").to_numpy()
    for run, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        owner = int(owners[a])
        seen = values[offsets[a] : offsets[b]]
        seen_origins = origin_values[offsets[a] : offsets[b]]
        lengths = offsets[a + 1 : b + 1] - offsets[a:b]
        own_rows = authors[a:b] == owner  # home's self edge (a list has none)
        # The rows of the timeline's own user: what its filter never screens.
        actor_rows = own_rows if owner > 0 else authors[a:b] == timeline_owners.user_of(owner)
        seen_answers = answer_values[offsets[a] : offsets[b]]
        if seen_answers.any():
            seen_answers = owner_answers(seen_answers, np.repeat(own_rows, lengths), owner)
        ids, origins, answers, pulls = [seen], [seen_origins], [seen_answers], []
        if any_pulled[run]:  # the pulled authors' ids left out, in NumPy (most owners)
            rows = pulled[a:b]
            pushed = np.repeat(~rows, lengths)
            ids, origins = [seen[pushed]], [seen_origins[pushed]]
            answers = [seen_answers[pushed]]
            pulls = authors[a:b][rows].tolist()
        got = OwnerInput(
            owner,
            ids,
            int(floors[run]),
            pulls,
            [seen],
            int(seen_floors[run]),
            origins,
            [seen_origins],
            answers,
            [seen_answers],
        )
        seen_by = by_values[offsets[a] : offsets[b]]
        if seen_by.any():  # reposts whose original's author a filter may hide
            mine = np.repeat(actor_rows, lengths)
            screenable = (seen_by != 0) & ~mine
            if screenable.any():
                got.reposts = [seen[screenable]]
                got.reposts_by = [seen_by[screenable]]
                got.reposts_pulled = [np.repeat(pulled[a:b], lengths)[screenable]]
        quiet_pulled = pulled[a:b] & quiet[a:b]
        if quiet_pulled.any():
            got.quiet_pulls = authors[a:b][quiet_pulled].tolist()
            repost = np.repeat(quiet_pulled, lengths) & (seen != seen_origins)
            got.quiet_reposts = [seen[repost]]
        rows_filtered, rows_mentions = filtered[a:b], notified[a:b]
        edges = ~rows_filtered & ~rows_mentions
        follows = edges & ~own_rows  # the rows of the owner's followees
        if timeline_owners.is_list(owner) and rows_mentions.any():
            # A list's rows of mentions name the members its owner hides: members
            # still (its followees), with no entries (spark.rebuild.read).
            follows |= rows_mentions
            rows_mentions = np.zeros_like(rows_mentions)
        if follows.any():
            got.followees = np.unique(authors[a:b][follows])
        if rows_filtered.any():
            users = hidden[a + int(np.argmax(rows_filtered))].values.to_numpy(zero_copy_only=False)
            got.hidden = np.unique(users)
        if rows_mentions.any():
            runs = mentions.slice(a, b - a).filter(pa.array(rows_mentions))
            got.mentions = [pc.list_flatten(runs).to_numpy()]
            got.mentioners = [
                np.repeat(authors[a:b][rows_mentions], pc.list_value_length(runs).to_numpy())
            ]
        got.followed = bool(edges.any())
        if timeline_owners.is_list(owner) and actor_rows.any():
            got.exempt = [seen[np.repeat(actor_rows, lengths)]]
        yield got


def newest_distinct(ids: np.ndarray, floor: int, keep: int) -> list[int]:
    """The newest ``keep`` distinct ids at or above ``floor``, ascending.

    A timeline's input is every followed author's newest tweets, thousands
    of ids per owner where popular authors are followed: NumPy cuts it down
    in C, ready for :func:`fanout.model.join.distinct_timeline` (the rule of
    :func:`fanout.model.join.rebuilt_timeline` on ids already distinct and sorted).
    With ``keep`` one more than the rule keeps, the rule gives the same result
    on the cut list as on the whole one (and still sees that older ids were
    cut, which sets the horizon)."""
    distinct = np.unique(ids[ids >= floor] if floor else ids)
    return distinct[-keep:].tolist() if keep > 0 else []


def _chunks(inputs: Iterator[OwnerInput], size: int = 5_000) -> Iterator[list[OwnerInput]]:
    while chunk := list(itertools.islice(inputs, size)):
        yield chunk


def idle_owners(
    store: TimelineStore, live: int | None, generation: int, owners: list[int]
) -> set[int]:
    """Of ``owners`` (homes and lists), those whose timelines stay dropped in
    ``generation``: every timeline of a user whose home timeline is dropped
    (idle) in the ``live`` generation, its lists (``owners.user_of``) too, and
    the mentions timelines of those homes (-u)."""
    if live is None or live == generation or not owners:
        return set()
    users = sorted({timeline_owners.user_of(o) for o in owners})
    asleep = store.dropped(live, users)
    idle = {o for o in owners if timeline_owners.user_of(o) in asleep}
    return idle | {-o for o in idle if timeline_owners.is_home(o)}


@spark_task
def write_timelines_partition(
    batches: Iterator[pa.RecordBatch],
    config: StarlingConfig,
    generation: int,
    kept: Broadcast[KeptIds] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Write this partition's timelines (from rows of :data:`EDGES`, or of
    :data:`OWNED` with ``kept``) into ``generation``, with the replies each
    keeps aside and shows, their owners' filters, followees and pulls (quiet
    ones marked), and beside each home timeline its owner's mentions timeline
    (owner ``-u``: :meth:`OwnerInput.mentions_timeline`, no pairs, no replies
    aside; a list, owner ``-L``, has none); return their lengths (-1 for the
    users idle in the active generation: their timelines, their mentions
    timelines and their lists' stay dropped, :func:`idle_owners`) and
    whether each is short: those are queued for a refill from
    the database, as the fanout job queues the timelines its screened
    merges leave short (a mentions timeline is screened before it is cut:
    never short)."""
    store = store_for(config, timeout=120)
    live = store.active_generation()
    cap, slack = config.timeline_size, config.timeline_slack
    for chunk in _chunks(owner_inputs(joined(batches, kept))):
        # A filter and the followees are written for every owner who has them,
        # as the job keeps them beside a timeline dropped or not yet made.
        store.write_filters(generation, ((i.owner, i.hidden.tolist()) for i in chunk))
        store.write_followees(generation, ((i.owner, i.followees.tolist()) for i in chunk))
        made = [i for i in chunk if i.followed]
        rows = [(i.owner, i.timeline(cap, slack)) for i in made]
        idle = idle_owners(store, live, generation, [i.owner for i in made])
        timelines = [(o, t) for o, t in rows if o not in idle]  # homes and lists
        # A home's mentions timeline beside it (a list has none: no "-(-L)").
        rows += [
            (timeline_owners.mentions_owner(i.owner), i.mentions_timeline(cap, slack))
            for i in made
            if timeline_owners.is_home(i.owner)
        ]
        written = [(o, t) for o, t in rows if o not in idle]
        store.write_timelines(
            generation, ((o, pack_timeline(t.horizon, t.ids)) for o, t in written)
        )
        store.write_timeline_reposts(generation, ((o, pack_pairs(t.pairs)) for o, t in timelines))
        store.write_replies(generation, ((o, t.aside, t.shown) for o, t in timelines))
        store.write_dropped(generation, idle)
        store.write_pulls(generation, ((i.owner, i.pulls, i.quiet_pulls) for i in made if i.pulls))
        short = [o for o, t in timelines if t.short(cap)]
        if short:
            store.request_refill(*short)
        yield arrow.batch(
            {
                "owner": [o for o, _ in rows],
                "entries": [-1 if o in idle else len(t.ids) for o, t in rows],
                "short": [o not in idle and t.short(cap) for o, t in rows],
            },
            WRITTEN,
        )


@spark_task
def diff_partition(
    batches: Iterator[pa.RecordBatch],
    config: StarlingConfig,
    live: int,
    newest_tweet: int,
    kept: Broadcast[KeptIds] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Compare what readers see of the rebuilt timelines (the pulled authors'
    lists merged in, screened for the reader) with what they see of the live
    generation's; tweets newer than the snapshot are left out of the live side."""
    store = store_for(config, timeout=120)
    cap = config.timeline_size
    for chunk in _chunks(i for i in owner_inputs(joined(batches, kept)) if i.followed):
        views = store.timelines(live, [i.owner for i in chunk])
        out: dict[str, list[Any]] = arrow.columns(DIFF)
        for owner_input, view in zip(chunk, views, strict=True):
            ids = owner_input.timeline(cap, config.timeline_slack, seen=True).ids
            want = set(visible(ids, cap))
            have = {i for i in view.ids if i <= newest_tweet} if view else set()
            out["owner"].append(owner_input.owner)
            out["live_missing"].append(view is None)
            out["missing"].append(len(want - have))
            out["extra"].append(len(have - want))
        yield arrow.batch(out, DIFF)
