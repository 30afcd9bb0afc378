"""Changelog events: plain frozen dataclasses and their wire format.

This module is the only place that knows how an event looks on Kafka. It is
pure (no Kafka, Django, Redis or Spark) so the web app, the outbox relay and
the Spark jobs share one definition.

Wire format (KTable style: the topics are tables):

* topic ``tweets``: key = tweet id, value = the tweet row as versioned JSON,
  delete = tombstone (``None`` value).
* topic ``follows``: key = ``"<follower_id>:<followee_id>"`` (the follow's
  natural key), value = the follow row as versioned JSON, unfollow = tombstone.
  A list's membership is a follow whose follower is the list's timeline owner
  (``-L``, fanout.model.owners): key ``"-L:<member_id>"``, the same value (it
  never turns reposts off), a removal = tombstone.
  A repost is a row of the same table: its value adds ``repost_of``, the
  original's id (a post's value has no such field), and its text is empty.
  A reply adds ``in_reply_to`` (the post it answers), ``reply_to`` and
  ``reply_to_name`` (that post's author's id, and their name as written:
  when the reply was written); a post that mentions users adds ``mentions``
  (their ids, the author's own left out) and ``mention_names`` (their names
  as written, which its body shows). Names as written never change: a
  rename posts again only the renamed user's own tweets. A post without
  them, and every repost, has none of these fields.
* topic ``engagements``: key = ``"<kind>:<member>:<tweet_id>"``, value = the
  row as versioned JSON, undo = tombstone; ``kind`` is ``like`` or
  ``repost`` (the member is the user who likes or reposts the tweet, the
  value's ``user_id``) or ``reply`` (the member is a reply to the tweet, the
  value's ``reply_id``: a user may answer a tweet many times). Its join key
  is the (original) tweet: the job counts each tweet's likes, reposts and
  replies from it.
* topic ``timelines``: commands for the fanout job that are not table
  rows: a :class:`TimelineReset` (key = the owner) carries the newest
  entries of one home timeline computed by the database, for the job to
  merge in (a timeline left short by removals, a cold or returning user).
  Not compacted: its records expire (see fanout/kafka.py).
* every record carries two headers: ``seq``, the outbox id of the write
  (global commit order, used for read-your-writes and to order events inside
  a micro-batch), and ``jk``, the join key (tweet author / followee /
  timeline owner). A tombstone has no value, so the header is how a consumer
  routes it.
* the relay's *marks*: after each delivered run it writes, into every
  partition of every topic, a record with key ``mark:<partition>``, no value
  and the header ``mark`` = P: every outbox event with ``seq`` <= P is
  before this record in the log (see :func:`mark_record`).

Keys and header values are decimal ASCII.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from fanout.model import ids, owners

SCHEMA_VERSION = 1
TWEETS = "tweets"
FOLLOWS = "follows"
TIMELINES = "timelines"
ENGAGEMENTS = "engagements"
FILTERS = "filters"
#: The kinds of engagement counted per original tweet.
LIKE = "like"
REPOST = "repost"
REPLY = "reply"
KINDS = (LIKE, REPOST, REPLY)
#: The field that names an engagement's member in its record's value, by kind.
MEMBER_FIELDS = {LIKE: "user_id", REPOST: "user_id", REPLY: "reply_id"}
HEADER_SEQ = "seq"
HEADER_JOIN_KEY = "jk"
HEADER_MARK = "mark"
MARK_KEY_PREFIX = b"mark:"


class BadEvent(ValueError):
    """A record that cannot be decoded into an event; ``str()`` says why."""


@dataclass(frozen=True, slots=True)
class TweetPosted:
    """A tweet row: a post, or (``repost_of`` set) a repost of the tweet
    ``repost_of`` by ``author_id``, whose id is a timeline entry of its own."""

    tweet_id: int
    author_id: int
    author: str
    text: str
    #: The original's id for a repost (its text is empty); 0 for a post.
    repost_of: int = 0
    #: A repost: the original's author (fixed: a tweet's author never changes);
    #: 0 for a post, and in records written before it was carried.
    repost_of_author: int = 0
    #: A reply: the post it answers (an older one), and that post's author
    #: with their name as written (both fixed when the reply is written; the
    #: body shows the name); 0 and "" for anything else, and in records
    #: written before replies.
    in_reply_to: int = 0
    reply_to: int = 0
    reply_to_name: str = ""
    #: The users the post mentions other than its author, ascending.
    mentions: tuple[int, ...] = ()
    #: The names of the users the post mentions (its author's too, if they
    #: name themselves), as written, in the order its text names them: the body's.
    mention_names: tuple[str, ...] = ()
    #: A repost of a reply: the user the reply answers (fixed, like
    #: ``repost_of_author``); 0 for anything else, and in records written before.
    repost_of_reply_to: int = 0

    @property
    def original(self) -> int:
        """The tweet this entry shows: itself, or the one it reposts."""
        return self.repost_of or self.tweet_id

    @property
    def answers(self) -> int:
        """The user this entry's original answers when that is someone other
        than the original's author (docs/decisions.md D29), else 0."""
        if self.repost_of:
            other = self.repost_of_reply_to != self.repost_of_author
            return self.repost_of_reply_to if other else 0
        return self.reply_to if self.reply_to != self.author_id else 0

    @property
    def join_key(self) -> int:
        return self.author_id


