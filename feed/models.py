"""The system of record: the tables, and the outbox of their changes.

Rows change only through the use-cases in :mod:`feed.services`, which append
an :class:`OutboxEvent` in the same transaction. Foreign keys to users are
``PROTECT``: a cascade would delete tweets and follows without emitting
their tombstones, leaving timelines that still show them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.contrib.auth.models import AbstractUser, UserManager
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower
from django.utils import timezone

# ``username__lower=name.lower()`` is ``LOWER(username) = ...``: the expression
# of the case-insensitive unique index, which serves it (``__iexact`` becomes
# ``UPPER(...)`` on PostgreSQL, which no index serves).
models.CharField.register_lookup(Lower)


class Users(UserManager["User"]):
    """``create_user`` / ``create_superuser`` (``manage.py createsuperuser``) go
    through the registration's use-case: a validated name and the self edge."""

    def _create_user(self, username: Any, email: Any, password: Any, **extra_fields: Any) -> User:
        from feed import services

        make = self._create_user_object  # type: ignore[attr-defined]  # Django 5.2, unstubbed
        return services.user_add(user=make(username, email, password, **extra_fields))


class User(AbstractUser):
    objects: ClassVar[Users] = Users()

    #: Tokens issued before this instant are refused (logout everywhere / revocation).
    tokens_valid_after = models.DateTimeField(null=True, blank=True)
    #: The last day the user read a timeline or signed in (updated once a day):
    #: users idle for STARLING_ACTIVE_DAYS get no fan-out (feed.tasks.drop_idle_timelines).
    last_active = models.DateTimeField(default=timezone.now, db_index=True)
    #: Kept by the write use-cases in the transaction of each write (feed.services),
    #: so a profile is one row: a celebrity's follower count is not a scan.
    followers_count = models.PositiveIntegerField(default=0)
    following_count = models.PositiveIntegerField(default=0)
    tweets_count = models.PositiveIntegerField(default=0)
    #: How many lists the user ever made: list n's id is ``owners.list_id(u, n)``
    #: (feed.lists; taken under the user's row lock, never reused).
    lists_made = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("username"), name="user_username_ci_unique"),
        ]
        #: A suspended user is inactive: no sign-in, no token, and their tweets out
        #: of every view (feed.moderation.user_suspend); moderators hold this and
        #: ``delete_tweet`` (manage.py createmoderator).
        permissions = [("suspend_user", "Can suspend and reinstate users")]


class Tweet(models.Model):
    """A post, or a repost (``repost_of`` set): a timeline entry of its own,
    with its own id, showing the original's text. A repost's text is empty;
    its id is greater than the original's; a user reposts a tweet at most
    once, and a repost of a repost is one of its original (feed.services).
    A post may answer another (``in_reply_to``, feed.conversations); its id
    is then greater than its parent's, so a thread's chain of parents always
    ends."""

    #: 53-bit time-ordered id (:mod:`fanout.model.ids`); also the pagination cursor.
    id = models.BigIntegerField(primary_key=True)
    author = models.ForeignKey(User, on_delete=models.PROTECT, related_name="tweets")
    text = models.CharField(max_length=280, blank=True)
    created_at = models.DateTimeField()
    #: The original, for a repost (deleting the original deletes its reposts
    #: first, each with its tombstone: feed.services.tweet_delete).
    repost_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="reposts",
        db_index=False,  # the partial index below serves "the reposts of o"
    )
    #: The post this one answers (a repost's id answers its original). A plain
    #: id, not a foreign key: it outlives its parent (deleting a tweet leaves
    #: its replies, and what they answered, as they are), so nothing cascades
    #: and no constraint refuses the delete.
    in_reply_to = models.BigIntegerField(null=True, blank=True, db_index=False)
    #: The author of ``in_reply_to``, fixed when the reply is written (kept
    #: when the parent goes; users are never deleted).
    reply_to = models.ForeignKey(
        User,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # the partial index below serves "the replies to u"
    )
    #: ``reply_to``'s name as written: their username when the reply was
    #: written, which its tweet object shows for good (a rename of theirs
    #: leaves it, as it leaves an ``@name`` in the text); "" for a non-reply.
    reply_to_name = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["author", "-id"], name="tweet_author_id_idx"),
            # The reposts of an original, by id: its cascade on delete, its
            # counts, and the view's "is there a newer entry of this original".
            models.Index(
                fields=["repost_of", "id"],
                name="tweet_repost_of_id_idx",
                condition=Q(repost_of__isnull=False),
            ),
            # A tweet's direct replies by id (the thread's pages, the counts).
            models.Index(
                fields=["in_reply_to", "id"],
                name="tweet_in_reply_to_id_idx",
                condition=Q(in_reply_to__isnull=False),
            ),
            # The replies to a user's posts by id (their mentions, feed.selectors).
            models.Index(
                fields=["reply_to", "id"],
                name="tweet_reply_to_id_idx",
                condition=Q(reply_to__isnull=False),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["author", "repost_of"],
                condition=Q(repost_of__isnull=False),
                name="tweet_repost_once",
            ),
            models.CheckConstraint(
                condition=Q(repost_of__isnull=True) | (Q(text="") & Q(repost_of__lt=F("id"))),
                name="tweet_repost_empty_and_newer",
            ),
            # A reply is a post, newer than its parent, with the parent's
            # author and their name as written.
            models.CheckConstraint(
                condition=(
                    Q(in_reply_to__isnull=True) & Q(reply_to__isnull=True) & Q(reply_to_name="")
                )
                | (
                    Q(repost_of__isnull=True)
                    & Q(reply_to__isnull=False)
                    & ~Q(reply_to_name="")
                    & Q(in_reply_to__lt=F("id"))
                ),
                name="tweet_reply_is_a_newer_post",
            ),
        ]

    def __str__(self) -> str:
        if self.repost_of_id:
            return f"{self.id} by {self.author_id}: repost of {self.repost_of_id}"
        return f"{self.id} by {self.author_id}: {self.text[:40]}"

    @property
    def original_id(self) -> int:
        """The tweet this entry shows: itself, or the one it reposts."""
        return self.repost_of_id or self.id


