"""The join run without Spark (the model tests' and the store tests' simulation):
a log that mints envelopes as the outbox does, the system that feeds them to
the join and the store's model batch by batch, the database beside it, random
workloads and their interleavings."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass, field

from fanout.model import events
from fanout.model.author_state import AuthorState
from fanout.model.join import Mutation, join_events
from tests.support.timeline_model import TimelineModel, oracle


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

    def _tweet_id(self) -> int:
        self.clock += 10
        while True:
            t = self.clock + self.rnd.randint(-self.jitter, self.jitter)
            if t not in self.minted:
                self.minted.add(t)
                return t

    def post(self, author: int) -> tuple[int, events.Envelope]:
        t = self._tweet_id()
        return t, events.Envelope(
            next(self.seq), events.TweetPosted(t, author, f"u{author}", f"tweet {t}")
        )

    def delete(self, author: int, t: int) -> events.Envelope:
        return events.Envelope(next(self.seq), events.TweetDeleted(t, author))

    def repost(self, author: int, t: int) -> events.Envelope:
        """Tweet ``t`` posted again (a reinstated author's, moderation.user_reinstate)."""
        return events.Envelope(
            next(self.seq), events.TweetPosted(t, author, f"u{author}", f"tweet {t}")
        )

    def follow(self, follower: int, followee: int) -> events.Envelope:
        return events.Envelope(next(self.seq), events.Followed(follower, followee))

    def unfollow(self, follower: int, followee: int) -> events.Envelope:
        return events.Envelope(next(self.seq), events.Unfollowed(follower, followee))

    def reset(
        self,
        owner: int,
        joined: list[int],
        keep: int,
        as_of: int | None = None,
        pulled: tuple[int, ...] = (),
    ) -> events.Envelope:
        """What services.timeline_reset appends: the database's newest ``keep``,
        read when every seq up to ``as_of`` was committed (default: all before
        it), leaving out the ``pulled`` authors (``joined`` already does)."""
        kept = joined[:keep]
        horizon = kept[-1] if len(joined) > keep else 0
        seq = next(self.seq)
        reset = events.TimelineReset(
            owner, tuple(sorted(kept)), horizon, seq - 1 if as_of is None else as_of, pulled
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

    def __post_init__(self) -> None:
        self.model = TimelineModel(cap=self.cap, slack=self.slack)

    def batch(self, envs: list[events.Envelope]) -> None:
        by_key: dict[int, list[events.Envelope]] = {}
        for env in envs:
            by_key.setdefault(env.event.join_key, []).append(env)
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
        short timeline, computed from the database (``joined``) without the
        authors the timeline pulls (read from the store). Returns resets."""
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
    """A workload and the database beside it: live tweets and follows, and the
    tweets of suspended users (in the database, out of every view)."""

    log: Log
    live: dict[int, int] = field(default_factory=dict)  # tweet -> author
    follows: set[tuple[int, int]] = field(default_factory=set)
    users: set[int] = field(default_factory=set)
    suspended: set[int] = field(default_factory=set)
    hidden: dict[int, int] = field(default_factory=dict)  # a suspended author's tweets

    def joined(self) -> dict[int, list[int]]:
        return oracle(self.live, self.follows, self.users)

    def register(self, *users: int) -> list[events.Envelope]:
        self.users |= set(users)
        return [self.log.follow(u, u) for u in users]

    def post(self, author: int, n: int = 1) -> list[events.Envelope]:
        out = []
        for _ in range(n):
            t, env = self.log.post(author)
            self.live[t] = author
            out.append(env)
        return out

    def delete(self, t: int) -> events.Envelope:
        return self.log.delete(self.live.pop(t), t)

    def follow(self, follower: int, followee: int) -> events.Envelope:
        self.follows.add((follower, followee))
        return self.log.follow(follower, followee)

    def unfollow(self, follower: int, followee: int) -> events.Envelope:
        self.follows.discard((follower, followee))
        return self.log.unfollow(follower, followee)

    def suspend(self, user: int) -> list[events.Envelope]:
        """moderation.user_suspend: a tombstone for each of the user's tweets."""
        self.suspended.add(user)
        mine = sorted(t for t, a in self.live.items() if a == user)
        for t in mine:
            self.hidden[t] = self.live.pop(t)
        return [self.log.delete(user, t) for t in mine]

    def reinstate(self, user: int) -> list[events.Envelope]:
        """moderation.user_reinstate: each of the user's tweets posted again."""
        self.suspended.discard(user)
        mine = sorted(t for t, a in self.hidden.items() if a == user)
        for t in mine:
            self.live[t] = self.hidden.pop(t)
        return [self.log.repost(user, t) for t in mine]


def exact(system: System, world: World) -> None:
    joined = world.joined()
    for user in world.users:
        assert system.view(user) == joined[user][: system.cap], f"user {user}"


def tables_seen(
    rnd: random.Random,
    envs: list[events.Envelope],
    owner: int,
    as_of: int,
    applied: set[int] | frozenset[int] = frozenset(),
) -> tuple[dict[int, int], set[tuple[int, int]]]:
    """The tables as a reset's read of ``owner``'s timeline saw them: every
    write up to ``as_of`` (committed), and some of the later ones (the others
    still in flight: on PostgreSQL a lower seq can commit after a higher one),
    but every one in ``applied``: the job applied it, so it was committed
    before the read. The owner's unfollows are always seen: they lock the
    owner's row, as the reset does (services.timeline_reset)."""
    live: dict[int, int] = {}
    follows: set[tuple[int, int]] = set()
    for env in envs:
        ev = env.event
        locked = isinstance(ev, events.Unfollowed) and ev.follower_id == owner
        if env.seq > as_of and not locked and env.seq not in applied and rnd.random() < 0.5:
            continue
        if isinstance(ev, events.TweetPosted):
            live[ev.tweet_id] = ev.author_id
        elif isinstance(ev, events.TweetDeleted):
            live.pop(ev.tweet_id, None)
        elif isinstance(ev, events.Followed) and ev.follower_id != ev.followee_id:
            follows.add((ev.follower_id, ev.followee_id))
        elif isinstance(ev, events.Unfollowed):
            follows.discard((ev.follower_id, ev.followee_id))
    return live, follows


def random_workload(
    rnd: random.Random,
    users: int,
    steps: int,
    *,
    jitter: int = 0,
    resets: float = 0.0,
    pull_threshold: int = 0,
    suspensions: float = 0.02,
) -> tuple[World, list[events.Envelope]]:
    """A workload over ``users``, where that share of ``suspensions`` of steps
    suspends or reinstates a user; with ``resets``, that share of steps also asks
    the database for a reset of a random timeline (see :func:`tables_seen`),
    leaving out the followees it guesses are pulled (those with
    ``pull_threshold`` followers: right or wrong, as a read of the store racing
    the job can be)."""
    world = World(Log(rnd=rnd, jitter=jitter))
    envs = world.register(*range(1, users + 1))
    for _ in range(steps):
        roll = rnd.random()
        a, b = rnd.randint(1, users), rnd.randint(1, users)
        if suspensions and rnd.random() < suspensions:
            envs += world.reinstate(a) if a in world.suspended else world.suspend(a)
        elif roll < 0.45 and a not in world.suspended:  # a suspended user cannot post
            envs += world.post(a)
        elif roll < 0.6 and world.live:
            envs.append(world.delete(rnd.choice(sorted(world.live))))
        elif roll < 0.85 and a != b and (a, b) not in world.follows:
            if b not in world.suspended:  # a suspended account cannot be followed
                envs.append(world.follow(a, b))
        elif world.follows:
            envs.append(world.unfollow(*rnd.choice(sorted(world.follows))))
        if rnd.random() < resets:
            owner = rnd.randint(1, users)
            as_of = max(0, envs[-1].seq - rnd.randint(0, 4))
            live, follows = tables_seen(rnd, envs, owner, as_of)
            audience = Counter(followee for _, followee in follows)
            pulled = {b for a, b in follows if a == owner and 0 < pull_threshold <= audience[b]}
            live = {t: a for t, a in live.items() if a not in pulled}
            joined = oracle(live, follows, world.users)[owner]
            envs.append(
                world.log.reset(owner, joined, rnd.randint(2, 12), as_of, tuple(sorted(pulled)))
            )
    return world, envs


def interleave(rnd: random.Random, envs: list[events.Envelope]) -> list[list[events.Envelope]]:
    """Cut each topic into its own order, then merge them into random micro-batches:
    one topic can run several batches ahead of the others."""
    streams = [
        [e for e in envs if isinstance(e.event, events.TweetPosted | events.TweetDeleted)],
        [e for e in envs if isinstance(e.event, events.Followed | events.Unfollowed)],
        [e for e in envs if isinstance(e.event, events.TimelineReset)],
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
