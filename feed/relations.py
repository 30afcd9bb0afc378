"""Write use-cases of who sees whom: follows (and their ``reposts`` flag),
blocks and mutes. Each changes its rows and appends its outbox events in one
transaction, like every write (feed.services).

A block stands in both directions: it removes the follows between the two
users (as unfollows, with their counts), and while it stands neither can
follow the other (:func:`feed.services.refuse_if_blocked`, checked under the
same row locks as a follow, a repost or a like, so a block and a follow of
the other side never both commit). A mute is private and one-way, and keeps
the follow.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from fanout.model import events
from feed import lists, outbox, selectors
from feed.errors import ApplicationError, NotFound
from feed.models import Block, Follow, ModerationAction, Mute, User
from feed.services import (
    Written,
    add_to_count,
    check_moderator,
    lock_users,
    record_moderation,
    refuse_if_blocked,
)


@transaction.atomic
def follow_create(*, follower: User, followee: User, reposts: bool | None = None) -> Written:
    """Follow ``followee``, showing their reposts unless ``reposts`` is False;
    following again changes nothing but the flag, when given. 403 ``blocked``
    while a block stands either way (checked under both users' row locks,
    which a block takes too: the two never both commit)."""
    if follower.pk == followee.pk:
        raise ApplicationError("you cannot follow yourself", field="username")
    active = lock_users(follower.pk, followee.pk)  # their counts change
    if not active.get(followee.pk):
        raise NotFound(f"no user named {followee.username!r}")  # suspended
    refuse_if_blocked(follower.pk, followee.pk, "follow this account")
    try:
        with transaction.atomic():
            Follow.objects.create(
                follower=follower, followee=followee, reposts=reposts is not False
            )
    except IntegrityError:
        if reposts is not None:
            return Written(
                created=False,
                seq=follow_reposts_set(follower=follower, followee=followee, reposts=reposts),
            )
        return Written(created=False, seq=outbox.high_water_seq())
    count_follows(follower.pk, followee.pk, +1, active)
    return Written(created=True, seq=outbox.append(followed(follower.pk, followee.pk)))


def followed(follower_id: int, followee_id: int) -> events.Followed:
    """The follow's changelog record as the tables say now: whether the
    follower mutes the followee, whether the followee's reposts show."""
    follow = Follow.objects.filter(follower_id=follower_id, followee_id=followee_id)
    flag = follow.values_list("reposts", flat=True).first()
    return events.Followed(
        follower_id=follower_id,
        followee_id=followee_id,
        muted=Mute.objects.filter(muter_id=follower_id, muted_id=followee_id).exists(),
        reposts=flag is not False,
    )


def filters_set(owner_id: int) -> events.FiltersSet:
    """The owner's hidden users as the tables say now (selectors.hidden_from)."""
    return events.FiltersSet(owner_id, tuple(sorted(selectors.hidden_from(owner_id))))


def filters_changed(user_id: int, other: int) -> list[events.Event]:
    """After ``user_id``'s hidden set changed (a block either way, or a mute,
    between them and ``other``): their filter, the copy of each of their
    lists, and ``other``'s memberships in those lists with the new ``muted``
    flag (feed.lists.filter_events)."""
    record = filters_set(user_id)
    return [record, *lists.filter_events(user_id, record.hidden, other)]


def _filters_both(a: int, b: int) -> list[events.Event]:
    """A block's or unblock's: both sides' hidden sets change."""
    return [*filters_changed(a, b), *filters_changed(b, a)]


def _following(follower_id: int, followee_id: int) -> bool:
    return Follow.objects.filter(follower_id=follower_id, followee_id=followee_id).exists()


@transaction.atomic
def follow_reposts_set(*, follower: User, followee: User, reposts: bool) -> int:
    """Show (or not) ``followee``'s reposts at home; 404 when not following."""
    lock_users(follower.pk, followee.pk)
    follow = Follow.objects.select_for_update().filter(follower=follower, followee=followee).first()
    if follow is None:
        raise NotFound(f"you do not follow {followee.username!r}")
    if follow.reposts == reposts:
        return outbox.high_water_seq()
    follow.reposts = reposts
    follow.save(update_fields=["reposts"])
    return outbox.append(followed(follower.pk, followee.pk))


