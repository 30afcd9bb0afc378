"""The write use-cases under concurrent requests, on the suite's database
(PostgreSQL by default, where transactions really run side by side): each
race ends with one row, one event, and no server error."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from feed.auth import issue_token
from feed.models import Follow, OutboxEvent, Tweet, User
from feed.services import tweet_create
from tests.support import postgres
from tests.support.factories import UserFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # The in-memory SQLite test database locks whole tables between threads;
    # SQLite runs one writer at a time anyway (the e2e tests cover its file database).
    pytest.mark.skipif(postgres.database_kind() != "postgres", reason="needs PostgreSQL"),
]


def race(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` in ``n`` threads released at once; return their results."""
    start = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def client(user: User) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(user)}")
    return c


def test_the_same_follow_from_many_requests_is_one_row_and_one_event(starling) -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    codes = race(8, lambda i: client(ann).post("/api/v1/users/bob/follow").status_code)
    assert sorted(codes) == [200] * 7 + [201], codes
    assert Follow.objects.filter(follower=ann, followee=bob).count() == 1
    assert OutboxEvent.objects.filter(topic="follows", key=f"{ann.pk}:{bob.pk}").count() == 1


def test_one_tweet_deleted_by_many_requests_is_one_tombstone(starling) -> None:
    ann = UserFactory(username="ann")
    tweet = tweet_create(author=ann, text="going away").tweet
    codes = race(6, lambda i: client(ann).delete(f"/api/v1/tweets/{tweet.id}").status_code)
    assert sorted(codes) == [204] + [404] * 5, codes
    tombstones = OutboxEvent.objects.filter(topic="tweets", key=str(tweet.id), value__isnull=True)
    assert tombstones.count() == 1


def test_one_username_registered_by_many_requests_is_taken_once(starling) -> None:
    def register(i: int) -> int:
        name = "Carol" if i % 2 else "carol"
        body = {"username": name, "password": "pw-long-enough-123"}
        return APIClient().post("/api/v1/auth/register", body, format="json").status_code

    codes = race(6, register)
    assert sorted(codes) == [201] + [409] * 5, codes
    assert User.objects.filter(username__iexact="carol").count() == 1


def test_concurrent_tweets_get_distinct_ids_and_one_event_each(starling) -> None:
    ann = UserFactory(username="ann")
    results = race(
        8, lambda i: client(ann).post("/api/v1/tweets", {"text": f"t{i}"}, format="json").json()
    )
    assert all("id" in r for r in results), results
    tweet_ids = {r["id"] for r in results}
    assert len(tweet_ids) == 8 == Tweet.objects.filter(author=ann).count()
    seqs = {r["seq"] for r in results}
    assert len(seqs) == 8
    assert set(OutboxEvent.objects.filter(id__in=seqs).values_list("key", flat=True)) == {
        str(i) for i in tweet_ids
    }


def test_the_same_repost_from_many_requests_is_one_repost(starling) -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    tweet = tweet_create(author=ann, text="worth sharing").tweet
    results = race(6, lambda i: client(bob).post(f"/api/v1/tweets/{tweet.id}/repost"))
    assert sorted(r.status_code for r in results) == [200] * 5 + [201], results
    assert len({r.json()["id"] for r in results}) == 1
    assert Tweet.objects.filter(author=bob, repost_of=tweet).count() == 1
    assert OutboxEvent.objects.filter(topic="engagements").count() == 1


def test_likes_and_reposts_racing_the_delete_of_their_tweet_leave_nothing_behind(
    starling,
) -> None:
    from feed.models import Like

    ann = UserFactory(username="ann")
    fans = [UserFactory(username=f"fan{i}") for i in range(6)]
    tweet = tweet_create(author=ann, text="short-lived").tweet

    def work(i: int) -> int:
        if i == len(fans):
            return client(ann).delete(f"/api/v1/tweets/{tweet.id}").status_code
        kind = "like" if i % 2 else "repost"
        return client(fans[i]).post(f"/api/v1/tweets/{tweet.id}/{kind}").status_code

    codes = race(len(fans) + 1, work)
    assert set(codes) <= {201, 204, 404}, codes
    assert not Tweet.objects.exists() and not Like.objects.exists()
    # Each engagement written is tombstoned after it (the delete saw it, or it was refused).
    last: dict[str, str | None] = {}
    rows = OutboxEvent.objects.exclude(topic="follows").order_by("id")  # not the self edges
    for key, value in rows.values_list("key", "value"):
        last[key] = value
    assert str(tweet.id) in last and all(value is None for value in last.values()), last


def test_a_block_racing_a_follow_of_the_other_side_leaves_no_edge(starling) -> None:
    for round_ in range(8):
        ann, bob = UserFactory(username=f"ann{round_}"), UserFactory(username=f"bob{round_}")

        def act(i: int, ann: User = ann, bob: User = bob) -> int:
            if i == 0:
                return client(bob).post(f"/api/v1/users/{ann.username}/block").status_code
            return client(ann).post(f"/api/v1/users/{bob.username}/follow").status_code

        block, follow = race(2, act)
        assert block == 201
        assert follow in (201, 403), follow
        assert not Follow.objects.filter(follower=ann, followee=bob).exists()
        follows = OutboxEvent.objects.filter(topic="follows", key=f"{ann.pk}:{bob.pk}")
        # A follow that won is undone by the block after it: its event, then a tombstone.
        assert [e.value is None for e in follows.order_by("id")] == (
            [False, True] if follow == 201 else []
        )


