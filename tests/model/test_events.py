from __future__ import annotations

import contextlib
from datetime import UTC

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.model import events, ids, owners

ID = st.integers(min_value=1, max_value=ids.MAX_ID)
TEXT = st.text(min_size=1, max_size=280)
#: The kinds of engagement whose member is a user.
USERS_ENGAGE = (events.LIKE, events.REPOST)
EVENTS = st.one_of(
    st.builds(
        events.TweetPosted, tweet_id=ID, author_id=ID, author=st.text(max_size=30), text=TEXT
    ),
    st.builds(events.TweetDeleted, tweet_id=ID, author_id=ID),
    st.builds(
        events.Followed,
        follower_id=ID,
        followee_id=ID,
        muted=st.booleans(),
        reposts=st.booleans(),
    ),
    st.builds(
        lambda owner, hidden: events.FiltersSet(owner, tuple(sorted(set(hidden)))),
        ID,
        st.lists(ID, max_size=20),
    ),
    st.builds(events.Unfollowed, follower_id=ID, followee_id=ID),
    st.builds(
        lambda original, gap, author_id, author, original_author: events.TweetPosted(
            original + gap, author_id, author, "", original, original_author
        ),
        st.integers(min_value=1, max_value=ids.MAX_ID // 2),
        st.integers(min_value=1, max_value=ids.MAX_ID // 2),
        ID,
        st.text(max_size=30),
        st.one_of(st.just(0), ID),  # 0: a record written before it was carried
    ),
    st.builds(
        lambda parent, gap, author_id, reply_to, name, mentions, names: events.TweetPosted(
            parent + gap,
            author_id,
            "ann",
            "a reply",
            in_reply_to=parent,
            reply_to=reply_to,
            reply_to_name=name,
            mentions=tuple(sorted(set(mentions) - {author_id})),
            mention_names=tuple(names),
        ),
        st.integers(min_value=1, max_value=ids.MAX_ID // 2),
        st.integers(min_value=1, max_value=ids.MAX_ID // 2),
        ID,
        ID,
        st.text(min_size=1, max_size=30),
        st.lists(ID, max_size=10),
        st.lists(st.text(min_size=1, max_size=30), max_size=10),
    ),
    st.builds(
        lambda tweet_id, author_id, mentions: events.TweetPosted(
            tweet_id,
            author_id,
            "ann",
            "hi",
            mentions=tuple(sorted(set(mentions) - {author_id})),
            mention_names=("ann",),
        ),
        ID,
        ID,
        st.lists(ID, max_size=10),
    ),
    st.builds(events.Engaged, kind=st.sampled_from(USERS_ENGAGE), member=ID, tweet_id=ID),
    st.builds(events.Disengaged, kind=st.sampled_from(USERS_ENGAGE), member=ID, tweet_id=ID),
    # A reply's engagement: its member is the reply, newer than the tweet it answers.
    st.builds(
        lambda parent, gap, on: (events.Engaged if on else events.Disengaged)(
            events.REPLY, parent + gap, parent
        ),
        st.integers(min_value=1, max_value=ids.MAX_ID // 2),
        st.integers(min_value=1, max_value=ids.MAX_ID // 2),
        st.booleans(),
    ),
)


def wire(
    event: events.Event, seq: int = 1
) -> tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]:
    record = events.encode(event)
    return record.topic, record.key, record.value, events.headers(seq, record.join_key)


@given(EVENTS, st.integers(min_value=1, max_value=2**62))
def test_every_event_round_trips(event: events.Event, seq: int) -> None:
    assert events.decode(*wire(event, seq)) == events.Envelope(seq=seq, event=event)


def test_keys_topics_and_tombstones() -> None:
    posted = events.encode(events.TweetPosted(tweet_id=10, author_id=3, author="ann", text="hi"))
    deleted = events.encode(events.TweetDeleted(tweet_id=10, author_id=3))
    followed = events.encode(events.Followed(follower_id=4, followee_id=3))
    unfollowed = events.encode(events.Unfollowed(follower_id=4, followee_id=3))
    assert (posted.topic, posted.key, posted.join_key) == ("tweets", b"10", 3)
    assert (deleted.key, deleted.value) == (b"10", None)
    assert (followed.topic, followed.key, followed.join_key) == ("follows", b"4:3", 3)
    assert (unfollowed.key, unfollowed.value) == (b"4:3", None)
    assert orjson.loads(posted.value or b"") == {
        "v": 1,
        "id": 10,
        "author_id": 3,
        "author": "ann",
        "text": "hi",
    }


def test_tombstone_is_routed_by_the_join_key_header() -> None:
    decoded = events.decode("tweets", b"10", None, {"seq": b"5", "jk": b"3"})
    assert decoded == events.Envelope(5, events.TweetDeleted(tweet_id=10, author_id=3))


def test_created_at_comes_from_the_id() -> None:
    tweet_id = ids.compose(ids.EPOCH_MS + 1234, 0, 0)
    assert events.created_at_iso(tweet_id) == "2026-01-01T00:00:01.234Z"


GOOD_VALUE = b'{"v":1,"id":10,"author_id":3,"author":"ann","text":"hi"}'
GOOD_HEADERS = {"seq": b"5", "jk": b"3"}


@pytest.mark.parametrize(
    ("topic", "key", "value", "headers", "reason"),
    [
        ("tweets", b"10", b"{not json", GOOD_HEADERS, "not JSON"),
        ("tweets", b"10", b"[1,2]", GOOD_HEADERS, "not a JSON object"),
        ("tweets", b"10", GOOD_VALUE.replace(b'"v":1', b'"v":99'), GOOD_HEADERS, "schema version"),
        ("tweets", b"11", GOOD_VALUE, GOOD_HEADERS, "does not match"),
        ("tweets", b"10", GOOD_VALUE, {"jk": b"3"}, "header 'seq'"),
        ("tweets", b"10", GOOD_VALUE, {"seq": b"x", "jk": b"3"}, "header 'seq'"),
        ("tweets", b"10", GOOD_VALUE, {"seq": b"5", "jk": b"4"}, "join key"),
        ("tweets", None, GOOD_VALUE, GOOD_HEADERS, "no key"),
        ("tweets", b"10", GOOD_VALUE.replace(b'"id":10', b'"id":-10'), GOOD_HEADERS, "valid id"),
        ("tweets", b"10", GOOD_VALUE.replace(b'"text":"hi"', b'"text":5'), GOOD_HEADERS, "text"),
        ("follows", b"4-3", None, GOOD_HEADERS, "follower:followee"),
        ("follows", b"4:3", b'{"v":1,"follower_id":4,"followee_id":9}', GOOD_HEADERS, "match"),
        ("likes", b"1", b"{}", GOOD_HEADERS, "unknown topic"),
    ],
)
def test_bad_records_raise_bad_event_naming_the_problem(
    topic: str, key: bytes | None, value: bytes | None, headers: dict[str, bytes], reason: str
) -> None:
    with pytest.raises(events.BadEvent, match=reason):
        events.decode(topic, key, value, headers)


@given(st.binary(max_size=200), st.one_of(st.none(), st.binary(max_size=300)))
def test_arbitrary_bytes_never_crash_the_decoder(key: bytes, value: bytes | None) -> None:
    for topic in ("tweets", "follows"):
        with contextlib.suppress(events.BadEvent):
            events.decode(topic, key, value, GOOD_HEADERS)


def test_a_timeline_reset_round_trips_and_bad_ones_are_named() -> None:
    reset = events.TimelineReset(owner_id=9, tweet_ids=(3, 5), horizon=3, as_of=41)
    record = events.encode(reset)
    assert (record.topic, record.key, record.join_key) == (events.TIMELINES, b"9", 9)
    assert events.decode(record.topic, record.key, record.value, events.headers(42, 9)) == (
        events.Envelope(42, reset)
    )
    for value, problem in (
        (b'{"v": 1, "ids": [1, "x"], "horizon": 0, "as_of": 1}', "ids"),
        (b'{"v": 1, "ids": [1], "horizon": -1, "as_of": 1}', "horizon"),
        (b'{"v": 1, "ids": [1], "horizon": 0}', "as_of"),
    ):
        with pytest.raises(events.BadEvent, match=problem):
            events.decode(events.TIMELINES, b"9", value, events.headers(42, 9))


def test_a_mentions_timeline_reset_goes_with_its_users_key() -> None:
    from fanout.store.keys import Shards

    reset = events.TimelineReset(owner_id=-9, tweet_ids=(3, 5), horizon=0, as_of=41)
    record = events.encode(reset)
    # Its own compacted key, but u's partition and u's shard.
    assert (record.key, record.join_key) == (b"-9", 9)
    assert events.decode(record.topic, record.key, record.value, events.headers(42, 9)) == (
        events.Envelope(42, reset)
    )
    assert all(Shards(n).of(-9) == Shards(n).of(9) for n in (1, 3, 16))
    for key in (b"-", b"-0", b"--9", b"-x"):
        with pytest.raises(events.BadEvent, match="owner key"):
            events.decode(events.TIMELINES, key, record.value, events.headers(42, 9))


def test_deleted_bodies_are_the_first_thing_a_batch_writes() -> None:
    from fanout.model.join import Mutation, Op
    from fanout.store.ops import OpCode, encode_ops, group_by_timeline, pack_ids

    ops, deleted = group_by_timeline(
        [
            Mutation(Op.ADD, tuple(range(1, 50)), (7,), 0, 3),
            Mutation(Op.DELETE_BODY, (), (5,)),
            Mutation(Op.REMOVE, tuple(range(1, 50)), (5,)),
        ]
    )
    chunks = encode_ops({7: b"{}"}, ops, deleted, chunk=10)
    # The body goes in the first script call: readers skip the tweet everywhere at
    # once, before the removals reach each of the 49 timelines in later calls.
    assert len(chunks) > 1 and chunks[0][:2] == [OpCode.DELETE_BODIES, pack_ids([5])]
    assert sum(c.count(pack_ids([5])) for c in chunks) == 1 + 49


def test_a_script_call_holds_a_bounded_number_of_ops_and_body_bytes() -> None:
    """Each op may rewrite its whole timeline (a trim): a call of single-id adds
    holds at most chunk / OP_COST of them; big bodies count by their bytes."""
    from fanout.model.join import Op
    from fanout.store.ops import BODY_BYTES, OP_COST, TimelineOp, encode_ops

    def blobs(call: list) -> int:  # one packed-ids or body argument per op (pairs: b"")
        return sum(isinstance(a, bytes) and a != b"" for a in call)

    ops = [TimelineOp(Op.ADD, owner, (owner,)) for owner in range(1, 2001)]
    calls = encode_ops({}, ops, [], chunk=4000)
    assert sum(map(blobs, calls)) == 2000 and max(map(blobs, calls)) <= 4000 // OP_COST
    bodies = {t: b"x" * 640 for t in range(1, 1001)}
    calls = encode_ops(bodies, [], [], chunk=4000)
    assert sum(map(blobs, calls)) == 1000
    assert max(map(blobs, calls)) <= 4000 // (1 + 640 // BODY_BYTES) + 1


def test_grouping_a_post_to_many_followers_shares_one_op_shape() -> None:
    """An owner reached by one mutation gets that mutation's ids (sorted, unique,
    cut to ``keep``) without a copy per owner; owners reached twice are merged."""
    from fanout.model.join import Mutation, Op
    from fanout.store.ops import TimelineOp, group_by_timeline

    many = tuple(range(1, 1001))
    ops, _ = group_by_timeline(
        [Mutation(Op.ADD, many, (30, 10, 10, 20), 0, 5), Mutation(Op.ADD, (7,), (40,), 0, 6)],
        keep=2,
    )
    by_owner = {op.owner: op for op in ops}
    assert len(ops) == 1000
    assert by_owner[1] == TimelineOp(Op.ADD, 1, (20, 30), 20, 5)
    assert by_owner[1].tweets is by_owner[999].tweets  # computed once
    assert by_owner[7] == TimelineOp(Op.ADD, 7, (30, 40), 30, 6)  # merged, then cut


_ids = st.lists(st.integers(1, 12), max_size=4).map(tuple)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_ids, _ids, st.integers(0, 12), st.integers(1, 50)), max_size=12),
    st.sampled_from([None, 1, 2, 5]),
)
def test_plain_adds_group_as_the_general_rules_do(
    adds: list[tuple[tuple[int, ...], tuple[int, ...], int, int]], keep: int | None
) -> None:
    """The vectorised grouping of plain adds gives what the general grouping
    gives, op for op and in the same order: owners reached once or several
    times, repeated ids, adds with no ids, trims."""
    from fanout.model.join import Mutation, Op
    from fanout.store import ops as timeline_ops

    # Entries 7-12 are reposts (of 1-6, by user 100 + the original), all by user 3:
    # merged and cut ops keep the pairs of their ids, checked against the
    # original's author except in the actor's own timeline.
    originals = {t: t - 6 for t in range(7, 13)}
    facts = {e: (o, 100 + o, 3) for e, o in originals.items()}
    mutations = [
        Mutation(
            Op.ADD,
            o,
            t,
            h,
            q,
            reposts=tuple(sorted({(e, originals[e], 100 + originals[e]) for e in t if e > 6})),
            actor=3,
        )
        for o, t, h, q in adds
    ]
    grouped = timeline_ops._group_adds(mutations, keep, facts)
    assert grouped == timeline_ops._group_any(mutations, keep, facts)
    assert grouped == timeline_ops.group_by_timeline(mutations, keep)[0]
    for op in grouped:
        by = 0 if op.owner == 3 else 100
        assert op.reposts == tuple(
            (e, originals[e], by + originals[e] if by else 0) for e in op.tweets if e > 6
        )


@pytest.mark.parametrize(
    ("raw", "number"),
    [
        (b"42", 42),
        (b" 7 ", 7),
        (b"+5", 5),
        (b"-3", -3),
        (b"9223372036854775807", 2**63 - 1),
        (b"9223372036854775808", None),  # beyond bigint
        (b"", None),
        (b"4x", None),
        (b"1_000", None),
        (b"\xff1", None),
        (None, None),
    ],
)
def test_a_header_number_is_what_spark_reads_as_a_bigint(
    raw: bytes | None, number: int | None
) -> None:
    assert events.header_number(raw) == number


def test_header_numbers_take_the_first_header_of_each_name() -> None:
    assert events.header_numbers([("seq", b"5"), ("x", b"1"), ("jk", b"9"), ("seq", b"6")]) == (
        5,
        9,
        None,
    )
    assert events.header_numbers([("mark", b"12"), ("mark", b"x")]) == (None, None, 12)
    assert events.header_numbers(None) == (None, None, None)
    assert events.header_numbers([("seq", b"bad"), ("seq", b"3")]) == (None, None, None)


@given(st.integers(min_value=1, max_value=ids.MAX_ID))
def test_created_at_is_the_ids_utc_millisecond_in_iso_form(tweet_id: int) -> None:
    expected = (
        ids.created_at(tweet_id).astimezone(UTC).isoformat(timespec="milliseconds")
    ).replace("+00:00", "Z")
    assert events.created_at_iso(tweet_id) == expected


def test_the_canonical_patterns_describe_what_encode_writes() -> None:
    """The relay's own form, as events.py describes it for bulk readers, is
    exactly what :func:`events.encode` and :func:`events.tweet_json` write."""
    import re

    post = events.TweetPosted(1234567, 89, "ann_1", "héllo, 🐦")
    record = events.encode(post)
    assert record.value is not None
    match = re.fullmatch(events.CANONICAL_TWEET_VALUE, record.value.decode())
    assert match and match.group("id") == "1234567" and match.group("author") == "ann_1"
    assert re.fullmatch(events.CANONICAL_ID, record.key.decode())
    follow = events.encode(events.Followed(12, 345))
    parts = re.fullmatch(events.CANONICAL_FOLLOW_KEY, follow.key.decode())
    assert parts and (parts.group("follower"), parts.group("followee")) == ("12", "345")
    before, between, after = events.CANONICAL_FOLLOW_VALUE
    assert follow.value == f"{before}12{between}345{after}".encode()
    head, author, text, created_at, tail = events.TWEET_BODY
    stamp = events.created_at_iso(post.tweet_id).removesuffix("Z")
    body = f"{head}1234567{author}ann_1{text}héllo, 🐦{created_at}{stamp}{tail}"
    assert events.tweet_json(post) == body.encode()
    assert re.fullmatch(events.CANONICAL_SEQ, "0") and not re.fullmatch(events.CANONICAL_SEQ, "07")
    # A text orjson must escape is not in the plain form: the slow path decodes it.
    quoted = events.encode(events.TweetPosted(1234568, 89, "ann_1", 'say "hi"'))
    assert not re.fullmatch(events.CANONICAL_TWEET_VALUE, quoted.value.decode())  # type: ignore[union-attr]


def test_a_repost_names_an_older_original_and_has_no_text() -> None:
    topic, key, _, hdrs = wire(events.TweetPosted(50, 7, "b", "", 40))
    for value in (
        b'{"v":1,"id":50,"author_id":7,"author":"b","text":"","repost_of":60}',
        b'{"v":1,"id":50,"author_id":7,"author":"b","text":"hi","repost_of":40}',
        b'{"v":1,"id":50,"author_id":7,"author":"b","text":"","repost_of":"40"}',
    ):
        with pytest.raises(events.BadEvent):
            events.decode(topic, key, value, hdrs)


def test_a_repost_carries_its_original_s_author_and_older_records_decode_without() -> None:
    repost = events.TweetPosted(50, 7, "b", "", 40, repost_of_author=9)
    topic, key, value, hdrs = wire(repost)
    assert orjson.loads(value)["repost_of_author"] == 9
    assert events.decode(topic, key, value, hdrs).event == repost
    older = b'{"v":1,"id":50,"author_id":7,"author":"b","text":"","repost_of":40}'
    assert events.decode(topic, key, older, hdrs).event.repost_of_author == 0  # type: ignore[union-attr]
    for bad in (
        b'{"v":1,"id":50,"author_id":7,"author":"b","text":"x","repost_of_author":9}',
        b'{"v":1,"id":50,"author_id":7,"author":"b","text":"","repost_of":40,"repost_of_author":0}',
    ):
        with pytest.raises(events.BadEvent):
            events.decode(topic, key, bad, hdrs)


def test_a_repost_of_a_reply_carries_whom_the_reply_answers() -> None:
    """The user a repost's original answers travels with the repost (the
    filters check it, docs/decisions.md D29); a post's own ``answers`` is its
    ``reply_to`` unless it answers its own author."""
    repost = events.TweetPosted(50, 7, "b", "", 40, repost_of_author=9, repost_of_reply_to=11)
    topic, key, value, hdrs = wire(repost)
    assert orjson.loads(value)["repost_of_reply_to"] == 11
    decoded = events.decode(topic, key, value, hdrs).event
    assert decoded == repost and isinstance(decoded, events.TweetPosted)
    assert decoded.answers == 11
    assert events.TweetPosted(50, 7, "b", "", 40, 9, repost_of_reply_to=9).answers == 0
    reply = events.TweetPosted(60, 7, "b", "hi", in_reply_to=40, reply_to=9, reply_to_name="c")
    assert reply.answers == 9
    own = events.TweetPosted(60, 7, "b", "hi", in_reply_to=40, reply_to=7, reply_to_name="b")
    assert own.answers == 0 and events.TweetPosted(60, 7, "b", "hi").answers == 0
    bad = b'{"v":1,"id":50,"author_id":7,"author":"b","text":"x","repost_of_reply_to":9}'
    with pytest.raises(events.BadEvent):
        events.decode(topic, key, bad, hdrs)


def test_a_follow_s_flags_are_written_only_when_not_the_default() -> None:
    plain = events.encode(events.Followed(3, 4))
    assert plain.value == b'{"v":1,"follower_id":3,"followee_id":4}'
    flagged = events.encode(events.Followed(3, 4, muted=True, reposts=False))
    assert orjson.loads(flagged.value or b"") == {  # type: ignore[arg-type]
        "v": 1,
        "follower_id": 3,
        "followee_id": 4,
        "muted": True,
        "reposts": False,
    }
    hdrs = events.headers(1, 4)
    for bad in (
        b'{"v":1,"follower_id":3,"followee_id":4,"muted":1}',
        b'{"v":1,"follower_id":3,"followee_id":4,"reposts":"no"}',
    ):
        with pytest.raises(events.BadEvent):
            events.decode(events.FOLLOWS, b"3:4", bad, hdrs)


def test_an_owner_s_filters_are_keyed_by_the_owner() -> None:
    record = events.encode(events.FiltersSet(7, (2, 9)))
    assert (record.topic, record.key, record.join_key) == (events.FILTERS, b"7", 7)
    hdrs = events.headers(1, 7)
    for bad in (None, b'{"v":1}', b'{"v":1,"hidden":[0]}', b'{"v":1,"hidden":"2"}'):
        with pytest.raises(events.BadEvent):
            events.decode(events.FILTERS, b"7", bad, hdrs)


def test_an_engagement_is_routed_by_its_tweet_and_checked_against_its_key() -> None:
    record = events.encode(events.Engaged(events.LIKE, 7, 40))
    assert (record.topic, record.key, record.join_key) == (events.ENGAGEMENTS, b"like:7:40", 40)
    hdrs = events.headers(3, 40)
    for key in (b"like:7:41", b"boost:7:40", b"like:7"):
        with pytest.raises(events.BadEvent):
            events.decode(events.ENGAGEMENTS, key, record.value, hdrs)
    gone = events.decode(events.ENGAGEMENTS, b"repost:7:40", None, hdrs)
    assert gone.event == events.Disengaged(events.REPOST, 7, 40)


def test_a_reply_s_engagement_is_keyed_by_the_reply_and_routed_by_its_parent() -> None:
    record = events.encode(events.Engaged(events.REPLY, 52, 40))
    assert (record.topic, record.key, record.join_key) == (events.ENGAGEMENTS, b"reply:52:40", 40)
    value = record.value or b""
    # Its value names the member as what it is: a reply, not a user.
    assert orjson.loads(value) == {
        "v": 1,
        "kind": "reply",
        "reply_id": 52,
        "tweet_id": 40,
    }
    hdrs = events.headers(3, 40)
    assert events.decode(events.ENGAGEMENTS, record.key, value, hdrs).event == (
        events.Engaged(events.REPLY, 52, 40)
    )
    gone = events.decode(events.ENGAGEMENTS, b"reply:52:40", None, hdrs)
    assert gone.event == events.Disengaged(events.REPLY, 52, 40)
    # A like's value names a user, as it always did (records already on the topic).
    like = events.encode(events.Engaged(events.LIKE, 7, 40))
    assert orjson.loads(like.value or b"")["user_id"] == 7
    bad = [
        (b"reply:40:40", None, "newer"),  # a reply is newer than its parent
        (b"reply:39:40", None, "newer"),
        (b"reply:52:40", value.replace(b"reply_id", b"user_id"), "reply_id"),
        (b"reply:53:40", value, "does not match"),
    ]
    for key, value, reason in bad:
        with pytest.raises(events.BadEvent, match=reason):
            events.decode(events.ENGAGEMENTS, key, value, hdrs)


def test_a_reposts_body_names_its_original() -> None:
    body = orjson.loads(events.tweet_json(events.TweetPosted(50, 7, "b", "", 40)))
    assert body == {
        "id": 50,
        "author": "b",
        "created_at": events.created_at_iso(50),
        "repost_of": 40,
    }
    head, author, created_at, original, tail = events.REPOST_BODY
    assert events.repost_json(50, "b", 40) == (
        f"{head}50{author}b{created_at}{events.created_at_iso(50)}{original}40{tail}".encode()
    )


#: b (7) answers ann's (9) tweet 40, naming cy (3) and themselves.
REPLY = events.TweetPosted(
    50,
    7,
    "b",
    "@Cy @b hi",
    in_reply_to=40,
    reply_to=9,
    reply_to_name="ann",
    mentions=(3,),
    mention_names=("cy", "b"),
)


def test_a_reply_and_its_mentions_are_written_only_when_there_and_read_back() -> None:
    topic, key, value, hdrs = wire(REPLY)
    assert orjson.loads(value or b"") == {
        "v": 1,
        "id": 50,
        "author_id": 7,
        "author": "b",
        "text": "@Cy @b hi",
        "in_reply_to": 40,
        "reply_to": 9,
        "reply_to_name": "ann",
        "mentions": [3],
        "mention_names": ["cy", "b"],
    }
    assert events.decode(topic, key, value, hdrs).event == REPLY
    # A post that answers and names nobody keeps the canonical form.
    plain = events.encode(events.TweetPosted(50, 7, "b", "hi"))
    assert plain.value == b'{"v":1,"id":50,"author_id":7,"author":"b","text":"hi"}'
    # Older records (and posts) decode to the defaults.
    posted = events.decode(topic, key, plain.value, hdrs).event
    assert isinstance(posted, events.TweetPosted)
    assert (posted.in_reply_to, posted.reply_to, posted.reply_to_name) == (0, 0, "")
    assert (posted.mentions, posted.mention_names) == ((), ())


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (b',"in_reply_to":"40","reply_to":9,"reply_to_name":"a"', "valid id"),
        (b',"in_reply_to":40,"reply_to_name":"a"', "reply_to"),
        (b',"in_reply_to":40,"reply_to":9', "reply_to_name"),
        (b',"in_reply_to":40,"reply_to":9,"reply_to_name":""', "reply_to_name"),
        (b',"in_reply_to":60,"reply_to":9,"reply_to_name":"a"', "older"),
        (b',"in_reply_to":50,"reply_to":9,"reply_to_name":"a"', "older"),
        (b',"reply_to":9,"reply_to_name":"a"', "without 'in_reply_to'"),
        (b',"mentions":3', "mentions"),
        (b',"mentions":[3,0]', "mentions"),
        (b',"mentions":[3,"4"]', "mentions"),
        (b',"mentions":[7]', "author"),
        (b',"mention_names":"cy"', "mention_names"),
        (b',"mention_names":["cy",""]', "mention_names"),
        (b',"mention_names":[5]', "mention_names"),
    ],
)
def test_a_malformed_reply_or_mention_is_a_bad_event(extra: bytes, reason: str) -> None:
    value = b'{"v":1,"id":50,"author_id":7,"author":"b","text":"hi"' + extra + b"}"
    with pytest.raises(events.BadEvent, match=reason):
        events.decode(events.TWEETS, b"50", value, events.headers(1, 7))


