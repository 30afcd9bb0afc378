"""Blocks, mutes and a follow's reposts flag on the web side: the endpoints
and their refusals, the follows a block removes (as unfollows, with their
counts), what a block forbids while it stands, and the lists."""

from __future__ import annotations

import pytest

from fanout.model import events
from feed import relations, selectors, services
from feed.models import Block, Follow, Like, Mute, User
from tests.support.clients import client_for
from tests.support.factories import UserFactory
from tests.web.test_api import assert_error
from tests.web.test_reposts_likes import high, outbox_after, post

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


def users(*names: str) -> list[User]:
    return [UserFactory(username=name) for name in names]


def test_a_block_removes_the_follows_both_ways_as_unfollows_with_their_counts() -> None:
    ann, bob = users("ann", "bob")
    relations.follow_create(follower=ann, followee=bob)
    relations.follow_create(follower=bob, followee=ann)
    before = high()
    response = client_for(ann).post("/api/v1/users/bob/block")
    assert response.status_code == 201, response.content
    assert Block.objects.filter(blocker=ann, blocked=bob).exists()
    assert not Follow.objects.filter(follower__in=[ann, bob], followee__in=[ann, bob]).exists()
    assert outbox_after(before) == [
        events.Unfollowed(follower_id=ann.pk, followee_id=bob.pk),
        events.Unfollowed(follower_id=bob.pk, followee_id=ann.pk),
        events.FiltersSet(ann.pk, (bob.pk,)),
        events.FiltersSet(bob.pk, (ann.pk,)),
    ]
    assert response.json()["seq"] == high()
    for user in (ann, bob):
        user.refresh_from_db()
        assert (user.followers_count, user.following_count) == (0, 0)
    again = client_for(ann).post("/api/v1/users/bob/block")
    assert again.status_code == 200 and high() == response.json()["seq"]


def test_blocking_oneself_or_nobody_is_refused() -> None:
    (ann,) = users("ann")
    assert_error(
        client_for(ann).post("/api/v1/users/ann/block"), 400, "invalid", mentions="yourself"
    )
    assert_error(client_for(ann).post("/api/v1/users/zed/block"), 404, "not_found")
    assert_error(
        client_for(ann).post("/api/v1/users/ann/mute"), 400, "invalid", mentions="yourself"
    )
    assert_error(client_for(ann).post("/api/v1/users/zed/mute"), 404, "not_found")


@pytest.mark.parametrize("blocker_is_reader", [True, False])
def test_while_a_block_stands_neither_side_follows_reposts_or_likes_the_other(
    blocker_is_reader: bool,
) -> None:
    ann, bob = users("ann", "bob")
    tweet = post(bob, "bob's")
    blocker, blocked = (ann, bob) if blocker_is_reader else (bob, ann)
    client_for(blocker).post(f"/api/v1/users/{blocked.username}/block")
    reader = client_for(ann)
    assert_error(reader.post("/api/v1/users/bob/follow"), 403, "blocked")
    assert_error(reader.post(f"/api/v1/tweets/{tweet}/repost"), 403, "blocked")
    assert_error(reader.post(f"/api/v1/tweets/{tweet}/like"), 403, "blocked")
    assert not Follow.objects.filter(follower=ann, followee=bob).exists()
    # Undoing is always allowed.
    assert reader.delete(f"/api/v1/tweets/{tweet}/like").status_code == 200
    assert reader.delete("/api/v1/users/bob/follow").status_code == 200
    # An unblock restores no follow, and lets them follow again.
    assert client_for(blocker).delete(f"/api/v1/users/{blocked.username}/block").status_code == 200
    assert not Follow.objects.filter(follower=ann, followee=bob).exists()
    assert reader.post("/api/v1/users/bob/follow").status_code == 201


def test_likes_and_reposts_made_before_a_block_stay() -> None:
    ann, bob = users("ann", "bob")
    tweet = post(bob)
    services.like_create(user=ann, tweet_id=tweet)
    repost = services.repost_create(user=ann, tweet_id=tweet).repost_id
    assert client_for(bob).post("/api/v1/users/ann/block").status_code == 201
    assert Like.objects.filter(user=ann, tweet_id=tweet).exists()
    assert selectors.user_tweets(ann, count=5) == [repost]
    # Unreposting stays allowed.
    assert client_for(ann).delete(f"/api/v1/tweets/{tweet}/repost").status_code == 200


def test_the_blocked_user_cannot_read_the_blocker_s_tweets_others_can() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    tweet = post(ann, "ann's")
    services.tweet_create(author=bob, text="bob's")
    client_for(ann).post("/api/v1/users/bob/block")
    assert_error(client_for(bob).get("/api/v1/users/ann/tweets"), 403, "blocked")
    assert_error(client_for(bob).get(f"/api/v1/tweets/{tweet}"), 403, "blocked")
    for reader in (client_for(cat), client_for(ann)):
        assert reader.get("/api/v1/users/ann/tweets").status_code == 200
        assert reader.get(f"/api/v1/tweets/{tweet}").status_code == 200
    # The blocker reads the blocked user's tweets: not filtered by the reader's blocks.
    assert client_for(ann).get("/api/v1/users/bob/tweets").json()["tweets"]


