"""Read queries against the database (profiles, user tweets, follow lists)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from feed.models import Follow, Tweet, User


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
