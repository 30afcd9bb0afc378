"""A rebuild's read task joins the authors of its partition itself
(spark.rebuild.read.PartitionJoin): the same states as the join rule, the
timelines' edges, and the figures the driver reads."""

from __future__ import annotations

import pyarrow as pa

from fanout.config import TopicNames
from fanout.model import events
from fanout.model.author_state import AuthorState
from fanout.model.engagements import Engagements
from fanout.model.join import join_events, newest, rebuilt_author_state
from fanout.model.partitioning import partition_for
from spark.rebuild.decode import decode_records
from spark.rebuild.read import BAD_KEPT, PartitionJoin, Row
from spark.source.offsets import OffsetRange

TOPICS = TopicNames("p.")
PARTITIONS = 2


def in_partition(p: int, n: int) -> list[int]:
    """The first ``n`` user ids whose join key is in partition ``p``."""
    return [u for u in range(1, 200) if partition_for(u, PARTITIONS) == p][:n]


def decoded(topic: str, items: list, first_offset: int = 0) -> pa.RecordBatch:
    """Rows of DECODED for ``items`` (events, or (key, value, headers) tuples)."""
    records = []
    for seq, item in enumerate(items, start=first_offset + 1):
        if isinstance(item, events.Event):
            r = events.encode(item)
            item = (r.key, r.value, events.headers(seq, r.join_key))
        records.append(item)
    part = OffsetRange(topic, 0, first_offset, first_offset + len(records))
    batch, _ = decode_records(
        part,
        [k for k, _, _ in records],
        [v for _, v, _ in records],
        list(range(first_offset, first_offset + len(records))),
        [h for _, _, h in records],
        topics=TOPICS,
    )
    return batch


def rows_of(join: PartitionJoin) -> list[dict]:
    return [r for batch in join.rows(TOPICS) for r in batch.to_pylist()]


def test_a_partitions_states_and_edges_are_those_of_the_join_rule() -> None:
    ann, bob, cy, dee = in_partition(0, 4)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=2)
    tweets = [events.TweetPosted(1000 + i, ann, "ann", f"t{i}") for i in range(5)]
    tweets += [events.TweetPosted(2000, bob, "bob", "hi")]
    join.add(decoded("p.tweets", tweets))
    follows = [events.Followed(f, ann) for f in (bob, cy, dee, ann)]  # ann: 3 others, pulled
    follows += [events.Followed(ann, cy)]  # cy: followed, no tweets
    join.add(decoded("p.follows", follows, first_offset=10))
    rows = rows_of(join)

    states = {r["a"]: r for r in rows if r["kind"] == Row.STATE}
    assert sorted(states) == [ann, bob, cy]
    expected = {
        ann: rebuilt_author_state(ann, [bob, cy, dee, ann], range(1000, 1005), pull_threshold=2),
        bob: rebuilt_author_state(bob, [], [2000], pull_threshold=2),
        cy: rebuilt_author_state(cy, [ann], [], pull_threshold=2),
    }
    for author, state in expected.items():
        kept, horizon = newest(state.tweets, 3)
        row = states[author]
        assert (row["blob"], row["kept"], row["horizon"], row["pulled"]) == (
            state.encode(),
            list(kept),
            horizon,
            state.pulled,
        )
    assert states[ann]["pulled"] and states[ann]["kept"] == [1002, 1003, 1004]
    assert states[ann]["horizon"] == 1002

    edges = sorted((r["a"], r["b"]) for r in rows if r["kind"] == Row.EDGE)
    # every follow (owner = follower), and each author who tweeted to themselves
    assert edges == sorted(
        [(bob, ann), (cy, ann), (dee, ann), (ann, ann), (ann, cy), (ann, ann), (bob, bob)]
    )
    tally = {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}
    assert tally == {
        "keys": 6 + 5,
        "tweet": 6,
        "follow": 5,
        "authors": 3,
        "kept": 3 + 1,
        "edges": 7,
        "seq": 10 + 5,
    }
    assert not [r for r in rows if r["kind"] == Row.MISPLACED]


