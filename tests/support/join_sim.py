"""The join run without Spark (the model tests' and the store tests' simulation):
a log that mints envelopes as the outbox does, the system that feeds them to
the join and the store's model batch by batch, the database beside it, random
workloads and their interleavings."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fanout.model import events, owners
from fanout.model.author_state import AuthorState
from fanout.model.engagements import Counts, Engagements, count_events
from fanout.model.join import Mutation, join_events, notified_users, winners
from tests.support.timeline_model import TimelineModel, View, oracle


@dataclass
class Log:
    """Builds envelopes with increasing seq, like the outbox does. Tweet ids are
    time-ordered but minted before the seq is taken, by several web processes:
    with ``jitter`` they disagree with the seq order, as they can in production."""

    rnd: random.Random = field(default_factory=lambda: random.Random(0))
    jitter: int = 0
    seq: itertools.count = field(default_factory=lambda: itertools.count(1))
    minted: set[int] = field(default_factory=set)
    clock: int = 1000

    def _tweet_id(self, above: int = 0) -> int:
        self.clock = max(self.clock, above) + 10
        while True:
            t = self.clock + self.rnd.randint(-self.jitter, self.jitter)
            if t not in self.minted and t > above:
                self.minted.add(t)
                return t

    def post(self, author: int, mentions: tuple[int, ...] = ()) -> tuple[int, events.Envelope]:
        """A post by ``author`` naming ``mentions`` (others than the author, ascending)."""
        t = self._tweet_id()
        names = tuple(f"u{u}" for u in mentions)
        event = events.TweetPosted(
            t, author, f"u{author}", f"tweet {t}", mentions=mentions, mention_names=names
        )
        return t, events.Envelope(next(self.seq), event)

    def delete(self, author: int, t: int) -> events.Envelope:
        return events.Envelope(next(self.seq), events.TweetDeleted(t, author))

    def answer(
        self, author: int, parent: int, parent_author: int
    ) -> tuple[int, list[events.Envelope]]:
        """``author`` replies to the post ``parent`` (by ``parent_author``): the
        reply (id above its parent's) and its engagement row, as
        conversations.tweet_create writes them."""
        r = self._tweet_id(above=parent)
        reply = events.TweetPosted(
            r,
            author,
            f"u{author}",
            f"reply {r}",
            in_reply_to=parent,
            reply_to=parent_author,
            reply_to_name=f"u{parent_author}",
        )
        return r, [
            events.Envelope(next(self.seq), reply),
            self.engage(events.REPLY, r, parent),
        ]

    def repost(
        self,
        author: int,
        t: int,
        original: int = 0,
        original_author: int = 0,
        answered: tuple[int, int] = (0, 0),
        mentions: tuple[int, ...] = (),
    ) -> events.Envelope:
        """Entry ``t`` posted again (a reinstated author's, moderation.user_reinstate):
        a post, or a repost of ``original`` (by ``original_author``); ``answered``:
        (the post it or its original answers, that post's author), or zeros;
        ``mentions``: whom a post names."""
        text = "" if original else f"tweet {t}"
        parent, to = answered
        if original:
            event = events.TweetPosted(
                t, author, f"u{author}", text, original, original_author, repost_of_reply_to=to
            )
        elif parent:
            event = events.TweetPosted(
                t, author, f"u{author}", text, in_reply_to=parent, reply_to=to, reply_to_name="x"
            )
        else:
            event = events.TweetPosted(t, author, f"u{author}", text)
        names = tuple(f"u{u}" for u in mentions)
        event = dataclasses.replace(event, mentions=mentions, mention_names=names)
        return events.Envelope(next(self.seq), event)

    def share(
        self, author: int, original: int, original_author: int = 0, reply_to: int = 0
    ) -> tuple[int, list[events.Envelope]]:
        """``author`` reposts ``original`` (by ``original_author``; answering
        ``reply_to`` if a reply): the entry (id above the original's) and its
        engagement row, as services.repost_create writes them."""
        r = self._tweet_id(above=original)
        return r, [
            events.Envelope(
                next(self.seq),
                events.TweetPosted(
                    r,
                    author,
                    f"u{author}",
                    "",
                    original,
                    original_author,
                    repost_of_reply_to=reply_to,
                ),
            ),
            self.engage(events.REPOST, author, original),
        ]

    def engage(self, kind: str, member: int, t: int, on: bool = True) -> events.Envelope:
        event: events.Event = (events.Engaged if on else events.Disengaged)(kind, member, t)
        return events.Envelope(next(self.seq), event)

    def follow(
        self, follower: int, followee: int, *, muted: bool = False, reposts: bool = True
    ) -> events.Envelope:
        return events.Envelope(next(self.seq), events.Followed(follower, followee, muted, reposts))

    def filters(self, owner: int, hidden: set[int]) -> events.Envelope:
        return events.Envelope(next(self.seq), events.FiltersSet(owner, tuple(sorted(hidden))))

    def unfollow(self, follower: int, followee: int) -> events.Envelope:
        return events.Envelope(next(self.seq), events.Unfollowed(follower, followee))

    def reset(
        self,
        owner: int,
        joined: list[int],
        keep: int,
        as_of: int | None = None,
        pulled: tuple[int, ...] = (),
        *,
        raw: list[int] | None = None,
        originals: dict[int, int] | None = None,
        answers: dict[int, int] | None = None,
    ) -> events.Envelope:
        """What services.timeline_reset appends: the database's newest ``keep``
        of the view (``joined``: one entry per original, newest first), and
        every entry of the owner's audience (``raw``, default ``joined``) at or
        above their horizon, read when every seq up to ``as_of`` was committed
        (default: all before it), leaving out the ``pulled`` authors
        (``joined`` and ``raw`` already do)."""
        kept = joined[:keep]
        horizon = kept[-1] if len(joined) > keep else 0
        entries = sorted(t for t in (joined if raw is None else raw) if t >= horizon)
        originals = originals or {}
        pairs = tuple((t, originals[t], 0) for t in entries if t in originals)
        answered = tuple((t, (answers or {})[t]) for t in entries if t in (answers or {}))
        seq = next(self.seq)
        reset = events.TimelineReset(
            owner,
            tuple(entries),
            horizon,
            seq - 1 if as_of is None else as_of,
            pulled,
            pairs,
            answered,
        )
        return events.Envelope(seq, reset)


@dataclass
class System:
    """The join, author states and the timeline store's model, fed batch by batch."""

    cap: int = 800
    slack: int = 64
    pull_threshold: int = 0
    states: dict[int, AuthorState] = field(default_factory=dict)
    #: Every tweet's author, as the database knows it (for the resets).
    author_of: dict[int, int] = field(default_factory=dict)
    #: The mutations of the last batch.
    last_mutations: list[Mutation] = field(default_factory=list)
    model: TimelineModel = field(init=False)
    #: Every seq written so far, and the ones applied: the contiguous watermark.
    written: set[int] = field(default_factory=set)
    applied: set[int] = field(default_factory=set)
    #: Per tweet: who likes and reposts it (the job's counter state), and the
    #: counts as the store holds them.
    engagements: dict[int, Engagements] = field(default_factory=dict)
    counts: dict[int, Counts] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.model = TimelineModel(cap=self.cap, slack=self.slack)

    def batch(self, envs: list[events.Envelope]) -> None:
        by_key: dict[int, list[events.Envelope]] = {}
        by_tweet: dict[int, list[events.Envelope]] = {}
        for env in envs:
            engagement = isinstance(env.event, events.Engaged | events.Disengaged)
            (by_tweet if engagement else by_key).setdefault(env.event.join_key, []).append(env)
        for tweet, group in by_tweet.items():
            stored = self.engagements.get(tweet)
            counted = count_events(tweet, Engagements.decode(stored and stored.encode()), group)
            self.engagements[tweet] = counted.state
            if counted.changed:
                self.counts[tweet] = counted.state.counts
                if not any(counted.state.counts):
                    del self.counts[tweet]
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for key, group in by_key.items():
            state = AuthorState.decode(self.states[key].encode()) if key in self.states else None
            result = join_events(
                key,
                state or AuthorState(),
                group,
                cap=self.cap,
                slack=self.slack,
                pull_threshold=self.pull_threshold,
            )
            for env in group:
                if isinstance(env.event, events.TweetPosted):
                    self.author_of[env.event.tweet_id] = key
            self.states[key] = result.state
            bodies |= result.bodies
            mutations += result.mutations
        self.last_mutations = mutations
        self.model.high_water = max([self.model.high_water, *(e.seq for e in envs)])
        self.model.apply(bodies, mutations)
        self.written |= {e.seq for e in envs}
        self.applied |= {e.seq for e in envs}
        self.model.release(self.contiguous())

    def contiguous(self) -> int:
        """Every written seq up to the result is applied (what the relay's marks say)."""
        missing = sorted(self.written - self.applied)
        return missing[0] - 1 if missing else max(self.written, default=0)

    def run(self, batches: list[list[events.Envelope]]) -> None:
        self.written |= {e.seq for b in batches for e in b}
        for b in batches:
            self.batch(b)

    def settle(self, log: Log, joined: dict[int, list[int]], rounds: int = 20) -> int:
        """What the refill task does until no timeline is short: a reset per
        short timeline, computed from the database (``joined``, a
        :class:`View` when there are reposts) without the authors the
        timeline pulls (read from the store). Returns resets."""
        done = 0
        for _ in range(rounds):
            short = sorted(self.model.refill)
            self.model.refill.clear()
            if not short:
                return done
            keep = self.cap + self.slack
            resets = []
            for u in short:
                pulled = self.model.pulls.get(u, set())
                if isinstance(joined, View):
                    raw = [t for t in joined.raw.get(u, []) if self.author_of.get(t) not in pulled]
                    ids = winners(raw, joined.originals)[::-1]
                    resets.append(
                        log.reset(
                            u,
                            ids,
                            keep,
                            pulled=tuple(sorted(pulled)),
                            raw=raw,
                            originals=dict(joined.originals),
                            answers=joined.answers.get(u, {}),
                        )
                    )
                    continue
                ids = [t for t in joined.get(u, []) if self.author_of.get(t) not in pulled]
                resets.append(log.reset(u, ids, keep, pulled=tuple(sorted(pulled))))
            self.run([resets])
            done += len(short)
        raise AssertionError(f"still short after {rounds} rounds: {sorted(self.model.refill)}")

    def view(self, user: int) -> list[int]:
        found = self.model.view(user)
        return found[1] if found else []


def run(
    batches: list[list[events.Envelope]], *, cap: int = 800, slack: int = 64
) -> tuple[TimelineModel, dict[int, AuthorState]]:
    system = System(cap, slack)
    system.run(batches)
    return system.model, system.states


def view(model: TimelineModel, user: int) -> list[int]:
    found = model.view(user)
    return found[1] if found else []


@dataclass
class World:
    """A workload and the database beside it: the tweet rows (posts, replies
    and reposts), follows, likes, and the suspended users, whose entries (and
    the reposts of their tweets) stay in the database but out of every view."""

    log: Log
    #: Every tweet row: id -> (author, original or 0 for a post).
    rows: dict[int, tuple[int, int]] = field(default_factory=dict)
    follows: set[tuple[int, int]] = field(default_factory=set)
    users: set[int] = field(default_factory=set)
    suspended: set[int] = field(default_factory=set)
    likes: set[tuple[int, int]] = field(default_factory=set)  # (user, original)
    blocks: set[tuple[int, int]] = field(default_factory=set)  # (blocker, blocked)
    mutes: set[tuple[int, int]] = field(default_factory=set)  # (muter, muted)
    #: Follows with reposts off: (follower, followee).
    quiet: set[tuple[int, int]] = field(default_factory=set)
    #: Every reply: id -> (the post it answers, that post's author), kept
    #: when either is deleted.
    replied: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: The posts that name others: id -> those users (ascending; fixed at write).
    mentioned: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: Every list: id -> its owner; and their members: (list, member).
    lists: dict[int, int] = field(default_factory=dict)
    members: set[tuple[int, int]] = field(default_factory=set)
    #: The lists each user has made (the next one's number is one more).
    lists_made: Counter[int] = field(default_factory=Counter)
    deleted_lists: set[int] = field(default_factory=set)

    def hidden(self, user: int) -> set[int]:
        """Whom ``user``'s view hides: those it blocks, who block it, it mutes."""
        out = {b for a, b in self.blocks if a == user} | {a for a, b in self.blocks if b == user}
        return out | {b for a, b in self.mutes if a == user}

    def blocked(self, a: int, b: int) -> bool:
        return (a, b) in self.blocks or (b, a) in self.blocks

    def visible(self, t: int) -> bool:
        author, original = self.rows[t]
        if author in self.suspended:
            return False
        return not original or (original in self.rows and self.visible(original))

    @property
    def live(self) -> dict[int, int]:
        """The entries of the view: entry -> actor."""
        return {t: a for t, (a, _) in self.rows.items() if self.visible(t)}

    @property
    def originals(self) -> dict[int, int]:
        """repost -> original, of the visible reposts."""
        return {t: o for t, (_, o) in self.rows.items() if o and self.visible(t)}

    @property
    def answers(self) -> dict[int, int]:
        """Visible entry -> the user its original answers, where that is not
        the original's author."""
        out = {}
        for t, (_, original) in self.rows.items():
            post = original or t
            parent, to = self.replied.get(post, (0, 0))
            if parent and to != self.rows[post][0] and self.visible(t):
                out[t] = to
        return out

    def joined(self) -> View:
        """Each user's home view, and at -u their mentions view (if not empty)."""
        view = oracle(
            self.live,
            self.follows,
            self.users,
            self.originals,
            hidden={u: self.hidden(u) for u in self.users},
            quiet=self.quiet,
            answers=self.answers,
        )
        for owner, ids in self.mentions_views().items():
            if ids:  # (a mentions timeline is made by its first mention)
                view[owner], view.raw[owner], view.answers[owner] = ids, ids, {}
        for list_, owner in self.lists.items():
            members = self.list_members(list_)
            owner_id = owners.list_owner(list_)
            add_list_view(view, owner_id, self.live, members, self.hidden(owner), self.answers)
        return view

    def list_members(self, list_: int) -> set[int]:
        return {m for x, m in self.members if x == list_}

    def mentions_views(self) -> dict[int, list[int]]:
        """The mentions view of docs/design.md, by owner -u: for each user u,
        the visible posts by others that name u or answer one of u's posts,
        leaving out the authors u hides; newest first."""
        out: dict[int, list[int]] = {-u: [] for u in self.users}
        for t, (author, original) in self.rows.items():
            if original or not self.visible(t):
                continue
            notified = {*self.mentioned.get(t, ()), self.replied.get(t, (0, 0))[1]}
            for u in notified - {0, author}:
                if author not in self.hidden(u):
                    out[-u].append(t)
        return {owner: sorted(ts, reverse=True) for owner, ts in out.items()}

    def counts(self) -> dict[int, Counts]:
        """Each tweet's (likes, reposts, replies) by active users, where not
        all 0 (the counts' view of docs/design.md: its live likes, reposts and
        direct replies)."""
        active = self.users - self.suspended
        out: dict[int, list[int]] = {}
        for user, t in self.likes:
            if user in active and t in self.rows:
                out.setdefault(t, [0, 0, 0])[0] += 1
        for author, original in self.rows.values():
            if original and author in active:
                out.setdefault(original, [0, 0, 0])[1] += 1
        for r, (parent, _) in self.replied.items():
            if r in self.rows and self.rows[r][0] in active and parent in self.rows:
                out.setdefault(parent, [0, 0, 0])[2] += 1
        return {t: (likes, reposts, replies) for t, (likes, reposts, replies) in out.items()}

    def _changes(self, before: dict[int, int]) -> list[events.Envelope]:
        """Tombstones and posts for the entries that left or joined the view."""
        after = self.live
        out = [self.log.delete(before[t], t) for t in sorted(set(before) - set(after))]
        for t in sorted(set(after) - set(before)):
            original = self.rows[t][1]
            by = self.rows[original][0] if original else 0
            answered = self.replied.get(original or t, (0, 0))
            mentions = self.mentioned.get(t, ())
            out.append(self.log.repost(after[t], t, original, by, answered, mentions))
        return out

    def register(self, *users: int) -> list[events.Envelope]:
        self.users |= set(users)
        return [self.log.follow(u, u) for u in users]

    def post(self, author: int, n: int = 1, mentions: Iterable[int] = ()) -> list[events.Envelope]:
        """``n`` posts by ``author``, each naming ``mentions`` (conversations.tweet_create
        keeps the active users named, the author left out of the record)."""
        assert author not in self.suspended, "a suspended user cannot post"
        named = tuple(sorted(set(mentions) - {author} - self.suspended))
        out = []
        for _ in range(n):
            t, env = self.log.post(author, named)
            self.rows[t] = (author, 0)
            if named:
                self.mentioned[t] = named
            out.append(env)
        return out

    def repost(self, user: int, t: int) -> list[events.Envelope]:
        """services.repost_create: a repost of ``t``'s original, once per user."""
        original = self.rows[t][1] or t
        if any(row == (user, original) for row in self.rows.values()):
            return []
        if self.blocked(user, self.rows[original][0]):
            return []  # 403 blocked
        to = self.replied.get(original, (0, 0))[1]
        r, out = self.log.share(user, original, self.rows[original][0], to)
        self.rows[r] = (user, original)
        return out

    def reply(self, user: int, t: int) -> list[events.Envelope]:
        """conversations.tweet_create with ``in_reply_to`` = ``t`` (a repost's
        id answers its original): refused (nothing) across a block."""
        assert user not in self.suspended, "a suspended user cannot post"
        parent = self.rows[t][1] or t
        parent_author = self.rows[parent][0]
        if self.blocked(user, parent_author):
            return []  # 403 blocked
        r, out = self.log.answer(user, parent, parent_author)
        self.rows[r] = (user, 0)
        self.replied[r] = (parent, parent_author)
        return out

    def unrepost(self, r: int) -> list[events.Envelope]:
        author, original = self.rows.pop(r)
        return [self.log.delete(author, r), self.log.engage(events.REPOST, author, original, False)]

    def like(self, user: int, t: int, on: bool = True) -> events.Envelope:
        original = self.rows[t][1] or t
        (self.likes.add if on else self.likes.discard)((user, original))
        return self.log.engage(events.LIKE, user, original, on)

    def delete(self, t: int) -> events.Envelope:
        """Delete entry ``t`` (for a post, see :meth:`delete_post`)."""
        return self.log.delete(self.rows.pop(t)[0], t)

    def delete_post(self, t: int) -> list[events.Envelope]:
        """services.tweet_delete of a post: its reposts and likes go with it,
        its direct replies stay but are no longer counted (their engagements'
        tombstones), and so does its own engagement if it is a reply."""
        out = []
        for r in sorted(r for r, (_, o) in self.rows.items() if o == t):
            out += self.unrepost(r)
        for user, liked in sorted(self.likes):
            if liked == t:
                out.append(self.like(user, t, False))
        out.append(self.delete(t))
        for r in sorted(r for r, (parent, _) in self.replied.items() if parent == t):
            if r in self.rows:
                out.append(self.log.engage(events.REPLY, r, t, False))
        if t in self.replied:
            out.append(self.log.engage(events.REPLY, t, self.replied[t][0], False))
        return out

    def follow(self, follower: int, followee: int) -> events.Envelope:
        self.follows.add((follower, followee))
        return self._follow_record(follower, followee)

    def _follow_record(self, follower: int, followee: int) -> events.Envelope:
        return self.log.follow(
            follower,
            followee,
            muted=(follower, followee) in self.mutes,
            reposts=(follower, followee) not in self.quiet,
        )

    def unfollow(self, follower: int, followee: int) -> events.Envelope:
        self.follows.discard((follower, followee))
        self.quiet.discard((follower, followee))
        return self.log.unfollow(follower, followee)

    def block(self, a: int, b: int) -> list[events.Envelope]:
        """relations.block_create: the follows both ways go, both filters change."""
        self.blocks.add((a, b))
        out = [self.unfollow(x, y) for x, y in ((a, b), (b, a)) if (x, y) in self.follows]
        out += [self.log.filters(a, self.hidden(a)), self.log.filters(b, self.hidden(b))]
        return [*out, *self._lists_hide(a, b), *self._lists_hide(b, a)]

    def unblock(self, a: int, b: int) -> list[events.Envelope]:
        self.blocks.discard((a, b))
        out = [self.log.filters(a, self.hidden(a)), self.log.filters(b, self.hidden(b))]
        return [*out, *self._lists_hide(a, b), *self._lists_hide(b, a)]

    def mute(self, a: int, b: int, on: bool = True) -> list[events.Envelope]:
        """relations.mute_create / mute_delete: the follow's record says it, the
        muter's filter too."""
        (self.mutes.add if on else self.mutes.discard)((a, b))
        out = [self._follow_record(a, b)] if (a, b) in self.follows else []
        return [*out, self.log.filters(a, self.hidden(a)), *self._lists_hide(a, b)]

    def set_reposts(self, a: int, b: int, on: bool) -> list[events.Envelope]:
        """relations.follow_reposts_set: the follow's record with its flag."""
        if (a, b) not in self.follows:
            return []
        (self.quiet.discard if on else self.quiet.add)((a, b))
        return [self._follow_record(a, b)]

    def make_list(self, owner: int) -> tuple[int, list[events.Envelope]]:
        """lists.list_create: a new list of ``owner``'s, with its filter's copy."""
        self.lists_made[owner] += 1
        list_ = owners.list_id(owner, self.lists_made[owner])
        self.lists[list_] = owner
        hidden = self.hidden(owner)
        return list_, [self.log.filters(owners.list_owner(list_), hidden)] if hidden else []

    def add_member(self, list_: int, member: int) -> events.Envelope:
        self.members.add((list_, member))
        return self._membership(list_, member)

    def _membership(self, list_: int, member: int) -> events.Envelope:
        hidden = member in self.hidden(self.lists[list_])
        return self.log.follow(owners.list_owner(list_), member, muted=hidden)

    def remove_member(self, list_: int, member: int) -> events.Envelope:
        self.members.discard((list_, member))
        return self.log.unfollow(owners.list_owner(list_), member)

    def delete_list(self, list_: int) -> list[events.Envelope]:
        """lists.list_delete: every membership removed, its filter's copy
        emptied, then the list's drop."""
        out = [self.remove_member(list_, m) for m in sorted(self.list_members(list_))]
        if self.hidden(self.lists[list_]):  # its filter's copy emptied
            out.append(self.log.filters(owners.list_owner(list_), set()))
        del self.lists[list_]
        self.deleted_lists.add(list_)
        seq = next(self.log.seq)
        drop = events.TimelineReset(owners.list_owner(list_), (), 0, seq - 1, drop=True)
        return [*out, events.Envelope(seq, drop)]

    def _lists_hide(self, user: int, other: int) -> list[events.Envelope]:
        """What a change of whom ``user`` hides writes for ``user``'s lists: their
        filters' copies, and the memberships of ``other`` with their flag."""
        out = []
        hidden = self.hidden(user)
        for list_ in sorted(x for x, o in self.lists.items() if o == user):
            out.append(self.log.filters(owners.list_owner(list_), hidden))
            if (list_, other) in self.members:
                out.append(self._membership(list_, other))
        return out

    def _engagements_of(self, user: int, on: bool) -> list[events.Envelope]:
        """The user's likes, reposts and replies as engagement rows
        (tombstones: ``on`` False; a reply whose parent is gone counts
        nowhere, and is posted again nowhere)."""
        out = [self.log.engage(events.LIKE, u, t, on) for u, t in sorted(self.likes) if u == user]
        for t, (author, original) in sorted(self.rows.items()):
            if original and author == user:
                out.append(self.log.engage(events.REPOST, user, original, on))
            parent = self.replied.get(t, (0, 0))[0]
            if parent and author == user and (not on or parent in self.rows):
                out.append(self.log.engage(events.REPLY, t, parent, on))
        return out

    def suspend(self, user: int) -> list[events.Envelope]:
        """moderation.user_suspend: a tombstone for each entry that leaves the
        view (the user's, and reposts of the user's tweets), and for the user's
        likes and reposts as engagements."""
        before = self.live
        self.suspended.add(user)
        return self._changes(before) + self._engagements_of(user, False)

    def reinstate(self, user: int) -> list[events.Envelope]:
        """moderation.user_reinstate: each of those posted again."""
        before = self.live
        self.suspended.discard(user)
        return self._changes(before) + self._engagements_of(user, True)


def exact(system: System, world: World) -> None:
    """Every view (home, and mentions at -u) is the join's newest ``cap``,
    and every count the tables'.

    A reader who hides some of a pulled author's reposts (or follows it with
    reposts off) reads its list without them: the merged view may then hold
    fewer than ``cap`` entries above its floor, and a read goes on into the
    database below it. What Redis holds is then exactly the join's entries
    at or above the floor, and the timeline itself is never short."""
    joined = world.joined()
    cap = system.cap
    lists = [owners.list_owner(x) for x in world.lists]
    for user in [*world.users, *(-u for u in world.users), *lists]:  # home, mentions, lists
        found = system.model.view(user)
        if found is None and user < 0:  # never mentioned, or a list never written to
            assert not joined.get(user), f"owner {user}"
            continue
        assert found is not None, f"user {user}"
        floor, got = found
        view = joined.get(user, [])
        assert got == [t for t in view if t >= floor][:cap], f"user {user}"
        if len(got) < cap and len(view) > len(got):
            tl = system.model.timelines[user]
            filtered = owners.user_of(user) if owners.is_mentions(user) else user
            screened = system.model.filters.get(filtered) or system.model.quiet.get(user)
            assert screened or tl.aside or system.model.pulls.get(user), f"user {user}: short"
            assert floor > 0, f"user {user}: short"
            assert len(tl.ids) + len(tl.aside) >= cap or tl.horizon == 0, f"user {user}: short"
    for list_ in world.lists:  # a list is made by its first member (pulled or not)
        owner = owners.list_owner(list_)
        made = owner in system.model.timelines or owner in system.model.idle
        assert made or not world.list_members(list_), f"list {list_} not made"
    for list_ in world.deleted_lists:  # a deleted list's keys are gone
        owner = owners.list_owner(list_)
        assert owner not in system.model.timelines and owner not in system.model.filters, list_
    assert system.counts == world.counts()


def add_list_view(
    view: View,
    owner: int,
    live: dict[int, int],
    members: set[int],
    hidden: set[int],
    answering: Mapping[int, int],
) -> None:
    """List ``-owner``'s view (docs/design.md, List) into ``view``, with the raw
    entries and answered users its refill carries: its members' entries (the
    owner's own only if a member); a post that answers someone else only if
    they are a member (no exception for the owner), else aside; every repost;
    leaving out the entries whose actor, original's author or original's
    answered user the owner hides (``hidden``), but never the owner's own;
    one entry per original, the newest."""
    me = owners.user_of(owner)
    originals = view.originals

    def shown(t: int, actor: int) -> bool:
        if actor == me:
            return True
        if actor in hidden or answering.get(t, 0) in hidden:
            return False
        return t not in originals or live.get(originals[t]) not in hidden

    raw = sorted((t for t, a in live.items() if a in members and shown(t, a)), reverse=True)
    aside = {t for t in raw if t not in originals and answering.get(t, 0) not in {0, *members}}
    view.raw[owner] = raw
    view.answers[owner] = {t: answering[t] for t in raw if t in answering}
    view[owner] = winners([t for t in raw if t not in aside], originals)[::-1]


@dataclass
class Seen:
    """The tables as a database read saw them."""

    live: dict[int, int]  # entry -> actor
    follows: set[tuple[int, int]]
    originals: dict[int, int]  # repost -> original
    hidden: dict[int, set[int]]  # user -> whom its view hides
    quiet: set[tuple[int, int]]  # follows with reposts off
    answers: dict[int, int] = field(default_factory=dict)  # entry -> the user it answers
    notified: dict[int, tuple[int, ...]] = field(default_factory=dict)  # post -> users

    def mentions(self, user: int) -> list[int]:
        """``user``'s mentions view as the read saw it, newest first."""
        hides = self.hidden.get(user, set())
        return sorted(
            (
                t
                for t, users in self.notified.items()
                if user in users and self.live[t] not in hides
            ),
            reverse=True,
        )

    def list_view(self, owner: int) -> View:
        """List ``-owner``'s view as the read saw it (its members are the
        follows of ``owner``, its owner's hidden users its filter's copy)."""
        view = View()
        view.raw, view.originals, view.answers = {}, self.originals, {}
        members = {m for f, m in self.follows if f == owner}
        hidden = self.hidden.get(owner, set())
        add_list_view(view, owner, self.live, members, hidden, self.answers)
        return view

    def joined(self, users: Iterable[int]) -> View:
        return oracle(
            self.live,
            self.follows,
            users,
            self.originals,
            hidden=self.hidden,
            quiet=self.quiet,
            answers=self.answers,
        )


def tables_seen(
    rnd: random.Random,
    envs: list[events.Envelope],
    owner: int,
    as_of: int,
    applied: set[int] | frozenset[int] = frozenset(),
) -> Seen:
    """The tables as a reset's read of ``owner``'s timeline saw them: every
    write up to ``as_of`` (committed), and some of the later ones (the others
    still in flight: on PostgreSQL a lower seq can commit after a higher one),
    but every one in ``applied``: the job applied it, so it was committed
    before the read. The owner's unfollows are always seen: they lock the
    owner's row, as the reset does (services.timeline_reset)."""
    live: dict[int, int] = {}
    originals: dict[int, int] = {}
    follows: set[tuple[int, int]] = set()
    hidden: dict[int, set[int]] = {}
    quiet: set[tuple[int, int]] = set()
    answers: dict[int, int] = {}
    notified: dict[int, tuple[int, ...]] = {}
    for env in envs:
        ev = env.event
        locked = isinstance(ev, events.Unfollowed) and ev.follower_id == owner
        if env.seq > as_of and not locked and env.seq not in applied and rnd.random() < 0.5:
            continue
        if isinstance(ev, events.TweetPosted):
            live[ev.tweet_id] = ev.author_id
            if ev.repost_of:
                originals[ev.tweet_id] = ev.repost_of
            if ev.answers:
                answers[ev.tweet_id] = ev.answers
            if not ev.repost_of and notified_users(ev.mentions, ev.answers):
                notified[ev.tweet_id] = notified_users(ev.mentions, ev.answers)
        elif isinstance(ev, events.TweetDeleted):
            live.pop(ev.tweet_id, None)
            originals.pop(ev.tweet_id, None)
        elif isinstance(ev, events.Followed) and ev.follower_id != ev.followee_id:
            edge = (ev.follower_id, ev.followee_id)
            follows.add(edge)
            (quiet.discard if ev.reposts else quiet.add)(edge)
        elif isinstance(ev, events.Unfollowed):
            follows.discard((ev.follower_id, ev.followee_id))
            quiet.discard((ev.follower_id, ev.followee_id))
        elif isinstance(ev, events.FiltersSet):
            hidden[ev.owner_id] = set(ev.hidden)
    # A repost whose original the read did not see (deleted, or not yet
    # committed) is not in the view.
    live = {t: a for t, a in live.items() if t not in originals or originals[t] in live}
    return Seen(
        live,
        follows,
        {t: o for t, o in originals.items() if t in live},
        hidden,
        quiet,
        {t: u for t, u in answers.items() if t in live},
        {t: users for t, users in notified.items() if t in live},
    )


def random_workload(
    rnd: random.Random,
    users: int,
    steps: int,
    *,
    jitter: int = 0,
    resets: float = 0.0,
    pull_threshold: int = 0,
    suspensions: float = 0.02,
    engagements: float = 0.0,
    relations: float = 0.0,
    replies: float = 0.0,
    lists: float = 0.0,
) -> tuple[World, list[events.Envelope]]:
    """A workload over ``users``, where that share of ``suspensions`` of steps
    suspends or reinstates a user, that share of ``engagements`` reposts,
    undoes a repost, likes or unlikes, that share of ``replies`` answers a
    visible tweet, and that share of ``relations`` blocks,
    unblocks, mutes, unmutes, or turns a followee's reposts off or on, that
    share of ``lists`` makes a list, adds or removes a member, or deletes a
    list (and resets ask for lists' refills too); with
    ``resets``, that share of steps also asks
    the database for a reset of a random timeline (see :func:`tables_seen`),
    leaving out the followees it guesses are pulled (those with
    ``pull_threshold`` followers: right or wrong, as a read of the store racing
    the job can be)."""
    world = World(Log(rnd=rnd, jitter=jitter))
    envs = world.register(*range(1, users + 1))
    for _ in range(steps):
        roll = rnd.random()
        a, b = rnd.randint(1, users), rnd.randint(1, users)
        if replies and rnd.random() < 0.5:  # often whom a's followees answer, not followed yet
            strangers = _answered_by_followees(world, a) - {g for f, g in world.follows if f == a}
            b = rnd.choice(sorted(strangers) or [b])
        live = world.live
        if suspensions and rnd.random() < suspensions:
            envs += world.reinstate(a) if a in world.suspended else world.suspend(a)
        elif engagements and rnd.random() < engagements:
            envs += _engage(rnd, world, a)
        elif relations and rnd.random() < relations:
            envs += _relate(rnd, world, a, b)
        elif lists and rnd.random() < lists:
            envs += list_step(rnd, world, a, b)
        elif replies and rnd.random() < replies:
            if a not in world.suspended and live:
                envs += world.reply(a, rnd.choice(sorted(live)))
        elif roll < 0.45 and a not in world.suspended:  # a suspended user cannot post
            # With replies, a post often names others (their mentions views).
            named = rnd.sample(range(1, users + 1), rnd.randint(1, 2)) if replies else []
            envs += world.post(a, mentions=named if named and rnd.random() < 0.4 else ())
        elif roll < 0.6 and live:
            t = rnd.choice(sorted(live))
            envs += world.delete_post(t) if not world.rows[t][1] else world.unrepost(t)
        elif roll < 0.85 and a != b and (a, b) not in world.follows:
            # A suspended account cannot be followed, nor one blocked either way.
            if b not in world.suspended and not world.blocked(a, b):
                envs.append(world.follow(a, b))
        elif world.follows:
            edges = sorted(world.follows)
            if replies and rnd.random() < 0.5:  # often of whom the follower's followees answer
                edges = [(f, u) for f, u in edges if u in _answered_by_followees(world, f)] or edges
            envs.append(world.unfollow(*rnd.choice(edges)))
        if rnd.random() < resets:
            owner = rnd.randint(1, users)
            if world.lists and rnd.random() < 0.3:  # a refill of a list
                owner = owners.list_owner(rnd.choice(sorted(world.lists)))
            as_of = max(0, envs[-1].seq - rnd.randint(0, 4))
            seen = tables_seen(rnd, envs, owner, as_of)
            if replies and rnd.random() < 0.3:  # a refill of the owner's mentions timeline
                mentions = seen.mentions(owner)
                envs.append(world.log.reset(-owner, mentions, rnd.randint(2, 12), as_of))
                continue
            follows = seen.follows
            audience = Counter(followee for _, followee in follows)
            pulled = {b for a, b in follows if a == owner and 0 < pull_threshold <= audience[b]}
            seen.live = {t: a for t, a in seen.live.items() if a not in pulled}
            joined = seen.list_view(owner) if owners.is_list(owner) else seen.joined(world.users)
            envs.append(
                world.log.reset(
                    owner,
                    joined[owner],
                    rnd.randint(2, 12),
                    as_of,
                    tuple(sorted(pulled)),
                    raw=joined.raw[owner],
                    originals=seen.originals,
                    answers=joined.answers[owner],
                )
            )
    return world, envs


def _answered_by_followees(world: World, user: int) -> set[int]:
    """The users whom ``user``'s followees answer (a follow of one shows
    those replies, an unfollow hides them)."""
    followees = {g for f, g in world.follows if f == user}
    return {
        to
        for r, (_, to) in world.replied.items()
        if r in world.rows and world.rows[r][0] in followees and to != user
    }


def _relate(rnd: random.Random, world: World, a: int, b: int) -> list[events.Envelope]:
    """A random block, unblock, mute, unmute or reposts flag of ``a`` on ``b``."""
    if a == b:
        return []
    roll = rnd.random()
    if roll < 0.25:
        return world.unblock(a, b) if (a, b) in world.blocks else world.block(a, b)
    if roll < 0.55:
        return world.mute(a, b, (a, b) not in world.mutes)
    followed = sorted(e for e in world.follows if e[0] == a)
    if not followed:
        return []
    x, y = rnd.choice(followed)
    return world.set_reposts(x, y, (x, y) in world.quiet)


def list_step(rnd: random.Random, world: World, a: int, b: int) -> list[events.Envelope]:
    """``a`` makes a list, adds ``b`` (``a`` too, sometimes) to one of its
    lists or removes a member, or deletes one of its lists."""
    if a in world.suspended:
        return []
    mine = sorted(x for x, o in world.lists.items() if o == a)
    roll = rnd.random()
    if (roll < 0.2 and len(mine) < 3) or not mine:
        return world.make_list(a)[1]
    list_ = rnd.choice(mine)
    members = sorted(world.list_members(list_))
    if roll < 0.75:
        member = a if rnd.random() < 0.2 else b
        if member in world.suspended or (list_, member) in world.members:
            return []
        return [world.add_member(list_, member)]
    if roll < 0.95:
        return [world.remove_member(list_, rnd.choice(members))] if members else []
    return world.delete_list(list_)


def _engage(rnd: random.Random, world: World, user: int) -> list[events.Envelope]:
    """A random repost, undone repost, like or unlike by ``user``."""
    if user in world.suspended:
        return []
    live = world.live
    mine = sorted(t for t, (a, o) in world.rows.items() if a == user and o)
    roll = rnd.random()
    if roll < 0.45 and live:
        return world.repost(user, rnd.choice(sorted(live)))
    if roll < 0.6 and mine:
        return world.unrepost(rnd.choice(mine))
    if roll < 0.9 and live:
        return [world.like(user, rnd.choice(sorted(live)))]
    liked = sorted(t for u, t in world.likes if u == user)
    return [world.like(user, rnd.choice(liked), False)] if liked else []


def interleave(rnd: random.Random, envs: list[events.Envelope]) -> list[list[events.Envelope]]:
    """Cut each topic into its own order, then merge them into random micro-batches:
    one topic can run several batches ahead of the others."""
    streams = [
        [e for e in envs if isinstance(e.event, events.TweetPosted | events.TweetDeleted)],
        [e for e in envs if isinstance(e.event, events.Followed | events.Unfollowed)],
        [e for e in envs if isinstance(e.event, events.TimelineReset)],
        [e for e in envs if isinstance(e.event, events.FiltersSet)],
        [e for e in envs if isinstance(e.event, events.Engaged | events.Disengaged)],
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
