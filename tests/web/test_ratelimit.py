"""Rate limits on writes and logins, counted in the real Redis."""

from __future__ import annotations

import pytest
import redis
from rest_framework.test import APIClient

from fanout.store.keys import RATE_LIMIT_PREFIX as KEY_PREFIX
from feed.auth import issue_token
from feed.ratelimit import Rate
from tests.support.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def limits(settings, starling, redis_client: redis.Redis):
    for key in redis_client.scan_iter(match=f"{KEY_PREFIX}*"):
        redis_client.delete(key)
    settings.STARLING_RATES = {
        "write_user": "3/min",
        "write_ip": "0",
        "login_ip": "0",
        "login_user": "2/min",
    }
    return settings.STARLING_RATES


def test_a_user_over_the_write_limit_gets_429_with_retry_after(limits) -> None:
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(ann)}")
    for i in range(3):
        assert client.post("/api/v1/tweets", {"text": f"t{i}"}, format="json").status_code == 201
    response = client.post("/api/v1/tweets", {"text": "one too many"}, format="json")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "throttled"
    assert 1 <= int(response["Retry-After"]) <= 60
    # Reads are not counted; another user has a budget of their own.
    assert client.get("/api/v1/users/ann").status_code == 200
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(bob)}")
    assert other.post("/api/v1/tweets", {"text": "mine"}, format="json").status_code == 201


def test_logins_are_limited_per_username_and_per_address(limits) -> None:
    UserFactory(username="carol")
    client = APIClient()
    for _ in range(2):
        assert (
            client.post(
                "/api/v1/auth/token", {"username": "carol", "password": "x"}, format="json"
            ).status_code
            == 401
        )
    blocked = client.post(
        "/api/v1/auth/token", {"username": "Carol", "password": "x"}, format="json"
    )
    assert blocked.status_code == 429 and "Retry-After" in blocked
    limits["login_user"], limits["login_ip"] = "0", "1/min"
    assert (
        client.post(
            "/api/v1/auth/token", {"username": "dave", "password": "x"}, format="json"
        ).status_code
        == 401
    )
    assert (
        client.post(
            "/api/v1/auth/register",
            {"username": "eve", "password": "pw-" + "x" * 12},
            format="json",
        ).status_code
        == 429
    )


def test_the_limiter_lets_requests_through_when_redis_is_down(limits, settings, starling) -> None:
    from dataclasses import replace

    settings.STARLING = replace(starling, redis_url="redis://127.0.0.1:1/0")
    client = APIClient()
    for _ in range(4):
        response = client.post(
            "/api/v1/auth/token", {"username": "nobody", "password": "x"}, format="json"
        )
        assert response.status_code == 401


def test_rates_parse_and_refuse_nonsense() -> None:
    assert Rate.parse("60/min") == Rate(60, 60)
    assert Rate.parse("5/s") == Rate(5, 1)
    assert Rate.parse("0") is None and Rate.parse("") is None
    with pytest.raises(ValueError, match="like '60/min'"):
        Rate.parse("lots")


def test_oversized_requests_are_refused_with_a_json_error(limits) -> None:
    ann = UserFactory(username="ann")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(ann)}")
    response = client.post(
        "/api/v1/tweets",
        data=b'{"text": "' + b"a" * 100_000 + b'"}',
        content_type="application/json",
    )
    assert 400 <= response.status_code < 500
    assert "error" in response.json()


def _login(client: APIClient, username: str, forwarded: str | None = None) -> int:
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    return client.post(
        "/api/v1/auth/token", {"username": username, "password": "x"}, format="json", **extra
    ).status_code


def test_a_client_cannot_choose_its_address_with_x_forwarded_for(limits) -> None:
    """With no proxy trusted (the default), the header is ignored: a new
    address per request buys no new budget."""
    limits["login_user"], limits["login_ip"] = "0", "2/min"
    client = APIClient()
    codes = [_login(client, f"user{i}", f"198.51.100.{i}") for i in range(3)]
    assert codes == [401, 401, 429]


def test_behind_a_trusted_proxy_each_client_counts_by_the_address_it_saw(limits, settings) -> None:
    """One proxy trusted: the last X-Forwarded-For entry (the proxy's own) is
    the client; what the client wrote to the left of it counts for nothing."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    limits["login_user"], limits["login_ip"] = "0", "1/min"
    client = APIClient()
    assert _login(client, "a", "203.0.113.7") == 401
    assert _login(client, "b", "203.0.113.7") == 429
    assert _login(client, "c", "203.0.113.8") == 401  # another client behind the proxy
    assert _login(client, "d", "198.51.100.1, 203.0.113.7") == 429  # a spoofed prefix


def test_a_body_over_the_limit_is_refused_even_when_its_fields_are_valid(limits) -> None:
    """The body limit itself, not the 280-character rule: a valid tweet padded
    with an unknown field past 64 kB is refused, and nothing is written."""
    from feed.models import Tweet

    ann = UserFactory(username="ann")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(ann)}")
    body = b'{"text": "hello", "padding": "' + b"a" * 70_000 + b'"}'
    response = client.post("/api/v1/tweets", data=body, content_type="application/json")
    assert response.status_code in (400, 413), response.content
    assert "error" in response.json()
    assert not Tweet.objects.exists()
    small = b'{"text": "hello", "padding": "' + b"a" * 1_000 + b'"}'
    assert (
        client.post("/api/v1/tweets", data=small, content_type="application/json").status_code
        == 201
    )


def test_reposts_and_likes_count_as_writes(limits) -> None:
    from feed.services import tweet_create

    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    tweet = tweet_create(author=ann, text="hi").tweet.id
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_token(bob)}")
    assert client.post(f"/api/v1/tweets/{tweet}/like").status_code == 201
    assert client.post(f"/api/v1/tweets/{tweet}/repost").status_code == 201
    assert client.delete(f"/api/v1/tweets/{tweet}/like").status_code == 200
    response = client.delete(f"/api/v1/tweets/{tweet}/repost")
    assert response.status_code == 429 and response.json()["error"]["code"] == "throttled"