def test_marks_and_bad_records_are_handed_over_and_tombstones_counted() -> None:
    (ann,) = in_partition(0, 1)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    key, headers = events.mark_record(0, 41)
    join.add(
        decoded(
            "p.tweets",
            [
                (key, None, headers),
                (b"7", None, events.headers(3, ann)),
                (b"8", b"not json", events.headers(4, ann)),
            ],
        )
    )
    rows = rows_of(join)
    (mark,) = [r for r in rows if r["kind"] == Row.MARK]
    assert (mark["name"], mark["a"], mark["b"]) == ("p.tweets", 0, 41)
    (bad,) = [r for r in rows if r["kind"] == Row.BAD]
    assert (bad["name"], bad["offset"], bad["seq"]) == ("p.tweets", 2, 4)
    assert "JSON" in bad["error"]
    tally = {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}
    assert tally["gone"] == 1 and tally["bad"] == 1 and tally["mark"] == 1
    assert tally["keys"] == 3
    assert not [r for r in rows if r["kind"] in (Row.STATE, Row.EDGE)]


def test_only_so_many_bad_records_are_handed_over_but_all_are_counted() -> None:
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    bad = [(str(i).encode(), b"{", events.headers(i + 1, 5)) for i in range(BAD_KEPT + 3)]
    join.add(decoded("p.tweets", bad))
    rows = rows_of(join)
    assert sum(r["kind"] == Row.BAD for r in rows) == BAD_KEPT
    assert {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}["bad"] == BAD_KEPT + 3


def test_a_record_outside_its_join_keys_partition_is_named() -> None:
    (ann,) = in_partition(0, 1)
    stray = in_partition(1, 1)[0]
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    join.add(decoded("p.tweets", [events.TweetPosted(1, ann, "a", "x")]))
    join.add(
        decoded(
            "p.follows",
            [events.Followed(ann, ann), events.Followed(ann, stray), events.Followed(3, stray)],
            first_offset=20,
        )
    )
    rows = rows_of(join)
    named = sorted(
        (r["name"], r["offset"], r["a"], r["b"]) for r in rows if r["kind"] == Row.MISPLACED
    )
    assert named == [("p.follows", 21, stray, 1), ("p.follows", 22, stray, 1)]
    assert {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}["misplaced"] == 2


def test_reposts_keep_their_originals_and_engagements_become_states_and_counts() -> None:
    ann, bob = in_partition(0, 2)
    liked, answered = [t for t in range(3000, 3100) if partition_for(t, PARTITIONS) == 0][:2]
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    posts = [events.TweetPosted(liked, ann, "ann", "hi")]
    posts += [events.TweetPosted(liked + 10, bob, "bob", "", liked)]  # bob reposts it
    posts += [events.TweetPosted(liked + 20, ann, "ann", "", liked)]  # and so does ann
    join.add(decoded("p.tweets", posts))
    engaged = [
        events.Engaged(events.LIKE, bob, liked),
        events.Engaged(events.LIKE, ann, liked),
        events.Engaged(events.REPOST, bob, liked),
        events.Engaged(events.REPOST, ann, liked),
        # Replies are counted by the reply: two of ann's to ``liked``, one to ``answered``.
        events.Engaged(events.REPLY, liked + 30, liked),
        events.Engaged(events.REPLY, liked + 31, liked),
        events.Engaged(events.REPLY, answered + 40, answered),
    ]
    join.add(decoded("p.engagements", engaged, first_offset=10))
    rows = rows_of(join)
    states = {r["a"]: r for r in rows if r["kind"] == Row.STATE}
    assert states[ann]["kept"] == [liked, liked + 20]
    assert states[ann]["origins"] == [liked, liked]
    assert states[bob]["origins"] == [liked]
    assert AuthorState.decode(states[ann]["blob"]).originals == {liked + 20: liked}
    counted = {r["a"]: r["blob"] for r in rows if r["kind"] == Row.ENGAGEMENTS}
    assert set(counted) == {liked, answered}
    assert Engagements.decode(counted[liked]).counts == (2, 2, 2)
    assert Engagements.decode(counted[answered]).replies.tolist() == [answered + 40]
    assert join.counts == {liked: (2, 2, 2), answered: (0, 0, 1)}
    assert not [r for r in rows if r["kind"] == Row.MISPLACED]


