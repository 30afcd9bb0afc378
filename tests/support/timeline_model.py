"""A plain-Python model of the packed timelines, for checking the join and the Lua.

``TimelineModel.apply`` does what the apply script (fanout/store/lua/apply.lua)
does, with lists; :func:`oracle` computes the join the way the SQL does.

Timelines and lists hold raw entries (entry -> original; a post is its own
original); what Redis packs are the *winners* (per original its greatest
entry: ``ids``) and the pairs (fanout/store/ops.py). Cap, trim, short, horizon,
top and version are on the winners.

Filters (docs/decisions.md D28): an owner's hidden users leave out of its
merges the reposts whose ``by`` they name; a change of them empties the
timeline above a new horizon and asks for a refill. A reader's hidden users,
and its quiet pulls (reposts off), screen the pulled lists it reads.

Replies (docs/decisions.md D29): an owner's followees (``follows``) decide
which delivered replies to others show; the others are kept *aside* (not in
the view, counted by the cap), and a follow or an unfollow of the user they
answer moves them in or out. The user an entry's original answers is
checked by the filter too. A reader's followees screen the pulled lists'
replies.

Lists (docs/decisions.md D31): a list's timeline is owner -L, kept like a home
timeline but for its filter (its own copy; a change empties -L alone) and its
owner's own entries (``owners.user_of(-L)``): never hidden by the filter, its
replies conditional all the same (their answers carry ``ops.OWN``). A dropped
list (``Op.DROP``) waits like a reset, then leaves nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fanout.model import owners
from fanout.model.join import Mutation, Op, winners
from fanout.store.ops import OWN, group_by_timeline, view_of


@dataclass
class ModelTimeline:
    horizon: int = 0
    fence: int = 0
    top: int = 0
    version: int = 0
    ids: list[int] = field(default_factory=list)  # the winners, ascending
    #: Every raw entry in scope (at or above the horizon): entry -> original.
    raw: dict[int, int] = field(default_factory=dict)
    #: A list's reposts: entry -> the original's author.
    by: dict[int, int] = field(default_factory=dict)
    #: Replies to users the owner does not follow: entry -> that user (D29).
    aside: dict[int, int] = field(default_factory=dict)
    #: Replies to other users that show (followed): entry -> that user.
    cond: dict[int, int] = field(default_factory=dict)
    #: A list's entries whose original answers another user: entry -> that user.
    answers: dict[int, int] = field(default_factory=dict)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The pairs string's records, (original, entry), sorted."""
        return view_of(self.raw)[1]

    @property
    def list_pairs(self) -> list[tuple[int, int, int]]:
        """A list's pairs: (original, entry, the original's author)."""
        return [(o, e, self.by.get(e, 0) if e != o else 0) for o, e in self.pairs]

    def settle(self) -> None:
        """The winners of the raw entries."""
        self.ids = view_of(self.raw)[0]

    def ceiling(self) -> int:
        return max(self.top, self.ids[-1] if self.ids else 0)

    def prune(self, horizon: int) -> None:
        """Leave out everything below ``horizon``."""
        self.raw = {e: o for e, o in self.raw.items() if e >= horizon}
        self.aside = {e: u for e, u in self.aside.items() if e >= horizon}
        self.cond = {e: u for e, u in self.cond.items() if e >= horizon}


