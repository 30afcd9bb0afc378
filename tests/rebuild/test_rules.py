"""The rebuild's rules (fanout.model.join.rebuilt_*) against the incremental ones."""

from __future__ import annotations

import itertools
import random
import struct
from array import array
from collections.abc import Iterable

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.model import events
from fanout.model.author_state import AuthorState
from fanout.model.join import (
    aside,
    join_events,
    rebuilt_author_state,
    rebuilt_timeline,
    winners,
)
from spark.rebuild.tasks import EDGES, FILTER_ROW, OWNED, STATE, KeptIds, owner_inputs
from spark.runtime import arrow

CAP, SLACK = 5, 2


def test_a_short_timeline_is_exact() -> None:
    assert rebuilt_timeline([3, 1, 2, 2], cap=CAP, slack=SLACK) == (0, [1, 2, 3])


def test_a_long_timeline_keeps_cap_plus_slack_and_gets_a_horizon() -> None:
    horizon, ids = rebuilt_timeline(range(1, 21), cap=CAP, slack=SLACK)
    assert ids == list(range(14, 21)) and horizon == 14


def test_an_authors_horizon_is_a_floor_and_never_leaves_it_short() -> None:
    # An author with more than cap + slack tweets contributes its newest 7,
    # all at or above its horizon 8: the timeline is exact from there, and full.
    author = list(range(8, 15))
    horizon, ids = rebuilt_timeline([1, 2, *author], cap=CAP, slack=SLACK, floor=8)
    assert (horizon, ids) == (8, author) and len(ids) >= CAP


def test_author_state_leaves_out_the_self_edge_and_keeps_every_tweet() -> None:
    state = rebuilt_author_state(7, [7, 1, 2], [30, 10, 20, 40, 50, 60, 70, 80, 90])
    assert state == AuthorState(followers={1, 2}, tweets=[10, 20, 30, 40, 50, 60, 70, 80, 90])
    assert AuthorState.decode(state.encode()) == state


def test_a_state_written_before_pulls_existed_decodes_as_pushed() -> None:
    """A checkpoint from before hybrid fan-out (state version 2, no flags)."""
    blob = struct.pack("<BII", 2, 1, 2) + array("q", [5, 10, 20]).tobytes()
    assert AuthorState.decode(blob) == AuthorState(followers={5}, tweets=[10, 20], pulled=False)
    pulled = AuthorState(followers={5}, tweets=[10], pulled=True)
    assert AuthorState.decode(pulled.encode()) == pulled


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(
                ["post", "repost", "reply", "delete", "follow", "quiet", "mute", "unfollow"]
            ),
            st.integers(1, 6),
        ),
        max_size=60,
    ),
    seed=st.integers(0, 1000),
    threshold=st.sampled_from([0, 3]),
)
def test_the_incremental_state_is_the_rebuilt_one(
    ops: list[tuple[str, int]], seed: int, threshold: int
) -> None:
    """Replaying an author's history through join_events gives the state the
    rebuild computes from the final tables, exactly, deletes at the cap
    included, and pulled or not alike (no follower count is in the hysteresis
    band of a threshold of 3): a follow that mutes the author is none, one
    with reposts off a quiet follower, and each repost keeps its original and
    the original's author; an entry whose original answers another user
    keeps whom, and a post that answers or mentions users notifies them."""
    rnd = random.Random(seed)
    author, next_id, seq = 100, 1000, 0
    live: set[int] = set()
    originals: dict[int, int] = {}
    answers: dict[int, int] = {}  # the events' answers, of every entry posted
    mentions: dict[int, tuple[int, ...]] = {}
    follows: dict[int, events.Followed] = {}  # the follows table: the newest record
    state = AuthorState()
    for op, who in ops:
        seq += 1
        ev: events.Event
        if op == "post":
            ev, next_id = events.TweetPosted(next_id, author, "a", "t"), next_id + 1
            live.add(ev.tweet_id)
        elif op == "repost":  # of the tweet `who` of user `who + 10` (a reply if `who` is even)
            to = (who + 20 if who % 4 else who + 10) if who % 2 == 0 else 0
            ev = events.TweetPosted(next_id, author, "a", "", who, who + 10, repost_of_reply_to=to)
            next_id += 1
            live.add(ev.tweet_id)
            originals[ev.tweet_id] = who
            answers[ev.tweet_id] = ev.answers
        elif op == "reply":  # to user `who` (the author itself if 6), mentioning some
            to = author if who == 6 else who
            named = tuple(range(who + 30, who + 30 + who % 3))
            ev = events.TweetPosted(
                next_id, author, "a", "t", in_reply_to=1, reply_to=to, reply_to_name="x",
                mentions=named, mention_names=tuple("m" for _ in named),
            )  # fmt: skip
            next_id += 1
            live.add(ev.tweet_id)
            answers[ev.tweet_id], mentions[ev.tweet_id] = ev.answers, named
        elif op == "delete" and live:
            ev = events.TweetDeleted(rnd.choice(sorted(live)), author)
            live.discard(ev.tweet_id)
            originals.pop(ev.tweet_id, None)
        elif op in ("follow", "quiet", "mute"):
            ev = events.Followed(who, author, muted=op == "mute", reposts=op != "quiet")
            follows[who] = ev
        elif op == "unfollow":
            ev = events.Unfollowed(who, author)
            follows.pop(who, None)
        else:
            continue
        state = join_events(
            author,
            state,
            [events.Envelope(seq, ev)],
            cap=CAP,
            slack=SLACK,
            pull_threshold=threshold,
        ).state
    followers = [f for f, ev in follows.items() if not ev.muted]
    rebuilt = rebuilt_author_state(
        author,
        followers,
        live,
        pull_threshold=threshold,
        originals=originals,
        original_authors={r: o + 10 for r, o in originals.items()},
        quiet=[f for f in followers if not follows[f].reposts],
        answers={t: u for t, u in answers.items() if t in live},
        mentions={t: m for t, m in mentions.items() if t in live},
    )
    assert state == rebuilt


