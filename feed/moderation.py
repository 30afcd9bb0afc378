"""Moderation's use-cases: moderators, suspension and reinstatement. Each
writes its rows, its record (:class:`feed.models.ModerationAction`) and its
outbox events in one transaction; deletes of tweets and follows by a
moderator are :mod:`feed.services`' own, checked and recorded the same way."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from fanout.model import events
from feed import outbox
from feed.errors import ApplicationError
from feed.models import Follow, ModerationAction, Tweet, User
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
    """Suspend ``user``: no sign-in and no token any more, and every tweet of
    theirs leaves every view as a delete would (a tombstone each, through the
    outbox and the job); their follows stop counting on the other side.
    The rows stay, for :func:`user_reinstate`. Returns whether it changed
    anything (suspending a suspended user does not) and the seq to wait for."""
    check_moderator(moderator, "suspend_user")
    if user.pk == moderator.pk:
        raise ApplicationError("you cannot suspend yourself", field="username")
    if not User.objects.filter(pk=user.pk, is_active=True).update(is_active=False):
        return Written(False, outbox.high_water_seq())  # already (the row is locked)
    _suspension_counts(user.pk, -1)
    # Tokens are timestamped to the second: one issued in this very second goes too.
    tokens_revoke(user=user, at=timezone.now() + timedelta(seconds=1))
    record_moderation(moderator, ModerationAction.Kind.SUSPEND, user.pk, reason=reason)
    tweets = Tweet.objects.filter(author_id=user.pk).values_list("id", flat=True)
    gone = [events.TweetDeleted(tweet_id=t, author_id=user.pk) for t in tweets.iterator()]
    return Written(True, outbox.append_many(gone) if gone else outbox.high_water_seq())


@transaction.atomic
def user_reinstate(*, user: User, moderator: User, reason: str = "") -> Written:
    """Undo :func:`user_suspend`: the user may sign in again, and every tweet
    of theirs still in the database comes back to every view (each posted
    again through the outbox, under the user's current name). Returns whether
    it changed anything (reinstating an active user does not) and the seq."""
    check_moderator(moderator, "suspend_user")
    if not User.objects.filter(pk=user.pk, is_active=False).update(is_active=True):
        return Written(False, outbox.high_water_seq())
    _suspension_counts(user.pk, +1)
    record_moderation(moderator, ModerationAction.Kind.REINSTATE, user.pk, reason=reason)
    name = User.objects.values_list("username", flat=True).get(pk=user.pk)
    rows = Tweet.objects.filter(author_id=user.pk).values_list("id", "text")
    back = [
        events.TweetPosted(tweet_id=t, author_id=user.pk, author=name, text=text)
        for t, text in rows.iterator()
    ]
    return Written(True, outbox.append_many(back) if back else outbox.high_water_seq())


def _suspension_counts(user_id: int, delta: int) -> None:
    """A (re)suspended user's follows leave (or join) the counts of the other
    side: those they follow lose a follower, those following them a followee."""
    followees = Follow.objects.filter(follower_id=user_id).values("followee_id")
    followers = Follow.objects.filter(followee_id=user_id).values("follower_id")
    User.objects.filter(pk__in=followees).update(followers_count=F("followers_count") + delta)
    User.objects.filter(pk__in=followers).update(following_count=F("following_count") + delta)