@dataclass(frozen=True, slots=True)
class TweetDeleted:
    tweet_id: int
    author_id: int

    @property
    def join_key(self) -> int:
        return self.author_id


@dataclass(frozen=True, slots=True)
class Followed:
    """A follow row, with what of the followee the follower's home timeline
    leaves out: everything while the follower mutes them (``muted``), their
    reposts when ``reposts`` is off. A follower ``-L`` is list L's timeline
    (the followee is a member; ``muted`` while the list's owner hides them)."""

    follower_id: int
    followee_id: int
    muted: bool = False
    reposts: bool = True

    @property
    def join_key(self) -> int:
        return self.followee_id


@dataclass(frozen=True, slots=True)
class Unfollowed:
    follower_id: int
    followee_id: int

    @property
    def join_key(self) -> int:
        return self.followee_id


@dataclass(frozen=True, slots=True)
class TimelineReset:
    """The newest entries of ``owner_id``'s timeline as the database computed
    them (owner -u: user u's mentions timeline, docs/decisions.md D30):
    ``tweet_ids`` ascending, and ``horizon``, the oldest of them when older
    ones were left out (0 when these are all). The horizon is set
    by the newest entries of the view (one per original); ``tweet_ids`` holds
    every entry at or above it, including those another entry of the same
    original hides (a post with a newer repost, an older repost). ``as_of``: every
    write with a seq up to it was committed, and so seen, when they were read.
    ``pulled``: the authors left out, whose tweets the owner read from their
    lists then (see fanout.model.join); the reset applies only if they still are.
    ``drop``: the owner (a deleted list) is gone: once every write before this
    one is applied, the store deletes its timeline and every key beside it
    (``tweet_ids`` empty)."""

    owner_id: int
    tweet_ids: tuple[int, ...]
    horizon: int
    as_of: int
    pulled: tuple[int, ...] = ()
    #: (entry, original, by) of the entries of ``tweet_ids`` that are reposts, by
    #: entry: ``by`` is the original's author, 0 for the owner's own reposts (the
    #: user the owner's filter checks the entry against: fanout.model.join).
    reposts: tuple[tuple[int, int, int], ...] = ()
    #: (entry, user) of the entries of ``tweet_ids`` whose original answers a
    #: user other than its author, as the owner sees them (none of the owner's
    #: own entries, none answering the owner): docs/decisions.md D29. The
    #: entries include the replies the owner's view leaves out for now (to
    #: users it does not follow): the store keeps them aside.
    answers: tuple[tuple[int, int], ...] = ()
    drop: bool = False

    @property
    def join_key(self) -> int:
        # A mentions timeline (-u) or a list goes with its user's key and shard.
        return owners.user_of(self.owner_id)


