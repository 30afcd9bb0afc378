"""Pure encoding of timeline writes and of the packed timeline format.

A timeline in Redis is a string: a 32-byte header, then tweet ids as 8-byte
big-endian integers in ascending order (docs/decisions.md D10 has the
measurements behind the format). The header holds four 8-byte big-endian
numbers:

| field | meaning |
| --- | --- |
| horizon | the timeline holds exactly the join's tweets at or above it (0: all of them) |
| fence | the newest ``seq`` that removed entries or left some out below the horizon |
| top | the newest id it ever held, while that entry is gone (0: its newest entry) |
| version | how many writes brought an entry below ``top``: pollers re-read on a change |

A pulled author's list (fanout.model.join) has the same format: its newest
tweets, its horizon, and a version of its own.

Reposts (docs/design.md, *Reposts*): the view keeps, per original, only its
greatest entry (a post is the entry of its own original). A timeline's (or
list's) ids are these *winners* only; cap, trim, short, horizon, ``top`` and
``version`` are all defined on them. Beside it a *pairs* string
(``tr:``/``ar:``, :mod:`fanout.store.keys`) keeps what the winners alone do not
tell, every raw entry in scope (at or above the horizon) being either a
winner or a pair:

| record | meaning |
| --- | --- |
| (original, entry), entry != original | a repost in scope, winner or not |
| (original, original) | a post in scope that is not its original's winner |

16 bytes each (original, then entry, 8 bytes big-endian each), sorted
ascending (by original, then entry). A pulled author's list's pairs
(``ar:``) carry a third number, ``by``: the original's author, which the
read checks against the reader's hidden users (docs/decisions.md D28); 24
bytes each. No reposts in scope: no pairs key, and
a timeline costs what it did before reposts. An original's winner is the
last entry of its run of pairs if it has one, else the post itself.
:func:`pack_view` computes both strings from raw entries, :func:`raw_entries`
goes back.

An idle user's timeline is dropped: the string ``idle`` (:data:`IDLE`,
shorter than any header) takes its place, and no write goes to it until the
user is back and it is regenerated.

This module turns a batch's mutations into the arguments of the apply
script (``fanout/store/lua/apply.lua``) and packs and unpacks timelines; it does
no I/O.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from fanout.model import owners
from fanout.model.engagements import Counts, counts_json
from fanout.model.join import Mutation, Op, aside, winners
from fanout.store.keys import Shards

HEADER = struct.Struct(">4Q")
#: What a dropped timeline leaves (fanout/store/lua/packed.lua spells it too).
IDLE = b"idle"


class OpCode:
    """Operation codes of the apply script, and their arguments. ``ids``: packed
    entry ids (8 bytes each, ascending); ``pairs``: the reposts among them, packed
    as 24-byte records (entry, original, by; 8 bytes big-endian each), by entry
    (:func:`pack_pairs`; empty when none are reposts); ``answers``: the entries
    among them whose original answers a user, as 16-byte records (entry, user),
    by entry (docs/decisions.md D29); a user plus :data:`OWN`: the entry is the
    timeline's user's own (a list owner's, D31), conditional but never screened."""

    ADD = 1  # owner, horizon, seq, ids, pairs, answers
    REMOVE = 2  # owner, seq, ids, pairs
    PUT_BODY = 3  # tweet id, body
    DELETE_BODIES = 4  # packed ids
    # owner, horizon, seq, as_of, pulled, ids, pairs, answers (kept until the watermark: seq)
    RESET = 5
    RELEASE_RESETS = 6  # watermark, packed ids of the tweets deleted (left out)
    LIST = 7  # author, horizon, ids, pairs, answers (a pulled author's list)
    PULL = 8  # owner, seq, author, quiet (1: without its reposts), ids, pairs (removed)
    UNPULL = 9  # owner, horizon, seq, author, the list's version, ids, pairs, answers
    COUNTS = 10  # tweet id, counts JSON text ('': none, the key is deleted)
    FILTER = 11  # owner, seq, packed user ids (the owner's hidden users, ascending)
    FOLLOWED = 12  # owner, seq, user (replies to the user kept aside show)
    UNFOLLOWED = 13  # owner, seq, user (replies to the user that showed go aside)
    MENTION = 14  # owner (-u), seq, ids, author (left out if u's filter hides the author)
    DROP = 15  # owner, seq: every key of the owner goes (kept like a reset until the watermark)


#: Added to the user of an ``answers`` record (user ids are below 2**32, so the
#: sum is exact in Lua): the entry's actor is the timeline's user without being
#: its owner (a list's owner o, in list -L): the filter never leaves it out (o's
#: own entries are never hidden), but a reply still shows only if the user it
#: answers is a member (followed), else it goes aside. A home timeline's own
#: entries carry no record at all: they show unconditionally.
OWN = 1 << 52


class TimelineOp(NamedTuple):
    """One timeline's share of a batch (a tuple: a celebrity's post makes a
    million of them, and a tuple is made several times faster than a frozen
    dataclass)."""

    op: Op
    owner: int
    tweets: tuple[int, ...]  # ascending
    horizon: int = 0
    seq: int = 0
    as_of: int = 0
    authors: tuple[int, ...] = ()  # see Mutation.authors
    #: (entry, original, by) of the entries of ``tweets`` that are reposts, by
    #: entry: ``by``, the user this owner's filter checks the entry against (the
    #: original's author; 0 for the owner's own reposts).
    reposts: tuple[tuple[int, int, int], ...] = ()
    quiet: bool = False  # see Mutation.quiet
    #: (entry, user) of the entries of ``tweets`` whose original answers a user
    #: other than its author, as this owner sees them: none of its own
    #: entries, none answering the owner (those always show; D29); a list's
    #: owner's own entries with the user plus :data:`OWN`.
    answers: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Header:
    horizon: int = 0
    fence: int = 0
    top: int = 0
    version: int = 0


def group_by_timeline(
    mutations: Iterable[Mutation], keep: int | None = None
) -> tuple[list[TimelineOp], list[int]]:
    """Regroup a batch's mutations per timeline, keeping each timeline's order.

    Consecutive adds to one timeline merge (their ids united, the higher
    horizon kept), and so do consecutive removes (the higher seq kept); an
    add and a remove never swap, and resets stay as they are. A follower
    receiving five tweets in a micro-batch then costs one write, not five.
    With ``keep`` (``cap + slack``), a merged add keeps only its newest
    ``keep`` ids, the oldest of them as its horizon: a user who follows
    thousands of accounts in one batch gets one bounded write. Pulls and
    unpulls stay as they are too.
    Returns the timeline ops and the tweet ids whose bodies go (which the
    store deletes before any timeline op, so a deleted tweet disappears from
    every timeline at once). The pulled authors' lists (``Op.LIST``, the last
    one of each author) come first: a follower's read finds a list before
    its timeline says to read it. The mentions timelines' ops (owners -u)
    come last, grouped apart: no other op touches those timelines.
    """
    deleted: list[int] = []
    lists: dict[int, TimelineOp] = {}
    timeline_mutations: list[Mutation] = []
    #: The mentions timelines' (owners -u): no other op touches them, so they are
    #: grouped apart and a batch's posts keep the vectorised path.
    mentions: list[Mutation] = []
    plain_adds = True
    #: An entry's original, the original's author and the entry's actor are
    #: facts of the entry: merged ops take their pairs from here.
    originals: Facts = {}
    #: entry -> (the user its original answers, the entry's actor)
    answered: dict[int, tuple[int, int]] = {}
    for m in mutations:
        op = m.op
        if op is Op.DELETE_BODY:
            deleted.extend(m.tweets)
        elif op is Op.LIST:
            owner = m.owners[0]
            lists[owner] = TimelineOp(
                Op.LIST, owner, m.tweets, m.horizon, reposts=m.reposts, answers=m.answers
            )
        elif m.owners and owners.is_mentions(m.owners[0]):
            mentions.append(m)
        else:
            timeline_mutations.append(m)
            plain_adds = plain_adds and op is Op.ADD and not m.as_of and not m.authors
            if m.reposts and op is not Op.RESET:  # a reset's ``by`` are its owner's
                actor = m.actor
                for e, o, by in m.reposts:
                    originals[e] = (o, by, actor)
            if m.answers and op is not Op.RESET:
                for e, u in m.answers:
                    answered[e] = (u, m.actor)
    out = list(lists.values())
    if plain_adds:
        grouped = _group_adds(timeline_mutations, keep, originals)
    else:
        grouped = _group_any(timeline_mutations, keep, originals)
    if answered:
        grouped = [_with_answers(op, answered) for op in grouped]
    if mentions:
        grouped += _group_any(mentions, keep, {})
    return out + grouped, deleted


def _with_answers(op: TimelineOp, answered: dict[int, tuple[int, int]]) -> TimelineOp:
    """``op`` with the answers of its entries as its owner sees them (a reset
    carries its own; filters and follows have no entries)."""
    if op.op is Op.RESET or not op.tweets or op.op is Op.FILTER:
        return op
    owner = op.owner
    user = owners.user_of(owner) if owners.is_list(owner) else 0  # a list's owner o
    found = []
    for t in op.tweets:
        fact = answered.get(t)
        if fact is not None and owner != fact[0] and owner != fact[1]:
            found.append((t, fact[0] + OWN if fact[1] == user else fact[0]))
    return op._replace(answers=tuple(found)) if found else op


def _own(owner: int, actor: int) -> bool:
    """Whether ``actor``'s entries are ``owner``'s own (never hidden by its
    filter): its home timeline's, or a list of its (``owners.user_of``)."""
    return owner == actor or (owners.is_list(owner) and owners.user_of(owner) == actor)


#: entry -> (original, original's author, actor) of the reposts a batch names.
Facts = dict[int, tuple[int, int, int]]
Triples = tuple[tuple[int, int, int], ...]


def _pairs_of(tweets: tuple[int, ...], originals: Facts, owner: int) -> Triples:
    """(entry, original, by) of the reposts among ``tweets`` (ascending) in
    ``owner``'s timeline, by entry."""
    if not originals:
        return ()
    out = []
    for t in tweets:
        fact = originals.get(t)
        if fact is not None:
            out.append((t, fact[0], 0 if _own(owner, fact[2]) else fact[1]))
    return tuple(out)


def _owned(pairs: Triples) -> Triples:
    """``pairs`` in their actor's own timeline (or list: :func:`_own`): checked
    against no one."""
    return tuple((e, o, 0) for e, o, _ in pairs)


def _group_any(mutations: list[Mutation], keep: int | None, originals: Facts) -> list[TimelineOp]:
    """:func:`group_by_timeline` of timeline mutations of any kind, in Python."""
    # An owner reached by one mutation only (every follower of an author who
    # posted once) points at that mutation: nothing is copied per owner.
    per_owner: dict[int, Mutation | list[list[Any]]] = {}
    get = per_owner.get
    for m in mutations:
        op = m.op
        # This loop runs once per delivery: the mutation's fields are read once.
        merges, horizon, seq, tweets = op in _MERGED, m.horizon, m.seq, m.tweets
        for owner in m.owners:
            ops = get(owner)
            if ops is None:
                per_owner[owner] = m
                continue
            if isinstance(ops, Mutation):
                ops = per_owner[owner] = [_entry(ops)]
            last = ops[-1]
            if merges and last[0] is op:
                if horizon > last[1]:
                    last[1] = horizon
                if seq > last[2]:
                    last[2] = seq
                last[4].update(tweets)
            else:
                ops.append(_entry(m))
    # per mutation: its trimmed ids, horizon and pairs
    single: dict[int, tuple[tuple[int, ...], int, Triples]] = {}
    out: list[TimelineOp] = []
    for owner, ops in per_owner.items():
        if isinstance(ops, Mutation):
            m = ops
            trimmed = single.get(id(m))
            if trimmed is None:
                trimmed = single[id(m)] = _own_ids(m, keep, originals)
            pairs = _owned(trimmed[2]) if trimmed[2] and _own(owner, m.actor) else trimmed[2]
            out.append(
                TimelineOp(
                    m.op,
                    owner,
                    trimmed[0],
                    trimmed[1],
                    m.seq,
                    m.as_of,
                    m.authors,
                    pairs,
                    m.quiet,
                    m.answers if m.op is Op.RESET else (),
                )
            )
            continue
        for op, horizon, seq, as_of, ids, authors, m in ops:
            tweets, horizon = _trim(op, tuple(sorted(ids)), horizon, keep)
            if op is Op.RESET:  # the owner's already
                pairs = m.reposts
            elif op is Op.FILTER:  # its ids are users
                pairs = ()
            else:
                pairs = _pairs_of(tweets, originals, owner)
            answers = m.answers if op is Op.RESET else ()
            out.append(
                TimelineOp(op, owner, tweets, horizon, seq, as_of, authors, pairs, m.quiet, answers)
            )
    return out


def _group_adds(adds: list[Mutation], keep: int | None, originals: Facts) -> list[TimelineOp]:
    """:func:`group_by_timeline` of plain adds (posts, and the merges of
    follows: the common case), vectorised. Every add to a timeline merges
    into one, so the deliveries of owners reached more than once are sorted
    by (owner, tweet) in NumPy, and Python touches each timeline once instead
    of each (owner, mutation) pair; an owner reached once shares its
    mutation's ids, as in :func:`_group_any`, whose result this is, in the
    same order (owners as first reached). One executor's share of a
    micro-batch of 20,000 posts to 10,000 users (~400,000 deliveries;
    ``python -m load_tests.bench_grouping [--authors uniform]``): 0.20 s ->
    0.10 s with uniform authors, 0.12 s -> 0.07 s with Zipf authors."""
    count = len(adds)
    n_owners = np.fromiter((len(m.owners) for m in adds), np.int64, count)
    owners = np.fromiter(
        itertools.chain.from_iterable(m.owners for m in adds), np.int64, int(n_owners.sum())
    )
    if not len(owners):
        return []
    entry_mutation = np.repeat(np.arange(count), n_owners)  # one entry per (owner, mutation)
    by_owner = np.argsort(owners, kind="stable")
    sorted_owners = owners[by_owner]
    starts = np.flatnonzero(_run_starts(sorted_owners))
    reached = np.diff(np.r_[starts, len(owners)])  # entries per owner
    unique_owners = sorted_owners[starts]
    first_entry = by_owner[starts]  # the stable sort keeps each owner's first entry first
    horizons = np.fromiter((m.horizon for m in adds), np.int64, count)[entry_mutation]
    seqs = np.fromiter((m.seq for m in adds), np.int64, count)[entry_mutation]
    horizon = np.maximum.reduceat(horizons[by_owner], starts).tolist()
    seq = np.maximum.reduceat(seqs[by_owner], starts).tolist()
    # The deliveries of owners reached more than once: (owner, tweet), sorted, distinct.
    merged = np.empty(len(owners), bool)
    merged[by_owner] = np.repeat(reached > 1, reached)
    entries = np.flatnonzero(merged)
    n_tweets = np.fromiter((len(m.tweets) for m in adds), np.int64, count)
    tweets = np.fromiter(
        itertools.chain.from_iterable(m.tweets for m in adds), np.int64, int(n_tweets.sum())
    )
    tweet_start = np.cumsum(n_tweets) - n_tweets
    per_entry = n_tweets[entry_mutation[entries]]
    delivery_owner = np.repeat(owners[entries], per_entry)
    entry_start = np.cumsum(per_entry) - per_entry
    offset = np.arange(int(per_entry.sum())) - np.repeat(entry_start, per_entry)
    delivery_tweet = tweets[np.repeat(tweet_start[entry_mutation[entries]], per_entry) + offset]
    order = np.lexsort((delivery_tweet, delivery_owner))
    delivery_owner, delivery_tweet = delivery_owner[order], delivery_tweet[order]
    distinct = _run_starts(delivery_owner) | _run_starts(delivery_tweet)
    delivery_owner, ids = delivery_owner[distinct], delivery_tweet[distinct].tolist()
    # Each timeline's slice of them (empty for an owner reached once, or by adds without ids).
    begin = np.searchsorted(delivery_owner, unique_owners, "left").tolist()
    end = np.searchsorted(delivery_owner, unique_owners, "right").tolist()
    owner_list, reached_list = unique_owners.tolist(), reached.tolist()
    first_mutation = entry_mutation[first_entry].tolist()
    # per mutation: its trimmed ids, horizon and pairs
    single: dict[int, tuple[tuple[int, ...], int, Triples]] = {}
    out: list[TimelineOp] = []
    for k in np.argsort(first_entry, kind="stable").tolist():
        owner = owner_list[k]
        if reached_list[k] == 1:
            i = first_mutation[k]
            trimmed = single.get(i)
            if trimmed is None:
                trimmed = single[i] = _own_ids(adds[i], keep, originals)
            pairs = trimmed[2]
            if pairs and _own(owner, adds[i].actor):
                pairs = _owned(pairs)
            out.append(TimelineOp(Op.ADD, owner, trimmed[0], trimmed[1], seq[k], reposts=pairs))
            continue
        tweets_of, h = _trim(Op.ADD, tuple(ids[begin[k] : end[k]]), horizon[k], keep)
        pairs = _pairs_of(tweets_of, originals, owner)
        out.append(TimelineOp(Op.ADD, owner, tweets_of, h, seq[k], reposts=pairs))
    return out


def _run_starts(values: np.ndarray) -> np.ndarray:
    """Where each run of equal values starts in ``values``."""
    starts = np.ones(len(values), bool)
    starts[1:] = values[1:] != values[:-1]
    return starts


#: Consecutive ops of these kinds to one timeline merge into one.
_MERGED = (Op.ADD, Op.REMOVE)


def _entry(m: Mutation) -> list[Any]:
    return [m.op, m.horizon, m.seq, m.as_of, set(m.tweets), m.authors, m]


def _own_ids(
    m: Mutation, keep: int | None, originals: Facts
) -> tuple[tuple[int, ...], int, Triples]:
    """The ids (and horizon, and pairs) an owner reached by ``m`` alone
    receives: its ids sorted and distinct, trimmed to ``keep``."""
    tweets, horizon = _trim(m.op, tuple(sorted(set(m.tweets))), m.horizon, keep)
    if not m.reposts:
        return tweets, horizon, ()
    if (tweets and tweets[0] <= m.reposts[0][0] and len(tweets) == len(m.tweets)) or not m.actor:
        return tweets, horizon, m.reposts  # nothing cut (or a reset's): the mutation's own pairs
    return tweets, horizon, _pairs_of(tweets, originals, 0)


def _trim(
    op: Op, tweets: tuple[int, ...], horizon: int, keep: int | None
) -> tuple[tuple[int, ...], int]:
    """An add's newest ``keep`` ids (ascending) and its horizon."""
    if op is Op.ADD and keep is not None and len(tweets) > keep:
        tweets = tweets[-keep:]
        horizon = max(horizon, tweets[0])
    return tweets, horizon


class ShardedOps(NamedTuple):
    """A batch's writes per shard tag, in the order they are applied."""

    #: tag -> (bodies, deleted tweet ids): by the tweet's shard.
    bodies: dict[str, tuple[dict[int, bytes], list[int]]]
    #: tag -> pulled authors' lists: by the author's shard.
    lists: dict[str, list[TimelineOp]]
    #: tag -> the other timeline ops: by the owner's shard.
    timelines: dict[str, list[TimelineOp]]
    #: The authors whose lists unpulls need the version of.
    unpulled: list[int]
    #: tag -> originals' counts (likes, reposts, replies): by the tweet's shard, like bodies.
    counts: dict[str, dict[int, Counts]]


def split_by_shard(
    bodies: Mapping[int, bytes],
    ops: Sequence[TimelineOp],
    deleted: Sequence[int],
    shards: Shards,
    counts: Mapping[int, Counts] | None = None,
) -> ShardedOps:
    """Cut :func:`group_by_timeline`'s output by shard (fanout.store.keys.Shards), each
    op keeping its order within its shard."""
    out = ShardedOps({}, {}, {}, [], {})
    tag = shards.tag_of
    for tweet in deleted:
        out.bodies.setdefault(tag(tweet), ({}, []))[1].append(tweet)
    for tweet, body in bodies.items():
        out.bodies.setdefault(tag(tweet), ({}, []))[0][tweet] = body
    for tweet, counted in (counts or {}).items():
        out.counts.setdefault(tag(tweet), {})[tweet] = counted
    for op in ops:
        if op.op is Op.LIST:
            out.lists.setdefault(tag(op.owner), []).append(op)
            continue
        out.timelines.setdefault(tag(op.owner), []).append(op)
        if op.op is Op.UNPULL:
            out.unpulled.append(op.authors[0])
    return out


def pack_ids(ids: Sequence[int]) -> bytes:
    return struct.pack(f">{len(ids)}Q", *ids)


def pack_pairs(records: Sequence[tuple[int, ...]]) -> bytes:
    """Records of ids, 8 bytes big-endian each: the apply script's (entry,
    original, by) arguments (24 bytes a record), the timelines' pairs strings
    ((original, entry), sorted: 16) and the lists' ((original, entry, by): 24)."""
    flat = list(itertools.chain.from_iterable(records))
    return struct.pack(f">{len(flat)}Q", *flat)


def by_entry(records: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """(user answered, entry) records in entry order: how a timeline's replies
    aside and shown (``ta:``, ``tc:``, docs/decisions.md D29) are kept."""
    return sorted(records, key=lambda r: r[1])


def unpack_pairs(packed: bytes) -> list[tuple[int, int]]:
    """A timeline's pairs string: (original, entry) records."""
    flat = struct.unpack(f">{len(packed) // 8}Q", packed)
    return list(zip(flat[::2], flat[1::2], strict=True))


def unpack_triples(packed: bytes) -> list[tuple[int, int, int]]:
    """Records of three ids (a list's pairs, the apply script's arguments)."""
    flat = struct.unpack(f">{len(packed) // 8}Q", packed)
    return list(zip(flat[::3], flat[1::3], flat[2::3], strict=True))


#: The counts of an original no one liked, reposted or answered (the key is absent).
NO_COUNTS = b'{"likes":0,"reposts":0,"replies":0}'


def view_of(raw: Mapping[int, int]) -> tuple[list[int], list[tuple[int, int]]]:
    """The winners (ascending) and the pairs ((original, entry), sorted) of raw
    entries (entry -> original; a post's original is itself)."""
    shown = winners(raw, raw)
    return shown, aside(shown, raw)


def raw_entries(ids: Sequence[int], pairs: Sequence[tuple[int, ...]]) -> dict[int, int]:
    """Back from winners and pairs ((original, entry), or a list's (original,
    entry, by)) to the raw entries (entry -> original)."""
    raw = {r[1]: r[0] for r in pairs}
    for w in ids:
        raw.setdefault(w, w)
    return raw


def pack_view(
    horizon: int,
    raw: Mapping[int, int],
    header: Header | None = None,
    by: Mapping[int, int] | None = None,
) -> tuple[bytes, bytes]:
    """The packed timeline (or list) and its packed pairs (b'': none, no key)
    holding the raw entries ``raw`` (entry -> original) at or above
    ``horizon``, for rebuilds and tests. ``by`` (entry -> the original's
    author) makes them a list's pairs, (original, entry, by)."""
    ids, pairs = view_of({e: o for e, o in raw.items() if e >= horizon})
    if by is None:
        return pack_timeline(horizon, ids, header), pack_pairs(pairs)
    triples = [(o, e, by.get(e, 0) if e != o else 0) for o, e in pairs]
    return pack_timeline(horizon, ids, header), pack_pairs(triples)


def unpack_ids(packed: bytes) -> list[int]:
    return list(struct.unpack(f">{len(packed) // 8}Q", packed))


#: The work of one timeline op beyond its ids, counted in ids: an op may rewrite
#: its whole timeline (a trim, a merge), so a call of ``chunk`` units holds at
#: most ``chunk / OP_COST`` ops whatever their size. Measured (load_tests/
#: bench_heavy.py): about 48 us per rewrite of an 864-entry timeline.
OP_COST = 8
#: Body bytes counted as one unit: a body is a SET of its bytes.
BODY_BYTES = 64


def encode_ops(
    bodies: Mapping[int, bytes],
    ops: Sequence[TimelineOp],
    deleted: Sequence[int],
    chunk: int,
    versions: Mapping[int, int] | None = None,
    counts: Mapping[int, Counts] | None = None,
) -> list[list[Any]]:
    """The apply script's arguments, cut into calls of about ``chunk`` units of
    work each (an id, :data:`BODY_BYTES` of a body, :data:`OP_COST` per op), so
    one call blocks Redis for milliseconds, not tens of them. Bodies of deleted
    tweets go first, then new bodies and counts, then timeline ops.
    ``versions``: the version of each unpulled author's list (0 where
    missing). ``counts``: originals' (likes, reposts, replies), written as
    absolute values (all 0: the key is deleted)."""
    chunks: list[list[Any]] = []
    current: list[Any] = []
    weight = 0
    if deleted:
        current += [OpCode.DELETE_BODIES, pack_ids(sorted(set(deleted)))]
        weight += len(set(deleted))
    for tweet_id, body in bodies.items():
        current += [OpCode.PUT_BODY, tweet_id, body]
        weight += 1 + len(body) // BODY_BYTES
        if weight >= chunk:
            chunks.append(current)
            current, weight = [], 0
    for tweet_id, counted in (counts or {}).items():
        text = counts_json(*counted) if any(counted) else ""
        current += [OpCode.COUNTS, tweet_id, text]
        weight += 1
        if weight >= chunk:
            chunks.append(current)
            current, weight = [], 0
    packed: dict[tuple[int, ...], bytes] = {}  # a post's id, packed once for all followers
    packed_pairs: dict[Triples, bytes] = {(): b""}
    packed_answers: dict[tuple[tuple[int, int], ...], bytes] = {(): b""}
    for op in ops:
        if op.op is Op.DROP:
            current += [OpCode.DROP, op.owner, op.seq]
            weight += OP_COST
            if weight >= chunk:
                chunks.append(current)
                current, weight = [], 0
            continue
        if op.op is Op.FOLLOWED or op.op is Op.UNFOLLOWED:
            code = OpCode.FOLLOWED if op.op is Op.FOLLOWED else OpCode.UNFOLLOWED
            current += [code, op.owner, op.seq, op.authors[0]]
            weight += OP_COST
            if weight >= chunk:
                chunks.append(current)
                current, weight = [], 0
            continue
        blob = packed.get(op.tweets)
        if blob is None:
            blob = packed[op.tweets] = pack_ids(op.tweets)
        pairs = packed_pairs.get(op.reposts)
        if pairs is None:
            pairs = packed_pairs[op.reposts] = pack_pairs(op.reposts)
        answers = packed_answers.get(op.answers)
        if answers is None:
            answers = packed_answers[op.answers] = pack_pairs(sorted(op.answers))
        if op.op is Op.ADD:
            current += [OpCode.ADD, op.owner, op.horizon, op.seq, blob, pairs, answers]
        elif op.op is Op.REMOVE:
            current += [OpCode.REMOVE, op.owner, op.seq, blob, pairs]
        elif op.op is Op.LIST:
            current += [OpCode.LIST, op.owner, op.horizon, blob, pairs, answers]
        elif op.op is Op.PULL:
            quiet = 1 if op.quiet else 0
            current += [OpCode.PULL, op.owner, op.seq, op.authors[0], quiet, blob, pairs]
        elif op.op is Op.UNPULL:
            author = op.authors[0]
            version = (versions or {}).get(author, 0)
            current += [
                OpCode.UNPULL,
                op.owner,
                op.horizon,
                op.seq,
                author,
                version,
                blob,
                pairs,
                answers,
            ]
        elif op.op is Op.FILTER:
            current += [OpCode.FILTER, op.owner, op.seq, blob]
        elif op.op is Op.MENTION:
            current += [OpCode.MENTION, op.owner, op.seq, blob, op.authors[0]]
        else:
            pulled = pack_ids(op.authors)
            current += [
                OpCode.RESET,
                op.owner,
                op.horizon,
                op.seq,
                op.as_of,
                pulled,
                blob,
                pairs,
                answers,
            ]
        weight += OP_COST + len(op.tweets) + len(op.reposts) + len(op.answers)
        if weight >= chunk:
            chunks.append(current)
            current, weight = [], 0
    if current:
        chunks.append(current)
    return chunks


def pack_timeline(
    horizon: int, ids_ascending: Sequence[int], header: Header | None = None
) -> bytes:
    """The packed form of a timeline (what the scripts write), for rebuilds and tests."""
    h = header or Header()
    return HEADER.pack(horizon, h.fence, h.top, h.version) + pack_ids(ids_ascending)


def unpack_timeline(packed: bytes) -> tuple[int, list[int]]:
    """(horizon, ids ascending) of a packed timeline."""
    return read_header(packed).horizon, timeline_ids(packed)


def read_header(packed: bytes) -> Header:
    return Header(*HEADER.unpack_from(packed))


def timeline_ids(packed: bytes) -> list[int]:
    """The ids of a packed timeline, ascending."""
    return unpack_ids(packed[HEADER.size :])


def entries(packed: bytes) -> int:
    """How many ids a packed timeline holds."""
    return entries_in(len(packed))


def entries_in(size: int) -> int:
    """How many ids a packed timeline of ``size`` bytes holds."""
    return (size - HEADER.size) // 8


def visible(ids_ascending: Sequence[int], cap: int) -> list[int]:
    """What readers see of a timeline: its newest ``cap`` ids, newest first."""
    return list(reversed(ids_ascending[-cap:])) if cap else []