@dataclass
class TimelineModel:
    cap: int
    slack: int
    timelines: dict[int, ModelTimeline] = field(default_factory=dict)
    bodies: dict[int, bytes] = field(default_factory=dict)
    #: Originals' counts texts (``ct:``).
    counts: dict[int, bytes] = field(default_factory=dict)
    refill: set[int] = field(default_factory=set)
    #: Resets waiting for the watermark, by seq: (owner, tweets, horizon, as_of).
    resets: dict[int, tuple[int, tuple[int, ...], int, int]] = field(default_factory=dict)
    #: Owners whose regeneration is pending (the regeneration key exists).
    regenerating: set[int] = field(default_factory=set)
    #: Owners whose timeline was dropped (an idle user): a tombstone in Redis.
    idle: set[int] = field(default_factory=set)
    #: Writes to dropped timelines not made.
    skipped: int = 0
    #: The highest seq the job has applied (any partition): what a trim fences
    #: (the apply script's HIGH), so that a refill read before the trim cannot
    #: lower the horizon over entries an author's key applied ahead of its seq.
    high_water: int = 0
    #: Per owner, its followees (``tf:``, D29): kept for idle owners too.
    follows: dict[int, set[int]] = field(default_factory=dict)
    #: The (entry, user) answers of a waiting reset's entries, by seq.
    reset_answers: dict[int, dict[int, int]] = field(default_factory=dict)
    #: Pulled authors' lists (only horizon, top, version, ids and raw are used).
    lists: dict[int, ModelTimeline] = field(default_factory=dict)
    #: Per owner, the pulled authors whose lists its reads merge in.
    pulls: dict[int, set[int]] = field(default_factory=dict)
    #: The pulled authors a waiting reset's read left out, by seq.
    reset_pulls: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: The (entry, original) pairs of a waiting reset's reposts, by seq.
    reset_pairs: dict[int, dict[int, int]] = field(default_factory=dict)
    #: Per owner, its hidden users (``tx:``).
    filters: dict[int, set[int]] = field(default_factory=dict)
    #: Per owner, the pulled authors it reads without their reposts.
    quiet: dict[int, set[int]] = field(default_factory=dict)
    #: Dropped owners (deleted lists) waiting for the watermark, by seq.
    drops: dict[int, int] = field(default_factory=dict)

    @property
    def keep(self) -> int:
        return self.cap + self.slack // 2

    def apply(
        self,
        bodies: Mapping[int, bytes],
        mutations: Iterable[Mutation],
        counts: Mapping[int, tuple[int, int, int]] | None = None,
    ) -> None:
        """Apply a batch the way the store does: deleted bodies, new bodies and
        counts, then the per-timeline ops."""
        ops, deleted = group_by_timeline(mutations, keep=self.cap + self.slack)
        for t in deleted:
            self.bodies.pop(t, None)
        self.bodies.update(bodies)
        for t, counted in (counts or {}).items():
            if any(counted):
                self.counts[t] = b'{"likes":%d,"reposts":%d,"replies":%d}' % counted
            else:
                self.counts.pop(t, None)
        for op in ops:
            originals = {e: o for e, o, _ in op.reposts}
            by = {e: b for e, _, b in op.reposts}
            answers = dict(op.answers)
            if op.op is Op.ADD:
                tweets = self._screen(op.owner, op.tweets, by, answers)
                self._add(op.owner, tweets, op.horizon, op.seq, originals, answers)
            elif op.op is Op.REMOVE:
                self._remove(op.owner, op.tweets, op.seq)
            elif op.op is Op.LIST:
                self._set_list(op.owner, op.tweets, op.horizon, originals, by, answers)
            elif op.op is Op.FOLLOWED:
                if owners.is_list(op.owner) and op.owner not in {*self.timelines, *self.idle}:
                    self._add(op.owner, (), 0, op.seq)  # a list is made by its first member
                self.follows.setdefault(op.owner, set()).add(op.authors[0])
                self._reveal(op.owner, op.authors[0], op.seq)
            elif op.op is Op.UNFOLLOWED:
                self.follows.get(op.owner, set()).discard(op.authors[0])
                self._hide(op.owner, op.authors[0])
            elif op.op is Op.FILTER:
                self._filter(op.owner, set(op.tweets), op.seq)
            elif op.op is Op.MENTION:  # the owner is -u, whose filter hides authors
                hides = op.authors[0] in self.filters.get(-op.owner, set())
                self._add(op.owner, () if hides else op.tweets, 0, op.seq)
            elif op.op is Op.PULL:
                self.pulls.setdefault(op.owner, set()).add(op.authors[0])
                quiet = self.quiet.setdefault(op.owner, set())
                if op.quiet:
                    quiet.add(op.authors[0])
                else:
                    quiet.discard(op.authors[0])
                self._remove(op.owner, op.tweets, op.seq)
                self._bump(op.owner, 1)
            elif op.op is Op.UNPULL:
                author = op.authors[0]
                gone = author in self.pulls.get(op.owner, set())
                self.pulls.get(op.owner, set()).discard(author)
                self.quiet.get(op.owner, set()).discard(author)
                if op.tweets:
                    tweets = self._screen(op.owner, op.tweets, by, answers)
                    self._add(op.owner, tweets, op.horizon, op.seq, originals, answers)
                else:
                    self._remove(op.owner, (), op.seq)
                listed = self.lists.get(author)
                self._bump(op.owner, 1 + (listed.version if gone and listed else 0))
            elif op.op is Op.DROP:
                self.drops[op.seq] = op.owner
            else:
                self.resets[op.seq] = (op.owner, op.tweets, op.horizon, op.as_of)
                self.reset_pulls[op.seq] = op.authors
                self.reset_pairs[op.seq] = originals
                self.reset_answers[op.seq] = answers

    def _screen(
        self,
        owner: int,
        tweets: Iterable[int],
        by: Mapping[int, int],
        answers: Mapping[int, int] | None = None,
    ) -> list[int]:
        """``tweets`` without the entries the owner's filter hides: reposts of
        its hidden users' tweets, entries whose original answers one of them."""
        hidden = self.filters.get(owner)
        if not hidden:
            return list(tweets)
        answers = answers or {}
        # (an answered user plus OWN, the owner's own entry, is in no filter)
        return [t for t in tweets if by.get(t, 0) not in hidden and answers.get(t, 0) not in hidden]

    def _place(
        self,
        owner: int,
        tl: ModelTimeline,
        t: int,
        originals: Mapping[int, int],
        answers: Mapping[int, int],
    ) -> None:
        """Entry ``t`` into the view, or aside (a reply to a user the owner
        does not follow)."""
        if t < tl.horizon or t in tl.raw or t in tl.aside:
            return
        original, user = originals.get(t, t), answers.get(t, 0) % OWN
        if user and original == t:
            if user not in self.follows.get(owner, set()):
                tl.aside[t] = user
                return
            tl.cond[t] = user
        tl.raw[t] = original

    def _reveal(self, owner: int, user: int, seq: int) -> None:
        """The owner follows ``user``: the replies to it kept aside show."""
        tl = self.timelines.get(owner)
        moving = [t for t, u in tl.aside.items() if u == user] if tl else []
        if tl is None or not moving:
            return
        top, had = tl.ceiling(), set(tl.ids)
        for t in moving:
            del tl.aside[t]
            tl.raw[t] = t
            tl.cond[t] = user
        self._late(tl, had, top)
        self._store(owner, tl, seq)

    def _hide(self, owner: int, user: int) -> None:
        """The owner no longer follows ``user``: the replies to it go aside."""
        tl = self.timelines.get(owner)
        moving = [t for t, u in tl.cond.items() if u == user] if tl else []
        if tl is None or not moving:
            return
        old = list(tl.ids)
        for t in moving:
            del tl.cond[t]
            del tl.raw[t]
            tl.aside[t] = user
        tl.settle()
        if old and (not tl.ids or tl.ids[-1] != old[-1]):
            tl.top = max(tl.top, old[-1])

    def _filter(self, owner: int, hidden: set[int], seq: int) -> None:
        if self.filters.get(owner, set()) == hidden:
            return
        self.filters[owner] = hidden
        # the home and mentions timelines; a list alone
        for o in (owner,) if owners.is_list(owner) else (owner, -owner):
            tl = self.timelines.get(o)
            if tl is not None:
                self._empty(o, tl, seq)
            elif o not in self.idle or o in self.regenerating:
                # None (nothing to hide), or a placeholder: made, fenced (a refill
                # read before is stale). Idle: a regeneration reads the database.
                self.idle.discard(o)
                self.timelines[o] = ModelTimeline(fence=seq)

    def _empty(self, owner: int, tl: ModelTimeline, seq: int) -> None:
        """Emptied above every entry it held (its replies aside too), fenced,
        and refilled."""
        tl.top = max(tl.top, tl.ids[-1] if tl.ids else 0, max(tl.aside, default=0))
        tl.horizon = max(tl.horizon, tl.top + 1)
        tl.version += 1
        tl.fence = max(tl.fence, seq)
        tl.raw, tl.aside, tl.cond = {}, {}, {}
        self._store(owner, tl, seq)

    def _set_list(
        self,
        author: int,
        tweets: tuple[int, ...],
        horizon: int,
        originals: Mapping[int, int],
        by: Mapping[int, int],
        answers: Mapping[int, int] | None = None,
    ) -> None:
        old = self.lists.get(author)
        new = ModelTimeline(
            horizon=horizon,
            raw={t: originals.get(t, t) for t in tweets},
            by=dict(by),
            answers=dict(answers or {}),
        )
        new.settle()
        if old is not None:
            top = old.ceiling()
            new.version = old.version + any(t < top and t not in old.ids for t in new.ids)
            if (new.ids[-1] if new.ids else 0) < top:
                new.top = top
        self.lists[author] = new

    def _bump(self, owner: int, n: int) -> None:
        if owner in self.timelines:
            self.timelines[owner].version += n

    def release(self, watermark: int) -> None:
        """Apply the resets and drops the contiguous watermark has reached, in
        seq order; a dropped owner's resets still waiting go with it."""
        gone: set[int] = set()
        for seq in sorted(s for s in [*self.resets, *self.drops] if s <= watermark):
            if seq in self.drops:
                owner = self.drops.pop(seq)
                self.forget(owner)
                gone.add(owner)
                continue
            if self.resets[seq][0] in gone:
                self._pop_reset(seq)
                continue
            owner, tweets, horizon, as_of = self.resets.pop(seq)
            self._reset(
                owner,
                tweets,
                horizon,
                seq,
                as_of,
                self.reset_pulls.pop(seq),
                self.reset_pairs.pop(seq),
                self.reset_answers.pop(seq),
            )
        for seq in [s for s, r in self.resets.items() if r[0] in gone]:
            self._pop_reset(seq)

    def _pop_reset(self, seq: int) -> None:
        del self.resets[seq]
        for held in (self.reset_pulls, self.reset_pairs, self.reset_answers):
            del held[seq]

    def forget(self, owner: int) -> None:
        """Every trace of ``owner`` (a deleted list's drop)."""
        for held in (
            self.timelines,
            self.follows,
            self.pulls,
            self.filters,
            self.quiet,
        ):
            held.pop(owner, None)
        self.refill.discard(owner)
        self.regenerating.discard(owner)
        self.idle.discard(owner)

    def _store(self, owner: int, tl: ModelTimeline, seq: int) -> None:
        """Trimmed when the view and the aside together outgrow cap + slack;
        short (refilled) when together they hold fewer than cap."""
        tl.settle()
        if len(tl.ids) + len(tl.aside) > self.cap + self.slack:
            tl.horizon = sorted([*tl.ids, *tl.aside])[-self.keep]
            tl.prune(tl.horizon)
            tl.settle()
            # What fell below may have come from any seq the job has applied
            # (an author's key can be ahead of this op's): a refill must have
            # read after all of them.
            tl.fence = max(tl.fence, seq, self.high_water)
        if tl.top and tl.ids and tl.ids[-1] >= tl.top:
            tl.top = 0
        self.timelines[owner] = tl
        if len(tl.ids) + len(tl.aside) < self.cap and tl.horizon > 0:
            self.refill.add(owner)

    @staticmethod
    def _late(tl: ModelTimeline, had: set[int], top: int) -> None:
        """Winners new to the timeline below what it held arrived late."""
        tl.settle()
        if any(w < top and w not in had for w in tl.ids):
            tl.version += 1

    def _merge(
        self,
        owner: int,
        tl: ModelTimeline,
        new: Iterable[int],
        originals: Mapping[int, int],
        existed: bool,
        answers: Mapping[int, int],
    ) -> None:
        top = tl.ceiling() if existed else 0
        had = set(tl.ids)
        for t in new:
            self._place(owner, tl, t, originals, answers)
        self._late(tl, had, top)

    def drop(self, owner: int, lists: Iterable[int] = ()) -> None:
        """What the idle sweep does to a user's timelines (home and mentions)
        and to ``lists`` (owners -L): each becomes a tombstone, unless it is
        being regenerated."""
        for o in (owner, -owner, *lists):  # the home and mentions timelines, lists
            if o in self.timelines and o not in self.regenerating:
                del self.timelines[o]
                self.idle.add(o)

    def _dropped(self, owner: int) -> bool:
        """A tombstone no write goes to: True if the write is skipped."""
        if owner not in self.idle:
            return False
        if owner in self.regenerating:  # a placeholder replaces it
            self.idle.discard(owner)
            return False
        self.skipped += 1
        return True

    def _add(
        self,
        owner: int,
        tweets: Iterable[int],
        h: int,
        seq: int,
        originals: Mapping[int, int] | None = None,
        answers: Mapping[int, int] | None = None,
    ) -> None:
        if self._dropped(owner):
            return
        existed = owner in self.timelines
        tl = self.timelines.get(owner, ModelTimeline())
        top, had = (tl.ceiling() if existed else 0), set(tl.ids)
        if h > tl.horizon:
            tl.horizon = h
            tl.prune(h)
            tl.fence = max(tl.fence, seq)
        tweets = list(tweets)
        if h > 0 or any(t < tl.horizon for t in tweets):
            tl.fence = max(tl.fence, seq)
        for t in tweets:
            self._place(owner, tl, t, originals or {}, answers or {})
        self._late(tl, had, top)
        self._store(owner, tl, seq)

    def _remove(self, owner: int, tweets: Iterable[int], seq: int) -> None:
        tl = self.timelines.get(owner)
        if tl is None:
            # A pending regeneration's reset may predate this removal: the fence says so.
            if seq > 0 and owner in self.regenerating:
                self.idle.discard(owner)
                self.timelines[owner] = ModelTimeline(fence=seq)
            return
        drop = set(tweets)
        if not drop:  # only the fence moves
            tl.fence = max(tl.fence, seq)
            return
        if seq > 0 and self.filters.get(owner):  # an author's entries, the filter's gaps
            self._empty(owner, tl, seq)
            return
        top, had, old = tl.ceiling(), set(tl.ids), list(tl.ids)
        tl.raw = {e: o for e, o in tl.raw.items() if e not in drop}
        tl.aside = {e: u for e, u in tl.aside.items() if e not in drop}
        tl.cond = {e: u for e, u in tl.cond.items() if e not in drop}
        self._late(tl, had, top)  # a removed winner's next entry shows below
        if old and (not tl.ids or tl.ids[-1] != old[-1]):
            tl.top = max(tl.top, old[-1])
        tl.fence = max(tl.fence, seq)
        self._store(owner, tl, seq)

    def _reset(
        self,
        owner: int,
        tweets: Iterable[int],
        h: int,
        seq: int,
        as_of: int,
        pulled: tuple[int, ...] = (),
        originals: Mapping[int, int] | None = None,
        answers: Mapping[int, int] | None = None,
    ) -> None:
        originals = originals or {}
        placeholder = owner in self.regenerating
        if owner in self.idle and not placeholder:  # a refill for a timeline dropped since
            self.skipped += 1
            return
        existed = owner in self.timelines
        tl = self.timelines.get(owner, ModelTimeline())
        if (existed and tl.fence > as_of) or set(pulled) != self.pulls.get(owner, set()):
            # Asked for again: a regeneration (still cold, its tombstone kept until
            # a write or a reset replaces it), or a short timeline.
            if placeholder or (len(tl.ids) + len(tl.aside) < self.cap and tl.horizon > 0):
                self.refill.add(owner)
            return
        self.idle.discard(owner)  # the reset replaces the tombstone
        self.regenerating.discard(owner)
        if not existed:
            tl.horizon = h
        elif not placeholder:
            tl.horizon = min(tl.horizon, h)
        elif h > tl.horizon:
            tl.horizon = h
            if any(e < h for e in [*tl.raw, *tl.aside]):
                tl.fence = max(tl.fence, seq)
            tl.prune(h)
        # An entry deleted since, or a repost of an original deleted since, is left out.
        live = [t for t in tweets if t in self.bodies and originals.get(t, t) in self.bodies]
        self._merge(owner, tl, live, originals, existed, answers or {})
        self._store(owner, tl, seq)

    def view(self, owner: int) -> tuple[int, list[int]] | None:
        """(floor, visible ids newest first): the timeline merged with the lists
        of the pulled authors the owner follows (fanout/store/lua/merged.lua), per
        original only its greatest entry across them."""
        merged = self.merged(owner)
        if merged is None:
            return None
        floor, entries = merged
        return floor, entries[: self.cap]

    def merged(self, owner: int) -> tuple[int, list[int]] | None:
        """(floor, every entry of the merged view at or above it, newest first)."""
        tl = self.timelines.get(owner)
        if tl is None:
            return None
        sources = [tl, *self._lists_of(owner)]
        floor = max(s.horizon for s in sources)
        best: dict[int, int] = {}
        for s in sources:
            for w in s.ids:
                if w >= floor:
                    o = s.raw.get(w, w)
                    best[o] = max(best.get(o, 0), w)
        return floor, sorted(best.values(), reverse=True)

    def original(self, owner: int, entry: int) -> int:
        """The original of an entry of the owner's merged view."""
        tl = self.timelines[owner]
        for s in [tl, *self._lists_of(owner)]:
            if entry in s.raw:
                return s.raw[entry]
        return entry

    def _lists_of(self, owner: int) -> list[ModelTimeline]:
        """The pulled lists the owner reads, as it sees them: without the
        reposts its filter hides, or any of a quiet pull's."""
        quiet = self.quiet.get(owner, set())
        follows = self.follows.get(owner, set()) | {owner}
        out = []
        for a in self.pulls.get(owner, ()):
            listed = self.lists.get(a)
            if listed is None:
                continue
            # the timeline's user's own entries (a list's owner's): never hidden
            hidden = set() if a == owners.user_of(owner) else self.filters.get(owner, set())
            if hidden or a in quiet or listed.answers:

                def shows(
                    e: int,
                    o: int,
                    listed: ModelTimeline = listed,
                    a: int = a,
                    hidden: set[int] = hidden,
                ) -> bool:
                    user = listed.answers.get(e, 0)
                    if user in hidden or (e == o and user and user not in follows):
                        return False
                    return e == o or (a not in quiet and listed.by.get(e, 0) not in hidden)

                raw = {e: o for e, o in listed.raw.items() if shows(e, o)}
                listed = ModelTimeline(horizon=listed.horizon, raw=raw, version=listed.version)
                listed.settle()
            out.append(listed)
        return out

    def version(self, owner: int) -> int:
        """The version readers get: the timeline's plus its lists'."""
        lists = (self.lists[a] for a in self.pulls.get(owner, ()) if a in self.lists)
        return self.timelines[owner].version + sum(s.version for s in lists)


