"""Moderation: who may (the same permissions as the admin), what a suspension
hides (every lookup, the database's view, the counts) and leaves on the
changelog (a tombstone per tweet, each posted again on reinstatement), and
the record of every moderator's action."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from feed.models import ModerationAction, OutboxEvent, User
from feed.relations import follow_create
from feed.services import tweet_create
from feed.view_sql import home_timeline_ids
from tests.support.clients import StarlingClient, client_for
from tests.support.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


@pytest.fixture
def moderator(tmp_path: Path) -> User:
    secret = tmp_path / "password"
    secret.write_text("moderate-with-care-42\n")
    call_command("createmoderator", "mia", "--password-file", str(secret))
    return User.objects.get(username="mia")


def test_createmoderator_makes_a_moderator_and_nothing_more(moderator: User) -> None:
    assert moderator.is_staff and not moderator.is_superuser
    assert moderator.check_password("moderate-with-care-42")
    assert moderator.has_perm("feed.suspend_user") and moderator.has_perm("feed.delete_tweet")
    assert not moderator.has_perm("feed.change_user") and not moderator.has_perm("feed.add_tweet")
    # Registered like anyone: the self edge is on the changelog.
    assert OutboxEvent.objects.filter(key=f"{moderator.pk}:{moderator.pk}").exists()


def test_only_the_permission_moderates_not_being_staff(moderator: User) -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    staff = UserFactory(username="sam", is_staff=True)  # staff, no moderation permission
    tweet = tweet_create(author=ann, text="hello").tweet
    for someone in (bob, staff):
        client = client_for(someone)
        assert client.post("/api/v1/users/ann/suspension", {}, format="json").status_code == 403
        assert client.delete(f"/api/v1/tweets/{tweet.id}").status_code == 403
    mod = client_for(moderator)
    assert mod.delete(f"/api/v1/tweets/{tweet.id}").status_code == 204
    record = ModerationAction.objects.get()
    assert (record.moderator, record.kind, record.subject, record.tweet_id) == (
        moderator,
        "delete-tweet",
        ann,
        tweet.id,
    )


def test_a_suspension_hides_the_user_everywhere_and_a_reinstatement_brings_all_back(
    moderator: User, django_capture_on_commit_callbacks
) -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    follow_create(follower=bob, followee=ann)
    follow_create(follower=ann, followee=cat)
    posts = [tweet_create(author=ann, text=f"t{i}").tweet.id for i in range(3)]
    mine = tweet_create(author=bob, text="bob's").tweet.id
    anns = client_for(ann)
    with django_capture_on_commit_callbacks(execute=True):
        done = client_for(moderator).post(
            "/api/v1/users/ann/suspension", {"reason": "spam"}, format="json"
        )
    assert done.status_code == 201
    seq = done.json()["seq"]
    again = client_for(moderator).post("/api/v1/users/ann/suspension", {}, format="json")
    assert again.status_code == 200  # already suspended: nothing more
    # A tombstone per tweet, through the outbox, the last one being the seq.
    tombstones = OutboxEvent.objects.filter(join_key=ann.pk, topic="tweets", value__isnull=True)
    assert sorted(int(k) for k in tombstones.values_list("key", flat=True)) == sorted(posts)
    assert max(tombstones.values_list("id", flat=True)) == seq
    public = StarlingClient()
    assert public.get("/api/v1/users/ann").status_code == 404
    assert public.get("/api/v1/users/ann/tweets").status_code == 404
    assert public.get(f"/api/v1/tweets/{posts[0]}").status_code == 404
    assert client_for(bob).post("/api/v1/users/ann/follow").status_code == 404
    assert anns.post("/api/v1/tweets", {"text": "x"}, format="json").status_code == 401
    assert anns.get("/api/v1/timeline").status_code == 401
    assert home_timeline_ids(bob.pk, limit=10) == [mine]  # the database's view
    assert public.get("/api/v1/users/bob").json()["following_count"] == 0
    assert public.get("/api/v1/users/cat").json()["followers_count"] == 0
    assert public.get("/api/v1/users/cat/followers").json()["users"] == []
    assert ModerationAction.objects.get(kind="suspend").reason == "spam"

    others = client_for(bob).delete("/api/v1/users/ann/suspension")
    assert others.status_code == 403
    with django_capture_on_commit_callbacks(execute=True):
        back = client_for(moderator).delete("/api/v1/users/ann/suspension")
    assert back.status_code == 200 and back.json()["seq"] > seq
    reposted = OutboxEvent.objects.filter(id__gt=seq, topic="tweets", join_key=ann.pk)
    assert sorted(int(k) for k in reposted.values_list("key", flat=True)) == sorted(posts)
    assert all(v and '"author":"ann"' in v for v in reposted.values_list("value", flat=True))
    assert public.get("/api/v1/users/ann").json()["tweets_count"] == 3
    assert home_timeline_ids(bob.pk, limit=10) == sorted([*posts, mine], reverse=True)
    assert public.get("/api/v1/users/bob").json()["following_count"] == 1
    assert public.get("/api/v1/users/cat").json()["followers_count"] == 1
    assert anns.get("/api/v1/timeline").status_code == 401  # its old tokens stay void
    assert [a.kind for a in ModerationAction.objects.order_by("id")] == ["suspend", "reinstate"]


def test_a_moderator_suspends_in_the_admin_and_sees_the_record(
    moderator: User, django_capture_on_commit_callbacks
) -> None:
    ann = UserFactory(username="ann")
    tweet_create(author=ann, text="hello")
    client = Client()
    client.force_login(moderator)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/admin/feed/user/",
            {"action": "suspend_users", "_selected_action": [ann.pk]},
        )
    assert response.status_code == 302
    ann.refresh_from_db()
    assert not ann.is_active
    assert OutboxEvent.objects.filter(join_key=ann.pk, value__isnull=True).count() == 1
    assert ModerationAction.objects.get().moderator == moderator
    page = client.get("/admin/feed/moderationaction/")
    assert page.status_code == 200 and b"suspend" in page.content