def test_a_repost_neither_answers_nor_mentions() -> None:
    base = b'{"v":1,"id":50,"author_id":7,"author":"b","text":"","repost_of":40'
    for extra in (
        b',"in_reply_to":30,"reply_to":9,"reply_to_name":"a"',
        b',"mentions":[3]',
        b',"mention_names":["cy"]',
    ):
        with pytest.raises(events.BadEvent, match="a repost neither"):
            events.decode(events.TWEETS, b"50", base + extra + b"}", events.headers(1, 7))


def test_a_reply_s_body_shows_what_it_answers_and_whom_it_mentions() -> None:
    body = events.tweet_json(REPLY)
    assert list(orjson.loads(body).items()) == [
        ("id", 50),
        ("author", "b"),
        ("text", "@Cy @b hi"),
        ("in_reply_to", {"id": 40, "author": "ann"}),
        ("mentions", ["cy", "b"]),
        ("created_at", events.created_at_iso(50)),
    ]
    # A post's body: the same fields, null and empty.
    post = orjson.loads(events.tweet_json(events.TweetPosted(50, 7, "b", "hi")))
    assert post["in_reply_to"] is None and post["mentions"] == []
    # A repost's body still names only its original (reads show the original's fields).
    assert "in_reply_to" not in orjson.loads(
        events.tweet_json(events.TweetPosted(60, 7, "b", "", 50))
    )


