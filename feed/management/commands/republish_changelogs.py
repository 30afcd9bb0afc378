"""``manage.py republish_changelogs``: put the database's current rows back on Kafka.

For a broker that lost its topics (the embedded Tansu broker keeps nothing
across restarts): every user's self edge, every follow and every tweet is
appended to the outbox as an upsert, and the relay publishes them. With the
compacted topics that is the whole current state again; a fanout job
started with ``--reset`` rebuilds every timeline from it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from fanout import events
from feed.models import Follow, OutboxEvent, Tweet, User
from feed.outbox import outbox_row

BATCH = 5000


def snapshot() -> Iterator[events.Event]:
    for user_id in User.objects.order_by("id").values_list("id", flat=True).iterator():
        yield events.Followed(follower_id=user_id, followee_id=user_id)
    for f, g in Follow.objects.order_by("id").values_list("follower_id", "followee_id").iterator():
        yield events.Followed(follower_id=f, followee_id=g)
    rows = Tweet.objects.order_by("id").values_list("id", "author_id", "author__username", "text")
    for tweet_id, author_id, author, text in rows.iterator():
        yield events.TweetPosted(tweet_id=tweet_id, author_id=author_id, author=author, text=text)


class Command(BaseCommand):
    help = "Append the current users, follows and tweets to the outbox (re-seeds empty topics)."

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        written = 0
        batch: list[OutboxEvent] = []
        for event in snapshot():
            batch.append(outbox_row(event))
            if len(batch) >= BATCH:
                written += self._write(batch)
                batch = []
                self.stdout.write(f"  republished {written:,} rows...")
        written += self._write(batch)
        self.stdout.write(
            f"republished {written:,} rows to the outbox in {time.monotonic() - started:.1f}s "
            "(the relay publishes them on its next sweep)"
        )

    @staticmethod
    def _write(batch: list[OutboxEvent]) -> int:
        with transaction.atomic():
            OutboxEvent.objects.bulk_create(batch)
        return len(batch)
