"""Profiles cost one indexed row: counts kept by the writes, usernames found
through the case-insensitive unique index."""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.test import APIClient

from feed.models import User
from feed.relations import follow_create, follow_delete
from feed.services import tweet_create, tweet_delete
from tests.support.factories import UserFactory

pytestmark = pytest.mark.django_db


def counts(name: str) -> tuple[int, int, int]:
    body = APIClient().get(f"/api/v1/users/{name}").json()
    return body["followers_count"], body["following_count"], body["tweets_count"]


def test_counts_follow_the_writes_without_counting_rows(
    starling, django_assert_num_queries
) -> None:
    ann, bob, cat = (UserFactory(username=n) for n in ("ann", "bob", "cat"))
    follow_create(follower=bob, followee=ann)
    follow_create(follower=cat, followee=ann)
    follow_create(follower=cat, followee=ann)  # again: no new follow, no new count
    first = tweet_create(author=ann, text="one")
    tweet_create(author=ann, text="two")
    assert counts("ann") == (2, 0, 2) and counts("cat") == (0, 1, 0)
    follow_delete(follower=cat, followee=ann)
    follow_delete(follower=cat, followee=ann)  # idempotent, counted once
    tweet_delete(tweet_id=first.tweet.id, actor=ann)
    assert counts("ANN") == (1, 0, 1) and counts("cat") == (0, 0, 0)
    with django_assert_num_queries(1):  # the user's row, nothing counted
        APIClient().get("/api/v1/users/ann")


def test_a_username_lookup_is_served_by_the_case_insensitive_index(starling) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the plan of PostgreSQL's planner")
    UserFactory(username="Zed")
    query = User.objects.filter(username__lower="zed")
    assert list(query.values_list("username", flat=True)) == ["Zed"]
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: no index otherwise
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "user_username_ci_unique" in plan, plan