class Mention(models.Model):
    """``tweet`` mentions ``user`` (an active user when it was written; the
    author too, if they name themselves): read from its text once, when it is
    written, in the order the text names them (the row's id), with the name
    it was written with."""

    #: The mentions go with their tweet (they have no changelog of their own).
    #: Indexed by the unique pair, and by (user, tweet): a user's mentions by id.
    tweet = models.ForeignKey(
        Tweet, on_delete=models.CASCADE, related_name="mentions", db_index=False
    )
    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="+", db_index=False)
    #: The user's name as written: their username when the tweet was written
    #: (in its own case), which the tweet object shows for good (a rename
    #: leaves it, as it leaves the ``@name`` in the text).
    name = models.CharField(max_length=150)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tweet", "user"], name="mention_once"),
        ]
        indexes = [models.Index(fields=["user", "tweet"], name="mention_user_tweet_idx")]

    def __str__(self) -> str:
        return f"{self.tweet_id} mentions {self.user_id}"


class DeletedReply(models.Model):
    """What a deleted reply answered, written when it is deleted if it has
    replies of its own: a thread's chain of parents goes on above it
    (feed.conversations). Its text and author go with it."""

    #: The deleted reply's id.
    id = models.BigIntegerField(primary_key=True)
    in_reply_to = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.id} (deleted) answered {self.in_reply_to}"


class Like(models.Model):
    """``user`` likes ``tweet`` (an original: a like of a repost is one of its
    original). Newest like first is id descending."""

    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="likes")
    #: Deleting the tweet deletes its likes first, each with its tombstone.
    tweet = models.ForeignKey(Tweet, on_delete=models.PROTECT, related_name="likes")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tweet"], name="like_once"),
        ]
        indexes = [models.Index(fields=["user", "-id"], name="like_user_id_idx")]

    def __str__(self) -> str:
        return f"{self.user_id} likes {self.tweet_id}"


class Follow(models.Model):
    follower = models.ForeignKey(User, on_delete=models.PROTECT, related_name="following_set")
    followee = models.ForeignKey(User, on_delete=models.PROTECT, related_name="follower_set")
    created_at = models.DateTimeField(auto_now_add=True)
    #: Whether the followee's reposts show in the follower's home timeline.
    reposts = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["follower", "followee"], name="follow_unique_pair"),
            models.CheckConstraint(condition=~Q(follower=F("followee")), name="follow_not_self"),
        ]
        indexes = [models.Index(fields=["followee", "-id"], name="follow_followee_id_idx")]

    def __str__(self) -> str:
        return f"{self.follower_id} -> {self.followee_id}"