LIST = owners.list_id(7, 3)


@pytest.mark.parametrize(
    "event",
    [
        events.Followed(-LIST, 9),
        events.Followed(-LIST, 9, muted=True),
        events.Unfollowed(-LIST, 9),
        events.FiltersSet(-LIST, (2, 9)),
        events.TimelineReset(-LIST, (), 0, 40, drop=True),
        events.TimelineReset(-LIST, (5, 6), 0, 40, answers=((6, 9),)),
    ],
)
def test_a_list_s_memberships_filters_and_drop_round_trip(event: events.Event) -> None:
    record = events.encode(event)
    assert record.key.startswith(b"-")
    back = events.decode(record.topic, record.key, record.value, events.headers(5, record.join_key))
    assert back == events.Envelope(seq=5, event=event)


def test_a_membership_goes_with_its_member_and_a_list_s_reset_with_its_owner() -> None:
    assert events.encode(events.Followed(-LIST, 9)).join_key == 9
    assert events.TimelineReset(-LIST, (), 0, 1, drop=True).join_key == 7


@pytest.mark.parametrize(
    ("topic", "key", "value", "reason"),
    [
        (events.FOLLOWS, b"-7:9", b'{"v":1,"follower_id":-7,"followee_id":9}', "mentions"),
        (events.FOLLOWS, b"-77:9", None, "mentions"),
        (events.FILTERS, b"-7", b'{"v":1,"hidden":[]}', "mentions"),
        (
            events.FOLLOWS,
            b"-%d:9" % LIST,
            b'{"v":1,"follower_id":-%d,"followee_id":9,"reposts":false}' % LIST,
            "reposts",
        ),
        (
            events.TIMELINES,
            b"-%d" % LIST,
            b'{"v":1,"ids":[5],"horizon":0,"as_of":1,"drop":true}',
            "drop",
        ),
        (events.FOLLOWS, b"-%d:9" % ((1 << 53) + 7), None, "not a timeline owner"),
    ],
)
def test_a_list_record_that_names_no_list_is_a_bad_event(
    topic: str, key: bytes, value: bytes | None, reason: str
) -> None:
    follower = int(key.split(b":")[0])
    join_key = 9 if topic == events.FOLLOWS else owners.user_of(follower)
    with pytest.raises(events.BadEvent, match=reason):
        events.decode(topic, key, value, events.headers(1, join_key))
