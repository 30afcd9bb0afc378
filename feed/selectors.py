"""Read queries against the database (profiles, user tweets and likes, follow
lists, the home timeline's and the mentions' views) and the one shape of a
tweet clients see."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
import redis
from django.conf import settings
from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Coalesce

from fanout.model import events, ids, owners
from feed.errors import NotFound
from feed.models import Block, Follow, Like, ListMember, Mention, Mute, OutboxEvent, Tweet, User
from feed.models import List as ListRow

if TYPE_CHECKING:
    from feed.timeline import TimelineQuery

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Profile:
    user: User
    followers_count: int
    following_count: int
    tweets_count: int


def profile(user: User) -> Profile:
    """The counts the write use-cases keep on the user's row (no COUNT)."""
    return Profile(
        user=user,
        followers_count=user.followers_count,
        following_count=user.following_count,
        tweets_count=user.tweets_count,
    )


def visible_entries(tweets: QuerySet[Tweet]) -> QuerySet[Tweet]:
    """The rows of ``tweets`` that are entries of the view as far as their
    original goes: posts, and reposts whose original's author is active (the
    caller filters the rows' own authors)."""
    return tweets.filter(Q(repost_of__isnull=True) | Q(repost_of__author__is_active=True))


def user_tweets(
    user: User, *, count: int, max_id: int | None = None, since_id: int | None = None
) -> list[int]:
    """A user's entries (posts and reposts), newest first, by the view's rule:
    per original only the greatest entry (their repost of their own post
    hides the post); a repost of a suspended author's tweet is none.
    ``max_id`` is inclusive, ``since_id`` exclusive. The caller checks that
    ``user`` is active."""
    qs = visible_entries(Tweet.objects.filter(author=user))
    own_repost = Tweet.objects.filter(author_id=user.pk, repost_of_id=OuterRef("pk"))
    qs = qs.filter(~Exists(own_repost))
    if max_id is not None:
        qs = qs.filter(id__lte=max_id)
    if since_id is not None:
        qs = qs.filter(id__gt=since_id)
    return list(qs.order_by("-id").values_list("id", flat=True)[:count])


