"""The database's side of the view with reposts (docs/design.md, "The view"):
the deep-page SQL (:func:`feed.view_sql.home_timeline_ids`), the ORM oracle
and the refills' contents, against a plain-Python computation of the view on
random tweets, reposts, follows (some with reposts off), blocks, mutes and
suspensions; and the mentions view (docs/design.md's SQL and
:func:`feed.view_sql.mentions_timeline_ids`) on the same tweets, with
mentions and replies whose parent is deleted. Runs on PostgreSQL (the
LATERAL query) and, with ``STARLING_TEST_DATABASE=sqlite``, on SQLite."""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from django.db import connection

from fanout.config import StarlingConfig
from fanout.model import events, ids
from feed import selectors, services, view_sql
from feed.models import Block, Follow, Mention, Mute, OutboxEvent, Tweet, User
from tests.support.factories import UserFactory
from tests.support.oracle import ORACLE_SQL

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("starling")]


@dataclass
class World:
    users: list[int]
    active: dict[int, bool]
    follows: set[tuple[int, int]]
    #: entry id -> (author, original or 0)
    tweets: dict[int, tuple[int, int]]
    blocks: set[tuple[int, int]] = field(default_factory=set)
    mutes: set[tuple[int, int]] = field(default_factory=set)
    #: Follows whose follower does not want the followee's reposts.
    no_reposts: set[tuple[int, int]] = field(default_factory=set)
    #: Posts that answer another: post -> the answered post's author.
    replies: dict[int, int] = field(default_factory=dict)
    #: Posts that mention users: post -> the users it names.
    mentions: dict[int, set[int]] = field(default_factory=dict)

    def answers(self, entry: int) -> int:
        """The user the entry's original answers, if not the original's author."""
        original = self.tweets[entry][1]
        post = original or entry
        to = self.replies.get(post, 0)
        return to if to != self.tweets[post][0] else 0

    def hidden(self, owner: int) -> set[int]:
        return (
            {b for a, b in self.blocks if a == owner}
            | {a for a, b in self.blocks if b == owner}
            | {m for a, m in self.mutes if a == owner}
        )

    def entries(
        self, owner: int, excluded: frozenset[int] = frozenset(), *, aside: bool = False
    ) -> list[tuple[int, int]]:
        """(entry, original) of every visible raw entry of owner's home timeline
        (with ``aside``, the replies to users the owner does not follow too)."""
        hidden = self.hidden(owner)
        followed = {g for f, g in self.follows if f == owner}
        actors = {owner} | {g for f, g in self.follows if f == owner and g not in hidden}
        actors = {a for a in actors - excluded if self.active[a]}
        out = []
        for entry, (author, original) in self.tweets.items():
            if author not in actors:
                continue
            if original and not self.active[self.tweets[original][0]]:
                continue
            if original and (owner, author) in self.no_reposts:
                continue
            original_author = self.tweets[original][0] if original else author
            to = self.answers(entry)
            if author != owner and (original_author in hidden or to in hidden):
                continue
            answers_a_stranger = to and owner not in (author, to) and to not in followed
            if answers_a_stranger and not original and not aside:
                continue  # a reply to someone the owner does not follow
            out.append((entry, original or entry))
        return sorted(out)

    def mentions_view(self, owner: int) -> list[int]:
        """Owner's mentions: the posts by active others that mention the owner
        or answer one of the owner's posts (deleted or not), but those whose
        author the owner hides; newest first."""
        hidden = self.hidden(owner)
        return sorted(
            (
                post
                for post, (author, original) in self.tweets.items()
                if not original
                and author != owner
                and self.active[author]
                and author not in hidden
                and (owner in self.mentions.get(post, ()) or self.replies.get(post) == owner)
            ),
            reverse=True,
        )

    def view(
        self, owner: int, excluded: frozenset[int] = frozenset(), *, aside: bool = False
    ) -> list[int]:
        """Per original the greatest entry, newest first."""
        best: dict[int, int] = {}
        for entry, original in self.entries(owner, excluded, aside=aside):
            best[original] = max(best.get(original, 0), entry)
        return sorted(best.values(), reverse=True)