def test_a_pulled_authors_followers_are_stored_apart_and_read_only_when_needed() -> None:
    state = AuthorState(followers={5, 6, 7}, tweets=[10, 20], pulled=True)
    main, apart = state.encode_split()
    assert AuthorState.apart(main) and apart is not None and len(main) < len(state.encode())
    reads: list[int] = []

    def followers() -> bytes:
        reads.append(1)
        return apart

    posted = join_events(
        1,
        AuthorState.decode(main, followers),
        [events.Envelope(3, events.TweetPosted(30, 1, "a", "t"))],
        cap=CAP,
        slack=SLACK,
        pull_threshold=2,
    ).state
    assert not reads and posted.encode_split() == (
        AuthorState(followers={5, 6, 7}, tweets=[10, 20, 30], pulled=True).encode_split()[0],
        None,  # the followers were not read, so they are not written
    )
    assert posted == AuthorState(followers={5, 6, 7}, tweets=[10, 20, 30], pulled=True)
    assert reads == [1]  # the comparison above needed them
    pushed = AuthorState(followers={5}, tweets=[10])
    assert pushed.encode_split() == (pushed.encode(), None) and not AuthorState.apart(
        pushed.encode()
    )


def test_a_pulled_state_written_whole_moves_its_followers_apart_at_its_next_write() -> None:
    """A rebuild hands over whole values; the job's first write of a pulled
    author must store the followers apart, or they would be lost."""
    whole = AuthorState(followers={5, 6}, tweets=[10], pulled=True).encode()
    state = AuthorState.decode(whole)
    main, apart = state.replaced([10, 20], True).encode_split()
    assert AuthorState.apart(main) and apart is not None
    assert AuthorState.decode(main, lambda: apart) == AuthorState({5, 6}, [10, 20], True)


def origin(entry: int) -> int:
    """The original of an entry of these tests: every third one reposts an older one."""
    return entry if entry % 3 or entry < 10 else entry - 7


