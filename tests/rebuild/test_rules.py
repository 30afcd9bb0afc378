"""The rebuild's rules (fanout.model.join.rebuilt_*) against the incremental ones."""

from __future__ import annotations

import itertools
import random
import struct
from array import array

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.model import events
from fanout.model.author_state import AuthorState
from fanout.model.join import join_events, rebuilt_author_state, rebuilt_timeline, rebuilt_view
from spark.rebuild.tasks import EDGES, OWNED, KeptIds, owner_inputs
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
        st.tuples(st.sampled_from(["post", "delete", "follow", "unfollow"]), st.integers(1, 6)),
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
    band of a threshold of 3)."""
    rnd = random.Random(seed)
    author, next_id, seq = 100, 1, 0
    live: set[int] = set()
    followers: set[int] = set()
    state = AuthorState()
    for op, who in ops:
        seq += 1
        ev: events.Event
        if op == "post":
            ev, next_id = events.TweetPosted(next_id, author, "a", "t"), next_id + 1
            live.add(ev.tweet_id)
        elif op == "delete" and live:
            ev = events.TweetDeleted(rnd.choice(sorted(live)), author)
            live.discard(ev.tweet_id)
        elif op == "follow":
            ev = events.Followed(who, author)
            followers.add(who)
        elif op == "unfollow":
            ev = events.Unfollowed(who, author)
            followers.discard(who)
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
    assert state == rebuilt_author_state(author, followers, live, pull_threshold=threshold)


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


_EDGE = st.tuples(
    st.integers(1, 4),  # owner
    st.integers(1, 6),  # author
    st.none() | st.lists(st.integers(1, 60), max_size=30),  # the author's kept tweets
    st.integers(0, 60),  # the author's horizon
    st.booleans(),  # pulled
)


@settings(deadline=None)  # the first example pays for pyarrow's first table
@given(st.lists(_EDGE, max_size=20), st.lists(st.integers(0, 20), max_size=3))
def test_timelines_merged_per_owner_in_numpy_equal_the_rule_on_whole_lists(
    edges: list[tuple[int, int, list[int] | None, int, bool]], cuts: list[int]
) -> None:
    # The rebuild's write gets each owner's rows together (sorted, running on
    # from one Arrow batch into the next) and merges them in NumPy before the
    # rule: the same timelines, horizons and pulls as the rule on whole
    # Python lists, made here the way the view's SQL defines them.
    edges = sorted(edges, key=lambda e: e[0])
    expected = {}
    for owner in sorted({e[0] for e in edges}):
        mine = [e for e in edges if e[0] == owner]
        pushed = [e for e in mine if not e[4]]
        ids = [(i, origin(i)) for e in pushed for i in e[2] or ()]
        floor = max((e[3] for e in pushed), default=0)
        seen = [(i, origin(i)) for e in mine for i in e[2] or ()]
        expected[owner] = (
            rebuilt_view(ids, cap=CAP, slack=SLACK, floor=floor),
            [e[1] for e in mine if e[4]],
            rebuilt_view(seen, cap=CAP, slack=SLACK, floor=max(e[3] for e in mine)),
        )
    names = ("owner", "author", "kept", "horizon", "pull")
    table = pa.Table.from_pylist(
        [
            {**dict(zip(names, e, strict=True)), "origins": e[2] and [origin(i) for i in e[2]]}
            for e in edges
        ],
        schema=arrow.schema(EDGES),
    )
    bounds = sorted({0, len(edges), *(c for c in cuts if c < len(edges))})
    batches = [
        table.slice(a, b - a).combine_chunks().to_batches()[0]
        for a, b in itertools.pairwise(bounds)
        if b > a
    ]
    got = {
        i.owner: (i.timeline(CAP, SLACK), i.pulls, i.timeline(CAP, SLACK, seen=True))
        for i in owner_inputs(batches)
    }
    assert got == expected


_STATE = st.tuples(
    st.lists(st.integers(1, 60), max_size=12),  # the author's kept tweets
    st.integers(0, 60),  # horizon
    st.booleans(),  # pulled
)


@settings(deadline=None)
@given(
    st.dictionaries(st.integers(1, 8), _STATE, max_size=8),
    st.lists(st.tuples(st.integers(1, 5), st.integers(1, 10)), max_size=25),
    st.lists(st.integers(0, 25), max_size=3),
)
def test_edges_joined_with_the_broadcast_kept_ids_equal_the_left_join(
    states: dict[int, tuple[list[int], int, bool]],
    edges: list[tuple[int, int]],
    cuts: list[int],
) -> None:
    # The write tasks join each edge with its author's kept tweets from a
    # broadcast (rebuild_tasks.KeptIds) instead of Spark's join: the same rows,
    # in the edges' order, as the left join the rebuild would otherwise run
    # (an author without state: no tweets, horizon 0, not pulled; an author is
    # never pulled from its own timeline).
    rows = [
        {"join_key": a, "kept": k, "origins": [origin(i) for i in k], "horizon": h, "pulled": p}
        for a, (k, h, p) in states.items()
    ]
    half = len(rows) // 2  # in two chunks, in no order
    schema = pa.schema(
        [("join_key", pa.int64()), ("kept", pa.list_(pa.int64())),
         ("origins", pa.list_(pa.int64())), ("horizon", pa.int64()), ("pulled", pa.bool_())]
    )  # fmt: skip
    table = pa.concat_tables(
        [pa.Table.from_pylist(rows[half:], schema), pa.Table.from_pylist(rows[:half], schema)]
    )
    kept = KeptIds.of(table)
    expected = []
    for owner, author in edges:
        ids, horizon, pulled = states.get(author, ([], 0, False))
        expected.append(
            (owner, author, ids, [origin(i) for i in ids], horizon, pulled and owner != author)
        )
    owned = pa.Table.from_pylist([{"owner": o, "author": a} for o, a in edges], arrow.schema(OWNED))
    bounds = sorted({0, len(edges), *(c for c in cuts if c < len(edges))})
    got = []
    for a, b in itertools.pairwise(bounds):
        batch = owned.slice(a, b - a).combine_chunks().to_batches()
        out = kept.join(batch[0] if batch else pa.RecordBatch.from_pylist([], arrow.schema(OWNED)))
        assert out.schema.names == arrow.names(EDGES)
        got += [
            (r["owner"], r["author"], r["kept"], r["origins"], r["horizon"], r["pull"])
            for r in out.to_pylist()
        ]
    assert got == expected
