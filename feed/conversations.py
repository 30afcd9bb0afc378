"""Replies, threads and mentions: writing a tweet (which may answer another
and name users), the fields its changelog record carries for them, and the
thread read.

A reply is a post whose ``in_reply_to`` names the post it answers (a
repost's id answers its original) and whose ``reply_to`` is that post's
author, both fixed when it is written and kept when the parent goes. Its id
is greater than its parent's, so a chain of parents always ends. Mentions
are read from the text once, when it is written (:mod:`feed.mentions`), and
kept as :class:`~feed.models.Mention` rows, in the text's order.

A tweet object shows the names of the user it answers and of the users it
mentions as written: their usernames when the tweet was written, fixed then,
like the ``@name`` in its text (``Tweet.reply_to_name``, ``Mention.name``;
the changelog record's ``reply_to_name`` and ``mention_names`` for the cached
body). Renaming a user changes none of them: a rename posts again only the
user's own tweets (:func:`feed.services.user_rename`), whatever the number
of tweets that answer or mention them.

A reply is also an engagement of its parent (``reply:<reply>:<parent>`` on
the ``engagements`` changelog, fanout.model.engagements): the fanout job
counts a tweet's replies from them as it counts its likes and reposts. Its
tombstone is written when the reply is deleted or its author suspended, and
when the parent is deleted (a deleted tweet has no counts; the reply stays).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet

from fanout.model import events, ids
from feed import outbox, selectors, services
from feed.errors import Forbidden, NotFound
from feed.mentions import MAX_MENTIONS, mentioned_names
from feed.models import Block, Mention, Mute, Tweet, User
from feed.validation import InvalidInput, normalize_tweet_text

#: The most ancestors a thread shows: the nearest ones, when the chain is longer.
MAX_ANCESTORS = 50


# --- writing -------------------------------------------------------------------------


@transaction.atomic
def tweet_create(*, author: User, text: str, in_reply_to: int | None = None) -> services.TweetWrite:
    """Post ``text`` by ``author``, answering the tweet ``in_reply_to`` if
    given (a repost's id answers its original), with the users it mentions.
    A reply is counted among its parent's replies (its engagement record).

    NotFound when the parent is unknown, deleted, a suspended user's repost
    or its author is suspended; 403 ``blocked`` while a block stands either
    way between the author and the parent's author; Forbidden for a
    suspended author. The parent's row is key-share locked (its delete waits
    for this write, or this write sees it gone), then, for a reply, the
    author's and the parent's author's rows (:func:`_lock_writers`). The
    users mentioned are read, not locked: a mention keeps the name it is
    written with, and nothing a rename or a suspension of that user does
    reads or changes it, so neither waits for the other."""
    try:
        text = normalize_tweet_text(text)
    except InvalidInput as exc:
        raise services.input_error(exc) from None
    parent, parent_author, _ = (
        services.locked_original(in_reply_to) if in_reply_to is not None else (0, 0, 0)
    )
    reply_to_name = _lock_writers(author, parent_author, in_reply_to) if parent else ""
    mentioned = _active_users_named(mentioned_names(text))
    tweet = _insert(author, text, parent, parent_author, reply_to_name)
    # Locks the author's row (if not yet): a suspension is either before
    # (nothing updated: refused) or after (it sees this tweet and tombstones it too).
    if not services.add_to_count(author.pk, "tweets_count", 1, if_active=True):
        raise Forbidden("this account is suspended")
    Mention.objects.bulk_create(
        Mention(tweet_id=tweet.id, user_id=u, name=name) for u, name in mentioned
    )
    links = Links(
        in_reply_to=parent,
        reply_to=parent_author,
        reply_to_name=reply_to_name,
        mentions=tuple(sorted(u for u, _ in mentioned if u != author.pk)),
        mention_names=tuple(name for _, name in mentioned),
    )
    written: list[events.Event] = [
        posted(tweet.id, author.pk, author.username, text, None, None, links)
    ]
    if parent:
        written.append(events.Engaged(events.REPLY, tweet.id, parent))
    seq = outbox.append_many(written)
    return services.TweetWrite(
        tweet=tweet,
        seq=seq,
        in_reply_to=(parent, links.reply_to_name) if parent else None,
        mentions=links.mention_names,
    )


def _active_users_named(names: list[str]) -> list[tuple[int, str]]:
    """(id, username) of the first :data:`MAX_MENTIONS` active users named,
    in the order of ``names`` (lowercased): one look-up through the
    case-insensitive unique index, without a lock (the names as written are
    what this read finds)."""
    if not names:
        return []
    users = User.objects.filter(username__lower__in=names, is_active=True)
    found = {name.lower(): (pk, name) for pk, name in users.values_list("pk", "username")}
    return [found[name] for name in names if name in found][:MAX_MENTIONS]


def _lock_writers(author: User, parent_author: int, in_reply_to: int | None) -> str:
    """For a reply: the rows of the author and of the parent's author
    locked (:func:`_lock_users`), and the parent's author's name as written
    (read under the lock). A suspension of either waits for this write, then
    sees it (the reply and its count), or comes first and this write is
    refused: a suspended parent's author (NotFound), a suspended author
    (Forbidden). A block between the two takes both rows too
    (:func:`feed.relations.block_create`): it is checked here under the
    locks, so a block and a reply across it never both commit
    (``blocked``)."""
    users = _lock_users(author.pk, {parent_author} - {author.pk})
    if not users[parent_author][0]:
        raise NotFound(f"no tweet with id {in_reply_to}")  # a suspended author's
    if not users[author.pk][0]:
        raise Forbidden("this account is suspended")
    services.refuse_if_blocked(author.pk, parent_author, "reply to this account's tweets")
    return users[parent_author][1]


def _insert(author: User, text: str, parent: int, parent_author: int, reply_to_name: str) -> Tweet:
    """The tweet's row, under a fresh id (greater than its parent's)."""
    for attempt in range(services.ID_ATTEMPTS):
        tweet_id = services.id_after(parent, attempt)
        tweet = Tweet(
            id=tweet_id,
            author=author,
            text=text,
            created_at=ids.created_at(tweet_id),
            in_reply_to=parent or None,
            reply_to_id=parent_author or None,
            reply_to_name=reply_to_name,
        )
        try:
            with transaction.atomic():
                tweet.save(force_insert=True)
            return tweet
        except IntegrityError:
            if attempt == services.ID_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises


def _lock_users(exclusive: int, shared: Collection[int]) -> dict[int, tuple[bool, str]]:
    """Lock the rows of ``exclusive`` (the writer: its count changes) and of
    ``shared`` until the transaction ends, in id order, each once (in the
    mode it keeps: no upgrade, so two users answering each other's tweets
    never wait for each other in a circle). Returns each found user's
    (is_active, username), as read under the lock. SQLite runs one write
    transaction at a time: a plain read."""
    wanted = sorted({exclusive, *shared})
    if connection.vendor != "postgresql":
        rows = User.objects.filter(pk__in=wanted).values_list("pk", "is_active", "username")
        return {pk: (active, name) for pk, active, name in rows}
    table = connection.ops.quote_name(User._meta.db_table)
    out: dict[int, tuple[bool, str]] = {}
    with connection.cursor() as cursor:
        for mode, run in itertools.groupby(
            wanted, key=lambda u: "NO KEY UPDATE" if u == exclusive else "SHARE"
        ):
            batch = list(run)
            marks = ", ".join(["%s"] * len(batch))
            cursor.execute(
                f"SELECT id, is_active, username FROM {table} "  # noqa: S608 (the model's table)
                f"WHERE id IN ({marks}) ORDER BY id FOR {mode}",
                batch,
            )
            out.update({int(i): (bool(a), str(n)) for i, a, n in cursor.fetchall()})
    return out


# --- the changelog's fields ------------------------------------------------------------


@dataclass(frozen=True)
class Links:
    """What a post answers and whom it mentions, as its changelog record
    carries them (:class:`fanout.model.events.TweetPosted`)."""

    in_reply_to: int = 0
    reply_to: int = 0
    #: ``reply_to``'s name as written (``Tweet.reply_to_name``).
    reply_to_name: str = ""
    #: The mentioned users other than the author, ascending.
    mentions: tuple[int, ...] = ()
    #: The mentioned users' names as written (``Mention.name``; the author's
    #: too), in the text's order.
    mention_names: tuple[str, ...] = ()


def posted(
    t: int,
    author: int,
    name: str,
    text: str,
    original: int | None,
    original_author: int | None,
    links: Links | None = None,
    original_reply_to: int | None = None,
) -> events.TweetPosted:
    """A tweet row's changelog record: a write, or the row posted again (a
    rename, a reinstatement, a republish) with its :class:`Links` (a
    repost's none; a repost carries whom its original answers instead,
    ``original_reply_to``: the original's ``reply_to``)."""
    links = links or Links()
    return events.TweetPosted(
        tweet_id=t,
        author_id=author,
        author=name,
        text=text,
        repost_of=original or 0,
        repost_of_author=original_author or 0,
        repost_of_reply_to=original_reply_to or 0,
        in_reply_to=links.in_reply_to,
        reply_to=links.reply_to,
        reply_to_name=links.reply_to_name,
        mentions=links.mentions,
        mention_names=links.mention_names,
    )


def links_of(tweet_ids: Iterable[int]) -> dict[int, Links]:
    """The :class:`Links` of those of these tweets that answer or mention
    anyone, with the names as written (two queries per :data:`CHUNK`
    tweets): what a rename of their author, a reinstatement and a republish
    post again."""
    out: dict[int, Links] = {}
    for chunk in _chunks(sorted(set(tweet_ids))):
        answering = Tweet.objects.filter(id__in=chunk, in_reply_to__isnull=False)
        replies: dict[int, tuple[int, int, str]] = {}
        for t, parent, author, name in answering.values_list(
            "id", "in_reply_to", "reply_to_id", "reply_to_name"
        ):
            replies[t] = (parent or 0, author or 0, name)  # a reply has all three
        mentioned: dict[int, list[tuple[int, str, int]]] = {}
        rows = (
            Mention.objects.filter(tweet_id__in=chunk)
            .order_by("id")
            .values_list("tweet_id", "user_id", "name", "tweet__author_id")
        )
        for t, user, name, author in rows:
            mentioned.setdefault(t, []).append((user, name, author))
        for t in replies.keys() | mentioned.keys():
            parent, reply_to, reply_to_name = replies.get(t, (0, 0, ""))
            found = mentioned.get(t, [])
            out[t] = Links(
                in_reply_to=parent,
                reply_to=reply_to,
                reply_to_name=reply_to_name,
                mentions=tuple(sorted(u for u, _, author in found if u != author)),
                mention_names=tuple(name for _, name, _ in found),
            )
    return out


def replies_counted(replies: Iterable[tuple[int, int]]) -> list[events.Event]:
    """The engagement records of these (reply, parent) pairs whose parent is
    still there (one query per :data:`CHUNK`), in the order given: what a
    reinstatement and a republish post again. A deleted parent's replies are
    counted nowhere (its delete tombstoned them). Read after the replies'
    rows are locked: a parent's delete locks them too, so it commits before
    this read, or waits for it and tombstones them after."""
    pairs = list(replies)
    there: set[int] = set()
    for chunk in _chunks(sorted({parent for _, parent in pairs})):
        there.update(Tweet.objects.filter(id__in=chunk).values_list("id", flat=True))
    return [events.Engaged(events.REPLY, r, parent) for r, parent in pairs if parent in there]


#: Tweets read per query by :func:`links_of` (a user's tweets can be many
#: more than a statement takes parameters).
CHUNK = 1000


def _chunks(items: list[int]) -> Iterable[list[int]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


# --- the thread ------------------------------------------------------------------------


def thread_focus(tweet_id: int) -> tuple[int, int]:
    """(id, author) of the post whose thread ``tweet_id`` asks for: itself, or
    a repost's original. NotFound for an unknown or deleted tweet, and for
    one whose author (a repost: or whose original's author) is suspended."""
    row = (
        Tweet.objects.filter(id=tweet_id)
        .values_list(
            "author_id",
            "author__is_active",
            "repost_of_id",
            "repost_of__author_id",
            "repost_of__author__is_active",
        )
        .first()
        if ids.is_valid(tweet_id)
        else None
    )
    if row is None or not row[1] or (row[2] is not None and not row[4]):
        raise NotFound(f"no tweet with id {tweet_id}")
    author, _, original, original_author, _ = row
    return (tweet_id, author) if original is None else (original, original_author)


#: The chain of parents above a post, nearest first, at most a bound deep:
#: (id, author, the author's is_active), the author NULL for a tweet gone.
#: Each step is a primary-key look-up in the tweets, or in the deleted
#: replies (what a deleted reply answered): one statement, on PostgreSQL and
#: SQLite alike. Ids decrease along the chain (a reply's id is greater than
#: its parent's): it ends. Parameters: the post, the bound.
_ANCESTORS_SQL = """
    WITH RECURSIVE up(id, depth) AS (
        SELECT CAST(%s AS bigint), 0
        UNION ALL
        SELECT COALESCE(t.in_reply_to, g.in_reply_to), up.depth + 1
        FROM up
        LEFT JOIN feed_tweet t ON t.id = up.id
        LEFT JOIN feed_deletedreply g ON g.id = up.id
        WHERE up.depth < %s AND COALESCE(t.in_reply_to, g.in_reply_to) IS NOT NULL
    )
    SELECT up.id, t.author_id, u.is_active
    FROM up
    LEFT JOIN feed_tweet t ON t.id = up.id
    LEFT JOIN feed_user u ON u.id = t.author_id
    WHERE up.depth > 0
    ORDER BY up.depth
"""


def ancestors(tweet_id: int, limit: int = MAX_ANCESTORS) -> list[tuple[int, int | None]]:
    """The chain of parents above ``tweet_id``, nearest first, at most
    ``limit``: (id, author), the author None for a tweet deleted or of a
    suspended user."""
    with connection.cursor() as cursor:
        cursor.execute(_ANCESTORS_SQL, [tweet_id, limit])
        return [(int(t), int(a) if a is not None and u else None) for t, a, u in cursor.fetchall()]


def replies_query(tweet_id: int, reader: User | None, *, cursor: int | None) -> QuerySet[Tweet]:
    """The direct replies to ``tweet_id`` after ``cursor`` (a reply's id), by
    active users, leaving out, for a signed-in reader, the users the reader
    blocks, is blocked by or mutes. Served by the (in_reply_to, id) index."""
    qs = Tweet.objects.filter(in_reply_to=tweet_id, author__is_active=True)
    if reader is not None:
        hidden = (
            Q(author_id__in=Block.objects.filter(blocker_id=reader.pk).values("blocked_id"))
            | Q(author_id__in=Block.objects.filter(blocked_id=reader.pk).values("blocker_id"))
            | Q(author_id__in=Mute.objects.filter(muter_id=reader.pk).values("muted_id"))
        )
        qs = qs.exclude(hidden)
    if cursor is not None:
        qs = qs.filter(id__gt=cursor)
    return qs.order_by("id")


def replies(
    tweet_id: int, reader: User | None, *, count: int, cursor: int | None = None
) -> tuple[list[int], int | None]:
    """One page of :func:`replies_query`, oldest first: the ids and the next
    page's cursor (None on the last page)."""
    query = replies_query(tweet_id, reader, cursor=cursor)
    found = list(query.values_list("id", flat=True)[: count + 1])
    page = found[:count]
    return page, (page[-1] if len(found) > count else None)


def thread(
    tweet_id: int, reader: User | None, *, count: int, cursor: int | None = None
) -> dict[str, Any]:
    """The thread of the post ``tweet_id`` (:func:`thread_focus`'s; visible,
    and the reader's to read: the caller checks): ``{"ancestors", "tweet",
    "replies", "next_cursor"}``. Ancestors from the root down (the nearest
    :data:`MAX_ANCESTORS`); one deleted or of a suspended user is ``{"id",
    "deleted": true}``, one whose author blocks the reader ``{"id",
    "blocked": true}``. Replies: :func:`replies`. A bounded number of
    queries, whatever the chain's length and the page's size."""
    chain = ancestors(tweet_id)
    authors = {a for _, a in chain if a is not None}
    blocking = (
        set(
            Block.objects.filter(blocked_id=reader.pk, blocker_id__in=authors).values_list(
                "blocker_id", flat=True
            )
        )
        if reader is not None and authors
        else set()
    )
    page, next_cursor = replies(tweet_id, reader, count=count, cursor=cursor)
    shown = [t for t, a in chain if a is not None and a not in blocking]
    objects = {o["id"]: o for o in selectors.tweet_objects([tweet_id, *shown, *page])}
    if tweet_id not in objects:  # deleted meanwhile
        raise NotFound(f"no tweet with id {tweet_id}")
    above: list[dict[str, Any]] = []
    for t, author in reversed(chain):
        if author in blocking:
            above.append({"id": t, "blocked": True})
        else:
            above.append(objects.get(t) or {"id": t, "deleted": True})
    return {
        "ancestors": above,
        "tweet": objects[tweet_id],
        "replies": [objects[t] for t in page if t in objects],
        "next_cursor": next_cursor,
    }
