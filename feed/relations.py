"""Write use-cases of who sees whom: blocks and mutes (a follow's ``reposts``
flag is :func:`feed.services.follow_reposts_set`). Each changes its rows and
appends its outbox events in one transaction, like every write
(feed.services).

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
from feed import outbox
from feed.errors import ApplicationError, NotFound
from feed.models import Block, Follow, Mute, User
from feed.services import Written, count_follows, lock_users


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
    seq = 0
    for follower, followee in ((blocker.pk, blocked.pk), (blocked.pk, blocker.pk)):
        deleted, _ = Follow.objects.filter(follower_id=follower, followee_id=followee).delete()
        if deleted:
            count_follows(follower, followee, -1, active)
            seq = outbox.append(events.Unfollowed(follower_id=follower, followee_id=followee))
    return Written(created=True, seq=seq or outbox.high_water_seq())


@transaction.atomic
def block_delete(*, blocker: User, blocked: User) -> int:
    """Unblock; idempotent. No follow comes back."""
    lock_users(blocker.pk, blocked.pk)
    Block.objects.filter(blocker=blocker, blocked=blocked).delete()
    return outbox.high_water_seq()


@transaction.atomic
def mute_create(*, muter: User, muted: User) -> Written:
    """Mute ``muted`` (private; the follow stays); muting again changes nothing."""
    _not_self(muter, muted, "mute")
    try:
        with transaction.atomic():
            Mute.objects.create(muter=muter, muted=muted)
    except IntegrityError:
        return Written(created=False, seq=outbox.high_water_seq())
    return Written(created=True, seq=outbox.high_water_seq())


@transaction.atomic
def mute_delete(*, muter: User, muted: User) -> int:
    """Unmute; idempotent."""
    Mute.objects.filter(muter=muter, muted=muted).delete()
    return outbox.high_water_seq()
