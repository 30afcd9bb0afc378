"""Reposts and likes for the fanout benchmarks: the engagement a post draws
(per post one repost and five likes of recent posts, written as the web
writes them), a steady load that carries them, and the ceiling of the same
mixed mutations through the store's own script (``bench_fanout --mix`` and
``--viral``).

The web writes a repost as two rows in one transaction: the repost entry
(``TweetPosted(repost_of=o)``, routed by the reposter) and
``Engaged(REPOST, reposter, o)`` (routed by ``o``, counted); a like is
``Engaged(LIKE, user, o)`` alone. Every user engages a tweet at most once
per kind, as the database's unique keys make it.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import random
import time
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fanout.model import events, ids
from fanout.model.author_state import AuthorState
from fanout.model.engagements import Counts, Engagements, count_events
from fanout.model.join import Mutation, join_events
from fanout.store.timelines import TimelineStore
from load_tests import network
from load_tests.fanout_rig import Changelog, SteadyLoad, make_tweets

#: Does this store write counts (``TimelineStore.apply(..., counts=...)``)? Until
#: it does, the job writes none either, and neither does the ceiling.
STORE_WRITES_COUNTS = "counts" in inspect.signature(TimelineStore.apply).parameters

#: A batch of the job's writes: bodies, mutations, counts (tweet -> (likes, reposts, replies)).
Batch = tuple[dict[int, bytes], list[Mutation], dict[int, Counts]]


def followers_of(pairs: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for f, g in pairs:
        out[g].append(f)
    return out


class Reactions:
    """What each post draws: ``reposts`` reposts and ``likes`` likes of recent
    posts (the last ``window`` posts, newer ones likelier: an age drawn as
    ``window * u**2``), each by a follower of the post's author (80%) or
    anyone (20%); and the share ``replies`` of posts that answer a recent
    post, drawn the same way (:meth:`shaped`)."""

    def __init__(
        self,
        followers: Mapping[int, Sequence[int]],
        users: int,
        rnd: random.Random,
        window: int = 5000,
        reposts: int = 1,
        likes: int = 5,
        replies: float = 0.0,
    ) -> None:
        self.followers, self.users, self.rnd = followers, users, rnd
        self.reposts, self.likes, self.replies = reposts, likes, replies
        self.recent: deque[events.TweetPosted] = deque(maxlen=window)
        #: Who engaged each recent post, by kind: forgotten when it leaves the window.
        self.engaged: dict[int, set[tuple[str, int]]] = {}
        self.made = {events.LIKE: 0, events.REPOST: 0, events.REPLY: 0}
        #: The repost entries made (for the memory figures).
        self.repost_ids: set[int] = set()

    def _pick(self, kind: str) -> tuple[int, int] | None:
        """(user, post) for one engagement of ``kind`` not made before."""
        n = len(self.recent)
        for _ in range(8):
            post = self.recent[n - 1 - int(n * self.rnd.random() ** 2)]
            fans = self.followers.get(post.author_id)
            user = (
                self.rnd.choice(fans)
                if fans and self.rnd.random() < 0.8
                else self.rnd.randint(1, self.users)
            )
            done = self.engaged.setdefault(post.tweet_id, set())
            if (kind, user) not in done:
                done.add((kind, user))
                self.made[kind] += 1
                return user, post.tweet_id
        return None

    def shaped(self, post: events.TweetPosted) -> events.TweetPosted:
        """``post`` as written: the share ``replies`` of the time, a reply to a
        recent post by a follower of that post's author (80%) or by the post's
        own author (20%: someone the followers of the answered user may not
        follow, whose reply goes aside in their timelines)."""
        if not self.replies or not self.recent or self.rnd.random() >= self.replies:
            return post
        n = len(self.recent)
        parent = self.recent[n - 1 - int(n * self.rnd.random() ** 2)]
        fans = self.followers.get(parent.author_id)
        user = self.rnd.choice(fans) if fans and self.rnd.random() < 0.8 else post.author_id
        self.made[events.REPLY] += 1
        return dataclasses.replace(
            post,
            author_id=user,
            author=f"user{user}",
            in_reply_to=parent.tweet_id,
            reply_to=parent.author_id,
            reply_to_name=parent.author,
        )

    def after(self, post: events.TweetPosted, gen: ids.IdGenerator) -> list[events.Event]:
        """The events that follow ``post`` (engaging the posts before it)."""
        out: list[events.Event] = []
        if post.in_reply_to:  # counted, as the web writes it
            out.append(events.Engaged(events.REPLY, post.tweet_id, post.in_reply_to))
        if self.recent:
            for _ in range(self.reposts):
                if got := self._pick(events.REPOST):
                    user, original = got
                    repost = events.TweetPosted(gen.next_id(), user, f"user{user}", "", original)
                    self.repost_ids.add(repost.tweet_id)
                    out.append(repost)
                    out.append(events.Engaged(events.REPOST, user, original))
            for _ in range(self.likes):
                if got := self._pick(events.LIKE):
                    out.append(events.Engaged(events.LIKE, *got))
        if len(self.recent) == self.recent.maxlen:
            self.engaged.pop(self.recent[0].tweet_id, None)
        self.recent.append(post)
        return out


def mixed(
    posts: Sequence[events.TweetPosted], reactions: Reactions, gen: ids.IdGenerator
) -> list[events.Event]:
    """``posts``, each followed by what it draws, ids minted in that order (as
    the web mints them: a repost's id is above the posts before it and below
    those after it)."""
    out: list[events.Event] = []
    for drawn in posts:
        post = reactions.shaped(dataclasses.replace(drawn, tweet_id=gen.next_id()))
        out.append(post)
        out += reactions.after(post, gen)
    return out


def distinct_users(users: int, total: int, rnd: random.Random) -> Iterator[int]:
    """``total`` distinct user ids: every one of the graph's ``users`` (in a
    random order, spread evenly through the stream) and the rest accounts
    outside the graph (no followers: their home timelines are their own)."""
    inside = list(range(1, users + 1))
    rnd.shuffle(inside)
    inside = inside[:total]
    outside = itertools.count(users + 10_000_001)
    left = total
    for _ in range(total):
        if inside and rnd.random() < len(inside) / left:
            yield inside.pop()
        else:
            yield next(outside)
        left -= 1


class Viral:
    """Likes and reposts of one tweet at ``likes`` and ``reposts`` per second for
    ``seconds`` from :meth:`begin`, written by the load's thread."""

    def __init__(
        self,
        tweet: events.TweetPosted,
        likes: int,
        reposts: int,
        seconds: float,
        users: int,
        rnd: random.Random,
        gen: ids.IdGenerator,
    ) -> None:
        self.tweet, self.rates, self.seconds, self.gen = tweet, (likes, reposts), seconds, gen
        self.likers = distinct_users(users, int(likes * seconds) + 1, rnd)
        self.reposters = distinct_users(
            users, int(reposts * seconds) + 1, random.Random(rnd.random())
        )
        self.sent = [0, 0]
        self.started = 0.0
        self.ended = 0.0

    def begin(self) -> None:
        self.started = time.monotonic()

    def send_due(self, log: Changelog) -> None:
        elapsed = min(time.monotonic() - self.started, self.seconds)
        original = self.tweet.tweet_id
        likes_due, reposts_due = (int(elapsed * rate) for rate in self.rates)
        while self.sent[0] < likes_due or self.sent[1] < reposts_due:
            # Interleaved in proportion: a like, or a repost when they are further behind.
            if self.sent[1] < reposts_due and (
                self.sent[0] >= likes_due
                or self.sent[1] * self.rates[0] <= self.sent[0] * self.rates[1]
            ):
                user = next(self.reposters)
                log.send(events.TweetPosted(self.gen.next_id(), user, f"user{user}", "", original))
                log.send(events.Engaged(events.REPOST, user, original))
                self.sent[1] += 1
            else:
                log.send(events.Engaged(events.LIKE, next(self.likers), original))
                self.sent[0] += 1
        if elapsed >= self.seconds and not self.ended:
            self.ended = time.time()


