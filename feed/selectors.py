"""Read queries against the database (profiles, user tweets, follow lists)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
from django.db import connection
from django.db.models import Q, QuerySet

from fanout.model import events, ids
from feed.models import Follow, OutboxEvent, Tweet, User

if TYPE_CHECKING:
    from feed.timeline import TimelineQuery


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


def user_tweets(
    user: User, *, count: int, max_id: int | None = None, since_id: int | None = None
) -> list[Tweet]:
    """A user's tweets, newest first. ``max_id`` is inclusive, ``since_id`` exclusive."""
    qs: QuerySet[Tweet] = Tweet.objects.filter(author=user)
    if max_id is not None:
        qs = qs.filter(id__lte=max_id)
    if since_id is not None:
        qs = qs.filter(id__gt=since_id)
    return list(qs.select_related("author").order_by("-id")[:count])


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


def _join_sql(vendor: str, excluded: int = 0) -> str:
    """One user's home timeline by the database, newest first: the ids of the
    user's own tweets and their followees', below a bound, at most a limit,
    leaving out ``excluded`` authors (given after the user) and suspended
    (inactive) ones.

    On PostgreSQL each author's newest rows come through the (author, -id)
    index (a LATERAL top-N per author, merged): the cost is bounded by the
    number of authors followed, not by how old the page is. SQLite (the
    embedded default) has no LATERAL and scans the tweets by id instead.
    Parameters: user, user, the excluded authors, max_id, since_id, limit
    (then, on PostgreSQL, the limit again: per author, then of the whole).
    """
    # Only placeholders are spliced in: the ids are parameters.
    leave_out = f"AND followee_id NOT IN ({', '.join(['%s'] * excluded)})" if excluded else ""
    if vendor == "postgresql":
        sql = """
            SELECT t.id FROM (
                SELECT %s AS author_id
                UNION SELECT followee_id FROM feed_follow WHERE follower_id = %s {leave_out}
            ) AS a JOIN feed_user u ON u.id = a.author_id AND u.is_active
            CROSS JOIN LATERAL (
                SELECT id FROM feed_tweet
                WHERE author_id = a.author_id AND id <= %s AND id > %s
                ORDER BY id DESC LIMIT %s
            ) AS t
            ORDER BY t.id DESC LIMIT %s
        """
    else:
        sql = """
        SELECT id FROM feed_tweet
        WHERE (author_id = %s OR author_id IN (
            SELECT followee_id FROM feed_follow WHERE follower_id = %s {leave_out}))
          AND author_id IN (SELECT id FROM feed_user WHERE is_active)
          AND id <= %s AND id > %s
        ORDER BY id DESC LIMIT %s
        """
    return sql.replace("{leave_out}", leave_out)


def home_timeline_ids(
    user_id: int,
    *,
    limit: int,
    max_id: int | None = None,
    since_id: int | None = None,
    excluded: Sequence[int] = (),
) -> list[int]:
    """The view for one user as the database computes it: the newest ``limit``
    ids of the user's and their followees' tweets (``max_id`` inclusive,
    ``since_id`` exclusive), newest first; followees in ``excluded`` left out."""
    high = ids.MAX_ID if max_id is None else max_id
    low = 0 if since_id is None else since_id
    params = [user_id, user_id, *excluded, high, low, limit]
    if connection.vendor == "postgresql":
        params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(_join_sql(connection.vendor, len(excluded)), params)
        return [row[0] for row in cursor.fetchall()]


def home_timeline_page(user_id: int, query: TimelineQuery) -> dict[str, Any]:
    """A home-timeline page from the database: ``{"tweets", "next_max_id"}``,
    ``next_max_id`` null on the last page. Bounded: ``count + 1`` rows."""
    count = query.count
    found = home_timeline_ids(
        user_id, limit=count + 1, max_id=query.max_id, since_id=query.since_id
    )
    page = found[:count]
    rows = dict(
        (i, (author, text))
        for i, author, text in Tweet.objects.filter(id__in=page).values_list(
            "id", "author__username", "text"
        )
    )
    tweets = [events.tweet_fields(i, *rows[i]) for i in page if i in rows]
    return {"tweets": tweets, "next_max_id": page[-1] - 1 if len(found) > count else None}


def home_timeline_fallback(user_id: int, issued_at: float, query: TimelineQuery) -> bytes | None:
    """A home-timeline page computed by the database, for a timeline missing
    from Redis (the page JSON). None if the user is gone, deactivated or
    revoked the token (the Redis read checks revocation; this one must)."""
    user = User.objects.filter(pk=user_id, is_active=True).only("id", "tokens_valid_after").first()
    if user is None:
        return None
    if user.tokens_valid_after and issued_at < int(user.tokens_valid_after.timestamp()):
        return None
    return orjson.dumps(home_timeline_page(user_id, query))


def home_timeline_oracle(user_ids: Sequence[int], cap: int) -> dict[int, list[int]]:
    """The view the timelines maintain, computed by the database (the join plus
    the user's own tweets) with the ORM, independently of
    :func:`home_timeline_ids`: each user's newest ``cap`` tweet ids, newest
    first. What a rebuild verifies its sample against."""
    out: dict[int, list[int]] = {}
    for user_id in user_ids:
        followees = Follow.objects.filter(follower_id=user_id).values("followee_id")
        authors = Q(author_id=user_id) | Q(author_id__in=followees)
        visible = Tweet.objects.filter(authors, author__is_active=True)
        out[user_id] = list(visible.order_by("-id").values_list("id", flat=True)[:cap])
    return out


def settled_since(user_ids: Sequence[int], seq: int) -> set[int]:
    """The users whose home timeline no write after outbox ``seq`` can have
    changed: they neither followed nor unfollowed, and nobody they follow (nor
    they) tweeted or deleted since. Their timeline as of ``seq`` equals the
    database's current join."""
    recent = OutboxEvent.objects.filter(id__gt=seq)
    followers = {
        int(key.split(":", 1)[0])
        for key in recent.filter(topic=events.FOLLOWS).values_list("key", flat=True)
    }
    authors = set(recent.filter(topic=events.TWEETS).values_list("join_key", flat=True))
    settled = set()
    for user_id in user_ids:
        if user_id in followers or user_id in authors:
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
