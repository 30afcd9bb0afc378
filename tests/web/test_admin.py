"""Moderation through the admin goes through the use-cases (tombstones emitted)."""

from __future__ import annotations

import pytest
from django.test import Client

from feed.models import Follow, OutboxEvent, Tweet, User
from feed.relations import follow_create
from feed.services import tweet_create
from tests.support.clients import client_for
from tests.support.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


@pytest.fixture
def moderator_client() -> Client:
    moderator = UserFactory(username="mod", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(moderator)
    return client


def test_admin_requires_a_staff_login() -> None:
    assert Client().get("/admin/feed/tweet/").status_code == 302
    regular = UserFactory()
    client = Client()
    client.force_login(regular)
    assert client.get("/admin/feed/tweet/").status_code == 302


def test_moderator_deleting_a_tweet_emits_its_tombstone(moderator_client: Client) -> None:
    author: User = UserFactory(username="troll")
    tweet = tweet_create(author=author, text="something nasty").tweet
    page = moderator_client.get(f"/admin/feed/tweet/{tweet.id}/delete/")
    assert page.status_code == 200
    response = moderator_client.post(f"/admin/feed/tweet/{tweet.id}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Tweet.objects.filter(id=tweet.id).exists()
    tombstone = OutboxEvent.objects.order_by("-id").first()
    assert tombstone is not None
    assert (tombstone.topic, tombstone.key, tombstone.value, tombstone.join_key) == (
        "tweets",
        str(tweet.id),
        None,
        author.pk,
    )


def test_bulk_delete_action_goes_through_the_use_case(moderator_client: Client) -> None:
    author: User = UserFactory()
    ids = [tweet_create(author=author, text=f"spam {i}").tweet.id for i in range(3)]
    response = moderator_client.post(
        "/admin/feed/tweet/", {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
    )
    assert response.status_code == 302
    tombstones = OutboxEvent.objects.filter(topic="tweets", value__isnull=True)
    assert sorted(int(k) for k in tombstones.values_list("key", flat=True)) == sorted(ids)


def test_moderator_can_remove_a_follow_with_its_tombstone(moderator_client: Client) -> None:
    a, b = UserFactory(), UserFactory()
    follow_create(follower=a, followee=b)
    follow = Follow.objects.get()
    moderator_client.post(f"/admin/feed/follow/{follow.pk}/delete/", {"post": "yes"})
    assert not Follow.objects.exists()
    assert OutboxEvent.objects.filter(
        topic="follows", value__isnull=True, key=f"{a.pk}:{b.pk}"
    ).exists()


def test_users_cannot_be_deleted_and_tweets_cannot_be_added(moderator_client: Client) -> None:
    user = UserFactory()
    assert moderator_client.get(f"/admin/feed/user/{user.pk}/delete/").status_code == 403
    assert moderator_client.get("/admin/feed/tweet/add/").status_code == 403


def test_outbox_is_read_only_and_shows_the_backlog(moderator_client: Client) -> None:
    author: User = UserFactory()
    tweet_create(author=author, text="a")
    tweet_create(author=author, text="b")
    OutboxEvent.objects.filter(id=OutboxEvent.objects.order_by("id").first().id).update(  # type: ignore[union-attr]
        published_at="2026-01-01T00:00:00Z"
    )
    page = moderator_client.get("/admin/feed/outboxevent/")
    assert page.status_code == 200
    assert b"Outbox: 1 events waiting for the relay" in page.content
    event = OutboxEvent.objects.first()
    assert moderator_client.get("/admin/feed/outboxevent/add/").status_code == 403
    assert (
        moderator_client.post(
            f"/admin/feed/outboxevent/{event.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )  # type: ignore[union-attr]
    unpublished = moderator_client.get("/admin/feed/outboxevent/?published=no")
    assert unpublished.content.count(b'class="field-topic"') == 1


def test_a_moderator_starts_a_rebuild_and_sees_its_state(moderator_client: Client) -> None:
    from feed.models import TimelineRebuild

    assert moderator_client.get("/admin/feed/timelinerebuild/").status_code == 200
    response = moderator_client.post("/admin/feed/timelinerebuild/add/", {"dry_run": "on"})
    assert response.status_code == 302, response.content[:500]
    run = TimelineRebuild.objects.get()
    assert run.dry_run and run.status == "queued" and run.requested_by.username == "mod"
    # The Celery task is queued on commit (never here: the test's transaction is
    # rolled back); the page lists the run and its state.
    page = moderator_client.get("/admin/feed/timelinerebuild/").content.decode()
    assert "queued" in page
    # Runs are a record: not edited, not deleted.
    assert moderator_client.post(f"/admin/feed/timelinerebuild/{run.pk}/delete/").status_code == 403


def test_the_admin_revoke_action_voids_tokens_on_the_read_path(
    moderator_client: Client, starling: object, django_capture_on_commit_callbacks: object
) -> None:
    import redis as redis_lib

    from fanout.store.timelines import store_for

    ann = UserFactory(username="ann")
    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        response = moderator_client.post(
            "/admin/feed/user/",
            {"action": "revoke_tokens", "_selected_action": [ann.pk]},
        )
    assert response.status_code == 302
    client: redis_lib.Redis = store_for(starling).redis  # type: ignore[arg-type]
    assert client.get(f"starling:tokens:{ann.pk}") is not None


def test_a_password_set_in_the_admin_ends_the_user_s_sessions(
    moderator_client: Client, starling: object, django_capture_on_commit_callbacks: object
) -> None:
    import time

    ann = UserFactory(username="ann")
    stolen = client_for(ann)
    time.sleep(1.05)  # tokens are timestamped to the second
    new = "a-new-password-7431"
    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        response = moderator_client.post(
            f"/admin/feed/user/{ann.pk}/password/",
            {"password1": new, "password2": new, "usable_password": "true"},
        )
    assert response.status_code == 302, response.content[-2000:]
    ann.refresh_from_db()
    assert ann.check_password(new)
    assert stolen.post("/api/v1/tweets", {"text": "x"}, format="json").status_code == 401
    assert stolen.get("/api/v1/timeline").status_code == 401  # the read path too


def test_users_added_in_the_admin_or_by_createsuperuser_are_registered(
    moderator_client: Client,
) -> None:
    """The registration's use-case either way: a validated name, the self edge."""
    from django.core.management import call_command

    response = moderator_client.post(
        "/admin/feed/user/add/",
        {"username": "newbie", "password1": "pw-long-enough-1", "password2": "pw-long-enough-1"},
    )
    assert response.status_code == 302, response.content[-3000:]
    bad = moderator_client.post(
        "/admin/feed/user/add/",
        {
            "username": "no spaces!",
            "password1": "pw-long-enough-1",
            "password2": "pw-long-enough-1",
        },
    )
    assert bad.status_code == 200 and b"letters, digits and underscores" in bad.content
    taken = moderator_client.post(
        "/admin/feed/user/add/",
        {"username": "NEWBIE", "password1": "pw-long-enough-1", "password2": "pw-long-enough-1"},
    )
    assert taken.status_code == 200 and b"already taken" in taken.content
    call_command("createsuperuser", "--noinput", "--username", "root", "--email", "r@example.com")
    for name in ("newbie", "root"):
        user = User.objects.get(username=name)
        assert OutboxEvent.objects.filter(key=f"{user.pk}:{user.pk}").count() == 1, name


def test_a_name_changed_in_the_admin_reaches_every_tweet_and_frees_the_old_one(
    moderator_client: Client,
) -> None:
    ann = UserFactory(username="ann")
    posts = {tweet_create(author=ann, text=f"t{i}").tweet.id for i in range(2)}
    last = OutboxEvent.objects.latest("id").id
    page = moderator_client.get(f"/admin/feed/user/{ann.pk}/change/")
    form = {k: v for k, v in page.context["adminform"].form.initial.items() if v is not None}
    form.update(
        username="anna",
        date_joined_0=ann.date_joined.strftime("%Y-%m-%d"),
        date_joined_1=ann.date_joined.strftime("%H:%M:%S"),
        last_login_0="",
        last_login_1="",
        is_active="on",
    )
    form.pop("groups", None)
    form.pop("user_permissions", None)
    form.pop("password", None)
    form.pop("date_joined", None)
    form.pop("last_login", None)
    form.pop("tokens_valid_after", None)
    form.pop("last_active", None)
    form.pop("is_staff", None)
    form.pop("is_superuser", None)
    response = moderator_client.post(f"/admin/feed/user/{ann.pk}/change/", form)
    assert response.status_code == 302, response.content[-3000:]
    ann.refresh_from_db()
    assert ann.username == "anna"
    again = OutboxEvent.objects.filter(id__gt=last, topic="tweets")
    assert {int(e.key) for e in again} == posts
    assert all('"author":"anna"' in (e.value or "") for e in again)
    UserFactory(username="ann")  # the old name is free


def test_the_admin_shows_reposts_and_likes_and_deletes_an_original_with_them(
    moderator_client: Client,
) -> None:
    from feed.models import Like
    from feed.services import like_create, repost_create

    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    original = tweet_create(author=ann, text="the original").tweet.id
    repost = repost_create(user=bob, tweet_id=original).repost_id
    like_create(user=bob, tweet_id=original)
    listing = moderator_client.get("/admin/feed/tweet/?kind=repost").content.decode()
    assert "(repost of ann) the original" in listing
    assert moderator_client.get("/admin/feed/like/").status_code == 200
    assert moderator_client.get("/admin/feed/like/add/").status_code == 403
    page = moderator_client.get(f"/admin/feed/tweet/{original}/delete/")
    assert page.status_code == 200 and b"Cannot delete" not in page.content
    response = moderator_client.post(
        "/admin/feed/tweet/",
        {"action": "delete_selected", "_selected_action": [original, repost], "post": "yes"},
    )
    assert response.status_code == 302
    assert not Tweet.objects.exists() and not Like.objects.exists()
    tombstones = OutboxEvent.objects.filter(topic="tweets", value__isnull=True)
    assert sorted(int(k) for k in tombstones.values_list("key", flat=True)) == [original, repost]


def test_the_users_list_counts_who_blocks_each_user_and_sorts_by_it(
    moderator_client: Client,
) -> None:
    from feed.relations import block_create

    troll, *others = (UserFactory(username=n) for n in ("troll", "ann", "bob", "cat"))
    for other in others:
        block_create(blocker=other, blocked=troll)
    block_create(blocker=troll, blocked=others[0])
    page = moderator_client.get("/admin/feed/user/?o=-7")  # the "blocked by" column, descending
    assert page.status_code == 200
    rows = page.context["cl"].result_list
    assert [(u.username, u.blocked_by_count) for u in rows[:2]] == [("troll", 3), ("ann", 1)]
    listed = moderator_client.get("/admin/feed/block/?q=troll")
    assert listed.status_code == 200 and listed.context["cl"].result_count == 4