class Block(models.Model):
    """``blocker`` blocks ``blocked``: neither sees the other's entries at home,
    neither can follow, repost, like or reply to the other."""

    blocker = models.ForeignKey(User, on_delete=models.PROTECT, related_name="blocking_set")
    blocked = models.ForeignKey(User, on_delete=models.PROTECT, related_name="blocked_by_set")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["blocker", "blocked"], name="block_unique_pair"),
            models.CheckConstraint(condition=~Q(blocker=F("blocked")), name="block_not_self"),
        ]
        indexes = [
            models.Index(fields=["blocker", "-id"], name="block_blocker_id_idx"),
            models.Index(fields=["blocked"], name="block_blocked_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.blocker_id} blocks {self.blocked_id}"


class Mute(models.Model):
    """``muter`` mutes ``muted``: private, one-way, hides ``muted``'s entries
    (and reposts of their tweets) from ``muter``'s home timeline."""

    muter = models.ForeignKey(User, on_delete=models.PROTECT, related_name="muting_set")
    muted = models.ForeignKey(User, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["muter", "muted"], name="mute_unique_pair"),
            models.CheckConstraint(condition=~Q(muter=F("muted")), name="mute_not_self"),
        ]
        indexes = [models.Index(fields=["muter", "-id"], name="mute_muter_id_idx")]

    def __str__(self) -> str:
        return f"{self.muter_id} mutes {self.muted_id}"


class List(models.Model):
    """A user's list: a timeline of its own whose "follows" are its members
    (docs/design.md, the list view). Private: only its owner sees it."""

    #: ``owners.list_id(owner, n)``: the owner's n-th list (``User.lists_made``),
    #: below 2**53 (exact as a JSON number); its timeline's owner id is -id.
    id = models.BigIntegerField(primary_key=True)
    owner = models.ForeignKey(User, on_delete=models.PROTECT, related_name="lists", db_index=False)
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    #: Kept by the membership use-cases in the write's transaction (feed.lists).
    members_count = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["owner", "-id"], name="list_owner_id_idx")]

    def __str__(self) -> str:
        return f"list {self.id} of {self.owner_id}: {self.name}"


class ListMember(models.Model):
    """``member`` is in ``list``: the list's timeline shows their entries.
    Deleting a list deletes its members first, each with its removal's event
    (feed.lists), so nothing cascades."""

    list = models.ForeignKey(List, on_delete=models.PROTECT, related_name="members", db_index=False)
    member = models.ForeignKey(User, on_delete=models.PROTECT, related_name="+", db_index=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Also the index of a list's members (the view's, the pages').
            models.UniqueConstraint(fields=["list", "member"], name="list_member_once"),
        ]
        indexes = [
            # A list's members, newest first (their pages).
            models.Index(fields=["list", "-id"], name="list_member_list_id_idx"),
            # The lists a user is in (a block's or mute's re-sent memberships).
            models.Index(fields=["member", "list"], name="list_member_member_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.member_id} in list {self.list_id}"


class OutboxEvent(models.Model):
    """One changelog record waiting for (or done with) the relay.

    ``id`` is the event's ``seq``: the commit order the relay publishes in,
    returned to clients for read-your-writes.
    """

    topic = models.CharField(max_length=16)
    key = models.CharField(max_length=64)
    #: JSON of the row; NULL for a tombstone (delete / unfollow).
    value = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL means tombstone
    join_key = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["id"], name="outbox_unpublished_idx", condition=Q(published_at__isnull=True)
            ),
            models.Index(fields=["published_at"], name="outbox_published_at_idx"),
        ]

    def __str__(self) -> str:
        kind = "tombstone" if self.value is None else "upsert"
        return f"#{self.id} {self.topic} {self.key} ({kind})"


class TimelineRebuild(models.Model):
    """A timeline rebuild started from the admin (run by a Celery task)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        HANDED_OVER = "handed-over", "handed over (the job switches when caught up)"
        FAILED = "failed"

    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    requested_at = models.DateTimeField(auto_now_add=True)
    dry_run = models.BooleanField(
        default=False, help_text="Only report how many timelines differ; change nothing."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    stage = models.CharField(max_length=200, blank=True)
    detail = models.TextField(blank=True)
    summary = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"rebuild #{self.pk} ({'dry run, ' if self.dry_run else ''}{self.status})"


class ModerationAction(models.Model):
    """What a moderator did, who, when and why: written by the use-cases in the
    transaction of the action (the API's and the admin's alike)."""

    class Kind(models.TextChoices):
        SUSPEND = "suspend"
        REINSTATE = "reinstate"
        DELETE_TWEET = "delete-tweet", "delete a tweet"
        DELETE_FOLLOW = "delete-follow", "delete a follow"

    moderator = models.ForeignKey(User, on_delete=models.PROTECT, related_name="moderation_actions")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    #: The user acted on (the tweet's author, for a deleted tweet).
    subject = models.ForeignKey(User, on_delete=models.PROTECT, related_name="+")
    tweet_id = models.BigIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["subject", "-id"], name="moderation_subject_idx")]

    def __str__(self) -> str:
        return f"{self.moderator_id} {self.kind} {self.subject_id}"
