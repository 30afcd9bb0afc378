"""The timeline views as the database computes them (docs/design.md): the
home timeline's, a list's and the mentions' SQL, their paged reads, and a
page of a timeline that Redis does not hold. Refills, cold reads and pages
past what Redis keeps all come from here; the SQL is the view's, checked
against a Python model of it (tests/web/test_view_sql.py,
test_list_view_sql.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson
from django.db import connection

from fanout.model import ids, owners
from feed.errors import NotFound
from feed.models import List as ListRow
from feed.models import User
from feed.selectors import tweet_objects

if TYPE_CHECKING:
    from feed.timeline import TimelineQuery


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