@dataclass(frozen=True, slots=True)
class FiltersSet:
    """The users whose tweets ``owner_id``'s home timeline hides when someone
    the owner follows reposts them: those the owner blocks, who block the
    owner, or whom the owner mutes (ascending). The owner's whole set, each
    time it changes (a compacted changelog: the latest per owner). A list's
    timeline (owner ``-L``) has its own record: its owner's set, copied."""

    owner_id: int
    hidden: tuple[int, ...] = ()

    @property
    def join_key(self) -> int:
        return owners.user_of(self.owner_id)  # a list's with its owner's


@dataclass(frozen=True, slots=True)
class Engaged:
    """``member`` is counted in the original tweet ``tweet_id``'s ``kind``:
    the user who likes (``LIKE``) or reposts (``REPOST``) it, or the id of a
    reply that answers it (``REPLY``: a user may answer it many times, each
    reply counts)."""

    kind: str
    #: A user id (likes, reposts) or a reply's id (replies).
    member: int
    tweet_id: int

    @property
    def join_key(self) -> int:
        return self.tweet_id


@dataclass(frozen=True, slots=True)
class Disengaged:
    """``member`` (:class:`Engaged`'s) is no longer counted in ``tweet_id``'s
    ``kind``: the like or repost undone, the reply gone."""

    kind: str
    member: int
    tweet_id: int

    @property
    def join_key(self) -> int:
        return self.tweet_id


Event = (
    TweetPosted
    | TweetDeleted
    | Followed
    | Unfollowed
    | TimelineReset
    | Engaged
    | Disengaged
    | FiltersSet
)


@dataclass(frozen=True, slots=True)
class Record:
    """An event as it is stored in the outbox and written to Kafka."""

    topic: str  # logical name: TWEETS or FOLLOWS
    key: bytes
    value: bytes | None
    join_key: int


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded event with the outbox sequence number it was written under."""

    seq: int
    event: Event


def created_at_iso(tweet_id: int) -> str:
    """A tweet's creation time, derived from its id (ids are time-ordered), in
    UTC to the millisecond: ``2026-01-01T12:00:00.123Z``. Computed from the
    integer milliseconds with the second's text cached (a batch's tweets share
    their seconds): ~0.3 µs instead of ~1.5 µs through ``datetime``, paid for
    every tweet body the job and the rebuild write."""
    second, milli = divmod(ids.timestamp_ms(tweet_id), 1000)
    return f"{_utc_second(second)}.{milli:03d}Z"


@functools.lru_cache(maxsize=4096)
def _utc_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def tweet_fields(
    tweet_id: int,
    author: str,
    text: str,
    *,
    in_reply_to: tuple[int, str] | None = None,
    mentions: Sequence[str] = (),
) -> dict[str, Any]:
    """A tweet as clients see it (the API and the timeline cache share this
    shape): ``in_reply_to`` is ``{"id", "author"}`` of the post it answers
    (``None``: not a reply) and ``mentions`` the names of the users it
    mentions. They come between ``text`` and ``created_at``: a repost's read
    shows its original's ``text`` up to ``created_at`` (fanout/store/lua/entries.lua),
    so a repost of a reply shows what the reply answers and mentions."""
    return {
        "id": tweet_id,
        "author": author,
        "text": text,
        "in_reply_to": None
        if in_reply_to is None
        else {"id": in_reply_to[0], "author": in_reply_to[1]},
        "mentions": list(mentions),
        "created_at": created_at_iso(tweet_id),
    }


def tweet_json(event: TweetPosted) -> bytes:
    """The cached body of a timeline entry. A post's is its fields
    (:func:`tweet_fields`); a repost's names the original instead of its text
    (:func:`repost_json`): reads put the original's text, author and counts
    in (fanout/store/lua/entries.lua), so a renamed or deleted original shows
    as it is now."""
    if event.repost_of:
        return repost_json(event.tweet_id, event.author, event.repost_of)
    answered = (event.in_reply_to, event.reply_to_name) if event.in_reply_to else None
    return orjson.dumps(
        tweet_fields(
            event.tweet_id,
            event.author,
            event.text,
            in_reply_to=answered,
            mentions=event.mention_names,
        )
    )


def repost_json(repost_id: int, author: str, original: int) -> bytes:
    """A repost's cached body: ``{"id","author","created_at","repost_of"}``
    with the original's id (:data:`REPOST_BODY`)."""
    return orjson.dumps(
        {
            "id": repost_id,
            "author": author,
            "created_at": created_at_iso(repost_id),
            "repost_of": original,
        }
    )