def test_users_answering_and_naming_each_other_at_once_all_succeed(starling) -> None:
    """Each reply locks its writer's row and share locks the other's, in id
    order: two users answering and naming each other never wait in a circle."""
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    parents = {
        "ann": tweet_create(author=bob, text="bob's").tweet.id,
        "bob": tweet_create(author=ann, text="ann's").tweet.id,
    }
    writers = [ann, bob] * 4

    def answer(i: int) -> int:
        writer = writers[i]
        other = "bob" if writer.username == "ann" else "ann"
        body = {"text": f"@{other} {i}", "in_reply_to": parents[writer.username]}
        return client(writer).post("/api/v1/tweets", body, format="json").status_code

    codes = race(len(writers), answer)
    assert codes == [201] * len(writers), codes
    assert Tweet.objects.filter(in_reply_to__isnull=False).count() == len(writers)


def test_a_rename_does_not_wait_for_a_tweet_in_flight_that_mentions_the_user(starling) -> None:
    """A mention keeps the name it was written with and locks nothing of the
    user it names: a rename of that user commits while the tweet's write is
    still open, and posts again only the user's own tweets. The tweet, once
    committed, shows the name as written."""
    from django.db import transaction

    from fanout.model import events
    from feed.services import user_rename

    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    own = tweet_create(author=ann, text="ann's").tweet.id
    written, release = threading.Event(), threading.Event()
    mention: list[int] = []
    renamed: list[int] = []

    def mentioning() -> None:
        try:
            with transaction.atomic():
                mention.append(tweet_create(author=bob, text="hi @ann").tweet.id)
                written.set()
                release.wait(10)
        finally:
            connection.close()

    def renaming() -> None:
        try:
            renamed.append(user_rename(user=User.objects.get(pk=ann.pk), username="anne"))
        finally:
            connection.close()

    first = threading.Thread(target=mentioning)
    first.start()
    assert written.wait(10)
    second = threading.Thread(target=renaming)
    second.start()
    second.join(5)
    waited = second.is_alive()
    release.set()
    first.join(10)
    second.join(10)
    assert not waited, "the rename waited for the write mentioning the user"
    # The rename's one record: ann's own tweet (the seq it returned).
    (seq,) = renamed
    assert OutboxEvent.objects.get(id=seq).key == str(own)
    # ann's tweet, written and posted again by the rename; bob's, written once.
    records = OutboxEvent.objects.filter(topic="tweets")
    assert sorted((r.key, r.join_key) for r in records) == sorted(
        [(str(own), ann.pk), (str(own), ann.pk), (str(mention[0]), bob.pk)]
    )
    row = records.get(key=str(mention[0]))
    decoded = events.decode_record("tweets", row.key.encode(), row.value.encode(), row.id, bob.pk)
    assert isinstance(decoded.event, events.TweetPosted)
    assert decoded.event.mention_names == ("ann",)
    shown = client(bob).get(f"/api/v1/tweets/{mention[0]}").json()
    assert shown["mentions"] == ["ann"] and shown["text"] == "hi @ann"


def test_a_reinstatement_racing_the_delete_of_its_reply_s_parent_leaves_no_count(
    starling, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parent's delete locks its direct replies, as the reinstatement of
    their author locks the author's tweets: whichever comes second sees what
    the first wrote. Here the reinstatement has read the parent still there
    when the delete starts; the delete waits for it, and its tombstone is the
    reply's last engagement record (a count of a deleted tweet would
    otherwise come back)."""
    from feed import moderation
    from feed.services import tweet_delete
    from tests.support.factories import ModeratorFactory

    ann, bob, mod = UserFactory(username="ann"), UserFactory(username="bob"), ModeratorFactory()
    parent = tweet_create(author=ann, text="going away").tweet.id
    answer = tweet_create(author=bob, text="an answer", in_reply_to=parent).tweet.id
    moderation.user_suspend(user=bob, moderator=mod, reason="x")
    read, deleted = threading.Event(), threading.Event()
    counted = moderation.replies_counted

    def reading_slowly(replies: Any) -> Any:
        found = counted(replies)  # the parent is there
        read.set()
        deleted.wait(3)  # the delete commits now, unless it waits for this transaction
        return found

    monkeypatch.setattr(moderation, "replies_counted", reading_slowly)

    def work(i: int) -> bool:
        if i == 0:
            return moderation.user_reinstate(user=bob, moderator=mod).created
        assert read.wait(10)
        tweet_delete(tweet_id=parent, actor=User.objects.get(pk=ann.pk))
        deleted.set()
        return True

    assert race(2, work) == [True, True]
    records = OutboxEvent.objects.filter(topic="engagements", key=f"reply:{answer}:{parent}")
    # Written, tombstoned (the suspension), written again (the reinstatement), tombstoned.
    assert [value is None for value in records.order_by("id").values_list("value", flat=True)] == [
        False,
        True,
        False,
        True,
    ]