def user_likes(
    user: User, *, count: int, cursor: int | None = None
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of the tweets ``user`` liked, newest like first (those of
    active authors), and the cursor of the next page (the like's id; None on
    the last page)."""
    qs = Like.objects.filter(user=user, tweet__author__is_active=True)
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.order_by("-id").values_list("id", "tweet_id")[: count + 1])
    page = rows[:count]
    tweets = tweet_objects([t for _, t in page])
    return tweets, (page[-1][0] if len(rows) > count else None)


def tweet_detail(tweet_id: int) -> dict[str, Any] | None:
    """The tweet object of a visible entry (a post of an active author, or a
    repost by an active user of one), or None."""
    if not ids.is_valid(tweet_id):
        return None
    visible = visible_entries(Tweet.objects.filter(id=tweet_id, author__is_active=True))
    if not visible.exists():
        return None
    found = tweet_objects([tweet_id])
    return found[0] if found else None


def author_of(tweet_id: int) -> int:
    """The author of an existing tweet (the actor of an entry)."""
    return Tweet.objects.filter(id=tweet_id).values_list("author_id", flat=True).get()


# --- tweet objects ----------------------------------------------------------------

#: The counts of a tweet nobody liked or reposted.
ZERO_COUNTS: dict[str, int] = {"likes": 0, "reposts": 0, "replies": 0}


def tweet_object(
    entry_id: int,
    author: str,
    text: str,
    *,
    original: tuple[int, str] | None = None,
    counts: dict[str, int] | None = None,
    in_reply_to: tuple[int, str] | None = None,
    mentions: Sequence[str] = (),
) -> dict[str, Any]:
    """A tweet as clients see it, wherever it appears (the API's pages, the
    database's timeline pages; the Redis read builds the same shape in Lua):
    ``{id, author, text, in_reply_to, mentions, created_at, repost_of,
    counts}`` (:func:`fanout.model.events.tweet_fields`, then ``repost_of``
    and ``counts``). For a repost, ``id``, ``author`` and ``created_at`` are
    the repost's; ``text``, ``in_reply_to`` and ``mentions`` are the
    original's, and ``original`` (its id and author) gives ``repost_of``;
    ``counts`` are the original's. The names in ``in_reply_to`` and
    ``mentions`` are as written (feed.conversations), not as they are now."""
    return {
        **events.tweet_fields(entry_id, author, text, in_reply_to=in_reply_to, mentions=mentions),
        "repost_of": None
        if original is None
        else {
            "id": original[0],
            "author": original[1],
            "created_at": events.created_at_iso(original[0]),
        },
        "counts": dict(counts or ZERO_COUNTS),
    }


def tweet_objects(entry_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The tweet objects of these entries, in their order (one query for the
    rows and their originals, one for the mentions, one Redis call for the
    counts); an entry gone meanwhile is left out. Visibility is the caller's."""
    if not entry_ids:
        return []
    rows = Tweet.objects.filter(id__in=list(entry_ids)).values_list(
        "id",
        "author__username",
        "text",
        "repost_of_id",
        "repost_of__author__username",
        "repost_of__text",
        # What the post (a repost: its original) answers: its id, and its
        # author's name as written.
        Coalesce("repost_of__in_reply_to", "in_reply_to"),
        Coalesce("repost_of__reply_to_name", "reply_to_name"),
    )
    by_id = {row[0]: row for row in rows}
    present = [by_id[i] for i in entry_ids if i in by_id]
    originals = list(dict.fromkeys(row[3] or row[0] for row in present))
    counts = tweet_counts(originals)
    mentions = _mention_names(originals)
    out = []
    for entry_id, author, text, original, original_author, original_text, *answered in present:
        shown = original or entry_id
        out.append(
            tweet_object(
                entry_id,
                author,
                text if original is None else original_text,
                original=None if original is None else (original, original_author),
                counts=counts.get(shown),
                in_reply_to=(answered[0], answered[1]) if answered[0] is not None else None,
                mentions=mentions.get(shown, ()),
            )
        )
    return out


def _mention_names(tweet_ids: Sequence[int]) -> dict[int, list[str]]:
    """The names of the users each of these tweets mentions, as written, in
    its text's order."""
    out: dict[int, list[str]] = {}
    rows = Mention.objects.filter(tweet_id__in=tweet_ids).order_by("id")
    for tweet_id, name in rows.values_list("tweet_id", "name"):
        out.setdefault(tweet_id, []).append(name)
    return out


def tweet_counts(tweet_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """The counts of these (original) tweets: from Redis, where the fanout job
    keeps them (``ct:`` keys, :func:`fanout.store.keys.counts`); from the
    database when Redis is unreachable (a COUNT per kind for the page's
    tweets, of live likes, reposts and direct replies by active users:
    :func:`_database_counts`)."""
    if not tweet_ids:
        return {}
    try:
        stored = _stored_counts(tweet_ids)
    except redis.RedisError:
        log.warning("counts: Redis unavailable, counting in the database", exc_info=True)
        return _database_counts(tweet_ids)
    out: dict[int, dict[str, int]] = {}
    for tweet_id, raw in zip(tweet_ids, stored, strict=True):
        counts = dict(ZERO_COUNTS)
        if raw:
            counts.update({k: int(v) for k, v in orjson.loads(raw).items() if k in counts})
        out[tweet_id] = counts
    return out


def _stored_counts(tweet_ids: Sequence[int]) -> list[bytes | None]:
    """The ``ct:`` values of these tweets (None: all zero)."""
    from fanout.store.timelines import store_for

    return store_for(settings.STARLING).counts(tweet_ids)


def _database_counts(tweet_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """The counts' view (docs/design.md) of these original tweets, by the
    database: their live likes, reposts and direct replies by active users
    (three indexed COUNTs, grouped by tweet)."""
    likes = dict(
        Like.objects.filter(tweet_id__in=tweet_ids, user__is_active=True)
        .values_list("tweet_id")
        .annotate(n=Count("id"))
        .values_list("tweet_id", "n")
    )
    reposts = dict(
        Tweet.objects.filter(repost_of_id__in=tweet_ids, author__is_active=True)
        .values_list("repost_of_id")
        .annotate(n=Count("id"))
        .values_list("repost_of_id", "n")
    )
    replies = dict(
        Tweet.objects.filter(in_reply_to__in=tweet_ids, author__is_active=True)
        .values_list("in_reply_to")
        .annotate(n=Count("id"))
        .values_list("in_reply_to", "n")
    )
    return {
        t: {"likes": likes.get(t, 0), "reposts": reposts.get(t, 0), "replies": replies.get(t, 0)}
        for t in tweet_ids
    }


def follow_page(
    user: User, *, direction: str, count: int, cursor: int | None = None
) -> tuple[list[tuple[int, User]], int | None]:
    """One page of ``followers`` or ``following``, newest follow first.

    Returns ``[(follow_id, other_user)]`` and the cursor of the next page
    (``None`` on the last page). The cursor is the follow row's id.
    """
    if direction == "followers":
        qs = Follow.objects.filter(followee=user, follower__is_active=True)
        qs = qs.select_related("follower")
    else:
        qs = Follow.objects.filter(follower=user, followee__is_active=True)
        qs = qs.select_related("followee")
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.order_by("-id")[: count + 1])
    page = [(f.id, f.follower if direction == "followers" else f.followee) for f in rows[:count]]
    return page, (page[-1][0] if len(rows) > count else None)


def relation_page(
    model: type[Block] | type[Mute], user: User, *, count: int, cursor: int | None = None
) -> tuple[list[User], int | None]:
    """One page of the users ``user`` blocks (``Block``) or mutes (``Mute``),
    newest first, and the cursor of the next page (the row's id; ``None`` on
    the last page)."""
    if model is Block:
        blocks = Block.objects.filter(blocker=user).select_related("blocked")
        if cursor is not None:
            blocks = blocks.filter(id__lt=cursor)
        pairs = [(b.id, b.blocked) for b in blocks.order_by("-id")[: count + 1]]
    else:
        mutes = Mute.objects.filter(muter=user).select_related("muted")
        if cursor is not None:
            mutes = mutes.filter(id__lt=cursor)
        pairs = [(m.id, m.muted) for m in mutes.order_by("-id")[: count + 1]]
    return [u for _, u in pairs[:count]], (pairs[count - 1][0] if len(pairs) > count else None)


def list_page(
    owner: User, *, count: int, cursor: int | None = None
) -> tuple[list[ListRow], int | None]:
    """One page of ``owner``'s lists, newest first, and the cursor of the next
    page (a list's id; None on the last page)."""
    qs = ListRow.objects.filter(owner_id=owner.pk)
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.order_by("-id")[: count + 1])
    page = rows[:count]
    return page, (page[-1].pk if len(rows) > count else None)


def member_page(
    found: ListRow, *, count: int, cursor: int | None = None
) -> tuple[list[User], int | None]:
    """One page of a list's (active) members, newest first, and the cursor of
    the next page (the membership's id; None on the last page)."""
    qs = ListMember.objects.filter(list_id=found.pk, member__is_active=True)
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.select_related("member").order_by("-id")[: count + 1])
    page = rows[:count]
    return [m.member for m in page], (page[-1].id if len(rows) > count else None)


def following(reader: User | None, user: User) -> dict[str, bool] | None:
    """``{"reposts"}`` of the reader's follow of ``user``; ``None`` when not
    following (or anonymous)."""
    if reader is None:
        return None
    flag = Follow.objects.filter(follower=reader, followee=user).values_list("reposts", flat=True)
    found = flag.first()
    return None if found is None else {"reposts": bool(found)}


def _hidden_sql() -> str:
    """The CTEs ``me`` (one user) and ``hid`` (the users the views hide from
    them: those they block, who block them, whom they mute; docs/design.md,
    ``hidden``). Parameter: the user."""
    return """
        me AS (SELECT CAST(%s AS bigint) AS id),
        hid AS (
            SELECT blocked_id AS user_id FROM feed_block WHERE blocker_id = (SELECT id FROM me)
            UNION SELECT blocker_id FROM feed_block WHERE blocked_id = (SELECT id FROM me)
            UNION SELECT muted_id FROM feed_mute WHERE muter_id = (SELECT id FROM me)
        )"""


def _audience_sql(excluded: int) -> str:
    """The CTEs of one user's home timeline: :func:`_hidden_sql`'s, and
    ``aud``, the actors whose entries it shows with ``reposts``, whether their
    reposts show: the user and their followees (active ones, not hidden),
    leaving out ``excluded`` followees. Parameters: the user, the excluded."""
    # Only placeholders are spliced in: the ids are parameters.
    leave_out = f"AND followee_id NOT IN ({', '.join(['%s'] * excluded)})" if excluded else ""
    return f"""{_hidden_sql()},
        aud AS (
            SELECT a.author_id, a.reposts FROM (
                SELECT id AS author_id, TRUE AS reposts FROM me
                UNION SELECT followee_id, reposts FROM feed_follow
                WHERE follower_id = (SELECT id FROM me) {leave_out}
                  AND followee_id NOT IN (SELECT user_id FROM hid)
            ) AS a JOIN feed_user u ON u.id = a.author_id AND u.is_active
        )"""  # noqa: S608 (placeholders only)


#: An entry ``e`` whose original is visible (a post, or a repost of a tweet
#: of an active author: reposts of deleted tweets are deleted with them).
_VISIBLE_ORIGINAL = """
    LEFT JOIN feed_tweet o ON o.id = e.repost_of_id
    LEFT JOIN feed_user oa ON oa.id = o.author_id
"""
_VISIBLE_WHERE = "(e.repost_of_id IS NULL OR oa.is_active)"
#: The author of ``e``'s original is not hidden from the user (``e`` by the
#: user shows whatever its original).
_ORIGINAL_SHOWN = """(
    e.author_id = (SELECT id FROM me)
    OR (COALESCE(o.author_id, e.author_id) NOT IN (SELECT user_id FROM hid)
        AND (COALESCE(o.reply_to_id, e.reply_to_id) IS NULL
             OR COALESCE(o.reply_to_id, e.reply_to_id) NOT IN (SELECT user_id FROM hid)))
)"""
#: A post that answers someone else shows only if the user wrote it, is the
#: one it answers, or follows the one it answers (docs/decisions.md D29).
_REPLY_SHOWN = """(
    e.reply_to_id IS NULL OR e.reply_to_id = e.author_id
    OR e.author_id = (SELECT id FROM me) OR e.reply_to_id = (SELECT id FROM me)
    OR e.reply_to_id IN (SELECT followee_id FROM feed_follow
                         WHERE follower_id = (SELECT id FROM me))
)"""
#: ``e`` is an entry of the view for the user: its actor ``ea`` (a row of
#: ``aud``) shows its reposts if ``e`` is one, and its original's author
#: is not hidden.
_ENTRY_SHOWN = f"(e.repost_of_id IS NULL OR ea.reposts) AND {_ORIGINAL_SHOWN}"


def _newest_of_its_original(audience: str) -> str:
    """``e`` is the greatest entry of its original in the view (no newer
    entry of the view: a repost by an actor of the audience, joined as
    ``na`` by ``audience``, of an original not hidden, whatever the page's
    bounds). Only a repost can be newer than an entry of the same original
    (reposts' ids are greater than their original's): served by the
    (repost_of, id) index, or by the (author, repost_of) unique index probed
    per actor."""
    return f"""
    NOT EXISTS (
        SELECT 1 FROM feed_tweet n {audience}
        WHERE n.repost_of_id = COALESCE(e.repost_of_id, e.id) AND n.id > e.id
          AND (n.author_id = (SELECT id FROM me)
               OR (COALESCE(o.author_id, e.author_id) NOT IN (SELECT user_id FROM hid)
                   AND (COALESCE(o.reply_to_id, e.reply_to_id) IS NULL
                        OR COALESCE(o.reply_to_id, e.reply_to_id)
                           NOT IN (SELECT user_id FROM hid))))
    )
"""  # noqa: S608 (constants only)


#: ... and the greatest entry of its original in the home view: the newer
#: entries are by an actor of the audience who shows reposts.
_NEWEST_OF_ITS_ORIGINAL = _newest_of_its_original(
    "JOIN aud na ON na.author_id = n.author_id AND na.reposts"
)


def _join_sql(vendor: str, excluded: int = 0, *, aside: bool = False) -> str:
    """One user's home timeline by the database, newest first: the entry ids
    of the view (docs/design.md, "The view": the entries of the user and their
    followees, per original only the greatest), below a bound, at most a
    limit, leaving out ``excluded`` followees (given after the user) and
    suspended (inactive) actors and originals.

    On PostgreSQL each actor's newest entries come through the (author, -id)
    index (a LATERAL top-N per actor, merged), the rule applied inside it:
    the cost is bounded by the number of actors followed (and the entries
    hidden by newer ones), not by how old the page is. SQLite (the embedded
    default) has no LATERAL and scans the tweets by id instead.
    Parameters: user, user, the excluded authors, max_id, since_id, limit
    (then, on PostgreSQL, the limit again: per actor, then of the whole).
    With ``aside``, the replies the view leaves out for now (to users the
    user does not follow) are in too: what a timeline holds, aside or not.
    """
    shown = _ENTRY_SHOWN if aside else f"{_ENTRY_SHOWN} AND {_REPLY_SHOWN}"
    where = f"{_VISIBLE_WHERE} AND {shown} AND {_NEWEST_OF_ITS_ORIGINAL}"
    return _top_n_sql(vendor, _audience_sql(excluded), "aud", where)


def _top_n_sql(vendor: str, ctes: str, actors: str, where: str) -> str:
    """The newest entries by the actors of the CTE ``actors`` (its
    ``author_id``) that meet ``where``, newest first: on PostgreSQL a LATERAL
    top-N per actor through the (author, -id) index, merged; on SQLite a scan
    by id. Parameters after the CTEs': max_id, since_id, limit (then, on
    PostgreSQL, the limit again: per actor, then of the whole)."""
    if vendor == "postgresql":
        return f"""
            WITH {ctes}
            SELECT t.id FROM {actors} ea CROSS JOIN LATERAL (
                SELECT e.id FROM feed_tweet e {_VISIBLE_ORIGINAL}
                WHERE e.author_id = ea.author_id AND e.id <= %s AND e.id > %s AND {where}
                ORDER BY e.id DESC LIMIT %s
            ) AS t
            ORDER BY t.id DESC LIMIT %s
        """  # noqa: S608 (constants and placeholders only)
    return f"""
        WITH {ctes}
        SELECT e.id FROM feed_tweet e JOIN {actors} ea ON ea.author_id = e.author_id
          {_VISIBLE_ORIGINAL}
        WHERE e.id <= %s AND e.id > %s AND {where}
        ORDER BY e.id DESC LIMIT %s
    """  # noqa: S608 (constants and placeholders only)


def _view_ids(
    sql: str, head: Sequence[int], max_id: int | None, since_id: int | None, limit: int
) -> list[int]:
    """The entry ids :func:`_top_n_sql`'s ``sql`` finds, its CTEs' parameters
    ``head``, between ``since_id`` (exclusive) and ``max_id`` (inclusive)."""
    high = ids.MAX_ID if max_id is None else max_id
    low = 0 if since_id is None else since_id
    params = [*head, high, low, limit]
    if connection.vendor == "postgresql":
        params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def home_timeline_ids(
    user_id: int,
    *,
    limit: int,
    max_id: int | None = None,
    since_id: int | None = None,
    excluded: Sequence[int] = (),
    aside: bool = False,
) -> list[int]:
    """The view for one user as the database computes it: the newest ``limit``
    entry ids (``max_id`` inclusive, ``since_id`` exclusive), newest first,
    each the greatest entry of its original in the whole view; followees in
    ``excluded`` left out; with ``aside``, the replies to users the user does
    not follow in too (what a timeline holds, view and aside: D29)."""
    sql = _join_sql(connection.vendor, len(excluded), aside=aside)
    return _view_ids(sql, [user_id, *excluded], max_id, since_id, limit)


def home_timeline_entries(
    user_id: int, *, low: int, excluded: Sequence[int] = ()
) -> list[tuple[int, int, int]]:
    """Every raw entry of one user's home timeline at or above ``low``, the
    greatest of its original or not, the replies the view leaves out for now
    included: ``(entry, original, answers)`` ascending, ``answers`` the user
    the entry's original answers where that is someone other than its author,
    the entry's actor and the user, and the entry is not the user's own (else
    0; as fanout.store.ops gives them to an owner): what a refill carries above its
    horizon (:class:`fanout.model.events.TimelineReset`)."""
    sql = f"""
        WITH {_audience_sql(len(excluded))}
        SELECT e.id, COALESCE(e.repost_of_id, e.id),
               CASE WHEN e.author_id <> (SELECT id FROM me)
                     AND COALESCE(o.reply_to_id, e.reply_to_id) NOT IN (
                         COALESCE(o.author_id, e.author_id), e.author_id, (SELECT id FROM me))
                    THEN COALESCE(o.reply_to_id, e.reply_to_id) ELSE 0 END
        FROM aud ea JOIN feed_tweet e ON e.author_id = ea.author_id {_VISIBLE_ORIGINAL}
        WHERE e.id >= %s AND {_VISIBLE_WHERE} AND {_ENTRY_SHOWN}
        ORDER BY e.id
    """  # noqa: S608 (constants and placeholders only)
    with connection.cursor() as cursor:
        cursor.execute(sql, [user_id, *excluded, low])
        return [(int(e), int(o), int(u or 0)) for e, o, u in cursor.fetchall()]


def _list_sql(excluded: int) -> str:
    """The CTEs of list L's timeline, owner o: :func:`_hidden_sql`'s (o's),
    ``lst`` (L), and ``mem``, the actors whose entries it shows: L's members,
    active, not hidden from o, leaving out ``excluded``. Parameters: o, L,
    the excluded."""
    leave_out = f"AND m.member_id NOT IN ({', '.join(['%s'] * excluded)})" if excluded else ""
    return f"""{_hidden_sql()},
        lst AS (SELECT CAST(%s AS bigint) AS id),
        mem AS (
            SELECT m.member_id AS author_id FROM feed_listmember m
            JOIN feed_user u ON u.id = m.member_id AND u.is_active
            WHERE m.list_id = (SELECT id FROM lst) {leave_out}
              AND m.member_id NOT IN (SELECT user_id FROM hid)
        )"""  # noqa: S608 (placeholders only)


#: A post of a list's that answers someone else shows only if the one it
#: answers is a member (its owner has no exception here, unlike at home).
_LIST_REPLY_SHOWN = """(
    e.reply_to_id IS NULL OR e.reply_to_id = e.author_id
    OR e.reply_to_id IN (SELECT member_id FROM feed_listmember
                         WHERE list_id = (SELECT id FROM lst))
)"""
#: ... and the greatest entry of its original in the list's view: the newer
#: entries are by a member (reposts always show in a list).
_LIST_NEWEST = _newest_of_its_original("JOIN mem na ON na.author_id = n.author_id")


def _list_join_sql(vendor: str, excluded: int = 0, *, aside: bool = False) -> str:
    """List L's timeline by the database, newest first (docs/design.md, the
    list view): the entries of its members, reposts included, of originals
    its owner o does not hide (o's own entries whatever they show), a reply
    to someone else only if they are a member (with ``aside``, every reply:
    what its timeline holds), per original only the greatest; like
    :func:`_join_sql`, a top-N per member through the (author, -id) index
    on PostgreSQL. Parameters: o, L, the excluded, max_id, since_id, limit
    (then, on PostgreSQL, the limit again)."""
    shown = _ORIGINAL_SHOWN if aside else f"{_ORIGINAL_SHOWN} AND {_LIST_REPLY_SHOWN}"
    where = f"{_VISIBLE_WHERE} AND {shown} AND {_LIST_NEWEST}"
    return _top_n_sql(vendor, _list_sql(excluded), "mem", where)


def list_user(list_id: int) -> int:
    """The user who owns list ``list_id`` (its id's low bits)."""
    return owners.user_of(owners.list_owner(list_id))


def list_timeline_ids(
    list_id: int,
    *,
    limit: int,
    max_id: int | None = None,
    since_id: int | None = None,
    excluded: Sequence[int] = (),
    aside: bool = False,
) -> list[int]:
    """List L's view as the database computes it: the newest ``limit`` entry
    ids (``max_id`` inclusive, ``since_id`` exclusive), newest first, each
    the greatest entry of its original in the whole view; members in
    ``excluded`` left out; with ``aside``, the replies to non-members in too
    (what its timeline holds). A list that is no more has no members: []."""
    sql = _list_join_sql(connection.vendor, len(excluded), aside=aside)
    return _view_ids(sql, [list_user(list_id), list_id, *excluded], max_id, since_id, limit)


def list_timeline_entries(
    list_id: int, *, low: int, excluded: Sequence[int] = ()
) -> list[tuple[int, int, int, int]]:
    """Every raw entry of list L's timeline at or above ``low``, the greatest
    of its original or not, the replies to non-members included: ``(entry,
    original, by, answers)`` ascending; ``by``, for a repost, its original's
    author, 0 when the list's owner reposted it (the user the list's filter
    checks it against), 0 for a post; ``answers``, the user the entry's
    original answers when that is someone other than its author (else 0):
    what a refill of the list carries above its horizon."""
    sql = f"""
        WITH {_list_sql(len(excluded))}
        SELECT e.id, COALESCE(e.repost_of_id, e.id),
               CASE WHEN e.repost_of_id IS NOT NULL AND e.author_id <> (SELECT id FROM me)
                    THEN o.author_id ELSE 0 END,
               CASE WHEN COALESCE(o.reply_to_id, e.reply_to_id)
                         <> COALESCE(o.author_id, e.author_id)
                    THEN COALESCE(o.reply_to_id, e.reply_to_id) ELSE 0 END
        FROM mem ea JOIN feed_tweet e ON e.author_id = ea.author_id {_VISIBLE_ORIGINAL}
        WHERE e.id >= %s AND {_VISIBLE_WHERE} AND {_ORIGINAL_SHOWN}
        ORDER BY e.id
    """  # noqa: S608 (constants and placeholders only)
    with connection.cursor() as cursor:
        cursor.execute(sql, [list_user(list_id), list_id, *excluded, low])
        return [(int(e), int(o), int(b or 0), int(u or 0)) for e, o, b, u in cursor.fetchall()]


def _mentions_side(rows: str, entry: str, named: str) -> str:
    """One side of the mentions view for one user: the newest posts ``t`` of
    ``rows`` whose user ``named`` is the user (an index on (``named``,
    ``entry``) serves it), by active others the user does not hide, at most
    a limit below a bound. Parameters: max_id, since_id, limit."""
    return f"""
        SELECT id FROM (
            SELECT t.id FROM {rows} JOIN feed_user a ON a.id = t.author_id AND a.is_active
            WHERE {named} = (SELECT id FROM me) AND {entry} <= %s AND {entry} > %s
              AND t.author_id <> (SELECT id FROM me)
              AND t.author_id NOT IN (SELECT user_id FROM hid)
            ORDER BY {entry} DESC LIMIT %s
        ) AS side"""  # noqa: S608 (constants and placeholders only)


#: One user's mentions by the database, newest first (docs/design.md, the
#: mentions view): the live posts by active others that mention the user
#: (``feed_mention``) or answer one of the user's posts (``reply_to``, fixed
#: when the reply was written: it stays when the post it answers is
#: deleted), leaving out the authors the user hides. Each side's newest come
#: through its index, (user, tweet) and (reply_to, id); the newest of their
#: union are the view's (a reply that names the one it answers is on both
#: sides, and once in the union). Reposts are in neither (they have no text
#: and answer nothing). Parameters: the user, then max_id, since_id and
#: limit for each side, then the limit.
_MENTIONED = _mentions_side(
    "feed_mention m JOIN feed_tweet t ON t.id = m.tweet_id", "m.tweet_id", "m.user_id"
)
_ANSWERED = _mentions_side("feed_tweet t", "t.id", "t.reply_to_id")
_MENTIONS_SQL = f"""
    WITH {_hidden_sql()}
    SELECT id FROM ({_MENTIONED} UNION {_ANSWERED}) AS mentions
    ORDER BY id DESC LIMIT %s
"""  # noqa: S608 (constants and placeholders only)


def mentions_timeline_ids(
    user_id: int, *, limit: int, max_id: int | None = None, since_id: int | None = None
) -> list[int]:
    """The mentions view for one user as the database computes it: the newest
    ``limit`` post ids (``max_id`` inclusive, ``since_id`` exclusive), newest
    first. What a refill of the user's mentions timeline (owner -u,
    docs/decisions.md D30) carries and deep pages show."""
    bounds = [ids.MAX_ID if max_id is None else max_id, since_id or 0, limit]
    with connection.cursor() as cursor:
        cursor.execute(_MENTIONS_SQL, [user_id, *bounds, *bounds, limit])
        return [row[0] for row in cursor.fetchall()]


def timeline_page(owner_id: int, query: TimelineQuery) -> dict[str, Any]:
    """A page of a timeline from the database: user u's home timeline (owner
    u), mentions (owner -u, docs/decisions.md D30) or list L's (-L), ``{"tweets",
    "next_max_id"}``, ``next_max_id`` null on the last page. Bounded:
    ``count + 1`` rows."""
    count = query.count
    view: Callable[..., list[int]]
    if owners.is_list(owner_id):
        view, key = list_timeline_ids, owners.list_of(owner_id)
    elif owner_id > 0:
        view, key = home_timeline_ids, owner_id
    else:
        view, key = mentions_timeline_ids, -owner_id
    found = view(key, limit=count + 1, max_id=query.max_id, since_id=query.since_id)
    page = found[:count]
    return {
        "tweets": tweet_objects(page),
        "next_max_id": page[-1] - 1 if len(found) > count else None,
    }


def timeline_fallback(owner_id: int, issued_at: float, query: TimelineQuery) -> bytes | None:
    """A page of a timeline missing from Redis computed by the database
    (:func:`timeline_page`), the page JSON. None if the user (a list's
    owner, for a list) is gone, deactivated or revoked the token (the Redis
    read checks revocation; this one must); :class:`~feed.errors.NotFound`
    for a list that is no more."""
    user = (
        User.objects.filter(pk=owners.user_of(owner_id), is_active=True)
        .only("id", "tokens_valid_after")
        .first()
    )
    if user is None:
        return None
    if user.tokens_valid_after and issued_at < int(user.tokens_valid_after.timestamp()):
        return None
    if (
        owners.is_list(owner_id)
        and not ListRow.objects.filter(pk=owners.list_of(owner_id)).exists()
    ):
        raise NotFound(f"no list {owners.list_of(owner_id)}")
    return orjson.dumps(timeline_page(owner_id, query))


def blocks(blocker: int, blocked: int) -> bool:
    """Whether ``blocker`` blocks ``blocked``."""
    return Block.objects.filter(blocker_id=blocker, blocked_id=blocked).exists()


def mutes(muter: int, muted: int) -> bool:
    """Whether ``muter`` mutes ``muted``."""
    return Mute.objects.filter(muter_id=muter, muted_id=muted).exists()


def blocked_between(a: int, b: int) -> bool:
    """Whether a block stands between users ``a`` and ``b``, either way."""
    return Block.objects.filter(
        Q(blocker_id=a, blocked_id=b) | Q(blocker_id=b, blocked_id=a)
    ).exists()


def hidden_from(user_id: int) -> set[int]:
    """The users whose entries (and reposts of whose tweets) the view hides
    from ``user_id``: those the user blocks, who block the user, or whom the
    user mutes."""
    blocks = Block.objects.filter(Q(blocker_id=user_id) | Q(blocked_id=user_id))
    hidden = {b if a == user_id else a for a, b in blocks.values_list("blocker_id", "blocked_id")}
    return hidden | set(Mute.objects.filter(muter_id=user_id).values_list("muted_id", flat=True))


def home_timeline_oracle(user_ids: Sequence[int], cap: int) -> dict[int, list[int]]:
    """The view the timelines maintain, computed by the database with the ORM,
    independently of :func:`home_timeline_ids`: each user's newest ``cap``
    entries (of the user and their followees, active, of visible originals,
    leaving out what the user's blocks and mutes hide, the reposts of
    followees whose reposts the user turned off, and replies to users the
    user does not follow), per original only the greatest, newest first.
    What a rebuild verifies its sample against."""
    out: dict[int, list[int]] = {}
    for user_id in user_ids:
        hidden = hidden_from(user_id)
        followed = set(
            Follow.objects.filter(follower_id=user_id).values_list("followee_id", flat=True)
        )
        follows = Follow.objects.filter(follower_id=user_id).exclude(followee_id__in=hidden)
        no_reposts = follows.filter(reposts=False).values("followee_id")
        actors = Q(author_id=user_id) | Q(author_id__in=follows.values("followee_id"))
        rows = visible_entries(Tweet.objects.filter(actors, author__is_active=True)).exclude(
            Q(repost_of__isnull=False) & Q(author_id__in=no_reposts)
        )
        seen: set[int] = set()
        newest: list[int] = []
        # Newest first: the first entry of an original is its greatest.
        entries = rows.order_by("-id").values_list(
            "id",
            "author_id",
            "repost_of_id",
            "repost_of__author_id",
            "reply_to_id",
            "repost_of__reply_to_id",
        )
        for (
            entry,
            actor,
            original,
            original_author,
            answers,
            original_answers,
        ) in entries.iterator():
            to = original_answers if original else answers
            if actor != user_id and ((original_author or actor) in hidden or to in hidden):
                continue
            if (
                not original
                and to
                and to not in (actor, user_id)
                and actor != user_id
                and to not in followed
            ):
                continue  # a reply to someone the user does not follow
            key = original or entry
            if key in seen:
                continue
            seen.add(key)
            newest.append(entry)
            if len(newest) == cap:
                break
        out[user_id] = newest
    return out


def settled_since(user_ids: Sequence[int], seq: int) -> set[int]:
    """The users whose home timeline no write after outbox ``seq`` can have
    changed: they neither followed nor unfollowed (nor changed a follow's
    flags), their hidden users did not change (a block either way, a mute),
    and nobody they follow (nor they) tweeted or deleted since. Their timeline
    as of ``seq`` equals the database's current join."""
    recent = OutboxEvent.objects.filter(id__gt=seq)
    followers = {
        int(key.split(":", 1)[0])
        for key in recent.filter(topic=events.FOLLOWS).values_list("key", flat=True)
    }
    filtered = set(recent.filter(topic=events.FILTERS).values_list("join_key", flat=True))
    authors = set(recent.filter(topic=events.TWEETS).values_list("join_key", flat=True))
    settled = set()
    for user_id in user_ids:
        if user_id in followers or user_id in authors or user_id in filtered:
            continue
        if not Follow.objects.filter(follower_id=user_id, followee_id__in=authors).exists():
            settled.add(user_id)
    return settled


def idle_user_ids(cutoff: datetime, *, batch: int = 1000) -> Iterator[list[int]]:
    """Ids of the users not seen since ``cutoff``, a batch at a time (an index scan)."""
    ids = User.objects.filter(last_active__lt=cutoff).order_by().values_list("pk", flat=True)
    chunk: list[int] = []
    for user_id in ids.iterator(chunk_size=batch):
        chunk.append(user_id)
        if len(chunk) == batch:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def idle_batches(
    cutoff: datetime, *, batch: int = 1000
) -> Iterator[tuple[list[int], tuple[int, ...]]]:
    """:func:`idle_user_ids`' batches, each with the timeline owners (-L) of
    those users' lists, ascending: what the idle sweep drops with them."""
    for users in idle_user_ids(cutoff, batch=batch):
        lists = ListRow.objects.filter(owner_id__in=users).values_list("id", flat=True)
        yield users, tuple(sorted(owners.list_owner(L) for L in lists))
