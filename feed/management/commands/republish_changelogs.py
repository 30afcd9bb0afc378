"""``manage.py republish_changelogs``: put the database's current rows back on Kafka.

For a broker that lost its topics (deleted, or a log dir lost; ``make run``
runs it when it starts a new broker log dir on a database with rows): every
user's self edge, every follow, every tweet and repost and every like (of
active users; reposts of active users' tweets), and every reply as its
parent's engagement (of active users, to a parent still there), is
appended to the outbox as an upsert, and the relay publishes them. With the
compacted topics that is the whole current state again; a fanout job
started with ``--reset`` rebuilds every timeline from it.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction
from django.db.models import Exists, OuterRef

from fanout.model import events
from feed import outbox
from feed.conversations import links_of, posted, replies_counted
from feed.models import Block, Follow, Like, Mute, Tweet, User
from feed.relations import filters_set

BATCH = 5000


def _users(after: int) -> list[events.Event]:
    ids = User.objects.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:BATCH]
    return [events.Followed(follower_id=u, followee_id=u) for u in ids]


def _follows(after: int) -> tuple[list[events.Event], int]:
    muting = Mute.objects.filter(muter_id=OuterRef("follower_id"), muted_id=OuterRef("followee_id"))
    rows = list(
        Follow.objects.select_for_update(of=("self",))
        .filter(pk__gt=after)
        .annotate(muted=Exists(muting))
        .order_by("pk")
        .values_list("pk", "follower_id", "followee_id", "muted", "reposts")[:BATCH]
    )
    out: list[events.Event] = [
        events.Followed(follower_id=f, followee_id=g, muted=m, reposts=r) for _, f, g, m, r in rows
    ]
    return out, rows[-1][0] if rows else 0


def _tweets(after: int) -> tuple[list[events.Event], int]:
    rows = list(
        Tweet.objects.select_for_update(of=("self",))
        .filter(pk__gt=after)
        .order_by("pk")
        .values_list(
            "pk",
            "author_id",
            "author__username",
            "author__is_active",
            "text",
            "repost_of_id",
            "repost_of__author_id",
            "repost_of__author__is_active",
            "repost_of__reply_to_id",
            "in_reply_to",
        )[:BATCH]
    )
    links = links_of(row[0] for row in rows if row[5] is None)
    out: list[events.Event] = []
    replies: list[tuple[int, int]] = []
    for t, a, name, active, text, original, o_author, o_active, o_reply_to, parent in rows:
        # A suspended author's tweets and reposts are tombstoned on the
        # changelogs (the view is of the visible rows): posting them again
        # would bring them back; so are reposts of a suspended author's tweets.
        # A repost's engagement counts while its reposter is active, and so
        # does a reply's (while its parent is there).
        if not active:
            continue
        if original is None or o_active:
            out.append(posted(t, a, name, text, original, o_author, links.get(t), o_reply_to))
        if original is not None:
            out.append(events.Engaged(events.REPOST, a, original))
        if parent is not None:
            replies.append((t, parent))
    return out + replies_counted(replies), rows[-1][0] if rows else 0


def _filters(after: int) -> tuple[list[events.Event], int]:
    """The hidden users of each user who blocks, is blocked or mutes."""
    involved = (
        Block.objects.filter(blocker_id__gt=after)
        .values_list("blocker_id", flat=True)
        .union(Block.objects.filter(blocked_id__gt=after).values_list("blocked_id", flat=True))
        .union(Mute.objects.filter(muter_id__gt=after).values_list("muter_id", flat=True))
    )
    owners = list(involved.order_by("blocker_id")[:BATCH])
    return [filters_set(owner) for owner in owners], owners[-1] if owners else 0


def _likes(after: int) -> tuple[list[events.Event], int]:
    rows = list(
        Like.objects.select_for_update(of=("self",))
        .filter(pk__gt=after)
        .order_by("pk")
        .values_list("pk", "user_id", "tweet_id", "user__is_active")[:BATCH]
    )
    out: list[events.Event] = [
        events.Engaged(events.LIKE, u, t) for _, u, t, active in rows if active
    ]
    return out, rows[-1][0] if rows else 0


class Command(BaseCommand):
    help = (
        "Append the current users, follows, tweets, reposts, likes and filters to the outbox "
        "(re-seeds empty topics)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        """Each batch is read and appended in one transaction, its rows locked:
        a delete or unfollow that races this command either removes the row
        before it is read or commits after the republished event, with a later
        seq. Its tombstone is then the key's last record, so the command is
        safe while the web tier takes writes."""
        started = time.monotonic()
        written = 0
        after = 0
        while True:  # users are never deleted: their self edges need no lock
            with transaction.atomic():
                batch = _users(after)
                if batch:
                    outbox.append_many(batch)
            if not batch:
                break
            after = max(e.follower_id for e in batch)  # type: ignore[union-attr]
            written += len(batch)
        for name, read in (
            ("follows", _follows),
            ("tweets", _tweets),
            ("likes", _likes),
            ("filters", _filters),
        ):
            after = 0
            while True:
                with transaction.atomic():
                    batch, after = read(after)
                    if batch:
                        outbox.append_many(batch)
                written += len(batch)
                if not after:  # no row left (a batch of rows may yield no event)
                    break
                self.stdout.write(f"  republished {written:,} rows ({name})...")
        self.stdout.write(
            f"republished {written:,} rows to the outbox in {time.monotonic() - started:.1f}s "
            "(the relay publishes them on its next sweep)"
        )
