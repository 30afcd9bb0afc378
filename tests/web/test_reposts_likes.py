"""Reposts and likes on the web side: the endpoints and their refusals, the
rows and the outbox events each write leaves (docs/design.md, "The view"),
the cascade of a deleted original, suspension and reinstatement, and the
tweet objects every page shows."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import orjson
import pytest

from fanout.config import StarlingConfig
from fanout.model import events
from fanout.store import keys
from feed import moderation, relations, selectors, services, view_sql
from feed.models import Like, OutboxEvent, Tweet, User
from tests.support.clients import client_for
from tests.support.factories import ModeratorFactory, UserFactory
from tests.web.test_api import TWEET_FIELDS, assert_error

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


def post(user: User, text: str = "hello") -> int:
    return services.tweet_create(author=user, text=text).tweet.id


def outbox_after(seq: int) -> list[events.Event]:
    """The events written after ``seq``, decoded as the relay would send them."""
    rows = OutboxEvent.objects.filter(id__gt=seq).order_by("id")
    return [
        events.decode_record(
            r.topic,
            r.key.encode(),
            None if r.value is None else r.value.encode(),
            r.id,
            r.join_key,
        ).event
        for r in rows
    ]


def high() -> int:
    from feed.outbox import high_water_seq

    return high_water_seq()


# --- reposts ---------------------------------------------------------------------


def test_a_repost_is_an_entry_of_its_own_and_an_engagement() -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    original = post(ann, "the original")
    before = high()
    response = client_for(bob).post(f"/api/v1/tweets/{original}/repost")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {"id", "seq"} and body["id"] > original
    repost = Tweet.objects.get(id=body["id"])
    assert (repost.author, repost.repost_of_id, repost.text) == (bob, original, "")
    assert outbox_after(before) == [
        events.TweetPosted(
            body["id"], bob.pk, "bob", "", repost_of=original, repost_of_author=ann.pk
        ),
        events.Engaged(events.REPOST, bob.pk, original),
    ]
    assert body["seq"] == high()
    # Posts only count as tweets.
    bob.refresh_from_db()
    assert bob.tweets_count == 0


def test_reposting_again_or_through_a_repost_returns_the_same_repost() -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    original = post(ann)
    first = client_for(bob).post(f"/api/v1/tweets/{original}/repost").json()
    seq = high()
    again = client_for(bob).post(f"/api/v1/tweets/{original}/repost")
    assert again.status_code == 200 and again.json() == {"id": first["id"], "seq": seq}
    # A repost's id reposts its original, for someone else and for bob alike.
    cats = client_for(cat).post(f"/api/v1/tweets/{first['id']}/repost")
    assert cats.status_code == 201
    assert Tweet.objects.get(id=cats.json()["id"]).repost_of_id == original
    through = client_for(bob).post(f"/api/v1/tweets/{cats.json()['id']}/repost")
    assert through.status_code == 200 and through.json()["id"] == first["id"]
    # One's own tweet can be reposted.
    own = client_for(ann).post(f"/api/v1/tweets/{original}/repost")
    assert own.status_code == 201
    assert Tweet.objects.filter(repost_of_id=original).count() == 3
    assert OutboxEvent.objects.filter(id__gt=seq).count() == 4  # cat's and ann's, two each


def test_reposting_or_liking_what_is_not_there_is_404() -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    gone = post(ann)
    services.tweet_delete(tweet_id=gone, actor=ann)
    for tweet_id in (gone, 12345, 2**60):
        for kind in ("repost", "like"):
            response = client_for(bob).post(f"/api/v1/tweets/{tweet_id}/{kind}")
            assert_error(response, 404, "not_found", mentions=f"no tweet with id {tweet_id}")
    assert client_for().post(f"/api/v1/tweets/{gone}/like").status_code == 401


def test_a_suspended_author_s_tweet_and_a_suspended_user_s_repost_are_404() -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    mod = ModeratorFactory()
    original = post(ann)
    other = post(cat)
    repost = services.repost_create(user=bob, tweet_id=other).repost_id
    moderation.user_suspend(user=ann, moderator=mod, reason="spam")
    moderation.user_suspend(user=bob, moderator=mod, reason="spam")
    for tweet_id in (original, repost):
        for kind in ("repost", "like"):
            response = client_for(cat).post(f"/api/v1/tweets/{tweet_id}/{kind}")
            assert_error(response, 404, "not_found")


def test_unreposting_is_idempotent_by_the_original_s_id_or_the_repost_s() -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    original = post(ann)
    for undo_by in ("original", "repost"):
        repost = client_for(bob).post(f"/api/v1/tweets/{original}/repost").json()["id"]
        before = high()
        target = original if undo_by == "original" else repost
        response = client_for(bob).delete(f"/api/v1/tweets/{target}/repost")
        assert response.status_code == 200 and response.json()["seq"] == high()
        assert outbox_after(before) == [
            events.TweetDeleted(repost, bob.pk),
            events.Disengaged(events.REPOST, bob.pk, original),
        ]
        assert not Tweet.objects.filter(id=repost).exists()
        again = client_for(bob).delete(f"/api/v1/tweets/{target}/repost")
        assert again.status_code == 200 and again.json()["seq"] == high()
        assert high() == response.json()["seq"]  # nothing written
    assert client_for(bob).delete("/api/v1/tweets/12345/repost").status_code == 200


def test_deleting_one_s_repost_by_its_id_is_an_unrepost() -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    original = post(ann)
    repost = services.repost_create(user=bob, tweet_id=original).repost_id
    assert client_for(cat).delete(f"/api/v1/tweets/{repost}").status_code == 403
    before = high()
    response = client_for(bob).delete(f"/api/v1/tweets/{repost}")
    assert response.status_code == 204 and int(response["X-Starling-Seq"]) == high()
    assert outbox_after(before) == [
        events.TweetDeleted(repost, bob.pk),
        events.Disengaged(events.REPOST, bob.pk, original),
    ]
    assert Tweet.objects.filter(id=original).exists()
    ann.refresh_from_db()
    assert ann.tweets_count == 1


def test_deleting_an_original_deletes_its_reposts_and_likes_with_their_tombstones() -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    original = post(ann)
    kept = post(ann, "kept")
    r_bob = services.repost_create(user=bob, tweet_id=original).repost_id
    r_cat = services.repost_create(user=cat, tweet_id=r_bob).repost_id
    services.like_create(user=bob, tweet_id=original)
    services.like_create(user=cat, tweet_id=r_bob)
    services.like_create(user=cat, tweet_id=kept)
    before = high()
    response = client_for(ann).delete(f"/api/v1/tweets/{original}")
    assert response.status_code == 204 and int(response["X-Starling-Seq"]) == high()
    assert outbox_after(before) == [
        events.TweetDeleted(original, ann.pk),
        events.TweetDeleted(r_bob, bob.pk),
        events.Disengaged(events.REPOST, bob.pk, original),
        events.TweetDeleted(r_cat, cat.pk),
        events.Disengaged(events.REPOST, cat.pk, original),
        events.Disengaged(events.LIKE, bob.pk, original),
        events.Disengaged(events.LIKE, cat.pk, original),
    ]
    assert not Tweet.objects.filter(id__in=[original, r_bob, r_cat]).exists()
    assert list(Like.objects.values_list("user_id", "tweet_id")) == [(cat.pk, kept)]


# --- likes -------------------------------------------------------------------------


def test_likes_are_idempotent_and_a_repost_s_like_is_its_original_s() -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    original = post(ann)
    repost = services.repost_create(user=ann, tweet_id=original).repost_id
    before = high()
    first = client_for(bob).post(f"/api/v1/tweets/{repost}/like")
    assert first.status_code == 201 and first.json() == {"seq": high()}
    assert outbox_after(before) == [events.Engaged(events.LIKE, bob.pk, original)]
    again = client_for(bob).post(f"/api/v1/tweets/{original}/like")
    assert again.status_code == 200 and again.json() == {"seq": first.json()["seq"]}
    assert list(Like.objects.values_list("user_id", "tweet_id")) == [(bob.pk, original)]
    before = high()
    undo = client_for(bob).delete(f"/api/v1/tweets/{repost}/like")
    assert undo.status_code == 200 and undo.json() == {"seq": high()}
    assert outbox_after(before) == [events.Disengaged(events.LIKE, bob.pk, original)]
    for target in (original, 12345):
        same = client_for(bob).delete(f"/api/v1/tweets/{target}/like")
        assert same.status_code == 200 and same.json() == {"seq": high()}
    assert not Like.objects.exists()


def test_a_user_s_likes_newest_like_first_paged_by_cursor() -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    tweets = [post(ann, f"t{i}") for i in range(5)]
    for t in (tweets[3], tweets[0], tweets[4], tweets[1]):
        services.like_create(user=bob, tweet_id=t)
    seen: list[int] = []
    cursor = None
    while True:
        query = "?count=3" + (f"&cursor={cursor}" if cursor else "")
        body = client_for().get(f"/api/v1/users/bob/likes{query}").json()
        assert set(body) == {"tweets", "next_cursor"}
        seen += [t["id"] for t in body["tweets"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [tweets[1], tweets[4], tweets[0], tweets[3]]
    assert_error(client_for().get("/api/v1/users/nobody/likes"), 404, "not_found")
    assert_error(client_for().get("/api/v1/users/bob/likes?count=0"), 400, "invalid")


# --- tweet objects --------------------------------------------------------------------


def test_every_tweet_object_has_one_shape_with_the_original_s_counts(
    starling: StarlingConfig, redis_client: Any
) -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    original = post(ann, "the original")
    repost = services.repost_create(user=bob, tweet_id=original).repost_id
    services.like_create(user=bob, tweet_id=original)
    # What the fanout job keeps (absent: zeros).
    counts = b'{"likes":7,"reposts":3,"replies":0}'
    redis_client.set(keys.counts(original, starling.shards.tag_of(original)), counts)
    expected_counts = {"likes": 7, "reposts": 3, "replies": 0}
    got = client_for().get(f"/api/v1/tweets/{repost}").json()
    assert list(got) == TWEET_FIELDS
    assert got["id"] == repost and got["author"] == "bob" and got["text"] == "the original"
    assert got["created_at"] == events.created_at_iso(repost)
    assert got["repost_of"] == {
        "id": original,
        "author": "ann",
        "created_at": events.created_at_iso(original),
    }
    assert got["counts"] == expected_counts
    plain = client_for().get(f"/api/v1/tweets/{original}").json()
    assert plain["repost_of"] is None and plain["counts"] == expected_counts
    liked = client_for().get("/api/v1/users/bob/likes").json()["tweets"]
    assert liked == [plain]
    bobs = client_for().get("/api/v1/users/bob/tweets").json()["tweets"]
    assert bobs == [got]
    page = view_sql.timeline_page(bob.pk, _query(count=10))
    assert page["tweets"] == [got]


def test_counts_are_read_from_their_shard_s_keys(settings, starling, redis_client) -> None:
    settings.STARLING = config = replace(starling, redis_shards=8)
    ann = UserFactory(username="ann")
    tweets = [post(ann, f"t{i}") for i in range(6)]
    for n, t in enumerate(tweets[:3]):
        value = f'{{"likes":{n + 1},"reposts":{n},"replies":0}}'
        redis_client.set(keys.counts(t, config.shards.tag_of(t)), value)
    assert len({config.shards.tag_of(t) for t in tweets}) > 1
    got = selectors.tweet_counts(tweets)
    assert [got[t]["likes"] for t in tweets] == [1, 2, 3, 0, 0, 0]
    assert [got[t]["reposts"] for t in tweets] == [0, 1, 2, 0, 0, 0]


def test_counts_come_from_the_database_when_redis_is_down(settings, starling) -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    original = post(ann)
    services.repost_create(user=bob, tweet_id=original)
    services.repost_create(user=cat, tweet_id=original)
    services.like_create(user=bob, tweet_id=original)
    services.like_create(user=cat, tweet_id=original)
    User.objects.filter(pk=cat.pk).update(is_active=False)  # a suspended user's do not count
    settings.STARLING = replace(starling, redis_url="redis://127.0.0.1:1/0")
    got = client_for().get(f"/api/v1/tweets/{original}").json()
    assert got["counts"] == {"likes": 1, "reposts": 1, "replies": 0}


def test_a_user_s_tweets_show_a_repost_of_their_own_post_once() -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    mod = ModeratorFactory()
    first = post(ann, "first")
    second = post(ann, "second")
    theirs = post(bob, "bob's")
    own = services.repost_create(user=ann, tweet_id=first).repost_id
    other = services.repost_create(user=ann, tweet_id=theirs).repost_id
    ids = [t["id"] for t in client_for().get("/api/v1/users/ann/tweets").json()["tweets"]]
    assert ids == [other, own, second]
    # Paging: the rule holds over the whole list, not the page.
    page = client_for().get(f"/api/v1/users/ann/tweets?max_id={second}").json()["tweets"]
    assert [t["id"] for t in page] == [second]
    moderation.user_suspend(user=bob, moderator=mod, reason="spam")
    ids = [t["id"] for t in client_for().get("/api/v1/users/ann/tweets").json()["tweets"]]
    assert ids == [own, second]
    assert client_for().get(f"/api/v1/tweets/{other}").status_code == 404


def test_a_timeline_from_the_database_shows_each_original_once() -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    for followee in (ann, cat):
        relations.follow_create(follower=bob, followee=followee)
    first = post(ann, "first")
    second = post(ann, "second")
    cats = services.repost_create(user=cat, tweet_id=first).repost_id
    # No timeline in Redis: the database answers (the fallback), by the view's rule.
    response = client_for(bob).get("/api/v1/timeline")
    assert response["X-Starling-Source"] == "fallback"
    tweets = response.json()["tweets"]
    assert [t["id"] for t in tweets] == [cats, second]
    assert tweets[0]["text"] == "first" and tweets[0]["repost_of"]["author"] == "ann"
    # Undone, the original shows again in its own place.
    services.repost_delete(user=cat, tweet_id=cats)
    tweets = client_for(bob).get("/api/v1/timeline").json()["tweets"]
    assert [t["id"] for t in tweets] == [second, first]


def _query(**kw: Any) -> Any:
    from feed.timeline import TimelineQuery

    return TimelineQuery(**kw)


# --- suspension ---------------------------------------------------------------------


def test_a_suspension_tombstones_reposts_and_likes_and_a_reinstatement_brings_them_back() -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    mod = ModeratorFactory()
    a_post = post(ann, "ann's")
    c_post = post(cat, "cat's")
    # ann's repost and like of cat's tweet; bob's repost and like of ann's.
    a_repost = services.repost_create(user=ann, tweet_id=c_post).repost_id
    services.like_create(user=ann, tweet_id=c_post)
    b_repost = services.repost_create(user=bob, tweet_id=a_post).repost_id
    services.like_create(user=bob, tweet_id=a_post)
    before = high()
    done = moderation.user_suspend(user=ann, moderator=mod, reason="spam")
    assert done.seq == high()
    assert outbox_after(before) == [
        events.TweetDeleted(a_post, ann.pk),
        events.TweetDeleted(a_repost, ann.pk),
        events.Disengaged(events.REPOST, ann.pk, c_post),
        events.Disengaged(events.LIKE, ann.pk, c_post),
        events.TweetDeleted(b_repost, bob.pk),  # an entry of an invisible original
    ]
    # The database's view agrees: nothing of ann's, no repost of ann's tweets.
    assert view_sql.home_timeline_ids(bob.pk, limit=10) == []
    before = high()
    moderation.user_reinstate(user=ann, moderator=mod)
    assert sorted(outbox_after(before), key=repr) == sorted(
        [
            events.TweetPosted(a_post, ann.pk, "ann", "ann's"),
            events.TweetPosted(
                a_repost, ann.pk, "ann", "", repost_of=c_post, repost_of_author=cat.pk
            ),
            events.Engaged(events.REPOST, ann.pk, c_post),
            events.Engaged(events.LIKE, ann.pk, c_post),
            events.TweetPosted(
                b_repost, bob.pk, "bob", "", repost_of=a_post, repost_of_author=ann.pk
            ),
        ],
        key=repr,
    )
    assert view_sql.home_timeline_ids(bob.pk, limit=10) == [b_repost]


def test_a_reinstated_reposter_s_repost_of_a_suspended_author_stays_out() -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    mod = ModeratorFactory()
    a_post = post(ann)
    b_repost = services.repost_create(user=bob, tweet_id=a_post).repost_id
    moderation.user_suspend(user=bob, moderator=mod, reason="x")
    moderation.user_suspend(user=ann, moderator=mod, reason="x")
    before = high()
    moderation.user_reinstate(user=bob, moderator=mod)
    # Its engagement counts again; its entry waits for ann's reinstatement.
    assert outbox_after(before) == [events.Engaged(events.REPOST, bob.pk, a_post)]
    before = high()
    moderation.user_reinstate(user=ann, moderator=mod)
    assert outbox_after(before) == [
        events.TweetPosted(a_post, ann.pk, "ann", "hello"),
        events.TweetPosted(b_repost, bob.pk, "bob", "", repost_of=a_post, repost_of_author=ann.pk),
    ]


def test_republish_and_rename_post_reposts_with_their_original() -> None:
    from django.core.management import call_command

    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    mod = ModeratorFactory()
    a_post = post(ann)
    c_post = post(cat)
    b_repost = services.repost_create(user=bob, tweet_id=a_post).repost_id
    c_repost = services.repost_create(user=bob, tweet_id=c_post).repost_id
    services.like_create(user=bob, tweet_id=a_post)
    services.like_create(user=cat, tweet_id=a_post)
    moderation.user_suspend(user=cat, moderator=mod, reason="x")
    before = high()
    services.user_rename(user=bob, username="bobby")
    assert outbox_after(before) == [
        events.TweetPosted(b_repost, bob.pk, "bobby", "", repost_of=a_post, repost_of_author=ann.pk)
    ]
    before = high()
    call_command("republish_changelogs", stdout=io.StringIO())
    republished = [e for e in outbox_after(before) if not isinstance(e, events.Followed)]
    assert republished == [
        events.TweetPosted(a_post, ann.pk, "ann", "hello"),
        events.TweetPosted(
            b_repost, bob.pk, "bobby", "", repost_of=a_post, repost_of_author=ann.pk
        ),
        events.Engaged(events.REPOST, bob.pk, a_post),
        events.Engaged(events.REPOST, bob.pk, c_post),  # its reposter is active
        events.Engaged(events.LIKE, bob.pk, a_post),
    ]
    assert c_repost  # of a suspended author's tweet: no entry


def test_a_repost_of_a_reply_carries_whom_the_reply_answers_wherever_it_is_posted() -> None:
    """``repost_of_reply_to``: the original's ``reply_to`` (0 for a post that
    answers nobody), on the repost's record when it is written (through a
    repost's id too), and when it is posted again: the reposter's rename and
    reinstatement, the original's author's reinstatement, a republish."""
    from django.core.management import call_command

    ann, bob, cat, dee = (UserFactory(username=n) for n in ("ann", "bob", "cat", "dee"))
    mod = ModeratorFactory()
    parent = post(ann)
    answer = services.tweet_create(author=bob, text="an answer", in_reply_to=parent).tweet.id

    def reposts_after(seq: int) -> dict[int, events.TweetPosted]:
        return {
            e.tweet_id: e
            for e in outbox_after(seq)
            if isinstance(e, events.TweetPosted) and e.repost_of
        }

    before = high()
    r_cat = services.repost_create(user=cat, tweet_id=answer).repost_id
    r_dee = services.repost_create(user=dee, tweet_id=r_cat).repost_id  # through cat's repost
    r_post = services.repost_create(user=cat, tweet_id=parent).repost_id
    of_answer = events.TweetPosted(
        r_cat,
        cat.pk,
        "cat",
        "",
        repost_of=answer,
        repost_of_author=bob.pk,
        repost_of_reply_to=ann.pk,
    )
    expected = {
        r_cat: of_answer,
        r_dee: replace(of_answer, tweet_id=r_dee, author_id=dee.pk, author="dee"),
        r_post: events.TweetPosted(
            r_post, cat.pk, "cat", "", repost_of=parent, repost_of_author=ann.pk
        ),
    }
    assert reposts_after(before) == expected
    assert expected[r_cat].answers == ann.pk and expected[r_post].answers == 0
    before = high()
    services.user_rename(user=cat, username="kat")
    expected = {
        t: replace(e, author="kat") if e.author == "cat" else e for t, e in expected.items()
    }
    assert reposts_after(before) == {t: expected[t] for t in (r_cat, r_post)}
    for user, again in ((cat, (r_cat, r_post)), (bob, (r_cat, r_dee))):
        moderation.user_suspend(user=user, moderator=mod, reason="x")
        before = high()
        moderation.user_reinstate(user=user, moderator=mod)
        assert reposts_after(before) == {t: expected[t] for t in again}, user.username
    before = high()
    call_command("republish_changelogs", stdout=io.StringIO())
    assert reposts_after(before) == expected


def test_repost_ids_are_greater_than_their_original_s(monkeypatch) -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    original = post(ann)
    # This host's clock is behind the one that minted the original.
    monkeypatch.setattr(services, "next_tweet_id", lambda: original - 1000)
    repost = services.repost_create(user=bob, tweet_id=original).repost_id
    assert repost > original
    assert Tweet.objects.get(id=repost).repost_of_id == original


def test_the_schema_describes_reposts_and_likes() -> None:
    schema = orjson.loads(client_for().get("/api/schema/?format=json").content)
    paths = schema["paths"]
    assert {"post", "delete"} <= set(paths["/api/v1/tweets/{tweet_id}/repost"])
    assert {"post", "delete"} <= set(paths["/api/v1/tweets/{tweet_id}/like"])
    assert "get" in paths["/api/v1/users/{username}/likes"]
    tweet = schema["components"]["schemas"]["TweetOut"]["properties"]
    assert {"repost_of", "counts"} <= set(tweet)