def engagement_key(kind: str, member: int, tweet_id: int) -> bytes:
    return f"{kind}:{member}:{tweet_id}".encode("ascii")


def follow_key(follower_id: int, followee_id: int) -> bytes:
    return f"{follower_id}:{followee_id}".encode("ascii")


def encode(event: Event) -> Record:
    if isinstance(event, TweetPosted):
        row: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "id": event.tweet_id,
            "author_id": event.author_id,
            "author": event.author,
            "text": event.text,
        }
        if event.repost_of:
            row["repost_of"] = event.repost_of
            if event.repost_of_author:
                row["repost_of_author"] = event.repost_of_author
            if event.repost_of_reply_to:
                row["repost_of_reply_to"] = event.repost_of_reply_to
        # Only what a post has: most tweets keep the canonical form.
        if event.in_reply_to:
            row["in_reply_to"] = event.in_reply_to
            row["reply_to"] = event.reply_to
            row["reply_to_name"] = event.reply_to_name
        if event.mentions:
            row["mentions"] = list(event.mentions)
        if event.mention_names:
            row["mention_names"] = list(event.mention_names)
        value = orjson.dumps(row)
        return Record(TWEETS, str(event.tweet_id).encode("ascii"), value, event.author_id)
    if isinstance(event, Engaged | Disengaged):
        key = engagement_key(event.kind, event.member, event.tweet_id)
        row_value = (
            orjson.dumps(
                {
                    "v": SCHEMA_VERSION,
                    "kind": event.kind,
                    MEMBER_FIELDS[event.kind]: event.member,
                    "tweet_id": event.tweet_id,
                }
            )
            if isinstance(event, Engaged)
            else None
        )
        return Record(ENGAGEMENTS, key, row_value, event.tweet_id)
    if isinstance(event, TweetDeleted):
        return Record(TWEETS, str(event.tweet_id).encode("ascii"), None, event.author_id)
    if isinstance(event, Followed):
        follow: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "follower_id": event.follower_id,
            "followee_id": event.followee_id,
        }
        # Only what differs from the default: most follows keep the canonical form.
        if event.muted:
            follow["muted"] = True
        if not event.reposts:
            follow["reposts"] = False
        value = orjson.dumps(follow)
        return Record(
            FOLLOWS, follow_key(event.follower_id, event.followee_id), value, event.followee_id
        )
    if isinstance(event, Unfollowed):
        return Record(
            FOLLOWS, follow_key(event.follower_id, event.followee_id), None, event.followee_id
        )
    if isinstance(event, FiltersSet):
        value = orjson.dumps({"v": SCHEMA_VERSION, "hidden": list(event.hidden)})
        return Record(FILTERS, str(event.owner_id).encode("ascii"), value, event.join_key)
    if isinstance(event, TimelineReset):
        row = {
            "v": SCHEMA_VERSION,
            "ids": list(event.tweet_ids),
            "horizon": event.horizon,
            "as_of": event.as_of,
            "pulled": list(event.pulled),
            "reposts": [list(r) if r[2] else [r[0], r[1]] for r in event.reposts],
        }
        if event.answers:
            row["answers"] = [list(a) for a in event.answers]
        if event.drop:
            row["drop"] = True
        value = orjson.dumps(row)
        return Record(TIMELINES, str(event.owner_id).encode("ascii"), value, event.join_key)
    raise TypeError(f"not an event: {event!r}")


