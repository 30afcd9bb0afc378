"""Nobody acts as someone else, and bad input gets a 4xx naming the problem
(real database and Redis through Django's test client)."""

from __future__ import annotations

import pytest
from django.core import signing
from django.test import Client

from feed.auth import SALT, issue_token
from feed.models import Follow, Tweet
from tests.support.clients import StarlingClient, client_for
from tests.support.factories import ModeratorFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_token_cannot_be_forged_or_edited_to_name_another_user() -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    forged = signing.TimestampSigner(key="not-our-secret-" + "x" * 40, salt=SALT).sign_object(
        {"u": bob.pk}
    )
    _, stamp, signature = issue_token(ann).split(":")
    edited = ":".join([signing.b64_encode(b'{"u":%d}' % bob.pk).decode(), stamp, signature])
    for token in (forged, edited):
        client = StarlingClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        response = client.post("/api/v1/tweets", {"text": "as bob"}, format="json")
        assert response.status_code == 401 and "signature" in response.json()["error"]["message"]
        assert client.get("/api/v1/timeline").status_code == 401
    assert not Tweet.objects.filter(text="as bob").exists()


def test_writes_act_only_as_the_token_holder() -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    # The body cannot name another author or follower: unknown fields are ignored.
    response = client_for(ann).post(
        "/api/v1/tweets", {"text": "hi", "author": "bob", "author_id": bob.pk}, format="json"
    )
    assert response.status_code == 201 and response.json()["author"] == "ann"
    assert client_for(ann).post("/api/v1/users/cat/follow").status_code == 201
    assert Follow.objects.filter(follower=ann, followee=cat).exists()
    assert not Follow.objects.filter(follower=bob).exists()
    tweet = client_for(bob).post("/api/v1/tweets", {"text": "bob's"}, format="json").json()
    assert client_for(ann).delete(f"/api/v1/tweets/{tweet['id']}").status_code == 403
    staff = ModeratorFactory(username="mod")
    assert client_for(staff).delete(f"/api/v1/tweets/{tweet['id']}").status_code == 204


def test_the_admin_requires_a_staff_login() -> None:
    assert Client().get("/admin/").status_code == 302
    user = UserFactory(username="plain")
    client = Client()
    client.force_login(user)
    response = client.get("/admin/feed/tweet/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    staff = UserFactory(username="staff", is_staff=True, is_superuser=True)
    client.force_login(staff)
    assert client.get("/admin/feed/tweet/").status_code == 200
    # A bearer token does not open the admin.
    token_client = Client(HTTP_AUTHORIZATION=f"Bearer {issue_token(staff)}")
    assert token_client.get("/admin/feed/tweet/").status_code == 302


@pytest.mark.parametrize(
    ("body", "mentions"),
    [
        ('{"text": 123}', "text"),
        ('{"text": null}', "text"),
        ('{"text": ["a"]}', "text"),
        ('["text"]', "dictionary"),
        ('{"text": "\\u0000nul"}', "text"),
        ('{"text": "\\ud800 lone surrogate"}', "text"),
        ('{"text": "\\u200b\\u200b\\u200b"}', "text"),
        ('{"text": "' + "é" * 281 + '"}', "280"),
        ('{"text": "' + "e\\u0301" * 281 + '"}', "280"),  # 281 characters once NFC-normalized
        ('{"text": ', "JSON"),
        ("", "text"),
    ],
)
def test_bad_tweet_bodies_get_a_4xx_naming_the_problem(body: str, mentions: str) -> None:
    client = client_for(UserFactory(username="ann"))
    response = client.post("/api/v1/tweets", data=body, content_type="application/json")
    assert 400 <= response.status_code < 500, response.content
    message = response.json()["error"]["message"]
    assert mentions.lower() in message.lower(), message
    assert not Tweet.objects.exists()


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/api/v1/timeline?max_id=-1", "max_id"),
        ("/api/v1/timeline?max_id=" + "9" * 30, "max_id"),
        ("/api/v1/timeline?since_id=abc", "since_id"),
        ("/api/v1/timeline?count=100000", "count"),
        ("/api/v1/timeline?min_seq=-5", "min_seq"),
        ("/api/v1/users/ann/tweets?max_id=" + "9" * 30, "max_id"),
        ("/api/v1/users/ann/tweets?count=0", "count"),
        ("/api/v1/users/ann/followers?cursor=-1", "cursor"),
        # Digits int() refuses although str.isdigit() takes them: "²", "٣".
        ("/api/v1/timeline?count=%C2%B2", "count"),
        ("/api/v1/timeline?max_id=%D9%A3", "max_id"),
        ("/api/v1/users/ann/tweets?count=%C2%B2", "count"),
        ("/api/v1/users/ann/followers?count=1.0", "count"),
    ],
)
def test_out_of_range_cursors_get_400_naming_the_parameter(path: str, param: str) -> None:
    client = client_for(UserFactory(username="ann"))
    response = client.get(path)
    assert response.status_code == 400, response.content
    assert param in response.json()["error"]["message"]
