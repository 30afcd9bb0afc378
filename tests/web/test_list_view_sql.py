"""The database's side of the lists' view (docs/design.md, List(L)): the
design's SQL, the paged selector (:func:`feed.view_sql.list_timeline_ids`)
and a list's refill (``services.timeline_reset(-L)``), against a
plain-Python model of the view on random tweets, reposts, replies, blocks,
mutes, suspensions and lists (some holding their owner, a user the owner
hides, a suspended user). Runs on PostgreSQL (the LATERAL query) and, with
``STARLING_TEST_DATABASE=sqlite``, on SQLite."""

from __future__ import annotations

import functools
import random
import re
from dataclasses import replace

import pytest
from django.db import connection

from fanout.config import StarlingConfig
from fanout.model import events, owners
from feed import services, view_sql
from feed.models import List, ListMember, OutboxEvent
from tests.web.test_view_sql import World, _design_sql, make_world, pages_follow

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


def list_entries(
    world: World,
    owner: int,
    members: set[int],
    excluded: frozenset[int] = frozenset(),
    *,
    aside: bool = False,
) -> list[tuple[int, int]]:
    """(entry, original) of every visible raw entry of a list of ``owner``'s
    with ``members``, leaving out the entries of ``excluded`` (pulled) members
    (with ``aside``, the replies to non-members too)."""
    hidden = world.hidden(owner)
    out = []
    for entry, (author, original) in world.tweets.items():
        if author not in members - excluded or not world.active[author]:
            continue
        if original and not world.active[world.tweets[original][0]]:
            continue
        original_author = world.tweets[original][0] if original else author
        to = world.answers(entry)
        if author != owner and ({author, original_author, to} & hidden):
            continue
        if not original and to and to not in members and not aside:
            continue  # a reply to a non-member
        out.append((entry, original or entry))
    return sorted(out)


def list_view(
    world: World,
    owner: int,
    members: set[int],
    excluded: frozenset[int] = frozenset(),
    *,
    aside: bool = False,
) -> list[int]:
    best: dict[int, int] = {}
    for entry, original in list_entries(world, owner, members, excluded, aside=aside):
        best[original] = max(best.get(original, 0), entry)
    return sorted(best.values(), reverse=True)


def make_lists(world: World, seed: int) -> dict[int, tuple[int, set[int]]]:
    """Lists of random members: list id -> (owner, members). The first list of
    each owner holds the owner and someone the owner hides, when there is."""
    rng = random.Random(seed + 2000)
    made: dict[int, tuple[int, set[int]]] = {}
    for owner in world.users[:4]:
        for n in (1, 2):
            members = set(rng.sample(world.users, rng.randint(2, len(world.users) - 1)))
            if n == 1:
                members.add(owner)
                members |= set(sorted(world.hidden(owner))[:1])
            made[owners.list_id(owner, n)] = (owner, members)
    List.objects.bulk_create(List(id=L, owner_id=o, name=f"l{L}") for L, (o, _) in made.items())
    ListMember.objects.bulk_create(
        ListMember(list_id=L, member_id=m) for L, (_, ms) in made.items() for m in sorted(ms)
    )
    return made


def list_sql() -> str:
    """docs/design.md's SQL of the lists' view, with ``entries`` and
    ``hidden`` from Home's query (which it names)."""
    home = re.search(r"(WITH entries AS \(.*?)\), audience AS", _design_sql("## The view"), re.S)
    assert home
    return f"{home.group(1)})\n{_design_sql('A user' + chr(39) + 's *lists*')}"


@pytest.mark.parametrize("seed", range(3))
def test_the_design_s_list_sql_is_the_list_view(seed: int) -> None:
    world = make_world(60 + seed)
    made = make_lists(world, seed)
    with connection.cursor() as cursor:
        cursor.execute(list_sql())
        rows = cursor.fetchall()
    got: dict[int, list[int]] = {L: [] for L in made}
    for list_id, entry in rows:
        got[int(list_id)].append(int(entry))
    expected = {L: list_view(world, o, ms) for L, (o, ms) in made.items()}
    assert got == expected
    assert sum(map(len, expected.values())) > 30


@pytest.mark.parametrize("seed", range(4))
def test_the_list_query_pages_through_the_list_view(seed: int) -> None:
    world = make_world(70 + seed)
    made = make_lists(world, seed)
    unfiltered = replace(world, blocks=set(), mutes=set())
    rng = random.Random(seed)
    hidden = asides = 0
    for list_id, (owner, members) in made.items():
        view = list_view(world, owner, members)
        hidden += len(list_view(unfiltered, owner, members)) - len(view)
        asides += len(list_view(world, owner, members, aside=True)) - len(view)
        assert view_sql.list_timeline_ids(list_id, limit=1000) == view
        assert view_sql.list_timeline_ids(list_id, limit=1000, aside=True) == list_view(
            world, owner, members, aside=True
        )
        pages_follow(functools.partial(view_sql.list_timeline_ids, list_id), view, rng)
        left_out = frozenset(rng.sample(sorted(members), 1))
        got = view_sql.list_timeline_ids(list_id, limit=1000, excluded=sorted(left_out))
        assert got == list_view(world, owner, members, left_out)
    assert hidden > 5 and asides > 5  # the filter and the reply rule had work to do
    # A list that is no more has no entries.
    assert view_sql.list_timeline_ids(owners.list_id(world.users[0], 99), limit=10) == []


@pytest.mark.parametrize("seed", range(3))
def test_a_list_refill_carries_every_raw_entry_above_the_horizon(
    seed: int, settings, starling: StarlingConfig
) -> None:
    world = make_world(80 + seed)
    made = make_lists(world, seed)
    settings.STARLING = replace(starling, timeline_size=6, timeline_slack=2)
    keep = 8
    for list_id, (owner, members) in made.items():
        seq = services.timeline_reset(owners.list_owner(list_id))
        row = OutboxEvent.objects.get(id=seq)
        reset = events.decode_record(
            row.topic, row.key.encode(), (row.value or "").encode(), row.id, row.join_key
        ).event
        assert isinstance(reset, events.TimelineReset)
        assert reset.owner_id == -list_id and reset.join_key == owner and not reset.drop
        view = list_view(world, owner, members, aside=True)
        horizon = view[keep - 1] if len(view) > keep else 0
        raw = [(e, o) for e, o in list_entries(world, owner, members, aside=True) if e >= horizon]
        assert reset.horizon == horizon
        assert reset.tweet_ids == tuple(e for e, _ in raw)
        assert reset.reposts == tuple(
            (e, o, 0 if world.tweets[e][0] == owner else world.tweets[o][0])
            for e, o in raw
            if e != o
        )
        # Every entry whose original answers someone else, the owner's own too.
        assert reset.answers == tuple((e, world.answers(e)) for e, _ in raw if world.answers(e))
        winners = {max(e for e, o2 in raw if o2 == o) for _, o in raw}
        assert sorted(winners, reverse=True) == view[:keep]
