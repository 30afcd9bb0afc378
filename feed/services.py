"""Write use-cases: each changes its rows and appends its outbox event in one
transaction. Nothing here talks to Kafka.

Every use-case returns the ``seq`` of the event it wrote. A write that
changes nothing (follow an already-followed user, unfollow a user one does
not follow) writes no event and returns the outbox's high-water ``seq``
instead, so read-your-writes still means "everything before my request".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from fanout.model import events, ids, owners
from feed import outbox, selectors, view_sql
from feed.errors import (
    ApplicationError,
    Blocked,
    Conflict,
    Forbidden,
    NotFound,
    ServiceUnavailable,
)
from feed.idgen import next_tweet_id
from feed.models import DeletedReply, Like, List, ModerationAction, Tweet, User
from feed.validation import InvalidInput, validate_username

log = logging.getLogger(__name__)

#: Attempts at a fresh tweet id if two processes ever mint the same one.
ID_ATTEMPTS = 5


@dataclass(frozen=True)
class TweetWrite:
    tweet: Tweet
    seq: int
    #: (id, author's name as written) of the post it answers, for a reply.
    in_reply_to: tuple[int, str] | None = None
    #: The names of the users it mentions, as written, in its text's order.
    mentions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Written:
    """A write that may have changed nothing (it was already so), and its seq."""

    created: bool
    seq: int


def input_error(exc: InvalidInput) -> ApplicationError:
    return ApplicationError(exc.message, field=exc.field)


def user_by_username(username: str, *, suspended: bool = False) -> User:
    """The user of that name (any case); a suspended one only with ``suspended``
    (moderation): for everyone else a suspended account does not exist."""
    users = User.objects.filter(username__lower=username.lower())
    user = (users if suspended else users.filter(is_active=True)).first()
    if user is None:
        raise NotFound(f"no user named {username!r}")
    return user


def new_user(username: str, password: str) -> User:
    """An unsaved user whose username and password passed validation."""
    try:
        validate_username(username)
    except InvalidInput as exc:
        raise input_error(exc) from None
    user = User(username=username)
    try:
        validate_password(password, user)
    except DjangoValidationError as exc:
        raise ApplicationError(" ".join(exc.messages), field="password") from None
    return user


@transaction.atomic
def user_register(*, username: str, password: str) -> User:
    user = new_user(username, password)
    user.set_password(password)
    return user_add(user=user)


@transaction.atomic
def user_add(*, user: User) -> User:
    """Save a new user (built with its password set) and its self edge: the
    one way a user comes to be, whether by registration, the admin's form or
    ``createsuperuser`` (the user manager's). The name is validated here."""
    username = user.username
    try:
        validate_username(username)
    except InvalidInput as exc:
        raise input_error(exc) from None
    if User.objects.filter(username__lower=username.lower()).exists():
        raise Conflict(f"username {username!r} is already taken", field="username")
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        raise Conflict(f"username {username!r} is already taken", field="username") from None
    # The self edge: the join materializes the new user's (empty) home timeline.
    outbox.append(events.Followed(follower_id=user.pk, followee_id=user.pk))
    return user


@transaction.atomic
def user_rename(*, user: User, username: str) -> int:
    """Give a user a new name, everywhere: the row, and each tweet of theirs
    posted again under it (through the outbox: the fanout job rewrites the
    cached bodies, and the changelog, which a rebuild reads, holds the new
    name). The old name is free once this commits. Returns the seq.

    Only the user's own tweets: the tweets of others that answer or mention
    the user show the name they were written with (feed.conversations), as
    their text does, so a rename costs the user's own tweets, whoever names
    them."""
    try:
        validate_username(username)
    except InvalidInput as exc:
        raise input_error(exc) from None
    taken = User.objects.filter(username__lower=username.lower()).exclude(pk=user.pk)
    if taken.exists():
        raise Conflict(f"username {username!r} is already taken", field="username")
    # The rows re-posted below, locked first (tweets before users, as every
    # write locks them): a delete of one in flight (an unrepost, an original
    # deleted with its reposts) commits before they are read, or waits.
    rows = list(
        selectors.visible_entries(
            Tweet.objects.select_for_update(of=("self",)).filter(author_id=user.pk)
        )
        .order_by("id")
        .values_list("id", "text", "repost_of_id", "repost_of__author_id", "repost_of__reply_to_id")
    )
    active = lock_users(user.pk)
    try:
        with transaction.atomic():
            User.objects.filter(pk=user.pk).update(username=username)
    except IntegrityError:  # taken meanwhile (the case-insensitive unique index)
        raise Conflict(f"username {username!r} is already taken", field="username") from None
    user.username = username
    if not active.get(user.pk):
        return outbox.high_water_seq()  # suspended: the reinstatement posts the new name
    from feed import conversations

    # Its posts, and its reposts whose original is visible (a repost's body
    # names the reposter; reposts of its tweets by others name the original).
    # A reply or a post with mentions keeps what it answers and mentions,
    # with the names as written.
    links = conversations.links_of(t for t, _, o, _, _ in rows if o is None)
    again = [
        conversations.posted(t, user.pk, username, text, o, o_author, links.get(t), o_reply_to)
        for t, text, o, o_author, o_reply_to in rows
    ]
    return outbox.append_many(again) if again else outbox.high_water_seq()


def tweet_create(*, author: User, text: str, in_reply_to: int | None = None) -> TweetWrite:
    """Post a tweet, a reply if ``in_reply_to`` names a tweet: the use-case is
    :func:`feed.conversations.tweet_create` (mentions, replies)."""
    from feed import conversations

    return conversations.tweet_create(author=author, text=text, in_reply_to=in_reply_to)


@transaction.atomic
def tweet_delete(*, tweet_id: int, actor: User) -> int:
    """Delete a tweet as its author or as staff (moderation); return the seq.

    A repost's id undoes the repost (:func:`repost_delete`'s events). An
    original goes with its reposts and its likes, in this transaction, each
    with its tombstones: the original's first (its body goes, so every entry
    showing it is skipped at once), then each repost's entry and engagement,
    then each like. Its direct replies stay (they still name it), but they
    no longer count as its replies: each reply's engagement is tombstoned
    (its count key goes), and so is the original's own, if it is a reply."""
    tweet = (
        Tweet.objects.select_for_update().filter(id=tweet_id).first()
        if ids.is_valid(tweet_id)
        else None
    )
    if tweet is None:
        raise NotFound(f"no tweet with id {tweet_id}")
    if tweet.author_id != actor.pk:
        check_moderator(actor, "delete_tweet")
        record_moderation(
            actor, ModerationAction.Kind.DELETE_TWEET, tweet.author_id, tweet_id=tweet_id
        )
    author_id = tweet.author_id
    if tweet.repost_of_id is not None:
        return _unrepost(tweet)
    # Locked (a like, repost or reply of this tweet key-share locks it: none
    # is in flight now, and none comes after this commits). Its reposts and
    # direct replies are locked too, in id order (as a reinstatement or a
    # republish locks a user's tweets): one that posts a reply's engagement
    # again reads this delete's outcome, or commits first.
    reposts: list[tuple[int, int]] = []
    replies: list[int] = []
    for t, a, original in (
        Tweet.objects.select_for_update()
        .filter(Q(repost_of_id=tweet_id) | Q(in_reply_to=tweet_id))
        .order_by("id")
        .values_list("id", "author_id", "repost_of_id")
    ):
        if original is None:
            replies.append(t)
        else:
            reposts.append((t, a))
    likers = list(
        Like.objects.select_for_update()
        .filter(tweet_id=tweet_id)
        .order_by("id")
        .values_list("user_id", flat=True)
    )
    Like.objects.filter(tweet_id=tweet_id).delete()
    Tweet.objects.filter(repost_of_id=tweet_id).delete()
    if tweet.in_reply_to is not None and replies:
        # What it answered stays known to the threads of its replies (feed.conversations).
        DeletedReply.objects.create(id=tweet_id, in_reply_to=tweet.in_reply_to)
    tweet.delete()
    add_to_count(author_id, "tweets_count", -1)
    gone: list[events.Event] = [events.TweetDeleted(tweet_id=tweet_id, author_id=author_id)]
    for repost_id, reposter in reposts:
        gone.append(events.TweetDeleted(tweet_id=repost_id, author_id=reposter))
        gone.append(events.Disengaged(events.REPOST, reposter, tweet_id))
    gone.extend(events.Disengaged(events.LIKE, liker, tweet_id) for liker in likers)
    gone.extend(events.Disengaged(events.REPLY, r, tweet_id) for r in replies)
    if tweet.in_reply_to is not None:
        gone.append(events.Disengaged(events.REPLY, tweet_id, tweet.in_reply_to))
    return outbox.append_many(gone)


# --- reposts and likes -----------------------------------------------------------


@dataclass(frozen=True)
class Reposted:
    """A repost (new, or the one already there) and the seq to wait for."""

    created: bool
    repost_id: int
    seq: int


class Original(NamedTuple):
    """The original a tweet id shows: itself, or the one a repost reposts."""

    id: int
    author: int
    #: The user it answers (``Tweet.reply_to``), 0 if it is not a reply.
    reply_to: int


def _original_of(tweet_id: int) -> Original | None:
    """The original a tweet id shows (a repost resolves to its original), or
    None for an unknown id."""
    if not ids.is_valid(tweet_id):
        return None
    row = (
        Tweet.objects.filter(id=tweet_id)
        .values_list(
            "id",
            "author_id",
            "reply_to_id",
            "repost_of_id",
            "repost_of__author_id",
            "repost_of__reply_to_id",
        )
        .first()
    )
    if row is None:
        return None
    own_id, author_id, reply_to, repost_of, original_author, original_reply_to = row
    if repost_of:
        return Original(repost_of, original_author, original_reply_to or 0)
    return Original(own_id, author_id, reply_to or 0)


def locked_original(tweet_id: int) -> Original:
    """The original that ``tweet_id`` shows, its row
    key-share locked (a delete of it waits for this transaction; likes of one
    tweet do not wait for each other). NotFound for an unknown or deleted
    tweet, and for a repost by a suspended user (the author of the original
    is the caller's to check, under its lock)."""
    resolved = _original_of(tweet_id)
    if resolved is not None and resolved.id != tweet_id:
        # A repost: visible only while its author is active.
        reposter = Tweet.objects.filter(id=tweet_id).values_list("author__is_active", flat=True)
        if not reposter.first():
            resolved = None
    if resolved is None or not _lock_tweet_shared(resolved.id):
        raise NotFound(f"no tweet with id {tweet_id}")
    return resolved


def _engageable(user: User, tweet_id: int) -> Original:
    """The visible original that ``tweet_id`` shows, for ``user`` to like or
    repost (:func:`locked_original`), both authors' rows share locked (a
    suspension of either waits, then sees what this wrote). NotFound for an
    unknown, deleted or invisible tweet; Forbidden for a suspended ``user``."""
    original = locked_original(tweet_id)
    active = _lock_users_shared(user.pk, original.author)
    if not active.get(original.author):
        raise NotFound(f"no tweet with id {tweet_id}")  # a suspended author's
    if not active.get(user.pk):
        raise Forbidden("this account is suspended")
    refuse_if_blocked(user.pk, original.author, "engage with this account's tweets")
    return original


def refuse_if_blocked(a: int, b: int, what: str) -> None:
    """403 ``blocked`` when a block stands between users ``a`` and ``b``."""
    if a != b and selectors.blocked_between(a, b):
        raise Blocked(f"a block stands between you and this account: you cannot {what}")


def _lock_tweet_shared(tweet_id: int) -> bool:
    """Key-share lock a tweet's row (PostgreSQL); whether it exists."""
    table = connection.ops.quote_name(Tweet._meta.db_table)
    lock = " FOR KEY SHARE" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s{lock}", [tweet_id])  # noqa: S608 (the model's table)
        return cursor.fetchone() is not None


def _lock_users_shared(*user_ids: int) -> dict[int, bool]:
    """:func:`lock_users` with a shared lock: writes of many users engaging
    with one author's tweets do not wait for each other, and a suspension
    (an update of the row) waits for them all."""
    if connection.vendor != "postgresql":
        return dict(User.objects.filter(pk__in=user_ids).values_list("pk", "is_active"))
    table = connection.ops.quote_name(User._meta.db_table)
    marks = ", ".join(["%s"] * len(user_ids))
    sql = f"SELECT id, is_active FROM {table} WHERE id IN ({marks}) ORDER BY id FOR SHARE"  # noqa: S608 (the model's table)
    with connection.cursor() as cursor:
        cursor.execute(sql, list(user_ids))
        return {int(i): bool(a) for i, a in cursor.fetchall()}


def id_after(earlier: int, attempt: int) -> int:
    """A fresh tweet id greater than ``earlier`` (ids order entries: a repost
    must come after what it reposts, a reply after what it answers, even
    when that was minted by a web host whose clock is ahead of this one's)."""
    minted = next_tweet_id()
    return minted if minted > earlier else earlier + 1 + attempt


@transaction.atomic
def repost_create(*, user: User, tweet_id: int) -> Reposted:
    """Repost the tweet ``tweet_id`` shows (a repost's id reposts its
    original): a row of its own (empty text), and on the outbox its entry
    (keyed by the reposter) and its engagement (keyed by the original).
    Reposting again returns the repost already there. Reposts do not count in
    the reposter's ``tweets_count`` (posts only). A repost of a reply
    carries whom the reply answers (``repost_of_reply_to``)."""
    original, original_author, original_reply_to = _engageable(user, tweet_id)
    existing = _repost_by(user.pk, original)
    if existing is not None:
        return Reposted(created=False, repost_id=existing, seq=outbox.high_water_seq())
    for attempt in range(ID_ATTEMPTS):
        repost_id = id_after(original, attempt)
        repost = Tweet(
            id=repost_id,
            author=user,
            text="",
            created_at=ids.created_at(repost_id),
            repost_of_id=original,
        )
        try:
            with transaction.atomic():
                repost.save(force_insert=True)
            break
        except IntegrityError:
            existing = _repost_by(user.pk, original)
            if existing is not None:  # the same repost, committed meanwhile
                return Reposted(created=False, repost_id=existing, seq=outbox.high_water_seq())
            if attempt == ID_ATTEMPTS - 1:
                raise
    seq = outbox.append_many(
        [
            events.TweetPosted(
                tweet_id=repost_id,
                author_id=user.pk,
                author=user.username,
                text="",
                repost_of=original,
                repost_of_author=original_author,
                repost_of_reply_to=original_reply_to,
            ),
            events.Engaged(events.REPOST, user.pk, original),
        ]
    )
    return Reposted(created=True, repost_id=repost_id, seq=seq)


def _repost_by(user_id: int, original: int) -> int | None:
    return (
        Tweet.objects.filter(author_id=user_id, repost_of_id=original)
        .values_list("id", flat=True)
        .first()
    )


@transaction.atomic
def repost_delete(*, user: User, tweet_id: int) -> int:
    """Undo ``user``'s repost of the tweet ``tweet_id`` shows (the original's
    id or a repost's); idempotent: nothing to undo (an unknown tweet too)
    returns the high-water seq. Allowed whatever the original's state."""
    resolved = _original_of(tweet_id)
    repost = (
        None
        if resolved is None
        else Tweet.objects.select_for_update()
        .filter(author_id=user.pk, repost_of_id=resolved.id)
        .first()
    )
    if repost is None:
        return outbox.high_water_seq()
    return _unrepost(repost)


def _unrepost(repost: Tweet) -> int:
    """Delete a (locked) repost row: its entry's and its engagement's tombstones.
    The reposter's row is share locked (after the tweet's, as every write
    locks them): a rename, suspension or reinstatement of theirs reads this
    repost before or after, never while its delete is in flight."""
    assert repost.repost_of_id is not None
    original, reposter = repost.repost_of_id, repost.author_id
    _lock_users_shared(reposter)
    repost_id = repost.id
    repost.delete()
    return outbox.append_many(
        [
            events.TweetDeleted(tweet_id=repost_id, author_id=reposter),
            events.Disengaged(events.REPOST, reposter, original),
        ]
    )


@transaction.atomic
def like_create(*, user: User, tweet_id: int) -> Written:
    """Like the tweet ``tweet_id`` shows (a repost's id likes its original);
    liking it again changes nothing."""
    original = _engageable(user, tweet_id).id
    try:
        with transaction.atomic():
            Like.objects.create(user=user, tweet_id=original)
    except IntegrityError:
        return Written(created=False, seq=outbox.high_water_seq())
    return Written(created=True, seq=outbox.append(events.Engaged(events.LIKE, user.pk, original)))


@transaction.atomic
def like_delete(*, user: User, tweet_id: int) -> int:
    """Undo ``user``'s like of the tweet ``tweet_id`` shows; idempotent
    (nothing to undo, an unknown tweet too: the high-water seq)."""
    resolved = _original_of(tweet_id)
    if resolved is None:
        return outbox.high_water_seq()
    deleted, _ = Like.objects.filter(user_id=user.pk, tweet_id=resolved.id).delete()
    if not deleted:
        return outbox.high_water_seq()
    return outbox.append(events.Disengaged(events.LIKE, user.pk, resolved.id))


#: The counts kept on the user's row (migration 0004), which add_to_count may change.
COUNTS = frozenset({"tweets_count", "followers_count", "following_count"})


def add_to_count(user_id: int, column: str, delta: int, *, if_active: bool = False) -> bool:
    """Add ``delta`` to one of a user's counts (only if the user is active,
    with ``if_active``); whether a row changed. One statement of our own: the
    ORM's ``filter().update(F() + 1)`` spent 0.5 ms building it, a third of a
    tweet's whole write on SQLite (load_tests/bench_write.py)."""
    if column not in COUNTS:
        raise ValueError(f"not a count: {column!r}")
    table = connection.ops.quote_name(User._meta.db_table)
    where = f"id = %s{' AND is_active' if if_active else ''}"
    sql = f"UPDATE {table} SET {column} = {column} + %s WHERE {where}"  # noqa: S608 (names: COUNTS, the model)
    with connection.cursor() as cursor:
        cursor.execute(sql, [delta, user_id])
        return bool(cursor.rowcount)


def lock_users(*user_ids: int) -> dict[int, bool]:
    """Lock these users' rows until the transaction ends, in id order (two
    writes locking the same two rows then never wait for each other in a
    circle; SQLite runs one write transaction at a time anyway). Returns
    whether each one found is active (not suspended), as read under the lock."""
    rows = User.objects.select_for_update().filter(pk__in=user_ids).order_by("pk")
    return dict(rows.values_list("pk", "is_active"))


@transaction.atomic
def timeline_reset(user_id: int) -> int:
    """Have the fanout job refill one timeline from the database: user u's
    home timeline (``user_id`` u), their mentions (-u, docs/decisions.md
    D30) or list L's (-L, feed.lists.list_reset; NotFound for a list that
    is no more); return the seq to wait for.

    The database computes the timeline's newest ``STARLING_TIMELINE_SIZE +
    STARLING_TIMELINE_SLACK`` entries (the join for this user) and the outbox carries
    them to the job as a :class:`~fanout.model.events.TimelineReset`, which merges
    them in: the job stays the only writer of timelines. For a timeline left
    short by removals, a cold timeline, a user back from idleness.

    The user's row is locked first, as an unfollow locks it: an unfollow is
    either seen by this read or committed after it with a higher seq (and
    the job then drops this reset as stale and asks again), so a reset never
    brings back an author the user has unfollowed. ``as_of`` says which
    writes the read saw for certain (on PostgreSQL, one committed after it
    with a lower seq may be missing): the job applies the reset once it has
    applied everything before it, and only if nothing it applied after
    ``as_of`` removed entries or let some fall below the horizon.
    """
    as_of = outbox.settled_high()  # the read below sees every write up to there
    if as_of is None:
        raise ServiceUnavailable("writes in flight hold the database; try again")
    user = owners.user_of(user_id)
    if user not in lock_users(user):
        raise NotFound(f"no user with id {user}")
    config = settings.STARLING
    keep = config.timeline_size + config.timeline_slack
    if owners.is_list(user_id):
        from feed import lists

        # Under its owner's lock, as every write of the user's lists: a list
        # deleted (or never made) gets nothing, its drop is on its way.
        if not List.objects.filter(pk=owners.list_of(user_id)).exists():
            raise NotFound(f"no list with id {owners.list_of(user_id)}")
        return outbox.append(lists.list_reset(user_id, keep, as_of))
    if user_id < 0:
        return outbox.append(_mentions_reset(-user_id, keep, as_of))
    return outbox.append(_home_reset(user_id, keep, as_of))


def _horizon(found: list[int], keep: int) -> int:
    """The horizon of a refill whose view's newest ids are ``found`` (more
    than ``keep`` if there are): the oldest of the newest ``keep``, or 0 when
    they are all."""
    return found[keep - 1] if len(found) > keep else 0


def _home_reset(user_id: int, keep: int, as_of: int) -> events.TimelineReset:
    """The refill of user's home timeline (:func:`timeline_reset`)."""
    from fanout.store.timelines import store_for

    # The pulled authors' tweets are not in the timeline (its reads merge their
    # lists): left out here, named in the reset, which applies only if the
    # timeline still reads exactly those lists then.
    pulled = store_for(settings.STARLING).pulled_authors(user_id)
    # The horizon is set by the newest ``keep`` entries of the view (one per
    # original); the reset carries every raw entry at or above it, those
    # another entry of their original hides too, and the originals of the
    # reposts among them: the timeline's pairs (fanout/store, "reposts").
    # The replies the view leaves out for now count: the timeline keeps them aside (D29).
    found = view_sql.home_timeline_ids(user_id, limit=keep + 1, excluded=pulled, aside=True)
    horizon = _horizon(found, keep)
    raw = view_sql.home_timeline_entries(user_id, low=horizon, excluded=pulled)
    return events.TimelineReset(
        user_id,
        tuple(sorted({entry for entry, _, _ in raw})),
        horizon,
        as_of,
        pulled,
        # A reset is never screened: the read applied the owner's filter (``by`` 0).
        tuple(sorted((entry, original, 0) for entry, original, _ in raw if entry != original)),
        tuple(sorted((entry, user) for entry, _, user in raw if user)),
    )


def _mentions_reset(user_id: int, keep: int, as_of: int) -> events.TimelineReset:
    """The refill of user's mentions timeline (owner -user_id): the newest
    ``keep`` posts of the mentions view, each an entry of its own (no
    reposts, no replies aside, nothing pulled)."""
    found = view_sql.mentions_timeline_ids(user_id, limit=keep + 1)
    return events.TimelineReset(-user_id, tuple(sorted(found[:keep])), _horizon(found, keep), as_of)


def user_seen(user_id: int) -> None:
    """Record that the user read a timeline or signed in (once a day is enough:
    idleness is counted in days). Idle users' timelines are dropped by
    :func:`feed.tasks.drop_idle_timelines`; a read brings them back."""
    User.objects.filter(pk=user_id).update(last_active=timezone.now())


def tokens_revoke(*, user: User, at: datetime | None = None, deactivate: bool = False) -> None:
    """Refuse every token the user holds (and, with ``deactivate``, the account).

    The database is the record (write endpoints check it); the timeline read
    path, which never asks the database, checks the copy the store keeps in
    Redis. Tokens are timestamped to the second: one issued in the same
    second as the revocation stays valid.
    """
    from fanout.store.timelines import store_for

    now = at or timezone.now()
    user.tokens_valid_after = now
    fields = ["tokens_valid_after"]
    if deactivate:
        user.is_active = False
        fields.append("is_active")
    user.save(update_fields=fields)
    valid_after = int(now.timestamp())

    def copy_to_redis() -> None:
        try:
            store_for(settings.STARLING).revoke_tokens(
                user.pk, valid_after, settings.STARLING_TOKEN_TTL
            )
        except Exception:  # the record is written; beat's reconcile copies it soon
            log.warning(
                "could not copy the revocation of user %d to Redis; "
                "feed.tasks.restore_revocations will",
                user.pk,
                exc_info=True,
            )

    transaction.on_commit(copy_to_redis)


@transaction.atomic
def password_change(*, user: User, old_password: str, new_password: str) -> None:
    """Set a new password after checking the old one, and end every session:
    the tokens issued before stop working (reads too), so a stolen token does
    not survive the change. Refuses a new password Django's validators refuse."""
    if not user.check_password(old_password):
        raise ApplicationError("the old password is wrong", field="old_password")
    try:
        validate_password(new_password, user)
    except DjangoValidationError as exc:
        raise ApplicationError(" ".join(exc.messages), field="new_password") from None
    user.set_password(new_password)
    user.save(update_fields=["password"])
    tokens_revoke(user=user)


def revocations_restore() -> int:
    """Put every token revocation still in force back into Redis (the read
    path checks revocations there, never in the database): what a rebuild
    does first, so a Redis that lost its data does not let revoked tokens
    read timelines again. Returns how many were restored."""
    from fanout.store.timelines import store_for

    ttl = settings.STARLING_TOKEN_TTL
    since = timezone.now() - timedelta(seconds=ttl)
    users = User.objects.filter(tokens_valid_after__gt=since).values_list(
        "pk", "tokens_valid_after"
    )
    return store_for(settings.STARLING).revoke_tokens_many(
        (user_id, int(valid_after.timestamp()), int((valid_after - since).total_seconds()))
        for user_id, valid_after in users.iterator()
        if valid_after is not None  # filtered on
    )


# --- moderation (the use-cases are feed.moderation's) --------------------------


def check_moderator(actor: User, permission: str) -> None:
    """The API's and the admin's check alike: the permission, not ``is_staff``."""
    if not actor.has_perm(f"feed.{permission}"):
        raise Forbidden(f"moderators only (the {permission} permission)")


def record_moderation(
    actor: User, kind: str, subject_id: int, *, tweet_id: int | None = None, reason: str = ""
) -> None:
    ModerationAction.objects.create(
        moderator=actor, kind=kind, subject_id=subject_id, tweet_id=tweet_id, reason=reason
    )
