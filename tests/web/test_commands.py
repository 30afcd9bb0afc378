"""Operator commands: re-seeding empty changelogs, inspecting dead letters."""

from __future__ import annotations

import base64
from io import StringIO

import pytest
from django.core.management import call_command

from fanout.config import StarlingConfig
from fanout.model import events
from fanout.store.timelines import store_for
from feed.models import OutboxEvent
from feed.moderation import moderator_create, user_suspend
from feed.relations import follow_create
from feed.services import like_create, repost_create, tweet_create, tweet_delete, user_register

pytestmark = pytest.mark.django_db


def test_republish_writes_the_current_state_as_upserts(starling: StarlingConfig) -> None:
    ann = user_register(username="ann", password="a-long-password-1")
    bob = user_register(username="bob", password="a-long-password-2")
    follow_create(follower=bob, followee=ann)
    kept = tweet_create(author=ann, text="kept").tweet
    gone = tweet_create(author=ann, text="gone").tweet
    tweet_delete(tweet_id=gone.id, actor=ann)
    before = OutboxEvent.objects.count()
    out = StringIO()
    call_command("republish_changelogs", stdout=out)
    rows = list(OutboxEvent.objects.order_by("id")[before:].values_list("topic", "key", "value"))
    assert [(t, k) for t, k, _ in rows] == [
        ("follows", f"{ann.pk}:{ann.pk}"),
        ("follows", f"{bob.pk}:{bob.pk}"),
        ("follows", f"{bob.pk}:{ann.pk}"),
        ("tweets", str(kept.id)),
    ]
    assert all(value is not None for _, _, value in rows)  # upserts only, no tombstones
    assert "republished 4 rows" in out.getvalue()


def test_registration_writes_the_self_edge(starling: StarlingConfig) -> None:
    user = user_register(username="cat", password="a-long-password-3")
    event = OutboxEvent.objects.get()
    assert (event.topic, event.key, event.join_key) == ("follows", f"{user.pk}:{user.pk}", user.pk)


def test_deadletters_lists_and_clears(starling: StarlingConfig) -> None:
    store = store_for(starling)
    store.dead_letter(
        [
            {
                "topic": "tweets",
                "partition": 1,
                "offset": 42,
                "error": "value is not JSON",
                "key": base64.b64encode(b"123").decode(),
                "value": base64.b64encode(b"{oops").decode(),
                "seen_at": 1_800_000_000,
            },
            {"topic": "tweets", "partition": 2, "offset": 7, "error": "no seq header"},
        ]
    )
    out = StringIO()
    call_command("deadletters", "--clear", "--limit", "1", stdout=out)
    text = out.getvalue()
    assert "2 dead letter(s)" in text and "tweets/1@42" in text and "value is not JSON" in text
    assert "key=123 value={oops" in text and "cleared 1 dead letter(s), 1 left" in text
    assert [(d["partition"], d["offset"]) for d in store.dead_letters()] == [(2, 7)]
    # One set aside after the listing is not lost by clearing what was listed.
    listed = store.dead_letters()
    store.dead_letter([{"topic": "follows", "partition": 0, "offset": 3, "error": "late"}])
    assert store.clear_dead_letters(listed) == 1
    assert [d["topic"] for d in store.dead_letters()] == ["follows"]


def test_republish_leaves_a_suspended_users_rows_out_of_the_changelogs(
    starling: StarlingConfig,
) -> None:
    """A suspended user's tweets, reposts and likes are tombstoned on the
    changelogs, and so are others' reposts of their tweets: republishing them
    would bring them back into the timelines, the counts and a rebuild."""
    ann = user_register(username="ann", password="a-long-password-1")
    bob = user_register(username="bob", password="a-long-password-2")
    mod = moderator_create(username="mod", password="a-long-password-3")
    anns = tweet_create(author=ann, text="ann's").tweet
    bobs = tweet_create(author=bob, text="bob's").tweet
    by_bob = repost_create(user=bob, tweet_id=anns.id).repost_id
    repost_create(user=ann, tweet_id=bobs.id)
    like_create(user=ann, tweet_id=bobs.id)
    like_create(user=bob, tweet_id=anns.id)
    user_suspend(user=ann, moderator=mod, reason="test")
    before = OutboxEvent.objects.count()
    call_command("republish_changelogs", stdout=StringIO())
    republished = [
        events.decode_record(
            e.topic, e.key.encode(), e.value and e.value.encode(), e.id, e.join_key
        ).event
        for e in OutboxEvent.objects.order_by("id")[before:]
    ]
    posted = {e.tweet_id for e in republished if isinstance(e, events.TweetPosted)}
    engaged = {(e.kind, e.member) for e in republished if isinstance(e, events.Engaged)}
    assert posted == {bobs.id}  # not ann's tweet or repost, nor bob's repost of ann's
    assert by_bob not in posted
    # Bob's engagements with ann's tweet are his (he is active); ann's are gone.
    assert engaged == {(events.REPOST, bob.pk), (events.LIKE, bob.pk)}
