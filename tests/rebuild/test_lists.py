"""The rebuild of lists' timelines without Spark (its decode, its read
task's join, the broadcast join and the timelines' rule), with explicit
expected timelines: a list (owner -L, docs/decisions.md D31) is rebuilt
like a home timeline whose follows are its members, screened by its own
filter copy, except that its owner's own entries are never hidden."""

from __future__ import annotations

import itertools

from fanout.model import events, owners
from fanout.model.author_state import AuthorState
from fanout.model.partitioning import partition_for
from spark.rebuild.decode import FILTER, FOLLOW, MUTED, decode_records
from spark.rebuild.read import PartitionJoin, Row
from spark.rebuild.tasks import idle_owners
from spark.source.offsets import OffsetRange
from tests.rebuild.test_world import TOPICS, rebuild

OWN, M, H, X, W, G = 1, 2, 3, 4, 5, 6  # the list's owner, members and others
L = owners.list_id(OWN, 1)
LO = owners.list_owner(L)  # the list's timeline owner, -L
BIG = 20  # a cap that cuts nothing


def envelopes(*evs: events.Event) -> list[events.Envelope]:
    seq = itertools.count(1)
    return [events.Envelope(next(seq), e) for e in evs]


def post(t: int, author: int) -> events.TweetPosted:
    return events.TweetPosted(t, author, f"u{author}", f"post {t}")


def repost(t: int, actor: int, original: int, by: int) -> events.TweetPosted:
    return events.TweetPosted(t, actor, f"u{actor}", "", repost_of=original, repost_of_author=by)


def reply(t: int, author: int, to: int, to_author: int) -> events.TweetPosted:
    return events.TweetPosted(
        t,
        author,
        f"u{author}",
        f"reply {t}",
        in_reply_to=to,
        reply_to=to_author,
        reply_to_name=f"u{to_author}",
    )


def world() -> list[events.Envelope]:
    """The list L of OWN: members OWN, M and H (H hidden by its owner's filter but followed
    plainly: the record says so), G (hidden, its membership muted), X
    (removed); W is hidden and no member."""
    return envelopes(
        events.Followed(LO, OWN),
        events.Followed(LO, M),
        events.Followed(LO, H),
        events.Followed(LO, G, muted=True),
        events.Followed(LO, X),
        events.Unfollowed(LO, X),
        events.Followed(X, M),  # a home follower of M beside the list
        events.FiltersSet(LO, (H, W, G)),
        events.FiltersSet(OWN, (H, W, G)),
        post(1001, H),
        post(1002, W),
        post(1003, G),
        post(1004, M),
        post(1005, X),
        repost(1006, M, 1001, H),  # a member's repost of a hidden user's: screened
        repost(1007, OWN, 1002, W),  # the owner's own repost of a hidden user's: kept
        repost(1008, M, 1005, X),
        reply(1009, OWN, 1001, H),  # the owner's reply to a hidden member: shows
        reply(1010, OWN, 1002, W),  # the owner's reply to a hidden non-member: aside
        reply(1011, M, 1005, X),  # a member's reply to a non-member: aside
        reply(1012, M, 1003, G),  # a member's reply to a hidden user: left out
        reply(1013, OWN, 1004, M),  # the owner's reply to a member: shows
        post(1014, H),
        post(1015, G),  # a muted member's: not in the list
        post(1016, X),  # a removed member's: not in the list
    )


def test_a_lists_timeline_is_its_members_entries_screened_by_its_filter_copy() -> None:
    got = rebuild(world(), pull_threshold=0)
    lst = got.inputs[LO]
    assert lst.followed and lst.hidden.tolist() == [H, W, G]
    assert lst.followees.tolist() == [OWN, M, H, G]  # tf: its members (the muted one too)
    made = lst.timeline(BIG, 0)
    assert made.horizon == 0
    assert made.ids == [1001, 1004, 1007, 1008, 1009, 1013, 1014]
    assert made.pairs == [(1002, 1007), (1005, 1008)]
    assert made.aside == [(X, 1011), (W, 1010)]
    assert made.shown == [(M, 1013), (H, 1009)]
    assert not lst.pulls
    # The owner's home: its own entries always show, answering no one.
    home = got.inputs[OWN].timeline(BIG, 0)
    assert home.ids == [1007, 1009, 1010, 1013] and home.aside == home.shown == []
    # The members' author states count the list among their followers.
    assert AuthorState.decode(got.states[M]["blob"]).followers == {X, LO}
    assert AuthorState.decode(got.states[OWN]["blob"]).followers == {LO}
    assert LO not in AuthorState.decode(got.states[G]["blob"]).followers