# --- the relay's own form, as patterns -------------------------------------------
# What :func:`encode` writes, described for readers that recognise records in
# bulk (the rebuild's Arrow kernels: spark/rebuild/decode.py) instead of
# decoding each one: anything they do not recognise goes through :func:`decode`.
# tests/model/test_events.py checks these against :func:`encode`.

#: An id as written: decimal, no leading zero (every id is below 10**16).
CANONICAL_ID = "[1-9][0-9]{0,15}"
#: A ``seq`` header as written: a non-negative decimal without leading zeros.
CANONICAL_SEQ = "^(0|[1-9][0-9]{0,17})$"
#: A JSON string's body that needs no escape (orjson writes it as it is).
_PLAIN = r'[^"\\\x00-\x1f]*'
CANONICAL_FOLLOW_KEY = f"^(?P<follower>{CANONICAL_ID}):(?P<followee>{CANONICAL_ID})$"
#: A follow's value is these three strings around the follower's and the followee's ids.
CANONICAL_FOLLOW_VALUE = (f'{{"v":{SCHEMA_VERSION},"follower_id":', ',"followee_id":', "}")
CANONICAL_TWEET_VALUE = (
    rf'^\{{"v":{SCHEMA_VERSION},"id":(?P<id>{CANONICAL_ID}),'
    rf'"author_id":(?P<author_id>{CANONICAL_ID}),'
    rf'"author":"(?P<author>{_PLAIN})","text":"(?P<text>{_PLAIN})"\}}$'
)
#: A post's body (:func:`tweet_json`) is these strings around its id, author,
#: text and ``created_at`` (to the millisecond, without its ``Z``), when it
#: answers nobody and mentions nobody (a canonical value's).
TWEET_BODY = (
    '{"id":',
    ',"author":"',
    '","text":"',
    '","in_reply_to":null,"mentions":[],"created_at":"',
    'Z"}',
)
#: A repost's body (:func:`repost_json`) is these strings around its id,
#: author, ``created_at`` and the original's id.
REPOST_BODY = ('{"id":', ',"author":"', '","created_at":"', '","repost_of":', "}")


def mark_record(partition: int, seq: int) -> tuple[bytes, list[tuple[str, bytes]]]:
    """(key, headers) of the relay's mark in ``partition``: every event with a
    ``seq`` up to ``seq`` is already before it in that partition's log."""
    return MARK_KEY_PREFIX + str(partition).encode("ascii"), [
        (HEADER_MARK, str(seq).encode("ascii"))
    ]


def headers(seq: int, join_key: int) -> list[tuple[str, bytes]]:
    return [
        (HEADER_SEQ, str(seq).encode("ascii")),
        (HEADER_JOIN_KEY, str(join_key).encode("ascii")),
    ]


# --- decoding ---------------------------------------------------------------


def _int_field(raw: bytes | str | None, what: str) -> int:
    if raw is None:
        raise BadEvent(f"missing {what}")
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    if not text.isdigit() or len(text) > 20:
        raise BadEvent(f"{what} is not a decimal id: {text[:40]!r}")
    return int(text)


def _owner_field(raw: bytes | str | None, what: str = "timeline owner key") -> int:
    """A timeline's owner (fanout.model.owners): u, -u for user u's mentions
    timeline, -L for list L's."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    if text is None:
        raise BadEvent(f"missing {what}")
    negative = text[:1] == "-"
    owner = _int_field(text[1:] if negative else text, what)
    if (
        owner == 0
        or owner > ids.MAX_ID
        or (negative and owner > owners.MAX_USER and not owners.is_list_id(owner))
    ):
        raise BadEvent(f"{what} is not a timeline owner: {text[:40]!r}")
    return -owner if negative else owner


def _list_or_user(owner: int, what: str) -> int:
    """A follower, or a filter's owner: a user's home timeline or a list's."""
    if owners.is_mentions(owner):
        raise BadEvent(f"{what} is a mentions timeline: {owner}")
    return owner