class View(dict[int, list[int]]):
    """Each user's view, newest first: one entry per original, the newest.
    ``raw[u]``: every entry of u's audience, newest first, the replies its
    view leaves out for now included (what a reset carries at or above its
    horizon); ``originals``: repost → original; ``answers[u]``: entry → the
    user its original answers, as u's reset carries them (D29)."""

    raw: dict[int, list[int]]
    originals: Mapping[int, int]
    answers: dict[int, dict[int, int]]


def oracle(
    tweets: Mapping[int, int],
    follows: Iterable[tuple[int, int]],
    users: Iterable[int],
    originals: Mapping[int, int] | None = None,
    *,
    hidden: Mapping[int, set[int]] | None = None,
    quiet: Iterable[tuple[int, int]] = (),
    answers: Mapping[int, int] | None = None,
) -> View:
    """Each user's timeline by the join (docs/design.md's SQL): the entries of
    the user and their followees, one per original (the newest), newest first;
    leaving out, but for the user's own entries, those whose actor or whose
    original's author the user hides (``hidden``: user → those it blocks, who
    block it, and those it mutes), and the reposts of followees it follows
    with reposts off (``quiet``: (follower, followee)).

    A reply (``answers``: entry → the user its original answers, where that
    is not the original's author) shows only to its actor, to the user it
    answers, and to users who follow that user; the user it answers is
    checked against the hidden users too (for reposts of replies as well).

    ``tweets`` maps live entry id → actor (author or reposter); ``follows``
    are (follower, followee); ``originals`` maps each repost to its original.
    """
    originals = originals or {}
    answering = answers or {}
    hides = hidden or {}
    no_reposts = set(quiet)
    followees: dict[int, set[int]] = {u: {u} for u in users}
    for follower, followee in follows:
        followees.setdefault(follower, {follower}).add(followee)
    by_author: dict[int, list[int]] = {}
    for tweet_id, author in tweets.items():
        by_author.setdefault(author, []).append(tweet_id)

    def shown(u: int, t: int, actor: int) -> bool:
        """Whether ``t`` is in u's audience (the condition on replies aside)."""
        if actor == u:
            return True
        h = hides.get(u, set())
        if actor in h or answering.get(t, 0) in h:
            return False
        if t not in originals:
            return True
        return (u, actor) not in no_reposts and tweets.get(originals[t]) not in h

    def aside(u: int, t: int, actor: int, fs: set[int]) -> bool:
        """A reply to someone u does not follow (u's own entries always show)."""
        user = answering.get(t, 0)
        return bool(user) and t not in originals and actor != u and user != u and user not in fs

    out = View()
    out.raw, out.originals, out.answers = {}, originals, {}
    for u, fs in followees.items():
        raw = [t for a in fs for t in by_author.get(a, ()) if shown(u, t, a)]
        out.raw[u] = sorted(raw, reverse=True)
        out.answers[u] = {
            t: answering[t] for t in raw if t in answering and tweets[t] != u and answering[t] != u
        }
        out[u] = winners([t for t in raw if not aside(u, t, tweets[t], fs)], originals)[::-1]
    return out
