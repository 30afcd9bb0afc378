"""Lists through the API: create, read, rename, delete, members, the limits,
privacy (404 for anyone but the owner), the exact outbox events of each
write, and blocks and mutes updating the lists' filter copies and the
memberships' ``muted`` flag. The view's SQL is test_list_view_sql.py's;
the timeline's reads are test_list_timeline.py's."""

from __future__ import annotations

from typing import Any

import pytest

from fanout.model import events, owners
from feed import lists, relations, selectors
from feed.models import List, ListMember, User
from tests.support.clients import client_for
from tests.support.factories import UserFactory
from tests.web.test_reposts_likes import high, outbox_after

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


def users(*names: str) -> list[User]:
    return [UserFactory(username=n) for n in names]


def make(user: User, name: str = "friends", **extra: Any) -> Any:
    return client_for(user).post("/api/v1/lists", {"name": name, **extra}, format="json")


def add(user: User, list_id: int, username: str) -> Any:
    return client_for(user).post(
        f"/api/v1/lists/{list_id}/members", {"username": username}, format="json"
    )


def test_a_list_is_made_numbered_read_renamed_and_listed() -> None:
    (ann,) = users("ann")
    before = high()
    response = make(ann, "  news ", description="what I read")
    assert response.status_code == 201, response.content
    body = response.json()
    first = owners.list_id(ann.pk, 1)
    assert body["id"] == first and body["name"] == "news" and body["members_count"] == 0
    assert body["description"] == "what I read" and body["seq"] == before
    assert outbox_after(before) == []  # ann hides no one: no filter copy
    second = make(ann, "two").json()["id"]
    assert second == owners.list_id(ann.pk, 2)
    client = client_for(ann)
    assert client.delete(f"/api/v1/lists/{first}").status_code == 200
    # Numbers are never reused.
    assert make(ann, "three").json()["id"] == owners.list_id(ann.pk, 3)
    page = client.get("/api/v1/lists?count=1").json()
    assert [x["id"] for x in page["lists"]] == [owners.list_id(ann.pk, 3)]
    rest = client.get(f"/api/v1/lists?count=1&cursor={page['next_cursor']}").json()
    assert [x["id"] for x in rest["lists"]] == [second] and rest["next_cursor"] is None
    renamed = client.patch(f"/api/v1/lists/{second}", {"name": "deux"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "deux"
    assert renamed.json()["description"] == ""
    assert client.get(f"/api/v1/lists/{second}").json()["name"] == "deux"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "a\tb"}, "name"),
        ({"name": 7}, "name"),
        ({}, "name"),
        ({"name": "ok", "description": "d" * 501}, "description"),
    ],
)
def test_bad_names_and_descriptions_are_400(body: dict[str, Any], field: str) -> None:
    (ann,) = users("ann")
    response = client_for(ann).post("/api/v1/lists", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert not List.objects.exists()


def test_lists_are_private() -> None:
    ann, bob = users("ann", "bob")
    mine = make(ann).json()["id"]
    other = client_for(bob)
    for response in (
        other.get(f"/api/v1/lists/{mine}"),
        other.patch(f"/api/v1/lists/{mine}", {"name": "x"}, format="json"),
        other.delete(f"/api/v1/lists/{mine}"),
        add(bob, mine, "bob"),
        other.get(f"/api/v1/lists/{mine}/members"),
        other.delete(f"/api/v1/lists/{mine}/members/ann"),
        other.get(f"/api/v1/lists/{mine}/timeline"),
        other.get(f"/api/v1/lists/{mine + 1}"),  # no such list either
        other.get("/api/v1/lists/5"),  # not a list id
    ):
        assert response.status_code == 404, response.content
        assert response.json()["error"]["code"] == "not_found"
    assert other.get("/api/v1/lists").json()["lists"] == []
    assert client_for().get(f"/api/v1/lists/{mine}").status_code == 401
    assert List.objects.get(pk=mine).name == "friends"


def test_members_are_added_once_removed_idempotently_and_paged() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    L = make(ann).json()["id"]
    before = high()
    first = add(ann, L, "BOB")
    assert first.status_code == 201 and first.json()["seq"] > before
    again = add(ann, L, "bob")
    assert again.status_code == 200 and again.json()["seq"] == first.json()["seq"]
    assert add(ann, L, "ann").status_code == 201  # oneself too
    assert add(ann, L, "cat").status_code == 201
    assert add(ann, L, "nobody").status_code == 404
    assert List.objects.get(pk=L).members_count == 3
    client = client_for(ann)
    page = client.get(f"/api/v1/lists/{L}/members?count=2").json()
    assert [u["username"] for u in page["users"]] == ["cat", "ann"]
    rest = client.get(f"/api/v1/lists/{L}/members?count=2&cursor={page['next_cursor']}").json()
    assert [u["username"] for u in rest["users"]] == ["bob"] and rest["next_cursor"] is None
    gone = client.delete(f"/api/v1/lists/{L}/members/bob")
    assert gone.status_code == 200
    assert client.delete(f"/api/v1/lists/{L}/members/bob").json()["seq"] == gone.json()["seq"]
    assert client.delete(f"/api/v1/lists/{L}/members/nobody").status_code == 404
    assert List.objects.get(pk=L).members_count == 2
    assert outbox_after(before) == [
        events.Followed(-L, bob.pk),
        events.Followed(-L, ann.pk),
        events.Followed(-L, cat.pk),
        events.Unfollowed(-L, bob.pk),
    ]


def test_the_events_of_a_list_s_life() -> None:
    ann, bob, cat, dee = users("ann", "bob", "cat", "dee")
    relations.mute_create(muter=ann, muted=dee)
    relations.block_create(blocker=cat, blocked=ann)
    before = high()
    L = make(ann).json()["id"]
    # Its filter copy: ann's hidden set, as ann's own record.
    assert outbox_after(before) == [events.FiltersSet(-L, tuple(sorted((cat.pk, dee.pk))))]
    before = high()
    for name in ("bob", "cat", "dee"):  # a blocked and a muted user: in, hidden
        assert add(ann, L, name).status_code == 201
    assert client_for(ann).patch(f"/api/v1/lists/{L}", {"description": "d"}, format="json")
    assert outbox_after(before) == [
        events.Followed(-L, bob.pk, muted=False),
        events.Followed(-L, cat.pk, muted=True),
        events.Followed(-L, dee.pk, muted=True),
    ]
    before = high()
    deleted = client_for(ann).delete(f"/api/v1/lists/{L}")
    assert deleted.status_code == 200
    written = outbox_after(before)
    unfollows = [events.Unfollowed(-L, m) for m in sorted((bob.pk, cat.pk, dee.pk))]
    assert written[:3] == unfollows
    assert written[3:] == [
        events.FiltersSet(-L, ()),  # its copy emptied: a rebuild finds none
        events.TimelineReset(-L, (), 0, as_of=deleted.json()["seq"] - 1, drop=True),
    ]
    assert deleted.json()["seq"] == high()
    assert not List.objects.exists() and not ListMember.objects.exists()
    assert client_for(ann).get(f"/api/v1/lists/{L}").status_code == 404
    # An empty list's drop: as of the outbox's newest seq.
    before = high()
    empty = make(bob).json()["id"]
    client_for(bob).delete(f"/api/v1/lists/{empty}")
    assert outbox_after(before) == [events.TimelineReset(-empty, (), 0, as_of=before, drop=True)]


def test_the_limits_are_409(monkeypatch: pytest.MonkeyPatch) -> None:
    ann, _, _ = users("ann", "bob", "cat")
    monkeypatch.setattr(lists, "MAX_LISTS", 2)
    monkeypatch.setattr(lists, "MAX_MEMBERS", 1)
    L = make(ann).json()["id"]
    make(ann)
    third = make(ann)
    assert third.status_code == 409 and third.json()["error"]["code"] == "conflict"
    assert "2 lists" in third.json()["error"]["message"]
    assert add(ann, L, "bob").status_code == 201
    full = add(ann, L, "cat")
    assert full.status_code == 409 and "1 members" in full.json()["error"]["message"]
    assert add(ann, L, "bob").status_code == 200  # already in: no conflict
    client_for(ann).delete(f"/api/v1/lists/{L}/members/bob")
    assert add(ann, L, "cat").status_code == 201


def test_blocks_and_mutes_update_the_lists_filter_copies_and_memberships() -> None:
    ann, bob, cat = users("ann", "bob", "cat")
    La = make(ann, "a1").json()["id"]
    Lb = make(ann, "a2").json()["id"]
    Lbob = make(bob, "b1").json()["id"]
    add(ann, La, "bob")
    add(bob, Lbob, "ann")
    add(bob, Lbob, "cat")
    before = high()
    relations.block_create(blocker=ann, blocked=bob)
    assert outbox_after(before) == [
        events.FiltersSet(ann.pk, (bob.pk,)),
        events.FiltersSet(-La, (bob.pk,)),
        events.FiltersSet(-Lb, (bob.pk,)),
        events.Followed(-La, bob.pk, muted=True),
        events.FiltersSet(bob.pk, (ann.pk,)),
        events.FiltersSet(-Lbob, (ann.pk,)),
        events.Followed(-Lbob, ann.pk, muted=True),
    ]
    # The memberships stay: a block hides them.
    assert ListMember.objects.filter(list_id=La, member_id=bob.pk).exists()
    before = high()
    relations.mute_create(muter=ann, muted=cat)  # cat is in none of ann's lists
    assert outbox_after(before) == [
        events.FiltersSet(ann.pk, tuple(sorted((bob.pk, cat.pk)))),
        events.FiltersSet(-La, tuple(sorted((bob.pk, cat.pk)))),
        events.FiltersSet(-Lb, tuple(sorted((bob.pk, cat.pk)))),
    ]
    before = high()
    relations.block_delete(blocker=ann, blocked=bob)
    assert outbox_after(before) == [
        events.FiltersSet(ann.pk, (cat.pk,)),
        events.FiltersSet(-La, (cat.pk,)),
        events.FiltersSet(-Lb, (cat.pk,)),
        events.Followed(-La, bob.pk, muted=False),
        events.FiltersSet(bob.pk, ()),
        events.FiltersSet(-Lbob, ()),
        events.Followed(-Lbob, ann.pk, muted=False),
    ]
    add(ann, Lb, "cat")
    before = high()
    relations.mute_delete(muter=ann, muted=cat)
    assert outbox_after(before) == [
        events.FiltersSet(ann.pk, ()),
        events.FiltersSet(-La, ()),
        events.FiltersSet(-Lb, ()),
        events.Followed(-Lb, cat.pk, muted=False),
    ]
    # A member added while hidden is added muted.
    relations.mute_create(muter=ann, muted=cat)
    before = high()
    add(ann, La, "cat")
    assert outbox_after(before) == [events.Followed(-La, cat.pk, muted=True)]


def test_the_idle_sweep_names_the_idle_users_lists() -> None:
    from datetime import timedelta

    from django.utils import timezone

    ann, bob, cat = users("ann", "bob", "cat")
    La, La2 = make(ann).json()["id"], make(ann).json()["id"]
    make(cat)
    old = timezone.now() - timedelta(days=60)
    User.objects.filter(pk__in=(ann.pk, bob.pk)).update(last_active=old)
    batches = list(selectors.idle_batches(timezone.now() - timedelta(days=30)))
    assert [(sorted(u), ls) for u, ls in batches] == [
        (sorted((ann.pk, bob.pk)), tuple(sorted((-La, -La2))))
    ]


def test_the_schema_declares_the_lists() -> None:
    schema = client_for().get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert set(paths["/api/v1/lists"]) == {"get", "post"}
    assert set(paths["/api/v1/lists/{list_id}"]) == {"get", "patch", "delete"}
    assert set(paths["/api/v1/lists/{list_id}/members"]) == {"get", "post"}
    assert set(paths["/api/v1/lists/{list_id}/members/{username}"]) == {"delete"}
    timeline = paths["/api/v1/lists/{list_id}/timeline"]["get"]
    assert {p["name"] for p in timeline["parameters"]} == {
        "list_id",
        "count",
        "max_id",
        "since_id",
        "min_seq",
    }
    assert timeline["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Timeline"
    }
    assert "409" in paths["/api/v1/lists"]["post"]["responses"]
    assert "429" in paths["/api/v1/lists/{list_id}/members"]["post"]["responses"]