def test_a_mute_keeps_the_follow_and_is_idempotent_both_ways() -> None:
    ann, bob = users("ann", "bob")
    relations.follow_create(follower=ann, followee=bob)
    first = client_for(ann).post("/api/v1/users/bob/mute")
    assert first.status_code == 201, first.content
    assert client_for(ann).post("/api/v1/users/bob/mute").status_code == 200
    assert Mute.objects.filter(muter=ann, muted=bob).count() == 1
    assert Follow.objects.filter(follower=ann, followee=bob).exists()
    # Muted, bob can still follow, like and repost ann (mutes are private).
    tweet = post(ann)
    assert client_for(bob).post(f"/api/v1/tweets/{tweet}/like").status_code == 201
    for _ in range(2):
        assert client_for(ann).delete("/api/v1/users/bob/mute").status_code == 200
    assert not Mute.objects.exists()


@pytest.mark.parametrize("kind", ["block", "mute"])
def test_blocks_and_mutes_are_listed_newest_first_by_cursor(kind: str) -> None:
    (ann,) = users("ann")
    others = users(*(f"u{i}" for i in range(5)))
    for other in others:
        assert client_for(ann).post(f"/api/v1/users/{other.username}/{kind}").status_code == 201
    seen: list[str] = []
    url = f"/api/v1/{kind}s?count=2"
    while True:
        body = client_for(ann).get(url).json()
        seen += [u["username"] for u in body["users"]]
        if body["next_cursor"] is None:
            break
        url = f"/api/v1/{kind}s?count=2&cursor={body['next_cursor']}"
    assert seen == [o.username for o in reversed(others)]
    assert client_for(others[0]).get(f"/api/v1/{kind}s").json()["users"] == []
    assert_error(client_for(ann).get(f"/api/v1/{kind}s?count=0"), 400, "invalid")


def test_a_follow_s_reposts_flag_is_set_kept_and_shown() -> None:
    ann, bob = users("ann", "bob")
    reader = client_for(ann)
    assert reader.get("/api/v1/users/bob").json()["following"] is None
    created = reader.post("/api/v1/users/bob/follow", {"reposts": False}, format="json")
    assert created.status_code == 201, created.content
    assert reader.get("/api/v1/users/bob").json()["following"] == {"reposts": False}
    # A POST without the field keeps the flag; with it, sets it.
    assert reader.post("/api/v1/users/bob/follow").status_code == 200
    assert Follow.objects.get(follower=ann, followee=bob).reposts is False
    assert (
        reader.post("/api/v1/users/bob/follow", {"reposts": True}, format="json").status_code == 200
    )
    assert Follow.objects.get(follower=ann, followee=bob).reposts is True
    patched = reader.patch("/api/v1/users/bob/follow", {"reposts": False}, format="json")
    assert patched.status_code == 200 and patched.json()["reposts"] is False
    assert set(patched.json()) == {"seq", "reposts"}
    assert client_for(bob).get("/api/v1/users/bob").json()["following"] is None
    assert_error(
        client_for(bob).patch("/api/v1/users/ann/follow", {"reposts": False}, format="json"),
        404,
        "not_found",
    )
    assert_error(reader.patch("/api/v1/users/bob/follow", {}, format="json"), 400, "invalid")
    bad = reader.patch("/api/v1/users/bob/follow", {"reposts": "maybe"}, format="json")
    assert_error(bad, 400, "invalid")


# --- what the join and the store are told ------------------------------------------


def test_each_change_writes_the_follow_s_flags_and_the_owner_s_hidden_users() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    relations.follow_create(follower=ann, followee=bob)
    before = high()
    relations.mute_create(muter=ann, muted=bob)
    assert outbox_after(before) == [
        events.Followed(ann.pk, bob.pk, muted=True),
        events.FiltersSet(ann.pk, (bob.pk,)),
    ]
    before = high()
    relations.follow_reposts_set(follower=ann, followee=bob, reposts=False)
    assert outbox_after(before) == [events.Followed(ann.pk, bob.pk, muted=True, reposts=False)]
    before = high()
    relations.mute_delete(muter=ann, muted=bob)
    relations.mute_create(muter=ann, muted=cat)  # not followed: only the hidden users
    assert outbox_after(before) == [
        events.Followed(ann.pk, bob.pk, reposts=False),
        events.FiltersSet(ann.pk, ()),
        events.FiltersSet(ann.pk, (cat.pk,)),
    ]
    before = high()
    relations.block_create(blocker=cat, blocked=ann)
    relations.block_delete(blocker=cat, blocked=ann)
    assert outbox_after(before) == [
        events.FiltersSet(cat.pk, (ann.pk,)),
        events.FiltersSet(ann.pk, (cat.pk,)),  # blocked by cat, and muting cat
        events.FiltersSet(cat.pk, ()),
        events.FiltersSet(ann.pk, (cat.pk,)),
    ]
    # Changing nothing writes nothing.
    before = high()
    relations.mute_delete(muter=ann, muted=bob)
    relations.block_delete(blocker=cat, blocked=ann)
    relations.follow_reposts_set(follower=ann, followee=bob, reposts=False)
    assert high() == before


def test_republishing_writes_the_flags_and_the_hidden_users() -> None:
    import io

    from django.core.management import call_command

    ann, bob, cat = users("ann", "bob", "cat")
    relations.follow_create(follower=ann, followee=bob, reposts=False)
    relations.mute_create(muter=ann, muted=bob)
    relations.block_create(blocker=cat, blocked=bob)
    before = high()
    call_command("republish_changelogs", stdout=io.StringIO())
    republished = outbox_after(before)
    assert events.Followed(ann.pk, bob.pk, muted=True, reposts=False) in republished
    filters = [e for e in republished if isinstance(e, events.FiltersSet)]
    assert filters == [
        events.FiltersSet(ann.pk, (bob.pk,)),
        events.FiltersSet(bob.pk, (cat.pk,)),
        events.FiltersSet(cat.pk, (bob.pk,)),
    ]
