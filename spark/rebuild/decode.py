"""The rebuild's decode of changelog records, a chunk of a read task at a time.

Nearly every record is exactly what the relay writes (:func:`fanout.model.events.encode`):
the headers ``seq`` and ``jk`` and nothing else, decimal ids without leading
zeros, compact JSON in a fixed field order. Those records are *recognised*
with Arrow compute kernels over the whole chunk (regular expressions, string
joins and comparisons in C++), about 1 µs a record instead of the 7-12 µs of
decoding each one in Python: the rebuild's read decodes every live key of
both changelogs, some three million records at full scale.

Every other record goes through :func:`fanout.model.events.decode_record`, the
rules' only home, one at a time: a relay mark, a bad record, a key with
leading zeros, a tweet whose text JSON-escapes a character (a quote, a
backslash, a control character), a value in another field order. The fast
path is a recogniser, not a second decoder: what it accepts, the Python
path decodes to the same row (tests/rebuild/test_decode.py checks
the two against each other on canonical and altered records).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from fanout.config import TopicNames
from fanout.model import events, ids
from spark.runtime import arrow
from spark.source.offsets import OffsetRange

#: The rebuild's read (``starling-changelog-newest``): the newest record of
#: each key, decoded where it is read (``a`` = the partition and ``b`` = the
#: seq of a relay mark). See :func:`decode_records`.
DECODED = (
    "kind string, a long, b long, c long, d long, e long, ids array<long>, seq long, "
    "topic string, partition int, offset long, error string"
)

#: The kinds of a live follow's row: a follow, one with the followee's reposts
#: off (the follower receives its posts only), one that mutes the followee
#: (the join's audience leaves the follower out: docs/decisions.md D28).
FOLLOW, QUIET, MUTED = "follow", "quiet", "muted"
FOLLOWS = (FOLLOW, QUIET, MUTED)
#: The kind of an owner's filter's row (its hidden users).
FILTER = "filter"

#: The relay's own form (fanout.model.events, the wire format's one home); the
#: exact id bound (:data:`fanout.model.ids.MAX_ID`) is checked on the numbers.
_ID = events.CANONICAL_ID
_TIME_SHIFT = ids.SEQUENCE_BITS + ids.NODE_BITS
_LONG = pa.int64()


class Slow(NamedTuple):
    """One record decoded in Python: a row of :data:`DECODED` (but for its
    position) and a live tweet's body."""

    kind: str
    a: int | None = None
    b: int | None = None
    c: int | None = None
    d: int | None = None
    e: int | None = None
    ids: list[int] | None = None
    body: bytes | None = None
    seq: int | None = None
    error: str | None = None


def _decode(
    topic: str, partition: int, key: bytes | None, value: bytes | None, headers: Any
) -> Slow:
    """One record, in Python (:func:`fanout.model.events.decode_record`)."""
    seq, jk, mark = events.header_numbers(headers)
    if mark is not None:
        return Slow("mark", partition, mark, seq=seq)
    try:
        envelope = events.decode_record(topic, key, value, seq, jk)
    except events.BadEvent as exc:
        return Slow("bad", seq=seq, error=str(exc))
    ev = envelope.event
    if isinstance(ev, events.TweetPosted):
        body = events.tweet_json(ev)
        answers = ev.answers or None  # a reply's, or a repost's of a reply
        if ev.repost_of:
            original, by = ev.repost_of, ev.repost_of_author
            return Slow(
                "tweet", ev.author_id, ev.tweet_id, original, by, answers, body=body, seq=seq
            )
        mentions = list(ev.mentions) or None
        return Slow("tweet", ev.author_id, ev.tweet_id, e=answers, ids=mentions, body=body, seq=seq)
    if isinstance(ev, events.Followed):
        kind = MUTED if ev.muted else FOLLOW if ev.reposts else QUIET
        return Slow(kind, ev.followee_id, ev.follower_id, seq=seq)
    if isinstance(ev, events.FiltersSet):
        return Slow(FILTER, ev.owner_id, ids=list(ev.hidden), seq=seq)
    if isinstance(ev, events.Engaged):
        return Slow(ev.kind, ev.tweet_id, ev.member, seq=seq)
    if isinstance(ev, events.TimelineReset):
        return Slow("command", seq=seq)
    return Slow("gone", seq=seq)


