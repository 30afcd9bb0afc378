"""``GET /api/v1/lists/{id}/timeline`` against real Redis and the database:
served from the list's timeline (owner -L) when the store has it, from the
database while it is cold (with its regeneration asked for), and on into
the database past what Redis keeps, with no gap; and the refill task with
a list that is no more."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fanout.config import StarlingConfig
from fanout.model import events, owners
from fanout.model.join import Mutation, Op
from fanout.store import keys
from fanout.store.timelines import TimelineStore, store_for
from feed import lists, services, tasks
from feed.errors import NotFound
from feed.models import List, User
from tests.support.clients import client_for
from tests.support.factories import UserFactory
from tests.web.test_mentions_timeline import reset_of
from tests.web.test_reposts_likes import high, outbox_after

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


def users(*names: str) -> list[User]:
    return [UserFactory(username=n) for n in names]


def post(user: User, text: str) -> int:
    return services.tweet_create(author=user, text=text).tweet.id


def new_list(owner: User, *members: User) -> int:
    made = lists.list_create(owner=owner, name="l").list
    for m in members:
        lists.member_add(owner=owner, list_id=made.pk, member=m)
    return made.pk


def read(user: User, list_id: int, query: str = "") -> Any:
    return client_for(user).get(f"/api/v1/lists/{list_id}/timeline{query}")


def ids_of(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [t["id"] for t in response.json()["tweets"]]


def write_list_timeline(store: TimelineStore, list_id: int, since: int) -> int:
    """The job's part, done here: the bodies of the posts written after
    ``since`` cached, and the list's timeline (owner -L) written with the
    database's refill. Returns the refill's seq."""
    generation = store.ensure_active_generation()
    written = {e.tweet_id: e for e in outbox_after(since) if isinstance(e, events.TweetPosted)}
    seq = services.timeline_reset(owners.list_owner(list_id))
    reset = reset_of(seq)
    store.apply(
        generation,
        {t: events.tweet_json(e) for t, e in written.items()},
        [Mutation(Op.ADD, (reset.owner_id,), reset.tweet_ids, reset.horizon, seq, reset.as_of)],
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


def test_a_warm_list_timeline_is_read_from_redis(
    starling: StarlingConfig, django_assert_num_queries: Any
) -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    start = high()
    L = new_list(ann, bob)
    shown = [post(bob, "one"), post(bob, "two"), post(bob, "three")]
    post(cat, "not a member")
    store = store_for(starling)
    seq = write_list_timeline(store, L, start)
    generation = store.active_generation()
    assert generation is not None
    stored = store.timeline(generation, -L)
    assert stored is not None and stored.ids == shown[::-1]
    client = client_for(ann)
    client.get(f"/api/v1/lists/{L}/timeline")  # the day's first read records ann's activity
    with django_assert_num_queries(0):  # one Redis call: the list's id names its owner
        response = client.get(f"/api/v1/lists/{L}/timeline?count=2&min_seq={seq}")
    assert response["X-Starling-Source"] == "redis"
    assert response["X-Starling-Watermark"] == str(seq)
    assert "X-Starling-Stale" not in response
    page = response.json()
    assert [t["id"] for t in page["tweets"]] == shown[:0:-1]
    assert page["tweets"][0]["text"] == "three" and page["tweets"][0]["author"] == "bob"
    rest = read(ann, L, f"?count=2&max_id={page['next_max_id']}")
    assert rest["X-Starling-Source"] == "redis" and ids_of(rest) == shown[:1]
    assert rest.json()["next_max_id"] is None
    # ann's home timeline is hers still.
    assert ids_of(client.get("/api/v1/timeline")) == []
    assert read(ann, L, "?count=0").status_code == 400


def test_a_cold_list_timeline_is_read_from_the_database_and_regenerated(
    starling: StarlingConfig,
) -> None:
    ann, bob = users("ann", "bob")
    store = store_for(starling)
    generation = store.ensure_active_generation()
    L = new_list(ann, bob)
    shown = [post(bob, f"p{i}") for i in range(3)]
    before = high()
    response = read(ann, L, "?count=2")
    assert response["X-Starling-Source"] == "fallback"
    assert ids_of(response) == shown[:0:-1]
    (reset,) = outbox_after(before)
    assert reset == events.TimelineReset(-L, tuple(shown), 0, before)
    assert store.redis.exists(keys.regeneration(generation, -L))
    assert not store.redis.exists(keys.regeneration(generation, ann.pk))
    again = read(ann, L)
    assert again["X-Starling-Source"] == "fallback" and len(outbox_after(before)) == 1


def test_pages_past_the_list_timeline_go_on_into_the_database(
    settings, starling: StarlingConfig
) -> None:
    settings.STARLING = replace(starling, timeline_size=5, timeline_slack=1)  # keeps 6
    ann, bob, cat = users("ann", "bob", "cat")
    start = high()
    L = new_list(ann, bob, cat)
    shown = [post(bob if i % 2 else cat, f"p{i}") for i in range(10)]
    write_list_timeline(store_for(settings.STARLING), L, start)
    newest = shown[::-1]
    seen: list[int] = []
    sources: list[str] = []
    query: str | None = "?count=4"
    while query:
        response = read(ann, L, query)
        page = response.json()
        seen += ids_of(response)
        sources.append(response["X-Starling-Source"])
        query = page["next_max_id"] and f"?count=4&max_id={page['next_max_id']}"
    assert seen == newest  # no gap at the cap, no repeat
    assert sources == ["redis", "redis+database", "database"]


def test_no_refill_of_a_list_that_is_no_more(starling: StarlingConfig) -> None:
    ann, bob = users("ann", "bob")
    L = new_list(ann, bob)
    post(bob, "p")
    lists.list_delete(owner=ann, list_id=L)
    with pytest.raises(NotFound):
        services.timeline_reset(-L)
    store = store_for(starling)
    store.request_refill(-L)
    before = high()
    assert tasks.refill_timelines() == 0
    assert outbox_after(before) == []
    assert not List.objects.exists()


def test_a_list_timeline_is_its_owner_s_alone_and_gone_with_the_list(
    starling: StarlingConfig, django_assert_num_queries: Any
) -> None:
    """Lists are private: another user's read of one, or of an id that names no
    list, is a 404 with no query (the id names its owner); a list deleted, its
    timeline dropped, reads cold and the database says it is no more."""
    ann, bob = users("ann", "bob")
    store_for(starling).ensure_active_generation()
    L = new_list(ann, bob)
    post(bob, "hi")
    for reader, listed in ((bob, L), (ann, ann.pk), (ann, owners.list_id(bob.pk, 1))):
        with django_assert_num_queries(0):
            refused = read(reader, listed)
        assert refused.status_code == 404, (reader, listed)
        assert refused.json()["error"]["code"] == "not_found"
    assert read(ann, L).status_code == 200
    lists.list_delete(owner=ann, list_id=L)
    gone = read(ann, L)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    assert read(ann, owners.list_id(ann.pk, 7)).status_code == 404  # never made