def rebuilt_view(
    entries: Iterable[tuple[int, int]],
    *,
    cap: int,
    slack: int,
    floor: int = 0,
    away: Iterable[tuple[int, int]] = (),
    shown: Iterable[tuple[int, int]] = (),
) -> tuple[int, list[int], list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
    """The rule on whole Python lists: ``entries`` are (entry, original) pairs
    of each followed author's newest entries, ``floor`` the highest of their
    horizons, ``away`` the (user, entry) of the replies kept aside (not among
    ``entries``, counted by the cap with the view), ``shown`` those of the
    replies among ``entries`` that show; the horizon, the view's entries (the
    newest of each original) ascending, the entries it hides at or above the
    horizon, as the store keeps them beside the timeline: (original, entry),
    sorted, and the replies aside and shown at or above the horizon."""
    raw = {e: o for e, o in entries if e >= floor}
    away, shown = set(away), set(shown)
    counted = {*winners(raw, raw), *(e for _, e in away if e >= floor)}
    horizon, _ = rebuilt_timeline(counted, cap=cap, slack=slack, floor=floor)
    kept = [w for w in winners(raw, raw) if w >= horizon]
    return (
        horizon,
        kept,
        aside(kept, {e: o for e, o in raw.items() if e >= horizon}),
        sorted(r for r in away if r[1] >= horizon),
        sorted(r for r in shown if r[1] >= horizon),
    )


def answer_of(entry: int) -> int:
    """The user an entry's original answers in these tests (0: none): every
    other original answers one, its author never."""
    o = origin(entry)
    user = (o // 10) % 6 + 1 if o % 2 == 0 else 0
    author = o % 10 if o == entry else by_of(entry)
    return 0 if user == author else user


def entry_of(author: int, k: int) -> int:
    """The ``k``-th entry id of ``author`` in these tests (an author's entries are its own)."""
    return 10 * k + author


def by_of(entry: int) -> int:
    """The author of an entry's original, if it is a repost (0 for a post)."""
    o = origin(entry)
    return 0 if o == entry else (o // 10) % 5 + 1


_EDGE = st.tuples(
    st.integers(1, 4),  # owner
    st.integers(1, 6),  # author
    st.none() | st.lists(st.integers(1, 60), max_size=30),  # the author's kept tweets
    st.just(0) | st.integers(0, 600),  # the author's horizon (often none: timelines get cut)
    st.booleans(),  # pulled
    st.booleans(),  # quiet: followed with reposts off
)


@settings(deadline=None)  # the first example pays for pyarrow's first table
@given(
    st.lists(_EDGE, max_size=20),
    st.dictionaries(st.integers(1, 5), st.sets(st.integers(1, 5), min_size=1), max_size=4),
    st.lists(st.booleans(), min_size=5, max_size=5),
    st.lists(st.integers(0, 25), max_size=3),
)
def test_timelines_merged_per_owner_in_numpy_equal_the_rule_on_whole_lists(
    edges: list[tuple[int, int, list[int] | None, int, bool, bool]],
    filters: dict[int, set[int]],
    filter_first: list[bool],
    cuts: list[int],
) -> None:
    # The rebuild's write gets each owner's rows together (sorted, running on
    # from one Arrow batch into the next; an owner's filter is a row among
    # them, anywhere) and merges them in NumPy before the rule: the same
    # timelines, horizons and pulls as the rule on whole Python lists, made
    # here the way the view's SQL defines them. The owner's filter leaves out
    # other authors' reposts of the users it hides (of the pulled authors, in
    # what readers see), and a pulled author followed with reposts off is
    # read without its reposts. Replies (docs/decisions.md D29): an entry
    # whose original answers a hidden user is left out; a post answering a
    # user the owner does not follow (its followees: the authors of its
    # rows) is kept aside, counted by the cap, and a pulled author's such
    # reply is not seen; the others that answer someone are recorded as shown.
    # One edge per owner and author (a follow is one row), and the self edge
    # is never pulled (a pulled author's own timeline holds its entries).
    unique: dict[tuple[int, int], tuple[int, int, list[int] | None, int, bool, bool]] = {}
    for o, a, k, h, p, q in edges:
        unique.setdefault((o, a), (o, a, k, h, p and o != a, q))
    edges = [
        (o, a, k and [entry_of(a, i) for i in k], h, p, q) for o, a, k, h, p, q in unique.values()
    ]
    expected = {}
    for owner in sorted({e[0] for e in edges}):
        mine = [e for e in edges if e[0] == owner]
        hidden = filters.get(owner, set())
        followees = {e[1] for e in mine if e[1] != owner}

        def answered(e: tuple, i: int, owner: int = owner) -> int:
            """Whom entry i's original answers, as its owner's timeline sees it:
            no one for the owner's own entries and for replies to the owner."""
            user = answer_of(i)
            return 0 if e[1] == owner or user == owner else user

        def shown(e: tuple, i: int, seen: bool, owner: int = owner, hidden: set = hidden) -> bool:
            if e[1] != owner and by_of(i) in hidden:
                return False
            if answered(e, i) in hidden:
                return False
            return not (seen and e[4] and e[5] and origin(i) != i)

        def reply(e: tuple, i: int) -> bool:
            return bool(answered(e, i)) and origin(i) == i

        def away(e: tuple, i: int, followees: set = followees) -> bool:
            """A reply to a user the owner does not follow: aside (a pulled
            author's: not seen)."""
            return reply(e, i) and answered(e, i) not in followees

        def view(seen: bool, mine: list = mine) -> tuple:
            rows = mine if seen else [e for e in mine if not e[4]]
            entries = [(e, i) for e in rows for i in e[2] or () if shown(e, i, seen)]
            return rebuilt_view(
                [(i, origin(i)) for e, i in entries if not away(e, i)],
                cap=CAP,
                slack=SLACK,
                floor=max((e[3] for e in rows), default=0),
                away=[(answered(e, i), i) for e, i in entries if away(e, i) and not e[4]],
                shown=[(answered(e, i), i) for e, i in entries if reply(e, i) and not away(e, i)],
            )

        expected[owner] = (
            view(seen=False),
            [e[1] for e in mine if e[4]],
            [e[1] for e in mine if e[4] and e[5]],
            view(seen=True),
            sorted(followees),
        )
    names = ("owner", "author", "kept", "horizon", "pull", "quiet")
    rows = [
        {
            **dict(zip(names, e, strict=True)),
            "origins": e[2] and [origin(i) for i in e[2]],
            "by": e[2] and [by_of(i) for i in e[2]],
            "answers": e[2] and [answer_of(i) for i in e[2]],
        }
        for e in edges
    ]
    rows += [
        {"owner": o, "author": FILTER_ROW, "kept": [], "origins": [], "by": [], "answers": [],
         "horizon": 0, "pull": False, "quiet": False, "hidden": sorted(h)}
        for o, h in filters.items()
    ]  # fmt: skip
    # Each owner's rows together, its filter's first or last.
    rows.sort(key=lambda r: (r["owner"], (r.get("hidden") is None) == filter_first[r["owner"] - 1]))
    table = pa.Table.from_pylist(rows, schema=arrow.schema(EDGES))
    bounds = sorted({0, len(rows), *(c for c in cuts if c < len(rows))})
    batches = [
        table.slice(a, b - a).combine_chunks().to_batches()[0]
        for a, b in itertools.pairwise(bounds)
        if b > a
    ]
    inputs = list(owner_inputs(batches))
    got = {
        i.owner: (
            i.timeline(CAP, SLACK),
            i.pulls,
            i.quiet_pulls,
            i.timeline(CAP, SLACK, seen=True),
            i.followees.tolist(),
        )
        for i in inputs
        if i.followed
    }
    assert got == expected
    # An owner with a filter and nothing else has no timeline, but keeps its filter.
    assert {i.owner for i in inputs if not i.followed} == set(filters) - {e[0] for e in edges}
    assert {i.owner: set(i.hidden.tolist()) for i in inputs if len(i.hidden)} == filters


_STATE = st.tuples(
    st.lists(st.integers(1, 60), max_size=12),  # the author's kept tweets
    st.integers(0, 60),  # horizon
    st.booleans(),  # pulled
    st.none() | st.tuples(st.lists(st.integers(1, 60), max_size=8), st.integers(0, 60)),  # posts
)


@settings(deadline=None)
@given(
    st.dictionaries(st.integers(1, 8), _STATE, max_size=8),
    st.lists(st.tuples(st.integers(1, 5), st.integers(0, 10), st.booleans()), max_size=25),
    st.lists(st.integers(0, 25), max_size=3),
)
def test_edges_joined_with_the_broadcast_kept_ids_equal_the_left_join(
    states: dict[int, tuple[list[int], int, bool, tuple[list[int], int] | None]],
    edges: list[tuple[int, int, bool]],
    cuts: list[int],
) -> None:
    # The write tasks join each edge with its author's kept tweets from a
    # broadcast (rebuild_tasks.KeptIds) instead of Spark's join: the same rows,
    # in the edges' order, as the left join the rebuild would otherwise run
    # (spark.rebuild.join.timeline_inputs: an author without state has no
    # tweets, horizon 0, and is not pulled; an author is never pulled from its
    # own timeline; a quiet edge to a pushed author with a posts run gets
    # that run, its posts their own originals, by no one, with the users they
    # answer beside them). An owner's filter is a row of author 0 (no user),
    # passed through.
    rows = [
        {
            "join_key": a,
            "kept": k,
            "origins": [origin(i) for i in k],
            "by": [by_of(i) for i in k],
            "answers": [answer_of(i) for i in k],
            "horizon": h,
            "posts": posts and posts[0],
            "posts_answers": posts and [i % 7 for i in posts[0]],
            "posts_horizon": posts and posts[1],
            "pulled": p,
        }
        for a, (k, h, p, posts) in states.items()
    ]
    half = len(rows) // 2  # in two chunks, in no order
    schema = arrow.schema(STATE.replace("blob binary, ", ""))
    table = pa.concat_tables(
        [pa.Table.from_pylist(rows[half:], schema), pa.Table.from_pylist(rows[:half], schema)]
    )
    kept = KeptIds.of(table)
    expected = []
    owned_rows = []
    for owner, author, quiet in edges:
        ids, horizon, pulled, posts = states.get(author, ([], 0, False, None))
        pull = pulled and owner != author
        hidden = [author, 9] if author == FILTER_ROW else None
        owned_rows.append({"owner": owner, "author": author, "quiet": quiet, "hidden": hidden})
        if quiet and not pull and posts is not None:
            ids, horizon = posts
            answers = [i % 7 for i in ids]
            expected.append(
                (owner, author, ids, ids, [0] * len(ids), answers, horizon, False, quiet)
            )
        else:
            run = (
                ids,
                [origin(i) for i in ids],
                [by_of(i) for i in ids],
                [answer_of(i) for i in ids],
                horizon,
                pull,
                quiet,
            )
            expected.append((owner, author, *run))
        expected[-1] += (hidden,)
    owned = pa.Table.from_pylist(owned_rows, arrow.schema(OWNED))
    bounds = sorted({0, len(edges), *(c for c in cuts if c < len(edges))})
    got = []
    names = (
        "owner", "author", "kept", "origins", "by", "answers", "horizon", "pull", "quiet", "hidden",
    )  # fmt: skip
    for a, b in itertools.pairwise(bounds):
        batch = owned.slice(a, b - a).combine_chunks().to_batches()
        out = kept.join(batch[0] if batch else pa.RecordBatch.from_pylist([], arrow.schema(OWNED)))
        assert out.schema.names == arrow.names(EDGES)
        got += [tuple(r[n] for n in names) for r in out.to_pylist()]
    assert got == expected


def test_replies_to_users_not_followed_are_kept_aside_and_counted_by_the_cap() -> None:
    """docs/decisions.md D29, on one owner (1) who follows 2 and 3 (pushed):
    2's replies to 5, whom 1 does not follow, are aside; its reply to 3 shows
    (recorded as shown), its reply to 1 shows like a post, and so does 1's own
    reply to 5. The newest ``cap + slack`` of view and aside together are
    kept, the horizon the oldest of them. A repost of a reply is an entry like
    any repost (it shows when the reply is aside), but 1's filter hides 3's
    repost of a reply to a hidden user."""
    owner = 1
    posts = list(range(102, 142, 10))  # 2's posts: 102 .. 132
    replies_to_5 = [142, 152, 162]
    to_3, to_1, own = 172, 182, 191
    kept = [*posts, *replies_to_5, to_3, to_1]
    answers = [0] * len(posts) + [5] * 3 + [3, 1]
    rows = [
        {"owner": owner, "author": 2, "kept": kept, "origins": kept, "by": [0] * len(kept),
         "answers": answers, "horizon": 0, "pull": False, "quiet": False, "hidden": None},
        {"owner": owner, "author": owner, "kept": [own], "origins": [own], "by": [0],
         "answers": [5], "horizon": 0, "pull": False, "quiet": False, "hidden": None},
        {"owner": owner, "author": 3, "kept": [193, 203], "origins": [152, 162], "by": [2, 9],
         "answers": [5, 9], "horizon": 0, "pull": False, "quiet": False, "hidden": None},
        {"owner": owner, "author": FILTER_ROW, "kept": [], "origins": [], "by": [],
         "answers": [], "horizon": 0, "pull": False, "quiet": False, "hidden": [9]},
    ]  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=arrow.schema(EDGES))
    (got,) = owner_inputs(table.to_batches())
    assert got.followees.tolist() == [2, 3]
    made = got.timeline(CAP, SLACK)
    # 203 (3's repost of 162) is hidden (it answers 9, whom 1 hides); 193,
    # 3's repost of 152, shows though 152 itself is aside. The newest seven
    # of view and aside: 193, 191, 182, 172, and 162, 152, 142 aside.
    assert made.horizon == 142
    assert made.ids == [172, 182, 191, 193]
    assert made.aside == [(5, 142), (5, 152), (5, 162)]
    assert made.shown == [(3, 172)]
    assert made.pairs == [(152, 193)]
    assert not made.short(CAP)