def _text(raw: list[Any]) -> pa.Array | None:
    """``raw`` (bytes or None) as Arrow strings; None if one is not UTF-8."""
    try:
        return pa.array(raw, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        return None


def _both(*conditions: pa.Array) -> pa.Array:
    """All ``conditions``, a null (unknown) counting as false."""
    out = conditions[0].fill_null(False)
    for c in conditions[1:]:
        out = pc.and_(out, c.fill_null(False))
    return out


def _number(digits: pa.Array) -> pa.Array:
    return digits.cast(pa.int64())


def _in_range(*numbers: pa.Array) -> pa.Array:
    return _both(*(pc.less_equal(n, ids.MAX_ID) for n in numbers))


class _Canonical:
    """A chunk's records in the relay's own form: per record whether it is a
    live event (``live``) or a tombstone (``gone``) of that form, with its
    decoded columns; a record that is neither is left to the Python path."""

    def __init__(self, n: int) -> None:
        none = pa.nulls(n, pa.int64())
        self.live = self.gone = pa.array([False] * n, pa.bool_())
        self.a = self.b = self.seq = none
        self.tweets: tuple[pa.Array, pa.Array] | None = None  # (ids, bodies) of live tweets


def _headers(headers: list[Any]) -> tuple[list[Any], list[Any]]:
    """The ``seq`` and ``jk`` header values of the records whose headers are
    exactly those two, in that order (None for the others)."""
    shaped = [
        h
        if h and len(h) == 2 and h[0][0] == events.HEADER_SEQ and h[1][0] == events.HEADER_JOIN_KEY
        else None
        for h in headers
    ]
    return [h and h[0][1] for h in shaped], [h and h[1][1] for h in shaped]


def _recognise(topic: str, keys: list[Any], values: list[Any], headers: list[Any]) -> _Canonical:
    out = _Canonical(len(keys))
    if topic not in (events.TWEETS, events.FOLLOWS):
        return out
    seq_raw, jk_raw = _headers(headers)
    key, value, seq, jk = _text(keys), _text(values), _text(seq_raw), _text(jk_raw)
    if key is None or value is None or seq is None or jk is None:
        return out  # a byte that is not UTF-8 somewhere: the Python path names it
    framed = _both(
        pc.match_substring_regex(seq, events.CANONICAL_SEQ),
        pc.match_substring_regex(jk, f"^{_ID}$"),
    )
    if topic == events.FOLLOWS:
        parts = pc.extract_regex(key, events.CANONICAL_FOLLOW_KEY)
        follower, followee = pc.struct_field(parts, "follower"), pc.struct_field(parts, "followee")
        keyed = _both(framed, pc.equal(jk, followee))
        before, between, after = events.CANONICAL_FOLLOW_VALUE
        canonical = pc.binary_join_element_wise(before, follower, between, followee, after, "")
        a, b = _number(followee), _number(follower)
        out.live = _both(keyed, pc.equal(value, canonical), _in_range(a, b))
    else:
        keyed = _both(framed, pc.match_substring_regex(key, f"^{_ID}$"))
        parts = pc.extract_regex(value, events.CANONICAL_TWEET_VALUE)
        tweet_id, author_id = pc.struct_field(parts, "id"), pc.struct_field(parts, "author_id")
        a, b = _number(author_id), _number(tweet_id)
        out.live = _both(keyed, pc.equal(tweet_id, key), pc.equal(author_id, jk), _in_range(a, b))
        live_ids = pc.filter(b, out.live)
        stamps = pc.add(pc.shift_right(live_ids, _TIME_SHIFT), ids.EPOCH_MS)
        # "2026-01-01 12:00:00.123" (a cast: 20 times cheaper than strftime), with its T.
        created = pc.replace_substring(
            stamps.cast(pa.timestamp("ms")).cast(pa.string()), " ", "T", max_replacements=1
        )
        head, author, text, created_at, tail = events.TWEET_BODY
        bodies = pc.binary_join_element_wise(
            head,
            pc.filter(tweet_id, out.live),
            author,
            pc.filter(pc.struct_field(parts, "author"), out.live),
            text,
            pc.filter(pc.struct_field(parts, "text"), out.live),
            created_at,
            created,
            tail,
            "",
        )
        out.tweets = (live_ids, bodies.cast(pa.binary()))
    out.gone = _both(keyed, value.is_null())
    out.a = pc.if_else(out.live, a, None)
    out.b = pc.if_else(out.live, b, None)
    out.seq = pc.if_else(pc.or_(out.live, out.gone), _number(pc.if_else(framed, seq, None)), None)
    return out


def decode_records(
    part: OffsetRange,
    keys: list[bytes | None],
    values: list[bytes | None],
    offsets: list[int],
    headers: list[Any],
    *,
    topics: TopicNames,
) -> tuple[pa.RecordBatch, list[tuple[int, bytes]]]:
    """Records of ``part`` decoded: rows of :data:`DECODED`, and the tweets'
    (id, body). A row is a ``tweet`` (a=author, b=tweet id; a repost's
    c=its original, d=the original's author, 0 in records written before it
    was carried; e=the user its original answers where that is not the
    original's author (:attr:`fanout.model.events.TweetPosted.answers`: a
    reply's, a repost's of a reply), else null; ids=the users a post
    mentions, null if none), a live follow (a=followee, b=follower): a ``follow``, a
    ``quiet`` one (the followee's reposts off) or a ``muted`` one, a
    ``filter`` (a=the owner, ids=its hidden users, ascending), a ``like``,
    ``repost`` or ``reply`` engagement (a=tweet, b=its member: the user, or
    the reply's id), ``gone`` (a tombstone), a
    ``mark`` (a=partition, b=the mark's seq), a ``command`` (a timeline
    reset, which a rebuild has no use for) or ``bad`` (with the error).
    Reposts, replies, posts that mention someone, flagged follows, filters
    and engagements take the Python path (:func:`_recognise` knows plain
    posts and plain follows).

    Decoding where the records are read, from the consumer's own Python
    objects, spares the rebuild a round trip of every record through Spark
    and back into Python."""
    try:
        topic = topics.logical(part.topic)
    except KeyError:
        topic = part.topic  # decoding names it: "unknown topic"
    n = len(offsets)
    fast = _recognise(topic, keys, values, headers)
    kind_name = "tweet" if topic == events.TWEETS else FOLLOW
    kind = pc.if_else(fast.live, kind_name, pc.if_else(fast.gone, "gone", None))
    a, b, seq = fast.a, fast.b, fast.seq
    c = d = e = pa.nulls(n, pa.int64())
    ids = pa.nulls(n, pa.list_(pa.int64()))
    error = pa.nulls(n, pa.string())
    bodies: list[tuple[int, bytes]] = []
    if fast.tweets is not None:
        bodies = list(zip(fast.tweets[0].to_pylist(), fast.tweets[1].to_pylist(), strict=True))
    others = pc.invert(pc.or_(fast.live, fast.gone))
    rest = pc.indices_nonzero(others).to_pylist()
    if rest:
        slow = [_decode(topic, part.partition, keys[i], values[i], headers[i]) for i in rest]

        def column(name: str, kind: pa.DataType = _LONG) -> pa.Array:
            return pa.array([getattr(r, name) for r in slow], kind)

        kind = pc.replace_with_mask(kind, others, column("kind", pa.string()))
        a = pc.replace_with_mask(a, others, column("a"))
        b = pc.replace_with_mask(b, others, column("b"))
        c = pc.replace_with_mask(c, others, column("c"))
        d = pc.replace_with_mask(d, others, column("d"))
        e = pc.replace_with_mask(e, others, column("e"))
        seq = pc.replace_with_mask(seq, others, column("seq"))
        error = pc.replace_with_mask(error, others, column("error", pa.string()))
        if any(r.ids is not None for r in slow):  # filters, mentions: only on the Python path
            listed: list[list[int] | None] = [None] * n
            for i, r in zip(rest, slow, strict=True):
                listed[i] = r.ids
            ids = pa.array(listed, pa.list_(pa.int64()))
        bodies += [(r.b, r.body) for r in slow if r.body and r.b is not None]
    columns = {
        "kind": kind,
        "a": a,
        "b": b,
        "c": c,
        "d": d,
        "e": e,
        "ids": ids,
        "seq": seq,
        "topic": pa.array([part.topic] * n, pa.string()),
        "partition": pa.array([part.partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "error": error,
    }
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=arrow.schema(DECODED)), bodies
