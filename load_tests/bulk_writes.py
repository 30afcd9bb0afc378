"""The seeder's bulk writes (load_tests/seed.py): the same validation, rows,
counts and events as the use-cases of :mod:`feed.services`, many per
transaction, each row's outbox event committed with the row. Imported once
Django is set up."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from fanout.model import events, ids
from feed import outbox
from feed.errors import ApplicationError, Conflict
from feed.idgen import next_tweet_id
from feed.models import Follow, Tweet, User
from feed.services import new_user
from feed.validation import InvalidInput, normalize_tweet_text


def recount(user_ids: Iterable[int]) -> None:
    """Set these users' counts from the tables (the bulk writes of the seeder)."""
    ids_ = list(set(user_ids))
    for column, rows, key in (
        ("followers_count", Follow.objects, "followee"),
        ("following_count", Follow.objects, "follower"),
        ("tweets_count", Tweet.objects, "author"),
    ):
        counted = rows.filter(**{key: OuterRef("pk")}).order_by().values(key)
        total = counted.annotate(n=Count("*")).values("n")
        User.objects.filter(pk__in=ids_).update(**{column: Coalesce(Subquery(total), 0)})


@transaction.atomic
def user_register_many(*, usernames: list[str], password: str) -> list[User]:
    """:func:`user_register` for many users (with their self edges) at once.

    Every user gets the same password, hashed once: a hash is deliberately
    slow (about 0.3 s here), and seeded accounts share a known password.
    """
    from django.contrib.auth.hashers import make_password
    from django.db.models.functions import Lower

    users = [new_user(username, password) for username in usernames]
    lowered = [u.lower() for u in usernames]
    if len(set(lowered)) != len(lowered):
        raise ApplicationError("a username is given twice", field="username")
    taken = User.objects.annotate(name=Lower("username")).filter(name__in=lowered)
    first = taken.values_list("username", flat=True).first()
    if first is not None:
        raise Conflict(f"username {first!r} is already taken", field="username")
    encoded = make_password(password)
    for user in users:
        user.password = encoded
    User.objects.bulk_create(users)  # sets the ids (PostgreSQL, SQLite >= 3.35)
    if users:
        outbox.append_many([events.Followed(follower_id=u.pk, followee_id=u.pk) for u in users])
    return users


@transaction.atomic
def follow_create_many(*, pairs: list[tuple[int, int]]) -> int:
    """:func:`feed.relations.follow_create` for many (follower id, followee id) pairs.

    Pairs already followed are skipped without an event, as there. Returns
    the seq of the last event written (the high-water seq if none was).
    """
    if any(follower == followee for follower, followee in pairs):
        raise ApplicationError("you cannot follow yourself", field="username")
    wanted = list(dict.fromkeys(pairs))
    existing = set(
        Follow.objects.filter(
            follower_id__in={f for f, _ in wanted}, followee_id__in={g for _, g in wanted}
        ).values_list("follower_id", "followee_id")
    )
    new = [pair for pair in wanted if pair not in existing]
    if not new:
        return outbox.high_water_seq()
    Follow.objects.bulk_create([Follow(follower_id=f, followee_id=g) for f, g in new])
    recount({user for pair in new for user in pair})
    return outbox.append_many([events.Followed(follower_id=f, followee_id=g) for f, g in new])


@transaction.atomic
def tweet_create_many(*, posts: list[tuple[User, str]]) -> int:
    """:func:`tweet_create` for many (author, text) posts; returns the last seq.

    Ids come from this process's generator; should another process share its
    node number and mint one of them too, the primary key refuses the batch
    (nothing is written) rather than retrying tweet by tweet.
    """
    tweets = []
    for author, text in posts:
        try:
            text = normalize_tweet_text(text)
        except InvalidInput as exc:
            raise ApplicationError(exc.message, field=exc.field) from None
        tweet_id = next_tweet_id()
        tweets.append(
            Tweet(id=tweet_id, author=author, text=text, created_at=ids.created_at(tweet_id))
        )
    if not tweets:
        return outbox.high_water_seq()
    Tweet.objects.bulk_create(tweets)
    recount({t.author.pk for t in tweets})
    return outbox.append_many(
        [
            events.TweetPosted(
                tweet_id=t.id, author_id=t.author.pk, author=t.author.username, text=t.text
            )
            for t in tweets
        ]
    )
