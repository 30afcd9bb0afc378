"""The seeder's bulk writes keep what the use-cases keep: the counts and an
outbox event per row."""

from __future__ import annotations

import pytest

from feed.models import OutboxEvent, User
from load_tests import bulk_writes

pytestmark = pytest.mark.django_db


def test_bulk_writes_count_and_emit_like_the_use_cases(starling) -> None:
    ann, bob = bulk_writes.user_register_many(usernames=["ann", "bob"], password="pw-long-enough-1")
    bulk_writes.follow_create_many(pairs=[(ann.pk, bob.pk), (ann.pk, bob.pk)])
    bulk_writes.tweet_create_many(posts=[(bob, "one"), (bob, "two")])
    bob, ann = User.objects.get(username="bob"), User.objects.get(username="ann")
    assert (bob.followers_count, bob.tweets_count, ann.following_count) == (1, 2, 1)
    topics = list(OutboxEvent.objects.order_by("id").values_list("topic", flat=True))
    assert topics == ["follows", "follows", "follows", "tweets", "tweets"]  # two self edges