def test_a_lists_membership_counts_toward_the_pull_threshold() -> None:
    got = rebuild(world(), pull_threshold=2)
    assert got.states[M]["pulled"]  # X and the list
    assert not got.states[H]["pulled"]  # the list only
    assert got.inputs[LO].pulls == [M] and got.inputs[X].pulls == [M]
    # Read with M's list merged in, screened alike (the reader's view).
    seen = got.inputs[LO].timeline(BIG, 0, seen=True)
    assert seen.ids == [1001, 1004, 1007, 1008, 1009, 1013, 1014]


def test_a_lists_timeline_without_its_owner_as_member_holds_none_of_its_entries() -> None:
    evs = [e.event for e in world() if e.event != events.Followed(LO, OWN)]
    got = rebuild(envelopes(*evs), pull_threshold=0)
    made = got.inputs[LO].timeline(BIG, 0)
    assert made.ids == [1001, 1004, 1008, 1014]
    assert made.aside == [(X, 1011)] and made.shown == []
    assert got.inputs[LO].followees.tolist() == [M, H, G]


def test_memberships_and_filter_copies_take_the_python_path_and_decode_right() -> None:
    records = [
        events.encode(events.Followed(LO, M)),
        events.encode(events.Followed(LO, G, muted=True)),
        events.encode(events.Unfollowed(LO, X)),
        events.encode(events.Followed(X, M)),
        events.encode(events.FiltersSet(LO, (H, W))),
    ]
    follows = [r for r in records if r.topic == events.FOLLOWS]
    batch, _ = decode_records(
        OffsetRange(TOPICS.physical(events.FOLLOWS), 0, 0, len(follows)),
        [r.key for r in follows],
        [r.value for r in follows],
        list(range(len(follows))),
        [events.headers(i + 1, r.join_key) for i, r in enumerate(follows)],
        topics=TOPICS,
    )
    rows = batch.select(["kind", "a", "b", "seq"]).to_pylist()
    assert rows == [
        {"kind": FOLLOW, "a": M, "b": LO, "seq": 1},
        {"kind": MUTED, "a": G, "b": LO, "seq": 2},
        {"kind": "gone", "a": None, "b": None, "seq": 3},
        {"kind": FOLLOW, "a": M, "b": X, "seq": 4},
    ]
    (filter_record,) = [r for r in records if r.topic == events.FILTERS]
    batch, _ = decode_records(
        OffsetRange(TOPICS.physical(events.FILTERS), 0, 0, 1),
        [filter_record.key],
        [filter_record.value],
        [0],
        [events.headers(5, filter_record.join_key)],
        topics=TOPICS,
    )
    assert batch.select(["kind", "a", "ids"]).to_pylist() == [
        {"kind": FILTER, "a": LO, "ids": [H, W]}
    ]


def test_a_lists_filter_copy_is_in_its_owners_partition() -> None:
    """The filters topic puts -L's record with its owner o (the join key):
    the read must not call it misplaced."""
    owner = next(o for o in range(1, 100) if partition_for(o, 2) != partition_for(-L, 2))
    list_owner = owners.list_owner(owners.list_id(owner, 1))
    home = partition_for(owner, 2)
    record = events.encode(events.FiltersSet(list_owner, (H,)))
    assert record.join_key == owner
    batch, _ = decode_records(
        OffsetRange(TOPICS.physical(events.FILTERS), home, 0, 1),
        [record.key],
        [record.value],
        [0],
        [events.headers(1, record.join_key)],
        topics=TOPICS,
    )
    join = PartitionJoin(home, 2, cap=4, slack=2, pull_threshold=0)
    join.add(batch)
    rows = [r for b in join.rows(TOPICS) for r in b.to_pylist()]
    assert not [r for r in rows if r["kind"] == Row.MISPLACED]
    assert [(r["a"], r["hidden"]) for r in rows if r["kind"] == Row.FILTER] == [(list_owner, [H])]


class _Store:
    """What :func:`idle_owners` asks of the store: the live generation's
    dropped timelines."""

    def __init__(self, dropped: set[int]) -> None:
        self.asked: list[int] = []
        self.dropped_ = dropped

    def dropped(self, generation: int, owners_: list[int]) -> set[int]:
        self.asked += owners_
        return {o for o in owners_ if o in self.dropped_}


def test_an_idle_owners_lists_stay_dropped_with_its_home_and_mentions() -> None:
    other = owners.list_owner(owners.list_id(M, 3))
    store = _Store({OWN})
    idle = idle_owners(store, 1, 2, [LO, other, M])  # type: ignore[arg-type]
    assert idle == {LO}  # OWN's home is not in this chunk: asked all the same
    assert sorted(store.asked) == [OWN, M]
    idle = idle_owners(store, 1, 2, [OWN, LO, M])  # type: ignore[arg-type]
    assert idle == {OWN, -OWN, LO}  # no "-(-L)"
    assert idle_owners(store, None, 2, [OWN, LO]) == set()  # type: ignore[arg-type]
    assert idle_owners(store, 2, 2, [OWN, LO]) == set()  # type: ignore[arg-type]
