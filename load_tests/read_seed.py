"""bench_read's timelines: every user follows 200 pushed authors, and the
second half of the users also 20 pulled authors with full lists.

With ``reposts`` > 0 (``bench_read --reposts 0.33``) that share of the
entries are reposts of recent posts (by anyone) and every post has counts
(``ct:``, as the fanout job writes them); with 0 the seeding is the one
before reposts existed, and this module uses nothing newer (so the same
benchmark runs on the code before them, for the comparison).

With ``list_reposts`` > 0 (``bench_read --hidden N``) that share of the pulled
authors' entries are reposts of recent posts of the timelines' authors, and
:func:`hide` gives readers hidden users (blocks and mutes, docs/decisions.md
D28), a few of them authors of originals the lists repost: that needs the
code with filters.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import random
from collections.abc import Sequence
from typing import Any


def fill(
    store: Any,
    config: Any,
    n_users: int,
    *,
    base: int = 0,
    reposts: float = 0.0,
    made: set[int] | None = None,
    interleave: bool = False,
    list_reposts: float = 0.0,
    reposted: list[tuple[int, int]] | None = None,
) -> tuple[list[int], list[int]]:
    """Fill ``store`` (seeded: every store gets the same network): timelines of
    STARLING_TIMELINE_SIZE entries for users ``base + 1 ..`` following 200 pushed
    authors each, and 20 pulled authors with full lists followed by the second
    half of the users. Returns the readers of one list and the readers of
    merged lists; ``made`` gets the ids of the repost entries.

    ``list_reposts`` adds to the lists' entries that share of reposts of one
    of the last 4,000 posts of the timelines' authors (drawn on their own:
    the rest of the network stays the same); ``reposted`` gets (list's author,
    original's author) of every repost the lists keep of a timeline author's
    post (what :func:`hide` picks hidden authors from).

    The pulled authors' entries are minted after the timelines', one author
    after another: a merged reader sees the newest list only (every other
    source is below its horizon). With ``interleave`` they are minted in the
    same rounds as the timelines' (all the sources overlap in time, and a
    merged read combines them all)."""
    from fanout.model import events, ids
    from fanout.model.author_state import AuthorState
    from fanout.model.join import Mutation, Op, join_events, newest
    from load_tests import network
    from load_tests.harness import mark_applied

    generation = store.ensure_active_generation()
    rnd = random.Random(7)
    draws = random.Random(11)  # the reposts' own draws: the network stays the same
    lister = random.Random(13)  # the lists' reposts' (list_reposts) own draws
    gen = ids.IdGenerator(5 + (base > 0))
    cap, keep = config.timeline_size, config.timeline_size + config.timeline_slack
    users = range(base + 1, base + n_users + 1)
    followers: dict[int, set[int]] = {a: set() for a in users}
    for u in users:
        for a in rnd.sample(users, 200):
            if a != u:
                followers[a].add(u)
    posts: list[int] = []  # every post, oldest first (the originals reposts draw from)
    user_posts: list[int] = []  # the timelines' authors' posts (the lists' reposts draw from)
    author_of: dict[int, int] = {}  # post -> its author (a list's pairs carry the original's)
    reposts_made: dict[int, int] = {}
    done: set[tuple[int, int]] = set()
    made = made if made is not None else set()

    def entry(author: int) -> Any:
        """A post by ``author``, or (a ``reposts`` share) its repost of one of
        the last 4,000 posts."""
        if reposts > 0 and posts and draws.random() < reposts:
            original = posts[-1 - int(draws.random() * min(len(posts), 4000))]
            if (author, original) not in done:  # one repost of a tweet per user
                done.add((author, original))
                reposts_made[original] = reposts_made.get(original, 0) + 1
                ev = events.TweetPosted(gen.next_id(), author, f"user{author}", "", original)
                made.add(ev.tweet_id)
                return ev
        ev = events.TweetPosted(gen.next_id(), author, f"user{author}", network.tweet_text(rnd))
        posts.append(ev.tweet_id)
        author_of[ev.tweet_id] = author
        if author <= base + n_users:
            user_posts.append(ev.tweet_id)
        return ev

    def user_repost(author: int) -> Any:
        """(``list_reposts``) ``author``'s repost of one of the last 4,000 posts of
        the timelines' authors, or None."""
        if not user_posts:
            return None
        original = user_posts[-1 - int(lister.random() * min(len(user_posts), 4000))]
        if (author, original) in done:
            return None
        done.add((author, original))
        reposts_made[original] = reposts_made.get(original, 0) + 1
        ev = events.TweetPosted(gen.next_id(), author, f"user{author}", "", original)
        made.add(ev.tweet_id)
        return ev

    rounds = cap // 200 + 4
    pulled = range(base + n_users + 1, base + n_users + 21)
    listed: dict[int, list[Any]] = {author: [] for author in pulled}  # their entries
    list_bodies: dict[int, bytes] = {}

    def list_entry(author: int) -> None:
        ev = None
        if list_reposts > 0 and lister.random() < list_reposts:
            ev = user_repost(author)
        ev = ev or entry(author)
        list_bodies[ev.tweet_id] = events.tweet_json(ev)
        listed[author].append(ev)

    per_list = keep + 10
    due = per_list * len(pulled)  # the lists' entries, interleaved: one after every few posts
    minted = 0
    for k in range(rounds):
        bodies: dict[int, bytes] = {}
        mutations: list[Mutation] = []
        for j, author in enumerate(users):
            if interleave:  # the lists' entries, round-robin, spread over the rounds' posts
                for _ in range(due * (k * n_users + j + 1) // (rounds * n_users) - minted):
                    list_entry(pulled[minted % len(pulled)])
                    minted += 1
            result = join_events(
                author,
                AuthorState(followers=followers[author]),
                [events.Envelope(1, entry(author))],
                cap=cap,
            )
            bodies |= result.bodies
            mutations += result.mutations
        store.apply(generation, bodies, mutations)
    if not interleave:
        for author in pulled:
            for _ in range(per_list):
                list_entry(author)
    merged_readers = list(users)[n_users // 2 :]
    bodies, mutations = list_bodies, []
    # The code with filters takes a list's reposts as (entry, original, original's author).
    triples = "actor" in {f.name for f in dataclasses.fields(Mutation)}
    for author in pulled:
        tweets = [ev.tweet_id for ev in listed[author]]
        originals = {
            ev.tweet_id: ev.repost_of
            for ev in listed[author]
            if (reposts > 0 or list_reposts > 0) and ev.repost_of
        }
        kept, horizon = newest(tweets, keep)
        if originals:
            shown = [(t, originals[t]) for t in kept if t in originals]
            pairs: Any = tuple((t, o, author_of[o]) if triples else (t, o) for t, o in shown)
            if reposted is not None:
                by = (author_of[o] for _, o in shown)
                reposted += [(author, a) for a in by if a <= base + n_users]
            mutations.append(Mutation(Op.LIST, (author,), kept, horizon, reposts=pairs))
        else:
            mutations.append(Mutation(Op.LIST, (author,), kept, horizon))
        mutations.append(Mutation(Op.PULL, tuple(merged_readers), (), 0, 1, 0, (author,)))
    store.apply(generation, bodies, mutations)
    if reposts > 0:
        write_counts(
            store,
            generation,
            {t: (int(draws.lognormvariate(3, 2)), reposts_made.get(t, 0), 0) for t in posts},
        )
    mark_applied(store, generation)
    single_readers = list(users)[: n_users // 2]
    for user_id in (single_readers[41], merged_readers[41]):
        assert store.read_page(user_id, count=50).status == "ok"
    return single_readers, merged_readers


def write_counts(store: Any, generation: int, counts: dict[int, tuple[int, int, int]]) -> None:
    """Tweets' (likes, reposts, replies) into Redis: through the store where it writes
    counts (``apply(..., counts=...)``), else as the job will (a SET of the
    JSON on ``ct:``, fanout/store/keys.py), so reads find them either way."""
    if "counts" in inspect.signature(store.apply).parameters:
        store.apply(generation, {}, [], counts=counts)
        return
    from fanout.model.engagements import counts_json
    from fanout.store import keys

    pipe = store.redis.pipeline(transaction=False)
    for n, (tweet, counted) in enumerate(counts.items()):
        pipe.set(keys.counts(tweet, store.shards.tag_of(tweet)), counts_json(*counted))
        if n % 2000 == 1999:
            pipe.execute()
    pipe.execute()


def hide(
    store: Any,
    generation: int,
    readers: Sequence[int],
    n_hidden: int,
    reposted: Sequence[tuple[int, int]],
) -> dict[str, Any]:
    """Give each of ``readers`` ``n_hidden`` hidden users (their filters key,
    ``keys.filters``: packed ids, ascending): the fewest authors of originals
    that the pulled lists repost (``reposted``, from :func:`fill`) such that
    every list with such reposts loses at least one, most reposted first, and
    strangers (ids no seeded user has) for the rest. The same set for every
    reader. Returns what the set hides, for the report."""
    from fanout.store import keys
    from fanout.store.ops import pack_ids

    lists_of: dict[int, set[int]] = collections.defaultdict(set)  # author -> lists reposting
    for listed, author in reposted:
        lists_of[author].add(listed)
    times = collections.Counter(author for _, author in reposted)
    left = set().union(*lists_of.values())
    authors: list[int] = []
    while left and len(authors) < n_hidden:  # greedy: the most lists still to cover
        best = max(lists_of, key=lambda a: (len(lists_of[a] & left), times[a], -a))
        authors.append(best)
        left -= lists_of[best]
    strangers = random.Random(17).sample(range(10**9, 2 * 10**9), n_hidden - len(authors))
    packed = pack_ids(sorted(authors + strangers))
    pipe = store.redis.pipeline(transaction=False)
    for n, reader in enumerate(readers):
        pipe.set(keys.filters(generation, reader, store.shards.tag_of(reader)), packed)
        if n % 2000 == 1999:
            pipe.execute()
    pipe.execute()
    gone = [listed for listed, author in reposted if author in set(authors)]
    return {
        "hidden_authors": len(authors),
        "hidden_list_reposts": f"{len(gone):,} of the lists' {len(reposted):,} reposts of "
        f"timeline authors' posts, in {len(set(gone))} lists",
    }