@transaction.atomic
def follow_delete(*, follower: User, followee: User, moderator: User | None = None) -> int:
    """Unfollow; idempotent. A ``moderator`` removing someone else's follow
    needs ``delete_follow`` and leaves a record."""
    if moderator is not None and moderator.pk != follower.pk:
        check_moderator(moderator, "delete_follow")
        record_moderation(moderator, ModerationAction.Kind.DELETE_FOLLOW, follower.pk)
    # Serialized with timeline_reset of the follower (see there); both counts change.
    active = lock_users(follower.pk, followee.pk)
    deleted, _ = Follow.objects.filter(follower=follower, followee=followee).delete()
    if not deleted:
        return outbox.high_water_seq()
    count_follows(follower.pk, followee.pk, -1, active)
    return outbox.append(events.Unfollowed(follower_id=follower.pk, followee_id=followee.pk))


def count_follows(follower_id: int, followee_id: int, delta: int, active: dict[int, bool]) -> None:
    """Both sides' counts, in the write's transaction (the rows are locked:
    ``active`` is :func:`lock_users`'). A follow counts on one side only while
    the other side is not suspended."""
    if active.get(followee_id):
        add_to_count(follower_id, "following_count", delta)
    if active.get(follower_id):
        add_to_count(followee_id, "followers_count", delta)


def _not_self(user: User, other: User, what: str) -> None:
    if user.pk == other.pk:
        raise ApplicationError(f"you cannot {what} yourself", field="username")


@transaction.atomic
def block_create(*, blocker: User, blocked: User) -> Written:
    """Block ``blocked``; blocking again changes nothing (200). The follows
    between the two go, both ways, as unfollows."""
    _not_self(blocker, blocked, "block")
    active = lock_users(blocker.pk, blocked.pk)  # serialized with follows of either side
    if not active.get(blocked.pk):
        raise NotFound(f"no user named {blocked.username!r}")
    try:
        with transaction.atomic():
            Block.objects.create(blocker=blocker, blocked=blocked)
    except IntegrityError:
        return Written(created=False, seq=outbox.high_water_seq())
    written: list[events.Event] = []
    for follower, followee in ((blocker.pk, blocked.pk), (blocked.pk, blocker.pk)):
        deleted, _ = Follow.objects.filter(follower_id=follower, followee_id=followee).delete()
        if deleted:
            count_follows(follower, followee, -1, active)
            written.append(events.Unfollowed(follower_id=follower, followee_id=followee))
    written += _filters_both(blocker.pk, blocked.pk)
    return Written(created=True, seq=outbox.append_many(written))


@transaction.atomic
def block_delete(*, blocker: User, blocked: User) -> int:
    """Unblock; idempotent. No follow comes back."""
    lock_users(blocker.pk, blocked.pk)
    deleted, _ = Block.objects.filter(blocker=blocker, blocked=blocked).delete()
    if not deleted:
        return outbox.high_water_seq()
    return outbox.append_many(_filters_both(blocker.pk, blocked.pk))


@transaction.atomic
def mute_create(*, muter: User, muted: User) -> Written:
    """Mute ``muted`` (private; the follow stays); muting again changes nothing."""
    _not_self(muter, muted, "mute")
    lock_users(muter.pk, muted.pk)  # in order with a follow of the same pair
    try:
        with transaction.atomic():
            Mute.objects.create(muter=muter, muted=muted)
    except IntegrityError:
        return Written(created=False, seq=outbox.high_water_seq())
    return Written(created=True, seq=outbox.append_many(_muted_events(muter.pk, muted.pk)))


@transaction.atomic
def mute_delete(*, muter: User, muted: User) -> int:
    """Unmute; idempotent."""
    lock_users(muter.pk, muted.pk)
    deleted, _ = Mute.objects.filter(muter=muter, muted=muted).delete()
    if not deleted:
        return outbox.high_water_seq()
    return outbox.append_many(_muted_events(muter.pk, muted.pk))


def _muted_events(muter_id: int, muted_id: int) -> list[events.Event]:
    """After a mute or unmute: the follow's record with its new flag (when
    the muter follows the muted: the join hides or shows the followee's
    entries), and the muter's hidden users (reposts of the muted's tweets),
    with their lists' copies and memberships (:func:`filters_changed`)."""
    out: list[events.Event] = []
    if _following(muter_id, muted_id):
        out.append(followed(muter_id, muted_id))
    out += filters_changed(muter_id, muted_id)
    return out
