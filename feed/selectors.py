"""Read queries against the database (profiles, user tweets, follow lists)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
from django.db.models import Q, QuerySet

from fanout import events
from feed.models import Follow, OutboxEvent, Tweet, User

if TYPE_CHECKING:
    from feed.timeline import TimelineQuery

#: The fallback reads the tweets of at most this many (most recent) followees.
FALLBACK_MAX_FOLLOWEES = 1000


@dataclass(frozen=True)
class Profile:
    user: User
    followers_count: int
    following_count: int
    tweets_count: int


def profile(user: User) -> Profile:
    return Profile(
        user=user,
        followers_count=Follow.objects.filter(followee=user).count(),
        following_count=Follow.objects.filter(follower=user).count(),
        tweets_count=Tweet.objects.filter(author=user).count(),
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
        qs = Follow.objects.filter(followee=user).select_related("follower")
    else:
        qs = Follow.objects.filter(follower=user).select_related("followee")
    if cursor is not None:
        qs = qs.filter(id__lt=cursor)
    rows = list(qs.order_by("-id")[: count + 1])
    page = [(f.id, f.follower if direction == "followers" else f.followee) for f in rows[:count]]
    return page, (page[-1][0] if len(rows) > count else None)


def home_timeline_fallback(user_id: int, issued_at: float, query: TimelineQuery) -> bytes | None:
    """A home-timeline page computed by the database (the join of DESIGN.md for
    one user), for a timeline missing from Redis. Bounded: at most ``count``
    rows, from at most FALLBACK_MAX_FOLLOWEES followees, through the
    (author, -id) index. None if the user is gone, deactivated or revoked the token.
    """
    user = User.objects.filter(pk=user_id, is_active=True).only("id", "tokens_valid_after").first()
    if user is None:
        return None
    if user.tokens_valid_after and issued_at < int(user.tokens_valid_after.timestamp()):
        return None
    followees = list(
        Follow.objects.filter(follower_id=user_id)
        .order_by("-id")
        .values_list("followee_id", flat=True)[:FALLBACK_MAX_FOLLOWEES]
    )
    qs = Tweet.objects.filter(author_id__in=[user_id, *followees])
    if query.max_id is not None:
        qs = qs.filter(id__lte=query.max_id)
    if query.since_id is not None:
        qs = qs.filter(id__gt=query.since_id)
    rows = list(qs.order_by("-id").values_list("id", "author__username", "text")[: query.count])
    next_max_id = rows[-1][0] - 1 if len(rows) == query.count else None
    return orjson.dumps(
        {
            "tweets": [events.tweet_fields(i, author, text) for i, author, text in rows],
            "next_max_id": next_max_id,
        }
    )


def home_timeline_oracle(user_ids: Sequence[int], cap: int) -> dict[int, list[int]]:
    """The view the timelines maintain, computed by the database (DESIGN.md's
    join plus the user's own tweets): each user's newest ``cap`` tweet ids,
    newest first. What a rebuild verifies its sample against."""
    out: dict[int, list[int]] = {}
    for user_id in user_ids:
        followees = Follow.objects.filter(follower_id=user_id).values("followee_id")
        authors = Q(author_id=user_id) | Q(author_id__in=followees)
        out[user_id] = list(
            Tweet.objects.filter(authors).order_by("-id").values_list("id", flat=True)[:cap]
        )
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
