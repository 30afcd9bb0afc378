"""Moderation's use-cases: moderators, suspension and reinstatement. Each
writes its rows, its record (:class:`feed.models.ModerationAction`) and its
outbox events in one transaction; deletes of tweets and follows by a
moderator are :mod:`feed.services`' own, checked and recorded the same way."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from fanout.model import events
from feed import outbox
from feed.conversations import links_of, posted, replies_counted
from feed.errors import ApplicationError
from feed.models import Follow, Like, ModerationAction, Tweet, User
from feed.services import (
    Written,
    check_moderator,
    record_moderation,
    tokens_revoke,
    user_register,
)

MODERATORS = "moderators"
#: What a moderator may do (codenames of the feed app).
MODERATION = (
    "view_user",
    "suspend_user",
    "view_tweet",
    "delete_tweet",
    "view_follow",
    "delete_follow",
    "view_like",
    "view_moderationaction",
)


def moderator_group() -> Group:
    """The group, with exactly the moderation permissions."""
    group, _ = Group.objects.get_or_create(name=MODERATORS)
    group.permissions.set(
        Permission.objects.filter(content_type__app_label="feed", codename__in=MODERATION)
    )
    return group


@transaction.atomic
def moderator_create(*, username: str, password: str) -> User:
    """A user (registered as anyone is) who may use the admin and moderate, and
    nothing more: ``is_staff`` and the :data:`MODERATORS` group."""
    user = user_register(username=username, password=password)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.groups.add(moderator_group())
    return user


@transaction.atomic
def user_suspend(*, user: User, moderator: User, reason: str) -> Written:
    """Suspend ``user``: no sign-in and no token any more, and everything of
    theirs leaves every view as a delete would (tombstones through the outbox
    and the job): each of their tweets and reposts, each of their likes,
    reposts and replies as engagements (counts leave them out), and every
    repost of their tweets by others (entries of an invisible original).
    Their follows stop counting on the other side. The rows stay, for
    :func:`user_reinstate`. Returns whether it changed anything (suspending
    a suspended user does not) and the seq to wait for. A like, repost or
    reply in flight locks the user's row: it commits before the update
    below (and is seen) or waits and is refused."""
    check_moderator(moderator, "suspend_user")
    if user.pk == moderator.pk:
        raise ApplicationError("you cannot suspend yourself", field="username")
    if not User.objects.filter(pk=user.pk, is_active=True).update(is_active=False):
        return Written(False, outbox.high_water_seq())  # already (the row is locked)
    _suspension_counts(user.pk, -1)
    # Tokens are timestamped to the second: one issued in this very second goes too.
    tokens_revoke(user=user, at=timezone.now() + timedelta(seconds=1))
    record_moderation(moderator, ModerationAction.Kind.SUSPEND, user.pk, reason=reason)
    gone: list[events.Event] = []
    own = Tweet.objects.filter(author_id=user.pk).order_by("id")
    for t, original, parent in own.values_list("id", "repost_of_id", "in_reply_to").iterator():
        gone.append(events.TweetDeleted(tweet_id=t, author_id=user.pk))
        if original is not None:
            gone.append(events.Disengaged(events.REPOST, user.pk, original))
        if parent is not None:
            gone.append(events.Disengaged(events.REPLY, t, parent))
    likes = Like.objects.filter(user_id=user.pk).order_by("id")
    gone.extend(
        events.Disengaged(events.LIKE, user.pk, t)
        for t in likes.values_list("tweet_id", flat=True).iterator()
    )
    # Reposts of their tweets by others: out of the view (their engagements
    # stay: counts of an invisible tweet are not shown).
    theirs = Tweet.objects.filter(repost_of__author_id=user.pk).exclude(author_id=user.pk)
    gone.extend(
        events.TweetDeleted(tweet_id=r, author_id=a)
        for r, a in theirs.order_by("id").values_list("id", "author_id").iterator()
    )
    return Written(True, outbox.append_many(gone) if gone else outbox.high_water_seq())


@transaction.atomic
def user_reinstate(*, user: User, moderator: User, reason: str = "") -> Written:
    """Undo :func:`user_suspend`: the user may sign in again, and everything
    of theirs still in the database comes back to every view, each posted
    again through the outbox (under the user's current name): their tweets,
    their reposts (entries of those whose original's author is active;
    engagements of all), their replies' engagements (of those whose parent
    is still there), their likes, and the reposts of their tweets by active
    users. Returns whether it changed anything (reinstating an active
    user does not) and the seq.

    The rows posted again are locked first (tweets, then likes, then the
    user's row, the order every write locks them in): a delete in flight of
    one of them (an unrepost, an unlike, an original deleted with its
    reposts, or with its replies' engagements) commits before they are read,
    or waits, so no tombstone is followed by a stale upsert."""
    check_moderator(moderator, "suspend_user")
    if User.objects.filter(pk=user.pk, is_active=True).exists():
        return Written(False, outbox.high_water_seq())
    rows = list(
        Tweet.objects.select_for_update(of=("self",))
        .filter(Q(author_id=user.pk) | Q(repost_of__author_id=user.pk))
        .order_by("id")
        .values_list(
            "id",
            "author_id",
            "author__is_active",
            "text",
            "repost_of_id",
            "repost_of__author_id",
            "repost_of__reply_to_id",
            "in_reply_to",
        )
    )
    liked = list(
        Like.objects.select_for_update()
        .filter(user_id=user.pk)
        .order_by("id")
        .values_list("tweet_id", flat=True)
    )
    if not User.objects.filter(pk=user.pk, is_active=False).update(is_active=True):
        return Written(False, outbox.high_water_seq())
    _suspension_counts(user.pk, +1)
    record_moderation(moderator, ModerationAction.Kind.REINSTATE, user.pk, reason=reason)
    active_authors = _active(
        {o_author for _, _, _, _, o, o_author, *_ in rows if o is not None} - {user.pk}
    )
    active_authors.add(user.pk)
    names = dict(
        User.objects.filter(pk__in={a for _, a, *_ in rows} | {user.pk}).values_list(
            "pk", "username"
        )
    )
    # A reply and a post with mentions come back as they were written.
    links = links_of(row[0] for row in rows if row[4] is None)
    back: list[events.Event] = []
    for t, author, author_active, text, original, o_author, o_reply_to, _ in rows:
        if author == user.pk:
            if original is None or o_author in active_authors:
                back.append(
                    posted(
                        t, author, names[author], text, original, o_author, links.get(t), o_reply_to
                    )
                )
            if original is not None:
                back.append(events.Engaged(events.REPOST, author, original))
        elif author_active:  # another's repost of the user's tweet
            back.append(
                posted(t, author, names[author], text, original, o_author, None, o_reply_to)
            )
    back += replies_counted((t, parent) for t, a, *_, parent in rows if a == user.pk and parent)
    back.extend(events.Engaged(events.LIKE, user.pk, t) for t in liked)
    return Written(True, outbox.append_many(back) if back else outbox.high_water_seq())


def _active(user_ids: set[int]) -> set[int]:
    return set(User.objects.filter(pk__in=user_ids, is_active=True).values_list("pk", flat=True))


def _suspension_counts(user_id: int, delta: int) -> None:
    """A (re)suspended user's follows leave (or join) the counts of the other
    side: those they follow lose a follower, those following them a followee."""
    followees = Follow.objects.filter(follower_id=user_id).values("followee_id")
    followers = Follow.objects.filter(followee_id=user_id).values("follower_id")
    User.objects.filter(pk__in=followees).update(followers_count=F("followers_count") + delta)
    User.objects.filter(pk__in=followers).update(following_count=F("following_count") + delta)
