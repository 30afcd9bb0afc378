"""The status codes and error bodies of the API table (README, "API")."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fanout.model import ids
from feed.models import Follow, OutboxEvent, Tweet, User
from tests.support.clients import client_for
from tests.support.factories import PASSWORD, ModeratorFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


def assert_error(response: Any, status: int, code: str, *, mentions: str = "") -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert mentions.lower() in error["message"].lower()
    return error


# --- auth ----------------------------------------------------------------------


def test_register_returns_a_working_token() -> None:
    response = client_for().post(
        "/api/v1/auth/register", {"username": "alice", "password": PASSWORD}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert body["username"] == "alice" and isinstance(body["id"], int)
    client = client_for()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    assert client.post("/api/v1/tweets", {"text": "first"}, format="json").status_code == 201


def test_register_refuses_taken_names_case_insensitively() -> None:
    UserFactory(username="alice")
    response = client_for().post(
        "/api/v1/auth/register", {"username": "ALICE", "password": PASSWORD}, format="json"
    )
    error = assert_error(response, 409, "conflict", mentions="already taken")
    assert "username" in error["fields"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"username": "bad name", "password": PASSWORD}, "username"),
        ({"username": "bob", "password": "short"}, "password"),
        ({"username": "bob", "password": "12345678901"}, "password"),
        ({"password": PASSWORD}, "username"),
        ({"username": "bob"}, "password"),
        ({"username": ["bob"], "password": PASSWORD}, "username"),
    ],
)
def test_register_validation_errors_name_the_field(payload: dict[str, Any], field: str) -> None:
    response = client_for().post("/api/v1/auth/register", payload, format="json")
    error = assert_error(response, 400, "invalid", mentions=field)
    assert field in error["fields"]


def test_token_for_good_and_bad_credentials() -> None:
    UserFactory(username="carol")
    good = client_for().post(
        "/api/v1/auth/token", {"username": "carol", "password": PASSWORD}, format="json"
    )
    assert good.status_code == 200 and good.json()["token"]
    bad = client_for().post(
        "/api/v1/auth/token", {"username": "carol", "password": "wrong-password"}, format="json"
    )
    assert_error(bad, 401, "invalid_credentials", mentions="wrong username or password")


@pytest.mark.parametrize(
    ("header", "mentions"),
    [
        ("Bearer not-a-token", "signature"),
        ("Bearer ", "no token"),
        ("Token abc", "Bearer <token>"),
    ],
)
def test_bad_tokens_get_401_with_a_reason(header: str, mentions: str) -> None:
    client = client_for()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post("/api/v1/tweets", {"text": "x"}, format="json")
    assert_error(response, 401, "authentication_failed", mentions=mentions)
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_expired_token_is_refused(settings) -> None:
    user = UserFactory()
    settings.STARLING_TOKEN_TTL = -1
    response = client_for(user).post("/api/v1/tweets", {"text": "x"}, format="json")
    assert_error(response, 401, "authentication_failed", mentions="expired")


def test_writes_need_authentication() -> None:
    assert_error(
        client_for().post("/api/v1/tweets", {"text": "x"}, format="json"),
        401,
        "not_authenticated",
    )


# --- tweets --------------------------------------------------------------------

#: A tweet object's fields, in order (the cached bodies' order, feed.selectors.tweet_object).
TWEET_FIELDS = [
    "id",
    "author",
    "text",
    "in_reply_to",
    "mentions",
    "created_at",
    "repost_of",
    "counts",
]


def test_post_tweet_returns_the_tweet_and_its_seq() -> None:
    alice = UserFactory(username="alice")
    response = client_for(alice).post("/api/v1/tweets", {"text": "cafe\u0301"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert list(body) == [*TWEET_FIELDS, "seq"]
    assert body["author"] == "alice" and body["text"] == "caf\u00e9"
    assert body["repost_of"] is None and body["in_reply_to"] is None and body["mentions"] == []
    assert body["counts"] == {"likes": 0, "reposts": 0, "replies": 0}
    assert ids.is_valid(body["id"]) and body["created_at"].endswith("Z")
    event = OutboxEvent.objects.get(id=body["seq"])
    assert (event.topic, event.key, event.join_key) == ("tweets", str(body["id"]), alice.pk)


@pytest.mark.parametrize(
    ("payload", "mentions"),
    [
        ({"text": ""}, "blank"),
        ({"text": "   \n "}, "blank"),
        ({"text": "x" * 281}, "at most 280"),
        ({"text": "null\x00byte"}, "null character"),
        ({"text": "bell\x07"}, "control character"),
        ({"text": 12}, "text"),
        ({}, "text"),
    ],
)
def test_bad_tweets_get_400_naming_the_problem(payload: dict[str, Any], mentions: str) -> None:
    response = client_for(UserFactory()).post("/api/v1/tweets", payload, format="json")
    assert_error(response, 400, "invalid", mentions=mentions)
    assert not Tweet.objects.exists() and not OutboxEvent.objects.exists()


def test_malformed_json_is_a_400() -> None:
    response = client_for(UserFactory()).post(
        "/api/v1/tweets", data=b'{"text": ', content_type="application/json"
    )
    assert_error(response, 400, "parse_error", mentions="JSON")


def test_get_tweet_and_404s() -> None:
    alice = UserFactory(username="alice")
    tweet_id = (
        client_for(alice).post("/api/v1/tweets", {"text": "hello"}, format="json").json()["id"]
    )
    got = client_for().get(f"/api/v1/tweets/{tweet_id}")
    assert got.status_code == 200 and got.json()["text"] == "hello"
    assert_error(client_for().get(f"/api/v1/tweets/{tweet_id + 1}"), 404, "not_found")
    assert_error(client_for().get(f"/api/v1/tweets/{2**70}"), 404, "not_found")


def test_delete_tweet_author_staff_and_others() -> None:
    alice, mallory = UserFactory(username="alice"), UserFactory(username="mallory")
    moderator = ModeratorFactory(username="mod")
    first = client_for(alice).post("/api/v1/tweets", {"text": "one"}, format="json").json()["id"]
    second = client_for(alice).post("/api/v1/tweets", {"text": "two"}, format="json").json()["id"]

    assert_error(client_for(mallory).delete(f"/api/v1/tweets/{first}"), 403, "forbidden")
    assert_error(client_for().delete(f"/api/v1/tweets/{first}"), 401, "not_authenticated")
    assert client_for(alice).delete(f"/api/v1/tweets/{first}").status_code == 204
    assert client_for(moderator).delete(f"/api/v1/tweets/{second}").status_code == 204
    assert_error(client_for(alice).delete(f"/api/v1/tweets/{first}"), 404, "not_found")
    assert_error(client_for().get(f"/api/v1/tweets/{first}"), 404, "not_found")

    tombstones = OutboxEvent.objects.filter(topic="tweets", value__isnull=True).order_by("id")
    assert [(e.key, e.join_key) for e in tombstones] == [
        (str(first), alice.pk),
        (str(second), alice.pk),
    ]


# --- follows -------------------------------------------------------------------


def test_follow_new_existing_self_and_unknown() -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    client = client_for(alice)
    created = client.post("/api/v1/users/bob/follow")
    assert created.status_code == 201
    again = client.post("/api/v1/users/BOB/follow")
    assert again.status_code == 200
    assert again.json()["seq"] >= created.json()["seq"]
    assert Follow.objects.filter(follower=alice, followee=bob).count() == 1
    assert OutboxEvent.objects.filter(topic="follows").count() == 1
    assert_error(client.post("/api/v1/users/alice/follow"), 400, "invalid", mentions="yourself")
    assert_error(client.post("/api/v1/users/nobody/follow"), 404, "not_found", mentions="nobody")


def test_unfollow_is_idempotent() -> None:
    alice = UserFactory(username="alice")
    UserFactory(username="bob")
    client = client_for(alice)
    follow_seq = client.post("/api/v1/users/bob/follow").json()["seq"]
    first = client.delete("/api/v1/users/bob/follow")
    second = client.delete("/api/v1/users/bob/follow")
    assert first.status_code == second.status_code == 200
    assert first.json()["seq"] > follow_seq
    assert second.json()["seq"] == first.json()["seq"]  # nothing new was written
    assert list(OutboxEvent.objects.filter(topic="follows").values_list("key", "value")) == [
        (f"{alice.pk}:{User.objects.get(username='bob').pk}", OutboxEvent.objects.first().value),
        (f"{alice.pk}:{User.objects.get(username='bob').pk}", None),
    ]


# --- reads ---------------------------------------------------------------------


def test_profile_counts() -> None:
    alice, bob, carol = (UserFactory(username=n) for n in ("alice", "bob", "carol"))
    client_for(bob).post("/api/v1/users/alice/follow")
    client_for(carol).post("/api/v1/users/alice/follow")
    client_for(alice).post("/api/v1/users/bob/follow")
    client_for(alice).post("/api/v1/tweets", {"text": "hi"}, format="json")
    body = client_for().get("/api/v1/users/alice").json()
    assert (body["followers_count"], body["following_count"], body["tweets_count"]) == (2, 1, 1)
    assert_error(client_for().get("/api/v1/users/nobody"), 404, "not_found")


def test_user_tweets_cursor_paging_returns_each_tweet_once_newest_first() -> None:
    alice = UserFactory(username="alice")
    client = client_for(alice)
    posted = [
        client.post("/api/v1/tweets", {"text": f"t{i}"}, format="json").json()["id"]
        for i in range(7)
    ]
    seen: list[int] = []
    url = "/api/v1/users/alice/tweets?count=3"
    while True:
        body = client_for().get(url).json()
        seen += [t["id"] for t in body["tweets"]]
        if body["next_max_id"] is None:
            break
        url = f"/api/v1/users/alice/tweets?count=3&max_id={body['next_max_id']}"
    assert seen == sorted(posted, reverse=True)
    newer = client_for().get(f"/api/v1/users/alice/tweets?since_id={posted[4]}").json()["tweets"]
    assert [t["id"] for t in newer] == [posted[6], posted[5]]


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("count=0", "count"),
        ("count=201", "count"),
        ("count=abc", "count"),
        ("max_id=-5", "max_id"),
        (f"since_id={2**60}", "since_id"),
    ],
)
def test_bad_cursors_name_the_parameter(query: str, param: str) -> None:
    UserFactory(username="alice")
    response = client_for().get(f"/api/v1/users/alice/tweets?{query}")
    error = assert_error(response, 400, "invalid", mentions=param)
    assert param in error["fields"]


def test_followers_and_following_pages() -> None:
    star = UserFactory(username="star")
    fans = [UserFactory(username=f"fan{i}") for i in range(5)]
    for fan in fans:
        client_for(fan).post("/api/v1/users/star/follow")
    names: list[str] = []
    url = "/api/v1/users/star/followers?count=2"
    while url:
        body = client_for().get(url).json()
        names += [u["username"] for u in body["users"]]
        url = (
            body["next_cursor"]
            and f"/api/v1/users/star/followers?count=2&cursor={body['next_cursor']}"
        )
    assert names == [f"fan{i}" for i in reversed(range(5))]
    following = client_for().get("/api/v1/users/fan0/following").json()
    assert following == {"users": [{"id": star.pk, "username": "star"}], "next_cursor": None}


def test_unknown_endpoint_is_a_json_404() -> None:
    assert_error(client_for().get("/api/v1/nope"), 404, "not_found", mentions="/api/v1/nope")


def test_wrong_method_is_a_json_405() -> None:
    response = client_for(UserFactory()).put("/api/v1/tweets", {"text": "x"}, format="json")
    assert_error(response, 405, "method_not_allowed", mentions="PUT")


def test_schema_and_docs_are_served() -> None:
    schema = client_for().get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/tweets" in paths and "/api/v1/users/{username}/follow" in paths
    assert client_for().get("/api/docs/").status_code == 200


def test_the_schema_states_the_password_rules_it_can() -> None:
    """Length and not-all-digits are in the schema, so a schema-valid request is
    not refused for them (Django's other password validators cannot be stated)."""
    schema = client_for().get("/api/schema/?format=json").json()
    password = schema["components"]["schemas"]["RegisterInputRequest"]["properties"]["password"]
    assert password["minLength"] == 8 and password["maxLength"] == 128
    assert re.search(password["pattern"], "abcdefgh1") and not re.search(
        password["pattern"], "12345678901"
    )
    query = {
        p["name"]: p["schema"] for p in schema["paths"]["/api/v1/timeline"]["get"]["parameters"]
    }
    assert query["min_seq"]["maximum"] == 2**63 - 1 and query["count"]["maximum"] == 200


def test_the_api_docs_load_their_assets_from_this_server() -> None:
    """Swagger UI's scripts and styles come from Starling's static files, not a
    CDN: the docs work offline and behind a strict firewall."""
    html = client_for().get("/api/docs/").content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css|png))"', html)
    assert assets and all(a.startswith("/static/drf_spectacular_sidecar/") for a in assets), assets
    assert "cdn." not in html and "unpkg" not in html