def make_world(
    seed: int, *, users: int = 7, posts: int = 60, reposts: int = 50, replies: float = 0.4
) -> World:
    rng = random.Random(seed)
    people = [UserFactory(username=f"u{seed}x{i}").pk for i in range(users)]
    pairs = [(f, g) for f in people for g in people if f != g]
    blocks = {p for p in pairs if rng.random() < 0.06}
    mutes = {p for p in pairs if rng.random() < 0.08}
    # No follow stands across a block (blocking removes them, both ways).
    follows = {
        (f, g)
        for f, g in pairs
        if rng.random() < 0.45 and (f, g) not in blocks and (g, f) not in blocks
    }
    no_reposts = {p for p in sorted(follows) if rng.random() < 0.2}
    Follow.objects.bulk_create(
        Follow(follower_id=f, followee_id=g, reposts=(f, g) not in no_reposts) for f, g in follows
    )
    Block.objects.bulk_create(Block(blocker_id=a, blocked_id=b) for a, b in blocks)
    Mute.objects.bulk_create(Mute(muter_id=a, muted_id=b) for a, b in mutes)
    ms = 1_800_000_000_000
    tweets: dict[int, tuple[int, int]] = {}
    answered: dict[int, int] = {}
    rows = []
    for n in range(posts + reposts):
        ms += rng.randint(1, 5)
        tweet_id = ids.compose(ms, rng.randint(0, 3), n % 100)
        author = rng.choice(people)
        originals = [t for t, (_, o) in tweets.items() if not o]
        if n >= 10 and rng.random() < reposts / (posts + reposts) and originals:
            target = rng.choice(list(tweets))
            original = tweets[target][1] or target  # a repost of a repost: of its original
            if any(a == author and o == original for a, o in tweets.values()):
                continue  # once per user and original
            tweets[tweet_id] = (author, original)
            rows.append(
                Tweet(
                    id=tweet_id,
                    author_id=author,
                    text="",
                    repost_of_id=original,
                    created_at=ids.created_at(tweet_id),
                )
            )
        else:
            tweets[tweet_id] = (author, 0)
            row = Tweet(
                id=tweet_id, author_id=author, text=f"t{n}", created_at=ids.created_at(tweet_id)
            )
            if originals and rng.random() < replies:  # an answer to an older post
                parent = rng.choice(originals)
                row.in_reply_to, row.reply_to_id, row.reply_to_name = parent, tweets[parent][0], "x"
                answered[tweet_id] = tweets[parent][0]
            rows.append(row)
    Tweet.objects.bulk_create(rows)
    suspended = set(rng.sample(people, 1))
    User.objects.filter(pk__in=suspended).update(is_active=False)
    active = {u: u not in suspended for u in people}
    world = World(people, active, follows, tweets, blocks, mutes, no_reposts, answered)
    _mention_and_delete(world, random.Random(seed + 1000))  # the draws above stay as they were
    return world


def _mention_and_delete(world: World, rng: random.Random) -> None:
    """Some posts mention users (their author, at times), and some answered
    posts that nobody reposted are deleted (their replies stay, answering
    the same user)."""
    rows = []
    for post, (_, original) in world.tweets.items():
        if not original and rng.random() < 0.35:
            named = set(rng.sample(world.users, rng.randint(1, 2)))
            world.mentions[post] = named
            rows += [Mention(tweet_id=post, user_id=u, name=f"n{u}") for u in named]
    Mention.objects.bulk_create(rows)
    reposted = {o for _, o in world.tweets.values() if o}
    answered = sorted(
        {
            p
            for p in Tweet.objects.filter(in_reply_to__isnull=False).values_list(
                "in_reply_to", flat=True
            )
        }
        - reposted
    )
    gone = rng.sample(answered, min(3, len(answered)))
    Tweet.objects.filter(id__in=gone).delete()
    for post in gone:
        del world.tweets[post]
        world.replies.pop(post, None)
        world.mentions.pop(post, None)


def pages_follow(read: Callable[..., list[int]], view: list[int], rng: random.Random) -> None:
    """``read(limit=, max_id=, since_id=)`` pages through ``view`` (newest
    first): by max_id (the API's next_max_id) every entry once, in order; and
    under any bounds the rule is the whole view's, not the page's."""
    for limit in (1, 3, 7):
        paged: list[int] = []
        cursor = None
        while True:
            page = read(limit=limit, max_id=cursor)
            paged += page
            if len(page) < limit:
                break
            cursor = page[-1] - 1
        assert paged == view, limit
    for _ in range(5):
        high = rng.choice(view) if view else ids.MAX_ID
        low = rng.choice(view) if view else 0
        assert read(limit=4, max_id=high, since_id=low) == [e for e in view if low < e <= high][:4]


@pytest.mark.parametrize("seed", range(4))
def test_deep_pages_follow_the_view_over_the_whole_timeline(seed: int) -> None:
    world = make_world(seed)
    unfiltered = replace(world, blocks=set(), mutes=set(), no_reposts=set())
    rng = random.Random(seed)
    hidden = filtered = 0
    for owner in world.users:
        view = world.view(owner)
        hidden += len(world.entries(owner)) - len(view)
        filtered += len(unfiltered.entries(owner)) - len(world.entries(owner))
        assert view_sql.home_timeline_ids(owner, limit=1000) == view
        pages_follow(functools.partial(view_sql.home_timeline_ids, owner), view, rng)
        # Followees left out (pulled authors): the rule among the others.
        followees = sorted(g for f, g in world.follows if f == owner)
        if followees:
            left_out = frozenset(rng.sample(followees, min(2, len(followees))))
            got = view_sql.home_timeline_ids(owner, limit=1000, excluded=sorted(left_out))
            assert got == world.view(owner, left_out)
    assert hidden > 10  # the rule had entries to hide
    assert filtered > 10  # and blocks, mutes and reposts turned off too