def test_muted_and_quiet_follows_filters_and_the_originals_authors() -> None:
    """A follow that mutes the author is no follower and no edge (but a self
    edge stays one); one with reposts off is a quiet follower, its edge
    marked, and the author's state row carries the newest posts it merges;
    the kept entries carry their originals' authors; each non-empty filter
    is a row of its own."""
    ann, bob, cy, dee, eve = in_partition(0, 5)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    tweets = [events.TweetPosted(1000 + i, ann, "ann", f"t{i}") for i in range(5)]
    tweets += [events.TweetPosted(1010, ann, "ann", "", 900, eve)]
    tweets += [events.TweetPosted(1011, ann, "ann", "", 950, dee)]
    tweets += [events.TweetPosted(1012, bob, "bob", "", 1001)]  # an older record: no author
    join.add(decoded("p.tweets", tweets))
    follows = [
        events.Followed(bob, ann, reposts=False),
        events.Followed(cy, ann, muted=True),
        events.Followed(dee, ann),
        events.Followed(ann, ann, muted=True, reposts=False),  # the self edge all the same
        events.Followed(eve, ann, muted=True, reposts=False),
        events.Followed(ann, bob, muted=True),
    ]
    join.add(decoded("p.follows", follows, first_offset=10))
    filters = [
        events.FiltersSet(bob, (eve,)),
        events.FiltersSet(cy, ()),
        events.FiltersSet(dee, (3, 7)),
    ]
    join.add(decoded("p.filters", filters, first_offset=20))
    rows = rows_of(join)

    states = {r["a"]: r for r in rows if r["kind"] == Row.STATE}
    expected = rebuilt_author_state(
        ann,
        [bob, dee, ann],
        [*range(1000, 1005), 1010, 1011],
        originals={1010: 900, 1011: 950},
        original_authors={1010: eve, 1011: dee},
        quiet=[bob],
    )
    row = states[ann]
    assert AuthorState.decode(row["blob"]) == expected
    assert AuthorState.decode(row["blob"]).quiet == {bob}
    assert (row["kept"], row["origins"], row["by"], row["horizon"]) == (
        [1004, 1010, 1011],
        [1004, 900, 950],
        [0, eve, dee],
        1004,
    )
    assert (row["posts"], row["posts_horizon"]) == ([1002, 1003, 1004], 1002)
    # bob has reposts but no quiet follower (nor any follower): no posts run.
    assert states[bob]["by"] == [0] and states[bob]["posts"] is None
    assert AuthorState.decode(states[bob]["blob"]).followers == set()

    edges = sorted((r["a"], r["b"], r["quiet"]) for r in rows if r["kind"] == Row.EDGE)
    assert edges == sorted(
        [
            (bob, ann, True),
            (dee, ann, False),
            (ann, ann, False),
            (ann, ann, False),
            (bob, bob, False),
        ]
    )
    hidden = {r["a"]: r["hidden"] for r in rows if r["kind"] == Row.FILTER}
    assert hidden == {bob: [eve], dee: [3, 7]}  # an empty filter: no row
    tally = {r["name"]: r["a"] for r in rows if r["kind"] == Row.TALLY}
    assert (tally["follow"], tally["quiet"], tally["muted"], tally["filter"]) == (1, 1, 4, 3)
    assert tally["edges"] == 5 and tally["kept"] == 3 + 3 + 1
    assert not [r for r in rows if r["kind"] == Row.MISPLACED]