class MixedLoad(SteadyLoad):
    """Posts at ``rate`` per second from one thread (one writer, as the relay),
    each followed by what it draws (``reactions``, optional), and a viral
    tweet's likes and reposts on top (``viral``, optional)."""

    def __init__(
        self,
        log: Changelog,
        rate: int,
        authors: network.Popularity | None,
        users: int,
        rnd: random.Random,
        gen: ids.IdGenerator,
        reactions: Reactions | None = None,
        viral: Viral | None = None,
    ) -> None:
        super().__init__(log, rate, authors, users, rnd, gen)
        self.reactions, self.viral = reactions, viral
        #: The posts and their reactions written (not the viral stream's).
        self.written: list[events.Event] = []

    def _run(self) -> None:
        start = time.monotonic()
        if self.viral is not None:
            self.viral.begin()
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            for drawn in make_tweets(due - self.sent, self.authors, self.users, self.rnd, self.gen):
                tweet = drawn if self.reactions is None else self.reactions.shaped(drawn)
                self.log.send(tweet)
                self.written.append(tweet)
                if self.reactions is not None:
                    for event in self.reactions.after(tweet, self.gen):
                        self.log.send(event)
                        self.written.append(event)
            self.sent = max(self.sent, due)
            if self.viral is not None:
                self.viral.send_due(self.log)
            time.sleep(0.005)