def test_the_oracle_is_the_view_capped() -> None:
    world = make_world(11)
    oracle = selectors.home_timeline_oracle(world.users, 9)
    assert oracle == {u: world.view(u)[:9] for u in world.users}


@pytest.mark.parametrize("seed", range(3))
def test_the_design_s_sql_is_the_view(seed: int) -> None:
    """docs/design.md's SQL of the view (the e2e tests' oracle) against the
    plain-Python view."""
    world = make_world(30 + seed)
    with connection.cursor() as cursor:
        cursor.execute(ORACLE_SQL)
        rows = cursor.fetchall()
    got: dict[int, list[int]] = {u: [] for u in world.users}
    for owner, entry in rows:
        if owner in got:
            got[owner].append(int(entry))
    assert {u: sorted(v, reverse=True) for u, v in got.items()} == {
        u: world.view(u) for u in world.users
    }


@pytest.mark.parametrize("seed", range(3))
def test_a_refill_carries_every_raw_entry_above_the_horizon_of_the_newest_winners(
    seed: int, settings, starling: StarlingConfig
) -> None:
    world = make_world(20 + seed)
    settings.STARLING = replace(starling, timeline_size=6, timeline_slack=2)
    keep = 8
    for owner in world.users:
        seq = services.timeline_reset(owner)
        row = OutboxEvent.objects.get(id=seq)
        reset = events.decode_record(
            row.topic, row.key.encode(), (row.value or "").encode(), row.id, row.join_key
        ).event
        assert isinstance(reset, events.TimelineReset)
        # The replies kept aside (to users the owner does not follow) count.
        view = world.view(owner, aside=True)
        horizon = view[keep - 1] if len(view) > keep else 0
        raw = [(e, o) for e, o in world.entries(owner, aside=True) if e >= horizon]
        assert reset.horizon == horizon
        assert reset.tweet_ids == tuple(e for e, _ in raw)
        assert reset.reposts == tuple((e, o, 0) for e, o in raw if e != o)  # never screened
        # As the join names them to an owner: none of its own entries' (they show).
        answers = tuple(
            (e, world.answers(e))
            for e, _ in raw
            if world.tweets[e][0] != owner
            and world.answers(e) not in (0, owner, world.tweets[e][0])
        )
        assert reset.answers == answers
        # The winners at or above the horizon are exactly the newest keep of the view.
        winners = {max(e for e, o2 in raw if o2 == o) for _, o in raw}
        assert sorted(winners, reverse=True) == view[:keep]


def _design_sql(heading: str) -> str:
    """The first SQL block of docs/design.md after ``heading``'s text."""
    text = (Path(__file__).parents[2] / "docs" / "design.md").read_text()
    found = re.search(re.escape(heading) + r".*?```sql\n(.*?)```", text, re.S)
    assert found, heading
    return found.group(1)


def mentions_sql() -> str:
    """docs/design.md's SQL of the mentions view, with its ``hidden`` from
    Home's query (which it names)."""
    hidden = re.search(r"(hidden AS \(.*?)\), audience AS", _design_sql("## The view"), re.S)
    assert hidden
    mentions = _design_sql("each user's *mentions*")
    return f"WITH {hidden.group(1)})\n{mentions}"


@pytest.mark.parametrize("seed", range(3))
def test_the_design_s_mentions_sql_is_the_mentions_view(seed: int) -> None:
    world = make_world(40 + seed)
    with connection.cursor() as cursor:
        cursor.execute(mentions_sql())
        rows = cursor.fetchall()
    got: dict[int, list[int]] = {u: [] for u in world.users}
    for owner, entry in rows:
        got[owner].append(int(entry))
    expected = {u: world.mentions_view(u) for u in world.users}
    assert got == expected
    assert sum(map(len, expected.values())) > 20


@pytest.mark.parametrize("seed", range(3))
def test_the_mentions_query_pages_through_the_mentions_view(seed: int) -> None:
    world = make_world(50 + seed)
    rng = random.Random(seed)
    for owner in world.users:
        view = world.mentions_view(owner)
        assert view_sql.mentions_timeline_ids(owner, limit=1000) == view
        pages_follow(functools.partial(view_sql.mentions_timeline_ids, owner), view, rng)