def _follower(obj: Mapping[str, Any]) -> int:
    value = obj.get("follower_id")
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return _list_or_user(_owner_field(str(value), "field 'follower_id'"), "field 'follower_id'")
    return _id(obj, "follower_id")


def _id(obj: Mapping[str, Any], name: str) -> int:
    value = obj.get(name)
    if not ids.is_valid(value):
        raise BadEvent(f"field {name!r} is not a valid id: {value!r}")
    return int(value)  # type: ignore[arg-type]


def _flag(obj: Mapping[str, Any], name: str, default: bool) -> bool:
    value = obj.get(name, default)
    if not isinstance(value, bool):
        raise BadEvent(f"field {name!r} is not a boolean: {value!r}")
    return value


#: A decimal header's bounds: Spark reads headers as ``bigint``.
_BIGINT = (-(2**63), 2**63)


def header_number(raw: bytes | None) -> int | None:
    """A decimal header's value, or ``None`` when missing or not a ``bigint``:
    what Spark's ``try_cast`` makes of it (spark.stream.changelog.header_column), so
    that records decoded in Python and in SQL carry the same numbers."""
    if raw is None:
        return None
    text = raw.decode("ascii", "replace").strip()
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits.isdigit():
        return None
    number = int(text)
    return number if _BIGINT[0] <= number < _BIGINT[1] else None


def header_numbers(
    items: Iterable[tuple[str, bytes]] | None,
) -> tuple[int | None, int | None, int | None]:
    """(seq, jk, mark) of a record's headers, each from the first header of its
    name (:func:`header_number`)."""
    seq = jk = mark = None
    seen: set[str] = set()
    for name, raw in items or ():
        if name in seen:
            continue
        seen.add(name)
        if name == HEADER_SEQ:
            seq = header_number(raw)
        elif name == HEADER_JOIN_KEY:
            jk = header_number(raw)
        elif name == HEADER_MARK:
            mark = header_number(raw)
    return seq, jk, mark


def _header_map(raw: Mapping[str, bytes] | Iterable[tuple[str, bytes]] | None) -> dict[str, bytes]:
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    return {k: v for k, v in raw}