def mixed_mutations(
    pairs: Sequence[tuple[int, int]],
    streams: Sequence[Sequence[events.Event]],
    cap: int,
    per_batch: int,
) -> list[tuple[list[Batch], int]]:
    """The job's writes for each of ``streams`` in turn (one state carried
    through them all), in batches of ``per_batch`` records, by the same rules
    without Spark: the join's bodies and mutations, and the counts of the
    tweets whose counts changed in the batch (one write each). For each
    stream, its batches and the deliveries they make."""
    states = {a: AuthorState(followers=set(fs)) for a, fs in followers_of(pairs).items()}
    engaged: dict[int, Engagements] = {}
    seq = itertools.count(1)
    out: list[tuple[list[Batch], int]] = []
    for stream in streams:
        batches: list[Batch] = []
        total = 0
        for start in range(0, len(stream), per_batch):
            by_author: dict[int, list[events.Envelope]] = defaultdict(list)
            by_tweet: dict[int, list[events.Envelope]] = defaultdict(list)
            for event in stream[start : start + per_batch]:
                engagement = isinstance(event, events.Engaged | events.Disengaged)
                (by_tweet if engagement else by_author)[event.join_key].append(
                    events.Envelope(next(seq), event)
                )
            bodies: dict[int, bytes] = {}
            mutations: list[Mutation] = []
            for author, envs in by_author.items():
                result = join_events(author, states.get(author, AuthorState()), envs, cap=cap)
                states[author] = result.state
                bodies.update(result.bodies)
                mutations += result.mutations
            counts: dict[int, Counts] = {}
            for tweet, envs in by_tweet.items():
                counted = count_events(tweet, engaged.get(tweet, Engagements.empty()), envs)
                engaged[tweet] = counted.state
                if counted.changed:
                    counts[tweet] = counted.state.counts
            total += sum(m.deliveries for m in mutations)
            batches.append((bodies, mutations, counts))
        out.append((batches, total))
    return out


def apply(store: TimelineStore, generation: int, batch: Batch) -> None:
    """One batch through the store, its counts too where the store writes them."""
    bodies, mutations, counts = batch
    if STORE_WRITES_COUNTS and counts:
        apply_counted: Any = store.apply
        apply_counted(generation, bodies, mutations, counts=counts)
    else:
        store.apply(generation, bodies, mutations)


def ceilings(
    store: TimelineStore,
    runs: Sequence[tuple[list[Batch], int]],
    pairs: Sequence[tuple[int, int]] = (),
) -> list[float]:
    """Deliveries per second of the store's own script applying each run of
    batches in turn to one spare generation of the same Redis: the job's
    ceiling for each, on timelines grown as the job's were (given the runs
    between, such as a steady phase's, in their place), whose owners follow
    whom ``pairs`` (follower, followee) say, as the job's do (replies to them show)."""
    spare = TimelineStore(store.redis, cap=store.cap, slack=store.slack, shards=store.shards)
    spare.create_generation(99)
    followees: dict[int, list[int]] = defaultdict(list)
    for f, g in pairs:
        followees[f].append(g)
    spare.write_followees(99, followees.items())
    rates = []
    for batches, planned in runs:
        started = time.perf_counter()
        for batch in batches:
            apply(spare, 99, batch)
        rates.append(planned / (time.perf_counter() - started))
    return rates
