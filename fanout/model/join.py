"""The join rules: tweets ⋈ follows, maintained incrementally per author.

This is the pure core of the fanout job (no Spark, Kafka or Redis). The job
groups changelog events by their join key (a tweet's author, a follow's
followee, a timeline's owner) and calls :func:`join_events` with that key's
state; the returned mutations say how home timelines change. The product
rule:

| event | effect |
| --- | --- |
| ``a`` posts ``t`` | add ``t`` to the timeline of every follower of ``a`` and to ``a``'s own |
| ``a`` reposts ``o`` as ``r`` | the same for the entry ``r``, which names its original ``o`` |
| ``t`` posted again | its body only is rewritten (a renamed author's name) |
| ``t`` deleted | remove ``t`` from those timelines (its body goes first: see the store) |
| ``f`` follows ``a`` | merge ``a``'s newest tweets into ``f``'s timeline |
| ``f`` unfollows ``a`` | remove ``a``'s newest tweets from ``f``'s timeline |
| ``f`` mutes / unmutes ``a`` | as an unfollow / a follow (a follow's ``muted`` flag) |
| ``f`` turns ``a``'s reposts off / on | remove / merge ``a``'s newest reposts (a flag) |
| ``f``'s hidden users change | the store applies them to ``f``'s reposts (``Op.FILTER``) |
| reset of ``f`` | merge the database's newest entries of ``f``'s timeline (a refill) |

An author with at least the pull threshold's followers is *pulled*
(docs/decisions.md D18): its tweets go to its own timeline and to its list,
which its followers' reads merge in, instead of to every follower; a follow
or an unfollow of it changes the follower's set of pulled authors; crossing
the threshold moves every follower between the two layouts.

``Followed(u, u)`` (the self edge, written when a user registers) creates
``u``'s timeline and merges ``u``'s own tweets into it; ``u`` is not its own
follower and ``Unfollowed(u, u)`` changes nothing.

**Entries.** A timeline holds entries: posts, and reposts (``Mutation.reposts``
names each repost's original). Per original only its newest entry is in the
view; the store keeps the others aside (fanout/store/ops.py), so that undoing
a repost shows the next one. Mutations here are per author and know nothing
of other authors' entries of the same original.

**State** per author: the set of followers and *every* live entry id of the
author, with each repost's original. An author's newest entries showing
``K = cap + slack`` originals (:func:`newest_entries`) are then always known,
whatever was deleted, which is what makes follows and unfollows exact.

**Timelines** keep between ``cap`` and ``K`` entries (readers see the newest
``cap``) and a *horizon*: when a timeline outgrows ``K`` it is trimmed and
its horizon becomes its oldest kept entry; a merge of an author with more
than ``K`` tweets raises it to the oldest merged one. Invariant: a timeline
holds exactly the join's tweets at or above its horizon. Merges never leave
fewer than ``cap`` of them; removals can (an unfollow, deletes). Such a
timeline is *short*: the store notices it and the system of record refills
it (a :class:`~fanout.model.events.TimelineReset` computed by the database,
merged through this job), so once the job has caught up every timeline's
newest ``cap`` entries equal the join's.

Why an unfollow removes ``a``'s newest entries showing ``K`` originals: a
timeline shows at most ``K`` originals and holds every entry of the join
above its horizon, so the entries of ``a`` it holds are a newest run of
``a``'s with at most ``K`` originals.

Events of one key are applied in ``seq`` (commit) order, whatever the order
they arrived in: within a micro-batch the result does not depend on how the
topics interleave. Mutations carry their ``seq``: a timeline remembers the
newest that removed entries from it, had entries fall below its horizon,
or merged an author's newest tweets without the older ones (its *fence*).
A reset is applied once every event before it is (the authors' states then
route later deletes to this follower), and only if its read saw every seq
up to the fence (``as_of``): otherwise it may still hold an unfollowed
author, or miss what fell below the horizon, and is redone.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from fanout.model import events, owners
from fanout.model.author_state import AuthorState

#: Entries kept beyond the cap, in timelines and in merges (the default of STARLING_TIMELINE_SLACK).
SLACK = 64


class Op(IntEnum):
    """Timeline mutations."""

    ADD = 1  # merge tweets into owners' timelines (creating missing timelines)
    REMOVE = 2  # remove tweets from owners' timelines
    RESET = 3  # merge a refill from the system of record (fenced by seq)
    DELETE_BODY = 4  # drop tweet bodies from the tweet cache (before anything else)
    LIST = 5  # set a pulled author's list to its newest tweets (before any timeline op)
    PULL = 6  # the owners read ``authors[0]`` from its list: its tweets leave their timelines
    UNPULL = 7  # the owners stop reading ``authors[0]``'s list: its tweets are merged in
    FILTER = 8  # the owner's hidden users are ``tweets`` (user ids): the store applies them
    FOLLOWED = 9  # the owners now follow ``authors[0]``: replies to it show (D29)
    UNFOLLOWED = 10  # the owners no longer follow ``authors[0]``: replies to it go aside
    #: the post ``tweets[0]`` by ``authors[0]`` names or answers each owner -u: it goes
    #: into u's mentions timeline unless u's filter hides the author (D30)
    MENTION = 11
    #: the owner (a deleted list) is gone: the store deletes its keys once the
    #: watermark reaches ``seq`` (held like a reset)
    DROP = 12


#: A pulled author goes back to push below this share of the threshold (in
#: tenths): an author hovering at the threshold does not flip at every follow.
PUSH_BACK_TENTHS = 9


@dataclass(frozen=True, slots=True)
class Mutation:
    op: Op
    owners: tuple[int, ...] = ()
    tweets: tuple[int, ...] = ()  # ascending
    #: ADD / RESET: the merged list leaves out older tweets below this (0: it is whole).
    horizon: int = 0
    #: The seq of the event it comes from (0 for a tweet's removal: a delete).
    seq: int = 0
    #: RESET: every seq up to this one was visible to the database's read.
    as_of: int = 0
    #: PULL / UNPULL: the pulled author. RESET: the authors the database's read
    #: left out (those the owner read from their lists then).
    authors: tuple[int, ...] = ()
    #: (entry, original, by) of the entries of ``tweets`` that are reposts, by
    #: entry: ``by`` is the original's author, whom an owner's filter checks
    #: (docs/decisions.md D28), except for the ``actor``'s own timeline.
    reposts: tuple[tuple[int, int, int], ...] = ()
    #: The author whose entries these are (0: a RESET's, of many authors, whose
    #: ``by`` already is the owner's).
    actor: int = 0
    #: PULL / UNPULL: the owners follow with reposts off (their reads of the
    #: list leave its reposts out).
    quiet: bool = False
    #: (entry, user) of the entries of ``tweets`` whose original answers a
    #: user other than its own author, by entry (docs/decisions.md D29): a
    #: post shows only to owners who follow that user (or are it, or its
    #: actor), and every owner's filter checks it.
    answers: tuple[tuple[int, int], ...] = ()

    @property
    def deliveries(self) -> int:
        return len(self.owners) * len(self.tweets)


def newest(tweets: Sequence[int], keep: int) -> tuple[tuple[int, ...], int]:
    """The newest ``keep`` of ``tweets`` (ascending) and their horizon: the
    oldest of them when older ones were left out, else 0."""
    if len(tweets) <= keep:
        return tuple(tweets), 0
    kept = tuple(tweets[-keep:])
    return kept, kept[0]


def newest_entries(
    entries: Sequence[int],
    originals: Mapping[int, int],
    keep: int,
    authors: Mapping[int, int] | None = None,
) -> tuple[tuple[int, ...], int, tuple[tuple[int, int, int], ...]]:
    """The newest of ``entries`` (ascending) that show at most ``keep``
    originals (``originals``: repost → original; a post shows itself), their
    horizon (the oldest of them when older ones were left out, else 0), and
    the (entry, original, original's author) of the reposts among them
    (``authors``: repost → the original's author).

    One original can have two entries of one author (a post and its author's
    repost of it), so a timeline of ``keep`` entries, one per original, can
    hold up to ``2 * keep`` of an author's: the longest newest run with at
    most ``keep`` originals is what a follow merges (it brings ``keep``
    entries of the view above its horizon) and what an unfollow removes
    (every entry of the author a timeline can hold)."""
    if not originals:
        kept, horizon = newest(entries, keep)
        return kept, horizon, ()
    seen: set[int] = set()
    at = len(entries)
    while at > 0:
        original = originals.get(entries[at - 1], entries[at - 1])
        if original not in seen:
            if len(seen) == keep:
                break
            seen.add(original)
        at -= 1
    kept = tuple(entries[at:])
    by = authors or {}
    pairs = tuple((e, originals[e], by.get(e, 0)) for e in kept if e in originals)
    return kept, (kept[0] if at > 0 else 0), pairs


@dataclass
class JoinResult:
    state: AuthorState
    #: Bodies to put in the tweet cache (before the mutations are applied).
    bodies: dict[int, bytes]
    mutations: list[Mutation]
    changed: bool
    #: Events that changed nothing (duplicates from a relay re-send, self unfollows).
    ignored: int


def pulled_at(followers: int, threshold: int, pulled: bool) -> bool:
    """Whether an author with ``followers`` followers is pulled: from
    ``threshold`` followers on, and back to push below
    :data:`PUSH_BACK_TENTHS` tenths of it (a threshold of 0: never)."""
    if threshold <= 0:
        return False
    if pulled:
        return followers * 10 >= threshold * PUSH_BACK_TENTHS
    return followers >= threshold


def join_events(
    author_id: int,
    state: AuthorState,
    envelopes: Iterable[events.Envelope],
    *,
    cap: int,
    slack: int = SLACK,
    pull_threshold: int = 0,
) -> JoinResult:
    """Apply one key's events (in ``seq`` order) to its state (whose follower
    set it may change: pass a state of your own).

    An author with ``pull_threshold`` followers or more is *pulled*
    (:func:`pulled_at`): its tweets go to its own timeline and to one list
    (``Op.LIST``, its newest ``cap + slack``), which each follower's read
    merges in; crossing the threshold moves every follower's share of its
    tweets between the timeline and the list (``Op.PULL`` / ``Op.UNPULL``).

    A follow's flags (docs/decisions.md D28): a follower who mutes the author
    leaves its audience as by an unfollow, and comes back as by a follow; a
    follower with reposts off (*quiet*) receives the author's posts only, and
    turning them off or on removes or merges the reposts a follow would have.
    """
    keep = cap + slack
    # The followers are decoded only if needed: a pulled author's posts do not need them.
    tweets, pulled, originals = list(state.tweets), state.pulled, dict(state.originals)
    by = dict(state.original_authors)
    answers, notified = dict(state.answers), dict(state.notified)
    quiet = state.quiet
    bodies: dict[int, bytes] = {}
    out: list[Mutation] = []
    ignored = 0
    changed = False
    listed = False  # the author's list changed: written once, at the end

    # Sorted once per call and again only after a follow or an unfollow: an
    # author with a million followers who posts pays for one sort, not one per tweet.
    cached: dict[bool, tuple[int, ...]] = {}

    def audience(repost: bool = False) -> tuple[int, ...]:
        if pulled:
            return (author_id,)
        repost = repost and bool(quiet)  # the same tuple when no follower is quiet
        got = cached.get(repost)
        if got is None:
            members = state.followers - quiet if repost else state.followers
            got = cached[repost] = tuple(sorted(members | {author_id}))
        return got

    def run(
        posts_only: bool = False,
    ) -> tuple[tuple[int, ...], int, tuple[tuple[int, int, int], ...]]:
        """The newest entries a follow merges and an unfollow removes (of a
        quiet follower: the newest posts)."""
        if posts_only and originals:
            return newest_entries([t for t in tweets if t not in originals], {}, keep)
        return newest_entries(tweets, originals, keep, by)

    def answered(entries: Iterable[int]) -> tuple[tuple[int, int], ...]:
        """(entry, user) of ``entries`` whose original answers another user."""
        if not answers:
            return ()
        return tuple((e, answers[e]) for e in entries if e in answers)

    def send(
        op: Op,
        follower: int,
        ids: tuple[int, ...],
        horizon: int,
        seq: int,
        pairs: tuple[tuple[int, int, int], ...],
    ) -> None:
        """Merge (ADD) or remove (REMOVE) some of the author's entries in the follower's."""
        out.append(
            Mutation(
                op,
                (follower,),
                ids,
                horizon,
                seq,
                reposts=pairs,
                actor=author_id,
                answers=answered(ids),
            )
        )

    def mentioned(users: tuple[int, ...], post: int, seq: int) -> Mutation:
        """The post into the mentions timelines of ``users``."""
        return Mutation(
            Op.MENTION,
            owners.mentions_owners(users),
            (post,),
            0,
            seq,
            authors=(author_id,),
            actor=author_id,
        )

    def edge(op: Op, follower: int, seq: int) -> None:
        """The follower's follow of the author starts or ends (FOLLOWED, UNFOLLOWED)."""
        out.append(Mutation(op, (follower,), (), 0, seq, authors=(author_id,), actor=author_id))

    def move(op: Op, owners: Iterable[int], seq: int) -> None:
        """PULL or UNPULL ``owners``, the quiet ones with their mark."""
        loud = tuple(sorted(o for o in owners if o not in quiet))
        still = tuple(sorted(o for o in owners if o in quiet))
        for group, posts_only in ((loud, False), (still, True)):
            if not group:
                continue
            merged, horizon, pairs = run(posts_only)
            if op is Op.PULL:
                horizon = 0
            out.append(
                Mutation(
                    op,
                    group,
                    merged,
                    horizon,
                    seq,
                    authors=(author_id,),
                    reposts=pairs,
                    actor=author_id,
                    quiet=posts_only,
                    answers=answered(merged),
                )
            )

    def cross(seq: int) -> None:
        """Move between push and pull when the follower count says so."""
        nonlocal pulled, listed, changed
        now = pulled_at(state.follower_count, pull_threshold, pulled)
        if now == pulled:
            return
        pulled, changed = now, True
        cached.clear()
        listed = listed or pulled
        move(Op.PULL if pulled else Op.UNPULL, state.followers, seq)

    def unfollow(follower: int, seq: int, member: bool = False) -> None:
        """The follower's entries of the author go (``member``: a list's
        member its owner hides, who stays a member)."""
        nonlocal changed
        posts_only = follower in quiet  # what the timeline holds of the author
        state.followers.discard(follower)
        quiet.discard(follower)
        changed = True
        cached.clear()
        if not member:
            edge(Op.UNFOLLOWED, follower, seq)
        if pulled:  # nothing of the author is in the timeline: only the fence moves
            out.append(
                Mutation(Op.UNPULL, (follower,), (), 0, seq, authors=(author_id,), actor=author_id)
            )
        else:
            removed, _, pairs = run(posts_only)
            send(Op.REMOVE, follower, removed, 0, seq, pairs)

    def follow(follower: int, reposts: bool, seq: int) -> None:
        nonlocal changed
        own = follower == author_id
        known = follower in state.followers
        was_quiet = follower in quiet
        if not own:
            if not known:
                state.followers.add(follower)
            if reposts:
                quiet.discard(follower)
            else:
                quiet.add(follower)
            if not known or was_quiet == reposts:
                changed = True
                cached.clear()
            edge(Op.FOLLOWED, follower, seq)  # again for a known one: changes nothing
        if pulled and not own:
            # Also for a known follower: the store replaces its mark (a flag's change).
            out.append(
                Mutation(
                    Op.PULL,
                    (follower,),
                    (),
                    0,
                    seq,
                    authors=(author_id,),
                    actor=author_id,
                    quiet=not reposts,
                )
            )
            return
        if not own and not reposts:
            if known and not was_quiet:  # reposts turned off: the ones it holds go
                _, _, pairs = run()
                send(Op.REMOVE, follower, tuple(e for e, _, _ in pairs), 0, seq, pairs)
                return  # its posts are there (merging them again could raise the horizon)
            merged, horizon, pairs = run(posts_only=True)
        else:
            # Also for a known follower (a relay re-send): merging again is harmless.
            merged, horizon, pairs = run()
        send(Op.ADD, follower, merged, horizon, seq, pairs)

    for envelope in sorted(envelopes, key=lambda e: e.seq):
        ev, seq = envelope.event, envelope.seq
        if ev.join_key != author_id:
            raise ValueError(f"event {ev!r} routed to key {author_id}")
        if isinstance(ev, events.TweetPosted):
            at = bisect.bisect_left(tweets, ev.tweet_id)
            if at < len(tweets) and tweets[at] == ev.tweet_id:
                # Posted again: a renamed author's tweet (its body gets the new
                # name) or a relay re-send (the same body); no timeline changes.
                bodies[ev.tweet_id] = events.tweet_json(ev)
                ignored += 1
                continue
            tweets.insert(at, ev.tweet_id)
            changed = True
            listed = listed or pulled
            bodies[ev.tweet_id] = events.tweet_json(ev)
            pair: tuple[tuple[int, int, int], ...] = ()
            if ev.repost_of:
                originals[ev.tweet_id] = ev.repost_of
                by[ev.tweet_id] = ev.repost_of_author
                pair = ((ev.tweet_id, ev.repost_of, ev.repost_of_author),)
            else:
                users = notified_users(ev.mentions, ev.answers)
                if users:
                    notified[ev.tweet_id] = users
                    out.append(mentioned(users, ev.tweet_id, seq))
            if ev.answers:
                answers[ev.tweet_id] = ev.answers
            out.append(
                Mutation(
                    Op.ADD,
                    audience(bool(ev.repost_of)),
                    (ev.tweet_id,),
                    0,
                    seq,
                    reposts=pair,
                    actor=author_id,
                    answers=((ev.tweet_id, ev.answers),) if ev.answers else (),
                )
            )
        elif isinstance(ev, events.TweetDeleted):
            at = bisect.bisect_left(tweets, ev.tweet_id)
            if at < len(tweets) and tweets[at] == ev.tweet_id:
                del tweets[at]
                changed = True
            listed = listed or pulled
            bodies.pop(ev.tweet_id, None)
            original = originals.pop(ev.tweet_id, 0)
            author = by.pop(ev.tweet_id, 0)
            pair = ((ev.tweet_id, original, author),) if original else ()
            told = notified.pop(ev.tweet_id, ())
            user = answers.pop(ev.tweet_id, 0)
            out.append(Mutation(Op.DELETE_BODY, (), (ev.tweet_id,)))
            if told:  # out of the mentions timelines (their own op: see fanout.store.ops)
                out.append(Mutation(Op.REMOVE, owners.mentions_owners(told), (ev.tweet_id,)))
            out.append(
                Mutation(
                    Op.REMOVE,
                    audience(),
                    (ev.tweet_id,),
                    reposts=pair,
                    actor=author_id,
                    answers=((ev.tweet_id, user),) if user else (),
                )
            )
        elif isinstance(ev, events.Followed):
            follower = ev.follower_id
            if ev.muted and follower != author_id:
                # The follower mutes the author: out of its audience, as by an unfollow.
                # A list's owner hides the member: out of its audience, still a
                # member (whom the replies' rule counts: the owner's own replies).
                member = owners.is_list(follower)
                if follower not in state.followers:
                    if member:
                        edge(Op.FOLLOWED, follower, seq)
                    else:
                        ignored += 1
                    continue
                unfollow(follower, seq, member)
            else:
                follow(follower, ev.reposts, seq)
        elif isinstance(ev, events.Unfollowed):
            if ev.follower_id == author_id or ev.follower_id not in state.followers:
                if owners.is_list(ev.follower_id):  # a member the owner hides leaves
                    edge(Op.UNFOLLOWED, ev.follower_id, seq)
                else:
                    ignored += 1
                continue
            unfollow(ev.follower_id, seq)
        elif isinstance(ev, events.TimelineReset) and ev.drop:
            out.append(Mutation(Op.DROP, (ev.owner_id,), (), 0, seq))
            continue
        elif isinstance(ev, events.TimelineReset):
            out.append(
                Mutation(
                    Op.RESET,
                    (ev.owner_id,),
                    ev.tweet_ids,
                    ev.horizon,
                    seq,
                    ev.as_of,
                    ev.pulled,
                    ev.reposts,
                    answers=ev.answers,
                )
            )
            continue
        elif isinstance(ev, events.FiltersSet):
            out.append(Mutation(Op.FILTER, (ev.owner_id,), ev.hidden, 0, seq))
            continue
        else:  # an engagement: counted by fanout.model.engagements, not here
            raise ValueError(f"event {ev!r} is not the join's")
        cross(seq)
    if listed:
        merged, horizon, pairs = run()
        out.insert(
            0,
            Mutation(
                Op.LIST,
                (author_id,),
                merged,
                horizon,
                reposts=pairs,
                actor=author_id,
                answers=answered(merged),
            ),
        )
    return JoinResult(
        state=state.replaced(tweets, pulled, originals, by, answers, notified),
        bodies=bodies,
        mutations=coalesce(out),
        changed=changed,
        ignored=ignored,
    )


def coalesce(mutations: list[Mutation]) -> list[Mutation]:
    """Merge adjacent tweet ADDs to the same owners (an author posting several
    tweets in one micro-batch becomes one write per follower).

    Linear in the tweets: a run's ids are gathered first and sorted once (an
    author posting k tweets in a batch used to cost k sorted merges), and the
    owners, one cached tuple per audience, compare by identity first."""
    out: list[Mutation] = []
    # index in out -> (ids, highest seq, repost pairs, answers)
    runs: dict[int, tuple[set[int], int, set[tuple[int, int, int]], set[tuple[int, int]]]] = {}
    for m in mutations:
        prev = out[-1] if out else None
        if (
            prev is not None
            and m.op is Op.ADD
            and prev.op is Op.ADD
            and prev.horizon == m.horizon == 0
            and (prev.owners is m.owners or prev.owners == m.owners)
        ):
            at = len(out) - 1
            ids, seq, pairs, answers = runs.get(at) or (
                set(prev.tweets),
                prev.seq,
                set(prev.reposts),
                set(prev.answers),
            )
            ids.update(m.tweets)
            pairs.update(m.reposts)
            answers.update(m.answers)
            runs[at] = (ids, max(seq, m.seq), pairs, answers)
        else:
            out.append(m)
    for at, (ids, seq, pairs, answers) in runs.items():
        out[at] = Mutation(
            Op.ADD,
            out[at].owners,
            tuple(sorted(ids)),
            0,
            seq,
            reposts=tuple(sorted(pairs)),
            actor=out[at].actor,
            answers=tuple(sorted(answers)),
        )
    return out


# --- the same view computed in one pass (the rebuild) ----------------------------------


def winners(entries: Iterable[int], originals: Mapping[int, int]) -> list[int]:
    """The entries the view shows of ``entries``: per original (``originals``:
    repost → original; a post is its own) the greatest; ascending."""
    best: dict[int, int] = {}
    for e in entries:
        o = originals.get(e, e)
        if e > best.get(o, 0):
            best[o] = e
    return sorted(best.values())


def rebuilt_timeline(
    ids: Iterable[int], *, cap: int, slack: int = SLACK, floor: int = 0
) -> tuple[int, list[int]]:
    """(horizon, ids ascending) of a timeline computed from scratch.

    ``ids`` are each followed author's newest ``cap + slack`` tweets (what a
    follow merges); ``floor`` is the highest of their horizons (below it an
    author's older tweets are not among them). Kept: the newest ``cap + slack``
    at or above ``floor``, which are at least ``cap + slack`` whenever the
    floor is not 0, so the result is never short. The horizon is ``floor``,
    or the oldest kept id when older ones were cut.
    """
    return distinct_timeline(
        sorted({i for i in ids if i >= floor}), cap=cap, slack=slack, floor=floor
    )


def aside(shown: Iterable[int], raw: Mapping[int, int]) -> list[tuple[int, int]]:
    """What a timeline keeps beside the entries it shows (``shown``, one per
    original: :func:`winners` of ``raw``, entry → original): every repost,
    and every post a newer repost hides, as (original, entry), sorted."""
    visible = set(shown)
    return sorted((o, e) for e, o in raw.items() if e != o or e not in visible)


def distinct_timeline(
    ids: Sequence[int], *, cap: int, slack: int = SLACK, floor: int = 0
) -> tuple[int, list[int]]:
    """:func:`rebuilt_timeline` of ``ids`` that are already distinct, ascending
    and at or above ``floor`` (a rebuild prepares them in bulk)."""
    kept, horizon = newest(ids, cap + slack)
    return max(horizon, floor), list(kept)


def notified_users(mentions: Iterable[int], answers: int) -> tuple[int, ...]:
    """The users a post notifies (ascending): those it names (``mentions``,
    its author left out) and the one it answers (``answers``, 0: none, nor its
    own author); their mentions timelines hold it (docs/decisions.md D30)."""
    return tuple(sorted({*mentions, answers} - {0}))


def rebuilt_author_state(
    author_id: int,
    followers: Iterable[int],
    live_tweets: Iterable[int],
    *,
    pull_threshold: int = 0,
    originals: Mapping[int, int] | None = None,
    original_authors: Mapping[int, int] | None = None,
    quiet: Iterable[int] = (),
    answers: Mapping[int, int] | None = None,
    mentions: Mapping[int, Iterable[int]] | None = None,
) -> AuthorState:
    """An author's join state computed from the current tables: what
    :func:`join_events` holds after replaying the author's history (pulled
    from ``pull_threshold`` followers on: a rebuild forgets the hysteresis).
    ``followers``: those who follow the author and do not mute them;
    ``originals`` and ``original_authors``: the original of each of
    ``live_tweets`` that is a repost, and its author; ``quiet``: the
    followers with reposts off; ``answers``: the user each entry's original
    answers where that is not the original's author (the event's
    ``answers``; 0: none); ``mentions``: the users each post mentions.

    A post (not a repost) that mentions or answers users notifies them, as
    :func:`join_events` records it when it is posted (the two must change
    together)."""
    audience = {f for f in followers if f != author_id}
    tweets = sorted(set(live_tweets))
    reposts = originals or {}
    answered = {t: u for t, u in (answers or {}).items() if u}
    notified: dict[int, tuple[int, ...]] = {}
    for t in tweets:
        if t in reposts:
            continue
        users = notified_users((mentions or {}).get(t, ()), answered.get(t, 0))
        if users:
            notified[t] = users
    return AuthorState(
        followers=audience,
        tweets=tweets,
        pulled=pulled_at(len(audience), pull_threshold, False),
        originals=dict(reposts),
        original_authors=dict(original_authors or {}),
        quiet=audience.intersection(quiet),
        answers=answered,
        notified=notified,
    )
