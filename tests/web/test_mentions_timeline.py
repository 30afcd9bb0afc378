"""The mentions timeline's database and read side (docs/decisions.md D30):
the view by the database (who is in it and who is not), the refill of a
mentions timeline (owner -u), and ``GET /api/v1/mentions`` against real
Redis and the database: served from the timeline of owner -u, from the
database while it is cold (with its regeneration asked for), and on into the
database past what Redis keeps. The view's SQL against a plain-Python model
on random data is in test_view_sql.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import redis

from fanout.config import StarlingConfig
from fanout.model import events
from fanout.model.join import Mutation, Op
from fanout.store import keys
from fanout.store.timelines import TimelineStore, store_for
from feed import relations, services, tasks, view_sql
from feed.errors import NotFound
from feed.models import OutboxEvent, User
from tests.support.clients import client_for
from tests.support.factories import UserFactory
from tests.web.test_reposts_likes import high, outbox_after

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


def users(*names: str) -> list[User]:
    return [UserFactory(username=n) for n in names]


def post(user: User, text: str, in_reply_to: int | None = None) -> int:
    return services.tweet_create(author=user, text=text, in_reply_to=in_reply_to).tweet.id


def mentions(user: User, query: str = "") -> Any:
    return client_for(user).get(f"/api/v1/mentions{query}")


def ids_of(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [t["id"] for t in response.json()["tweets"]]


def test_the_mentions_are_the_posts_of_others_naming_or_answering_the_user() -> None:
    ann, bob, cat, dee, eve, fay, gus = users("ann", "bob", "cat", "dee", "eve", "fay", "gus")
    own = post(ann, "ann's post")
    gone = post(ann, "ann's post, deleted later")
    shown = [
        post(bob, "hi @ann"),
        post(cat, "an answer", in_reply_to=own),
        post(cat, "an answer naming @ann", in_reply_to=own),  # once, not twice
        post(bob, "an answer to a post deleted since", in_reply_to=gone),
    ]
    post(ann, "@ann talks to herself")
    post(ann, "and answers herself", in_reply_to=own)
    post(bob, "an answer to cat's", in_reply_to=shown[1])  # answers cat, not ann
    services.repost_create(user=bob, tweet_id=shown[0])  # a repost is never a mention
    post(dee, "@ann, from a user suspended since")
    post(eve, "@ann, from a user ann mutes")
    post(fay, "@ann, from a user who blocks ann")
    post(gus, "@ann, from a user ann blocks")
    services.tweet_delete(tweet_id=gone, actor=ann)
    User.objects.filter(pk=dee.pk).update(is_active=False)
    relations.mute_create(muter=ann, muted=eve)
    relations.block_create(blocker=fay, blocked=ann)
    relations.block_create(blocker=ann, blocked=gus)
    expected = sorted(shown, reverse=True)
    assert view_sql.mentions_timeline_ids(ann.pk, limit=50) == expected
    # Unmuted, eve's post is back: the filter is the current one.
    relations.mute_delete(muter=ann, muted=eve)
    assert len(view_sql.mentions_timeline_ids(ann.pk, limit=50)) == len(expected) + 1
    # Cold (nothing in Redis): the database's page, the same view.
    relations.mute_create(muter=ann, muted=eve)
    response = mentions(ann)
    assert response["X-Starling-Source"] == "fallback"
    assert ids_of(response) == expected
    assert response.json()["tweets"][0]["text"] == "an answer to a post deleted since"


def reset_of(seq: int) -> events.TimelineReset:
    row = OutboxEvent.objects.get(id=seq)
    envelope = events.decode_record(
        row.topic, row.key.encode(), (row.value or "").encode(), row.id, row.join_key
    )
    assert isinstance(envelope.event, events.TimelineReset)
    return envelope.event


@pytest.mark.parametrize("written", [3, 6])
def test_a_refill_of_minus_u_is_the_newest_of_the_mentions_view(
    settings, starling: StarlingConfig, written: int
) -> None:
    settings.STARLING = replace(starling, timeline_size=3, timeline_slack=1)  # keep 4
    ann, bob = users("ann", "bob")
    named = [post(bob, f"@ann {i}") for i in range(written)]
    post(bob, "nothing for ann")
    as_of = OutboxEvent.objects.order_by("-id").values_list("id", flat=True)[0]
    reset = reset_of(services.timeline_reset(-ann.pk))
    newest = named[-4:]
    assert reset == events.TimelineReset(
        -ann.pk, tuple(newest), newest[0] if written > 4 else 0, as_of
    )
    assert reset.join_key == ann.pk
    # The home refill is ann's home timeline still: none of bob's posts.
    assert reset_of(services.timeline_reset(ann.pk)).tweet_ids == ()


def test_no_refill_of_the_mentions_of_no_one() -> None:
    with pytest.raises(NotFound):
        services.timeline_reset(-(10**12))


def test_the_refill_task_refills_mentions_timelines_and_skips_unknown_users(
    starling: StarlingConfig,
) -> None:
    ann, bob = users("ann", "bob")
    named = post(bob, "@ann hello")
    store = store_for(starling)
    store.request_refill(-ann.pk, -(10**12))
    before = high()
    assert tasks.refill_timelines() == 1
    (reset,) = outbox_after(before)
    assert reset == events.TimelineReset(-ann.pk, (named,), 0, before)
    assert store.pending_refills() == 0


def write_mentions_timeline(
    store: TimelineStore, user: User, since: int, *, op: Op = Op.ADD
) -> int:
    """The job's part, done here: the bodies of the posts written after
    ``since`` cached, and ``user``'s mentions timeline (owner -u) written
    with the database's refill's ids and horizon, as an ``op`` (a merge, or
    the store's reset path). Returns the refill's seq."""
    generation = store.ensure_active_generation()
    written = {e.tweet_id: e for e in outbox_after(since) if isinstance(e, events.TweetPosted)}
    seq = services.timeline_reset(-user.pk)
    reset = reset_of(seq)
    store.apply(
        generation,
        {t: events.tweet_json(e) for t, e in written.items()},
        [Mutation(op, (-user.pk,), reset.tweet_ids, reset.horizon, seq, reset.as_of)],
    )
    store.release_resets(generation, seq)
    store.record_watermark(
        generation,
        batch_id=1,
        seq=seq,
        marks={},
        contiguous=seq,
        event_time=0,
        offsets={},
        counters={},
    )
    return seq


def test_a_reset_of_minus_u_writes_the_mentions_timeline(starling: StarlingConfig) -> None:
    ann, bob = users("ann", "bob")
    start = high()
    named = [post(bob, "@ann one"), post(bob, "@ann two")]
    store = store_for(starling)
    write_mentions_timeline(store, ann, start, op=Op.RESET)
    generation = store.active_generation()
    assert generation is not None
    stored = store.timeline(generation, -ann.pk)
    assert stored is not None and stored.ids == named[::-1]
    assert ids_of(mentions(ann)) == named[::-1] and mentions(ann)["X-Starling-Source"] == "redis"


def test_the_mentions_are_read_from_the_timeline_of_minus_u(
    starling: StarlingConfig, redis_client: redis.Redis, django_assert_num_queries: Any
) -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    start = high()
    mine = post(ann, "ann's")
    named = [post(bob, "@ann one"), post(cat, "two", in_reply_to=mine), post(bob, "@ann three")]
    store = store_for(starling)
    seq = write_mentions_timeline(store, ann, start)
    generation = store.active_generation()
    assert generation is not None
    stored = store.timeline(generation, -ann.pk)
    assert stored is not None and stored.ids == named[::-1]
    assert redis_client.exists(keys.timeline(generation, -ann.pk))
    client = client_for(ann)
    client.get("/api/v1/mentions")  # the day's first read records ann's activity (SQL)
    with django_assert_num_queries(0):  # warm: one Redis call
        response = client.get("/api/v1/mentions?count=2")
    assert response["X-Starling-Source"] == "redis"
    assert response["X-Starling-Watermark"] == str(seq)
    page = response.json()
    assert [t["id"] for t in page["tweets"]] == named[:0:-1]
    assert page["tweets"][0]["text"] == "@ann three" and page["tweets"][0]["mentions"] == ["ann"]
    assert page["tweets"][1]["in_reply_to"] == {"id": mine, "author": "ann"}
    rest = client.get(f"/api/v1/mentions?count=2&max_id={page['next_max_id']}")
    assert rest["X-Starling-Source"] == "redis" and ids_of(rest) == named[:1]
    assert rest.json()["next_max_id"] is None
    # The home timeline is ann's own still: her post only.
    assert ids_of(client.get("/api/v1/timeline")) == [mine]
    # Another user's mentions timeline is not ann's: bob reads his own (cold, empty).
    assert ids_of(mentions(bob)) == []
    # ann's token revoked: refused by the Redis read, as for the home timeline.
    redis_client.set(keys.tokens(ann.pk), 2**40)
    with django_assert_num_queries(0):
        refused = client.get("/api/v1/mentions")
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]


def test_a_cold_mentions_timeline_is_read_from_the_database_and_regenerated(
    starling: StarlingConfig,
) -> None:
    ann, bob = users("ann", "bob")
    store = store_for(starling)
    generation = store.ensure_active_generation()
    named = [post(bob, f"@ann {i}") for i in range(3)]
    before = high()
    response = mentions(ann, "?count=2")
    assert response["X-Starling-Source"] == "fallback"
    assert ids_of(response) == named[:0:-1]
    # One reset, of -ann, asked for; the read stays cold until it is applied.
    (reset,) = outbox_after(before)
    assert reset == events.TimelineReset(-ann.pk, tuple(named), 0, before)
    assert store.redis.exists(keys.regeneration(generation, -ann.pk))
    assert not store.redis.exists(keys.regeneration(generation, ann.pk))
    again = mentions(ann)
    assert again["X-Starling-Source"] == "fallback" and len(outbox_after(before)) == 1
    # The home timeline's read is ann's own (the mentions' regeneration is -ann's).
    assert client_for(ann).get("/api/v1/timeline")["X-Starling-Source"] == "fallback"


def test_pages_past_the_mentions_timeline_go_on_into_the_database(
    settings, starling: StarlingConfig
) -> None:
    settings.STARLING = replace(starling, timeline_size=5, timeline_slack=1)  # keeps 6
    ann, bob = users("ann", "bob")
    start = high()
    named = [post(bob, f"@ann {i}") for i in range(10)]
    write_mentions_timeline(store_for(settings.STARLING), ann, start)
    newest = named[::-1]
    seen: list[int] = []
    sources: list[str] = []
    url = "/api/v1/mentions?count=4"
    while url:
        response = mentions(ann, url.removeprefix("/api/v1/mentions"))
        page = response.json()
        seen += ids_of(response)
        sources.append(response["X-Starling-Source"])
        url = page["next_max_id"] and f"/api/v1/mentions?count=4&max_id={page['next_max_id']}"
    assert seen == newest  # no gap at the cap, no repeat
    assert sources == ["redis", "redis+database", "database"]
    since = mentions(ann, f"?since_id={newest[3]}")
    assert since["X-Starling-Source"] == "redis" and ids_of(since) == newest[:3]


def test_the_schema_declares_the_mentions() -> None:
    schema = client_for().get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/mentions"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {
        "count",
        "max_id",
        "since_id",
        "min_seq",
    }
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Timeline"
    }
