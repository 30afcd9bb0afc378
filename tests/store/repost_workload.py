"""Random batches of timeline mutations with reposts, for the store's property
tests (the join's own workload, tests/support/join_sim.py, has none yet).

The batches are not the join's output: they are any mutations the apply
script may receive, within its preconditions (an entry's original is fixed, a
repost's id is above its original's, a post's body exists while it is live).
They cover reposts newer than every entry and late ones, undos (a winner
removed), deletes of reposted originals, merges and removals of many entries
(follows, unfollows), horizons, resets with pairs, pulled authors' lists with
reposts, pulls and unpulls (quiet ones too: the owner reads the list
without its reposts), owners' filters (hidden users: reposts of their tweets
left out of merges and of the lists a reader reads), and counts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from fanout.model import events, owners
from fanout.model.join import Mutation, Op

USERS = (1, 2, 3, 4)
#: Lists' timelines (owners -L) of users 1 and 2: their owners' entries in them
#: are never hidden by their filters; a list may be dropped (deleted).
LISTS = (owners.list_owner(owners.list_id(1, 1)), owners.list_owner(owners.list_id(2, 5)))
OWNERS = (*USERS, *LISTS)
AUTHORS = (101, 102)  # pulled authors
#: The originals' authors, whom filters hide: :func:`original_author`.
WRITERS = (201, 202, 203)


def original_author(original: int) -> int:
    return WRITERS[original % len(WRITERS)]


@dataclass
class Batch:
    bodies: dict[int, bytes]
    mutations: list[Mutation]
    counts: dict[int, tuple[int, int, int]]


@dataclass
class RepostWorkload:
    rnd: random.Random
    clock: int = 1000
    seq: int = 0
    #: Every live entry: entry -> original (a post's is itself).
    live: dict[int, int] = field(default_factory=dict)
    #: Entries ever minted (a deleted one's id is never used again).
    minted: dict[int, int] = field(default_factory=dict)
    #: The pulled authors each owner reads (as the workload last said).
    pulls: dict[int, set[int]] = field(default_factory=dict)
    #: Each pulled author's entries (in no timeline: an author is pushed or pulled).
    by_author: dict[int, list[int]] = field(default_factory=dict)
    listed: set[int] = field(default_factory=set)

    def _id(self, late: bool = False) -> int:
        self.clock += self.rnd.randint(1, 3)
        return self.clock - (self.rnd.randint(5, 30) if late else 0)

    def _new_entry(self, bodies: dict[int, bytes], late: bool = False) -> int:
        """A new post, or a repost of a live post."""
        t = self._id(late)
        while t in self.minted:
            t = self._id(late)
        posts = [o for o, orig in self.live.items() if o == orig and o < t]
        if posts and self.rnd.random() < 0.55:
            o = self.rnd.choice(posts[-12:] if self.rnd.random() < 0.7 else posts)
            bodies[t] = events.repost_json(t, f"r{t % 7}", o)
        else:
            o = t
            bodies[t] = b'{"id":%d,"author":"a%d","text":"t \\" %d","created_at":"c%d"}' % (
                t,
                t % 5,
                t,
                t,
            )
        self.minted[t] = o
        self.live[t] = o
        return t

    def _pairs(self, tweets: tuple[int, ...]) -> tuple[tuple[int, int, int], ...]:
        return tuple(
            (t, self.minted[t], original_author(self.minted[t]))
            for t in tweets
            if self.minted[t] != t
        )

    def _actor(self) -> int:
        """Whose entries a mutation's are: now and then an owner's own (its
        filter does not apply to them), else someone else's."""
        return self.rnd.choice([*USERS, 9, 9, 9])

    def _some(self, k: int) -> tuple[int, ...]:
        pool = sorted(t for t in self.live if t not in self.listed)
        if not pool:
            return ()
        recent = pool[-20:] if self.rnd.random() < 0.7 else pool
        return tuple(sorted(set(self.rnd.sample(recent, min(k, len(recent))))))

    def batch(self) -> Batch:
        rnd = self.rnd
        bodies: dict[int, bytes] = {}
        counts: dict[int, tuple[int, int, int]] = {}
        mutations: list[Mutation] = []
        for _ in range(rnd.randint(1, 4)):
            self.seq += 1
            kind = rnd.random()
            targets = tuple(rnd.sample(OWNERS, rnd.randint(1, len(OWNERS))))
            if kind < 0.35:  # new entries (posts, reposts), now and then a late one
                tweets = tuple(
                    sorted(
                        self._new_entry(bodies, late=rnd.random() < 0.15)
                        for _ in range(rnd.randint(1, 3))
                    )
                )
                mutations.append(
                    Mutation(
                        Op.ADD,
                        targets,
                        tweets,
                        0,
                        self.seq,
                        reposts=self._pairs(tweets),
                        actor=self._actor(),
                    )
                )
            elif kind < 0.45:  # a follow's merge: older entries, maybe with a horizon
                tweets = self._some(rnd.randint(1, 8))
                horizon = rnd.choice([0, 0, *tweets[:2]]) if tweets else 0
                mutations.append(
                    Mutation(
                        Op.ADD,
                        targets,
                        tweets,
                        horizon,
                        self.seq,
                        reposts=self._pairs(tweets),
                        actor=self._actor(),
                    )
                )
            elif kind < 0.57:  # an undo or an unfollow: entries removed (winners or not)
                tweets = self._some(rnd.randint(1, 4))
                seq = 0 if rnd.random() < 0.3 else self.seq
                mutations.append(
                    Mutation(
                        Op.REMOVE, targets, tweets, 0, seq, reposts=self._pairs(tweets), actor=9
                    )
                )
            elif kind < 0.65:  # a delete: the body first, then the entry and its reposts
                if self.live:
                    t = rnd.choice(sorted(self.live))
                    gone = tuple(sorted({t} | {e for e, o in self.live.items() if o == t}))
                    for e in gone:
                        del self.live[e]
                    mutations.append(Mutation(Op.DELETE_BODY, (), gone))
                    mutations.append(
                        Mutation(Op.REMOVE, OWNERS, gone, 0, 0, reposts=self._pairs(gone), actor=9)
                    )
            elif kind < 0.75:  # a refill from the database
                owner = targets[0]
                tweets = self._some(rnd.randint(0, 8))
                if rnd.random() < 0.3 and tweets:  # a tweet deleted since the read
                    newest = max(t for t in self.minted if t not in self.listed)
                    tweets = tuple(sorted({*tweets, newest}))
                horizon = rnd.choice([0, *tweets[:2]]) if tweets else 0
                mutations.append(
                    Mutation(
                        Op.RESET,
                        (owner,),
                        tweets,
                        horizon,
                        self.seq,
                        max(0, self.seq - rnd.randint(0, 3)),
                        tuple(sorted(self.pulls.get(owner, ()))),
                        self._pairs(tweets),
                    )
                )
            elif kind < 0.85:  # a pulled author's list
                author = rnd.choice(AUTHORS)
                mine = self.by_author.setdefault(author, [])
                mine += [self._new_entry(bodies) for _ in range(rnd.randint(0, 2))]
                self.listed.update(mine)
                mine[:] = [t for t in mine if t in self.live]
                tweets = tuple(sorted(mine))
                horizon = rnd.choice([0, 0, *tweets[:2]]) if tweets else 0
                tweets = tuple(t for t in tweets if t >= horizon)
                mutations.append(
                    Mutation(
                        Op.LIST,
                        (author,),
                        tweets,
                        horizon,
                        reposts=self._pairs(tweets),
                        actor=author,
                    )
                )
            elif kind < 0.88:  # an owner's hidden users change (a block, a mute)
                hidden = tuple(sorted(rnd.sample(WRITERS, rnd.randint(0, 2))))
                mutations.append(Mutation(Op.FILTER, (targets[0],), hidden, 0, self.seq))
                if targets[0] in LISTS and rnd.random() < 0.3:  # the list is deleted
                    self.seq += 1
                    mutations.append(Mutation(Op.DROP, (targets[0],), (), 0, self.seq))
            elif kind < 0.96:  # an owner starts or stops reading a pulled author's list
                author = rnd.choice(AUTHORS)
                owner = targets[0]
                mine = tuple(t for t in sorted(self.by_author.get(author, ())) if t in self.live)
                if author in self.pulls.get(owner, set()):
                    self.pulls[owner].discard(author)
                    mutations.append(
                        Mutation(
                            Op.UNPULL,
                            (owner,),
                            mine,
                            0,
                            self.seq,
                            authors=(author,),
                            reposts=self._pairs(mine),
                            actor=author,
                        )
                    )
                else:
                    self.pulls.setdefault(owner, set()).add(author)
                    mutations.append(
                        Mutation(
                            Op.PULL,
                            (owner,),
                            mine,
                            0,
                            self.seq,
                            authors=(author,),
                            reposts=self._pairs(mine),
                            actor=author,
                            quiet=rnd.random() < 0.4,
                        )
                    )
            else:  # likes, reposts and replies counted
                for o in self._some(2):
                    counts[self.minted[o]] = (
                        rnd.randint(0, 2),
                        rnd.randint(0, 1),
                        rnd.randint(0, 1),
                    )
        return Batch(bodies, mutations, counts)