def test_replies_carry_whom_they_answer_and_posts_whom_they_notify() -> None:
    """A reply's state names whom it answers (not its own author: a reply to
    oneself answers no one) and notifies them with the users it mentions; a
    repost of a reply answers whom the reply does, and notifies no one. The
    kept run and a quiet follower's posts run carry whom each entry answers
    (0: no one): the join's state after replaying the same records."""
    ann, bob, cy, dee = in_partition(0, 4)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)

    def reply(t: int, to: int, mentions: tuple[int, ...] = ()) -> events.TweetPosted:
        names = tuple(f"u{m}" for m in mentions)
        return events.TweetPosted(
            t, ann, "ann", "re", in_reply_to=t - 500, reply_to=to, reply_to_name="x",
            mentions=mentions, mention_names=names,
        )  # fmt: skip

    tweets = [
        reply(1000, bob, (cy,)),
        reply(1001, ann),  # to ann's own post
        reply(1002, cy),
        events.TweetPosted(1003, ann, "ann", "", 500, dee, repost_of_reply_to=bob),
        events.TweetPosted(1004, ann, "ann", "hi @dee", mentions=(dee,), mention_names=("dee",)),
        events.TweetPosted(1005, ann, "ann", "", 501, dee, repost_of_reply_to=dee),
    ]
    join.add(decoded("p.tweets", tweets))
    join.add(decoded("p.follows", [events.Followed(bob, ann, reposts=False)], first_offset=10))
    rows = rows_of(join)
    (row,) = [r for r in rows if r["kind"] == Row.STATE and r["a"] == ann]
    state = AuthorState.decode(row["blob"])
    replayed = join_events(
        ann,
        AuthorState(),
        [
            events.Envelope(seq, ev)
            for seq, ev in enumerate([*tweets, events.Followed(bob, ann, reposts=False)], 1)
        ],
        cap=2,
        slack=1,
    ).state
    assert state == replayed
    assert state.answers == {1000: bob, 1002: cy, 1003: bob}
    assert state.notified == {1000: (bob, cy), 1002: (cy,), 1004: (dee,)}
    # Whom they notify, per user: their mentions timelines' rows.
    notified = {(r["a"], r["b"]): r["kept"] for r in rows if r["kind"] == Row.MENTIONS}
    assert notified == {(bob, ann): [1000], (cy, ann): [1000, 1002], (dee, ann): [1004]}
    assert (row["kept"], row["answers"]) == ([1003, 1004, 1005], [bob, 0, 0])
    assert (row["posts"], row["posts_answers"]) == ([1001, 1002, 1004], [0, cy, 0])


def test_posts_naming_users_notify_them_without_a_reply_among_them() -> None:
    """A chunk of posts that name users and answer none: its author's state
    notifies them, and each user's row holds the author's newest cap + slack
    + 1 of the posts naming it (one more than its mentions timeline keeps:
    it says older ones were cut)."""
    ann, bob, cy = in_partition(0, 3)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    tweets = [
        events.TweetPosted(1000 + i, ann, "ann", "hi", mentions=(bob,), mention_names=("bob",))
        for i in range(6)
    ]
    tweets += [events.TweetPosted(1010, ann, "ann", "hi", mentions=(bob, cy), mention_names=())]
    join.add(decoded("p.tweets", [*tweets, events.TweetPosted(1011, ann, "ann", "hi")]))
    rows = rows_of(join)
    (row,) = [r for r in rows if r["kind"] == Row.STATE and r["a"] == ann]
    assert AuthorState.decode(row["blob"]).notified == {
        **{t.tweet_id: (bob,) for t in tweets[:6]}, 1010: (bob, cy),
    }  # fmt: skip
    notified = {(r["a"], r["b"]): r["kept"] for r in rows if r["kind"] == Row.MENTIONS}
    assert notified == {(bob, ann): [1003, 1004, 1005, 1010], (cy, ann): [1010]}
    assert [r["a"] for r in rows if r["kind"] == Row.TALLY and r["name"] == "notified"] == [8]


def test_a_pulled_authors_quiet_followers_read_its_list() -> None:
    """A pulled author's quiet followers read its list (its reposts left out
    when read): no posts run is kept for them."""
    ann, bob, cy = in_partition(0, 3)
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=2)
    posts = [
        events.TweetPosted(1000, ann, "ann", "hi"),
        events.TweetPosted(1001, ann, "", "", 7, 9),
    ]
    join.add(decoded("p.tweets", posts))
    join.add(
        decoded("p.follows", [events.Followed(bob, ann, reposts=False), events.Followed(cy, ann)])
    )
    (state,) = [r for r in rows_of(join) if r["kind"] == Row.STATE]
    assert state["pulled"] and state["posts"] is None and state["by"] == [0, 9]


def test_a_muted_follow_or_a_filter_outside_its_partition_is_named() -> None:
    stray = in_partition(1, 1)[0]
    join = PartitionJoin(0, PARTITIONS, cap=2, slack=1, pull_threshold=0)
    join.add(decoded("p.follows", [events.Followed(3, stray, muted=True)]))
    join.add(decoded("p.filters", [events.FiltersSet(stray, (4,))], first_offset=5))
    rows = rows_of(join)
    named = sorted((r["name"], r["offset"], r["a"]) for r in rows if r["kind"] == Row.MISPLACED)
    assert named == [("p.filters", 5, stray), ("p.follows", 0, stray)]