def _load(value: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise BadEvent(f"value is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadEvent("value is not a JSON object")
    if obj.get("v") != SCHEMA_VERSION:
        raise BadEvent(f"unknown schema version {obj.get('v')!r}")
    return obj


def _conversation(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A tweet value's reply and mention fields, as :class:`TweetPosted`'s
    keywords (absent: the defaults)."""
    out: dict[str, Any] = {}
    if "in_reply_to" in obj:
        name = obj.get("reply_to_name")
        if not isinstance(name, str) or not name:
            raise BadEvent(f"field 'reply_to_name' is not a name: {name!r}")
        out.update(
            in_reply_to=_id(obj, "in_reply_to"), reply_to=_id(obj, "reply_to"), reply_to_name=name
        )
    elif "reply_to" in obj or "reply_to_name" in obj:
        raise BadEvent("'reply_to' without 'in_reply_to'")
    if "mentions" in obj:
        mentions = obj["mentions"]
        if not isinstance(mentions, list) or not all(ids.is_valid(u) for u in mentions):
            raise BadEvent("field 'mentions' is not a list of user ids")
        out["mentions"] = tuple(sorted(set(mentions)))
    if "mention_names" in obj:
        names = obj["mention_names"]
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise BadEvent("field 'mention_names' is not a list of names")
        out["mention_names"] = tuple(names)
    return out


def _check_conversation(event: TweetPosted) -> None:
    """A reply answers an older post; a repost neither answers nor mentions;
    a tweet's author is not among its ``mentions``."""
    if event.repost_of and (event.in_reply_to or event.mentions or event.mention_names):
        raise BadEvent("a repost neither answers nor mentions anyone")
    if event.in_reply_to and event.in_reply_to >= event.tweet_id:
        raise BadEvent("a reply needs an older 'in_reply_to'")
    if event.author_id in event.mentions:
        raise BadEvent("field 'mentions' names the tweet's author")


def _is_repost_record(record: object) -> bool:
    """[entry, original] or [entry, original, by] (``by``: a user id or 0)."""
    if not isinstance(record, list) or len(record) not in (2, 3):
        return False
    if not all(ids.is_valid(i) for i in record[:2]):
        return False
    return len(record) == 2 or record[2] == 0 or ids.is_valid(record[2])


def decode(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    header_items: Mapping[str, bytes] | Iterable[tuple[str, bytes]] | None,
) -> Envelope:
    """Decode one changelog record; raise :class:`BadEvent` naming the problem.

    ``topic`` is the logical name (``"tweets"`` or ``"follows"``).
    """
    hdrs = _header_map(header_items)
    seq = _int_field(hdrs.get(HEADER_SEQ), "header 'seq'")
    join_key = _int_field(hdrs.get(HEADER_JOIN_KEY), "header 'jk'")
    return decode_record(topic, key, value, seq, join_key)


def decode_record(
    topic: str, key: bytes | None, value: bytes | None, seq: int | None, join_key: int | None
) -> Envelope:
    """:func:`decode` for a record whose headers were already read as numbers
    (``None`` when missing or not a number), as the Spark job does in SQL."""
    if seq is None or seq < 0:
        raise BadEvent("missing header 'seq' (or not a decimal id)")
    if join_key is None or join_key <= 0:
        raise BadEvent("missing header 'jk' (or not a decimal id)")
    if key is None:
        raise BadEvent("record has no key")
    event: Event
    if topic == TWEETS:
        tweet_id = _int_field(key, "tweet key")
        if value is None:
            event = TweetDeleted(tweet_id=tweet_id, author_id=join_key)
        else:
            obj = _load(value)
            text, author = obj.get("text"), obj.get("author")
            if not isinstance(text, str) or not isinstance(author, str):
                raise BadEvent("tweet needs string fields 'text' and 'author'")
            repost_of = _id(obj, "repost_of") if "repost_of" in obj else 0
            event = TweetPosted(
                tweet_id=_id(obj, "id"),
                author_id=_id(obj, "author_id"),
                author=author,
                text=text,
                repost_of=repost_of,
                repost_of_author=_id(obj, "repost_of_author") if "repost_of_author" in obj else 0,
                repost_of_reply_to=(
                    _id(obj, "repost_of_reply_to") if "repost_of_reply_to" in obj else 0
                ),
                **_conversation(obj),
            )
            if event.tweet_id != tweet_id:
                raise BadEvent(f"key {tweet_id} does not match tweet id {event.tweet_id}")
            if repost_of and (repost_of >= tweet_id or text):
                raise BadEvent("a repost needs an empty text and an older original")
            if (event.repost_of_author or event.repost_of_reply_to) and not repost_of:
                raise BadEvent("a post has no 'repost_of_author' nor 'repost_of_reply_to'")
            _check_conversation(event)
    elif topic == ENGAGEMENTS:
        kind, _, rest = key.decode("ascii", "replace").partition(":")
        member_raw, colon, tweet_raw = rest.partition(":")
        if kind not in KINDS or not colon:
            raise BadEvent(f"engagement key is not 'kind:member:tweet': {key[:40]!r}")
        member = _int_field(member_raw, "member in key")
        tweet_id = _int_field(tweet_raw, "tweet in key")
        if kind == REPLY and member <= tweet_id:
            raise BadEvent("a reply is newer than the tweet it answers")
        if value is None:
            event = Disengaged(kind, member, tweet_id)
        else:
            obj = _load(value)
            event = Engaged(kind, _id(obj, MEMBER_FIELDS[kind]), _id(obj, "tweet_id"))
            if obj.get("kind") != kind or (event.member, event.tweet_id) != (member, tweet_id):
                raise BadEvent("engagement key does not match its value")
    elif topic == TIMELINES:
        owner_id = _owner_field(key)
        if value is None:
            raise BadEvent("a timeline reset needs a value")
        obj = _load(value)
        tweet_ids = obj.get("ids")
        if not isinstance(tweet_ids, list) or not all(ids.is_valid(t) for t in tweet_ids):
            raise BadEvent("field 'ids' is not a list of tweet ids")
        horizon, as_of, drop = obj.get("horizon"), obj.get("as_of"), obj.get("drop", False)
        if not isinstance(drop, bool) or (drop and tweet_ids):
            raise BadEvent(f"field 'drop' is not a flag of a reset with no ids: {drop!r}")
        if not isinstance(horizon, int) or horizon < 0:
            raise BadEvent(f"field 'horizon' is not an id or 0: {horizon!r}")
        if not isinstance(as_of, int) or as_of < 0:
            raise BadEvent(f"field 'as_of' is not a seq: {as_of!r}")
        pulled = obj.get("pulled", [])
        if not isinstance(pulled, list) or not all(ids.is_valid(a) for a in pulled):
            raise BadEvent("field 'pulled' is not a list of user ids")
        reposts = obj.get("reposts", [])
        if not isinstance(reposts, list) or not all(_is_repost_record(p) for p in reposts):
            raise BadEvent("field 'reposts' is not a list of [entry, original, by] records")
        answers = obj.get("answers", [])
        if not isinstance(answers, list) or not all(
            isinstance(a, list) and len(a) == 2 and all(ids.is_valid(x) for x in a) for a in answers
        ):
            raise BadEvent("field 'answers' is not a list of [entry, user] records")
        event = TimelineReset(
            owner_id,
            tuple(sorted(set(tweet_ids))),
            horizon,
            as_of,
            tuple(sorted(set(pulled))),
            tuple(sorted({(p[0], p[1], p[2] if len(p) == 3 else 0) for p in reposts})),
            tuple(sorted({(a[0], a[1]) for a in answers})),
            drop,
        )
    elif topic == FOLLOWS:
        left, sep, right = key.partition(b":")
        if not sep:
            raise BadEvent(f"follow key is not 'follower:followee': {key[:40]!r}")
        follower_id = _list_or_user(_owner_field(left, "follower in key"), "follower in key")
        followee_id = _int_field(right, "followee in key")
        if value is None:
            event = Unfollowed(follower_id=follower_id, followee_id=followee_id)
        else:
            obj = _load(value)
            event = Followed(
                follower_id=_follower(obj),
                followee_id=_id(obj, "followee_id"),
                muted=_flag(obj, "muted", False),
                reposts=_flag(obj, "reposts", True),
            )
            if (event.follower_id, event.followee_id) != (follower_id, followee_id):
                raise BadEvent("follow key does not match its value")
            if owners.is_list(follower_id) and not event.reposts:
                raise BadEvent("a list's membership cannot turn reposts off")
    elif topic == FILTERS:
        owner_id = _list_or_user(_owner_field(key, "filters owner key"), "filters owner key")
        if value is None:
            raise BadEvent("a filters record needs a value")
        hidden = _load(value).get("hidden")
        if not isinstance(hidden, list) or not all(ids.is_valid(u) for u in hidden):
            raise BadEvent("field 'hidden' is not a list of user ids")
        event = FiltersSet(owner_id, tuple(sorted(set(hidden))))
    else:
        raise BadEvent(f"unknown topic {topic!r}")
    if event.join_key != join_key:
        raise BadEvent(f"header 'jk' {join_key} does not match the event's join key")
    return Envelope(seq=seq, event=event)
