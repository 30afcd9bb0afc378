"""The oracle of the end-to-end tests: a random workload through the HTTP API,
and every home timeline in Redis compared with the view computed by SQL over
the database."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import requests

from fanout.config import DEFAULT_ACTIVE_DAYS
from fanout.model import events
from fanout.store import keys
from fanout.store.ops import IDLE
from fanout.store.reads import Timeline
from spark.source.datasource import read_range
from spark.source.kafka_io import EndOffsetReader
from spark.source.offsets import ranges
from tests.support.stack import Stack

#: The view being maintained, as docs/design.md writes it: the entries (posts
#: and reposts of visible tweets by active users) of each user's followees and
#: their own, leaving out what the user hides (blocks both ways and mutes, of
#: the actor, the original's author or the user the original answers; the
#: reposts of followees with reposts off) and the replies to users the user
#: does not follow, one per original (the newest). Rows (owner, entry).
_VIEW_CTES = """
    WITH entries AS (
      SELECT t.id AS entry_id, t.author_id AS actor_id,
             COALESCE(t.repost_of_id, t.id) AS original_id,
             COALESCE(o.author_id, t.author_id) AS original_author_id,
             COALESCE(o.reply_to_id, t.reply_to_id) AS original_reply_to_id,
             t.repost_of_id IS NOT NULL AS is_repost,
             t.reply_to_id IS NOT NULL AND t.reply_to_id <> t.author_id AS answers_another
      FROM feed_tweet t
      JOIN feed_user a ON a.id = t.author_id AND a.is_active
      LEFT JOIN feed_tweet o ON o.id = t.repost_of_id
      LEFT JOIN feed_user oa ON oa.id = o.author_id
      WHERE t.repost_of_id IS NULL OR oa.is_active
    ), hidden AS (
      SELECT blocker_id AS owner_id, blocked_id AS user_id FROM feed_block
      UNION SELECT blocked_id, blocker_id FROM feed_block
      UNION SELECT muter_id, muted_id FROM feed_mute
    )
"""
ORACLE_SQL = (
    _VIEW_CTES  # noqa: S608 - constants
    + """    , audience AS (
      SELECT follower_id AS owner_id, followee_id AS actor_id, reposts FROM feed_follow
      UNION ALL SELECT id, id, TRUE FROM feed_user
    )
    SELECT au.owner_id, MAX(e.entry_id) AS entry_id
    FROM entries e JOIN audience au ON au.actor_id = e.actor_id
    WHERE (NOT e.is_repost OR au.reposts)
      AND (NOT e.answers_another OR e.actor_id = au.owner_id
           OR e.original_reply_to_id = au.owner_id
           OR EXISTS (SELECT 1 FROM feed_follow ff WHERE ff.follower_id = au.owner_id
                        AND ff.followee_id = e.original_reply_to_id))
      AND (e.actor_id = au.owner_id OR NOT EXISTS (
            SELECT 1 FROM hidden h WHERE h.owner_id = au.owner_id
              AND h.user_id IN (e.actor_id, e.original_author_id, e.original_reply_to_id)))
    GROUP BY au.owner_id, e.original_id
"""
)
#: The mentions view, as docs/design.md writes it: each user's visible posts by
#: others that name them or answer one of their posts, leaving out the
#: authors they hide. Rows (owner, entry), newest first per owner.
MENTIONS_SQL = """
    WITH hidden AS (
      SELECT blocker_id AS owner_id, blocked_id AS user_id FROM feed_block
      UNION SELECT blocked_id, blocker_id FROM feed_block
      UNION SELECT muter_id, muted_id FROM feed_mute
    )
    SELECT m.user_id AS owner_id, t.id AS entry_id
    FROM (SELECT tweet_id, user_id FROM feed_mention
          UNION SELECT id, reply_to_id FROM feed_tweet WHERE reply_to_id IS NOT NULL) m
    JOIN feed_tweet t ON t.id = m.tweet_id
    JOIN feed_user a ON a.id = t.author_id AND a.is_active
    WHERE t.author_id <> m.user_id
      AND NOT EXISTS (SELECT 1 FROM hidden h
                      WHERE h.owner_id = m.user_id AND h.user_id = t.author_id)
    ORDER BY m.user_id, t.id DESC
"""
#: Each list's view, as docs/design.md writes it (``entries`` and ``hidden`` as
#: in Home's): its members' entries; a post that answers someone else only if
#: they are a member; every repost; leaving out what the list's owner hides
#: but the owner's own entries; one per original (the newest). Rows (owner
#: -L, entry).
LIST_SQL = (
    _VIEW_CTES  # noqa: S608 - constants
    + """    SELECT -l.id AS owner_id, MAX(e.entry_id) AS entry_id
    FROM feed_list l
    JOIN feed_listmember lm ON lm.list_id = l.id
    JOIN entries e ON e.actor_id = lm.member_id
    WHERE (NOT e.answers_another
           OR EXISTS (SELECT 1 FROM feed_listmember rm WHERE rm.list_id = l.id
                        AND rm.member_id = e.original_reply_to_id))
      AND (e.actor_id = l.owner_id OR NOT EXISTS (
            SELECT 1 FROM hidden h WHERE h.owner_id = l.owner_id
              AND h.user_id IN (e.actor_id, e.original_author_id, e.original_reply_to_id)))
    GROUP BY l.id, e.original_id
"""
)
#: Every tweet's counts (docs/design.md): its likes, reposts and direct
#: replies by active users.
COUNTS_SQL = """
    SELECT o.id,
           (SELECT COUNT(*) FROM feed_like l JOIN feed_user u ON u.id = l.user_id
            WHERE l.tweet_id = o.id AND u.is_active),
           (SELECT COUNT(*) FROM feed_tweet r JOIN feed_user u ON u.id = r.author_id
            WHERE r.repost_of_id = o.id AND u.is_active),
           (SELECT COUNT(*) FROM feed_tweet r JOIN feed_user u ON u.id = r.author_id
            WHERE r.in_reply_to = o.id AND u.is_active)
    FROM feed_tweet o WHERE o.repost_of_id IS NULL
"""
PASSWORD = "pw-" + "x" * 12


@dataclass
class Workload:
    """Registers users, then mixes tweets, deletes, follows and unfollows at
    random, (that share of ``engagements`` of the writes) reposts, undone
    reposts, likes and unlikes, (that share of ``relations``) blocks,
    unblocks, mutes, unmutes and follows' reposts turned off or on, (that
    share of ``replies``) replies to a tweet, a reply or a repost, and (that
    share of ``suspensions``) a moderator suspends or reinstates one of them.
    Nothing it asks is refused: it follows, reposts, likes and replies only
    where no block stands."""

    stack: Stack
    rnd: random.Random
    prefix: str
    http: requests.Session = field(default_factory=requests.Session)
    users: dict[str, str] = field(default_factory=dict)  # username -> token
    live: dict[int, str] = field(default_factory=dict)  # tweet id -> author
    follows: set[tuple[str, str]] = field(default_factory=set)
    max_seq: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    suspensions: float = 0.0
    suspended: set[str] = field(default_factory=set)
    moderated: dict[str, int] = field(default_factory=dict)  # suspend / reinstate -> how many
    #: Users the moderator leaves alone (a test reads as them later).
    protected: set[str] = field(default_factory=set)
    engagements: float = 0.0
    reposts: dict[int, tuple[str, int]] = field(default_factory=dict)  # id -> (user, original)
    likes: set[tuple[str, int]] = field(default_factory=set)
    relations: float = 0.0
    blocks: set[tuple[str, str]] = field(default_factory=set)  # (blocker, blocked)
    mutes: set[tuple[str, str]] = field(default_factory=set)  # (muter, muted)
    quiet: set[tuple[str, str]] = field(default_factory=set)  # follows with reposts off
    replies: float = 0.0
    lists: float = 0.0
    owned: dict[int, tuple[str, set[str]]] = field(default_factory=dict)  # list -> owner, members
    deleted_lists: set[int] = field(default_factory=set)
    #: Whom posts name, drawn apart: the rest of a seed's workload stays what it was.
    naming: random.Random = field(default_factory=lambda: random.Random(11))

    def blocked(self, a: str, b: str) -> bool:
        return (a, b) in self.blocks or (b, a) in self.blocks

    def call(
        self, method: str, path: str, user: str | None = None, body: dict | None = None
    ) -> dict:
        headers = {"Authorization": f"Bearer {self.users[user]}"} if user else {}
        response = self.http.request(
            method, f"{self.stack.base}/api/v1{path}", json=body, headers=headers, timeout=30
        )
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        data = response.json() if response.content else {}
        seq = data.get("seq") or int(response.headers.get("X-Starling-Seq", 0))
        self.max_seq = max(self.max_seq, seq)
        return data

    def register(self, n: int) -> None:
        for i in range(n):
            name = f"{self.prefix}{i}"
            self.users[name] = self.call(
                "POST", "/auth/register", body={"username": name, "password": PASSWORD}
            )["token"]

    def moderate(self, name: str) -> None:
        """A moderator suspends ``name``, or reinstates them (who then signs in
        again: a suspension voids every token)."""
        moderator = f"{self.prefix}mod"
        if moderator not in self.users:
            secret = self.stack.logs / f"{moderator}.password"
            secret.write_text(PASSWORD)
            self.stack.manage("createmoderator", moderator, "--password-file", str(secret))
            body = {"username": moderator, "password": PASSWORD}
            self.users[moderator] = self.call("POST", "/auth/token", body=body)["token"]
        if name in self.suspended:
            self.call("DELETE", f"/users/{name}/suspension", moderator)
            self.suspended.discard(name)
            # Tokens are timestamped to the second, and the suspension voided
            # those up to the second after it: sign in once that has passed.
            time.sleep(2 - time.time() % 1)
            body = {"username": name, "password": PASSWORD}
            self.users[name] = self.call("POST", "/auth/token", body=body)["token"]
            kind = "reinstate"
        else:
            self.call("POST", f"/users/{name}/suspension", moderator, {"reason": "test"})
            self.suspended.add(name)
            kind = "suspend"
        self.moderated[kind] = self.moderated.get(kind, 0) + 1

    def run(self, writes: int, on_write: Callable[[int], None] = lambda i: None) -> None:
        names = sorted(n for n in self.users if n != f"{self.prefix}mod")
        # A few accounts are followed by many (power law), as on a real network.
        popularity = [1 / (rank + 1) for rank in range(len(names))]
        for i in range(writes):
            on_write(i)
            # (No draw without suspensions: the workloads of a seed stay what they were.)
            if self.suspensions and self.rnd.random() < self.suspensions:
                name = self.rnd.choices(names, popularity)[0]
                if name not in self.protected:
                    self.moderate(name)
                continue
            # A suspended user neither writes nor can be followed.
            active = [
                (n, w) for n, w in zip(names, popularity, strict=True) if n not in self.suspended
            ]
            roll = self.rnd.random()
            a = self.rnd.choice(active)[0]
            b = self.rnd.choices([n for n, _ in active], [w for _, w in active])[0]
            if self.engagements and self.rnd.random() < self.engagements:
                kind = self.engage(a)
                if kind:
                    self.counts[kind] = self.counts.get(kind, 0) + 1
                continue
            if self.relations and self.rnd.random() < self.relations:
                kind = self.relate(a, b)
                if kind:
                    self.counts[kind] = self.counts.get(kind, 0) + 1
                continue
            if self.lists and self.rnd.random() < self.lists:
                kind = self.list_step(a, b)
                if kind:
                    self.counts[kind] = self.counts.get(kind, 0) + 1
                continue
            if self.replies and self.rnd.random() < self.replies:
                if self.reply(a):
                    self.counts["reply"] = self.counts.get("reply", 0) + 1
                continue
            if roll < 0.45:
                text = " ".join(
                    self.rnd.choice(["hello", "world", "é", "🐦", "starling"]) for _ in range(5)
                )
                if self.replies and self.naming.random() < 0.3:  # names someone: their mentions
                    text += f" @{self.naming.choice(active)[0]}"
                self.live[self.call("POST", "/tweets", a, {"text": text})["id"]] = a
                kind = "tweet"
            elif roll < 0.55 and self.live:
                tweet_id = self.rnd.choice(sorted(self.live))
                if self.live[tweet_id] in self.suspended:
                    continue
                self.call("DELETE", f"/tweets/{tweet_id}", self.live.pop(tweet_id))
                # Its reposts and likes go with it.
                self.reposts = {r: v for r, v in self.reposts.items() if v[1] != tweet_id}
                self.likes = {(u, t) for u, t in self.likes if t != tweet_id}
                kind = "delete"
            elif roll < 0.85 and a != b:
                if self.blocked(a, b):
                    continue
                self.call("POST", f"/users/{b}/follow", a)
                self.follows.add((a, b))
                kind = "follow"
            elif self.follows:
                pair = self.rnd.choice(sorted(self.follows))
                if pair[0] in self.suspended:
                    continue
                self.follows.discard(pair)
                self.quiet.discard(pair)
                self.call("DELETE", f"/users/{pair[1]}/follow", pair[0])
                kind = "unfollow"
            else:
                continue
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def engage(self, user: str) -> str | None:
        """``user`` reposts a tweet (or a repost of it), undoes a repost, likes
        or unlikes; the kind of write made, None if none was."""
        roll = self.rnd.random()
        visible = sorted(t for t, a in self.live.items() if a not in self.suspended)
        mine = sorted(r for r, (u, _) in self.reposts.items() if u == user)
        if roll < 0.4 and visible:
            found = self._target(user, visible)
            if found is None:
                return None
            target, original = found
            made = self.call("POST", f"/tweets/{target}/repost", user)
            self.reposts[made["id"]] = (user, original)
            return "repost"
        if roll < 0.55 and mine:
            r = self.rnd.choice(mine)
            # By the repost's id or the original's: both undo it.
            which = r if self.rnd.random() < 0.5 else self.reposts[r][1]
            self.call("DELETE", f"/tweets/{which}/repost", user)
            del self.reposts[r]
            return "unrepost"
        if roll < 0.9 and visible:
            t = self.rnd.choice(visible)
            if self.blocked(user, self.live[t]):
                return None
            self.call("POST", f"/tweets/{t}/like", user)
            self.likes.add((user, t))
            return "like"
        liked = sorted(t for u, t in self.likes if u == user)
        if liked:
            t = self.rnd.choice(liked)
            self.call("DELETE", f"/tweets/{t}/like", user)
            self.likes.discard((user, t))
            return "unlike"
        return None

    def reply(self, user: str) -> bool:
        """``user`` answers a visible tweet (a post or a reply), or a repost of
        one (which answers its original); whether a reply was written."""
        visible = sorted(t for t, a in self.live.items() if a not in self.suspended)
        found = self._target(user, visible) if visible else None
        if found is None:
            return False
        body = {"text": "a reply", "in_reply_to": found[0]}
        self.live[self.call("POST", "/tweets", user, body)["id"]] = user
        return True

    def _target(self, user: str, visible: list[int]) -> tuple[int, int] | None:
        """One of the ``visible`` tweets or a repost, drawn at random, and its
        original, if ``user`` may repost it or answer it (None if not)."""
        target = self.rnd.choice(visible + sorted(self.reposts))
        original = self.reposts[target][1] if target in self.reposts else target
        if original not in self.live or self.live[original] in self.suspended:
            return None
        if target in self.reposts and self.reposts[target][0] in self.suspended:
            return None  # a suspended user's repost is not found
        if self.blocked(user, self.live[original]):
            return None
        return target, original

    def list_step(self, a: str, b: str) -> str | None:
        """``a`` makes a list (now and then: few lists, many members), or the
        owner of a list drawn at random adds ``b`` (or themselves) to it,
        removes a member (a suspended one too), or deletes it; the kind of
        write made, None if none was."""
        roll = self.rnd.random()
        mine = [x for x, (o, _) in self.owned.items() if o == a]
        if (roll < 0.12 and len(mine) < 3) or not self.owned:
            made = self.call("POST", "/lists", a, {"name": f"list {len(mine)}", "description": ""})
            self.owned[made["id"]] = (a, set())
            return "list"
        list_ = self.rnd.choice(sorted(self.owned))
        owner, members = self.owned[list_]
        if owner in self.suspended:
            return None
        if roll < 0.8:
            member = owner if self.rnd.random() < 0.2 else b
            if member in members or member in self.suspended:
                return None
            self.call("POST", f"/lists/{list_}/members", owner, {"username": member})
            members.add(member)
            return "member_add"
        if roll < 0.95:
            if not members:
                return None
            member = self.rnd.choice(sorted(members))
            self.call("DELETE", f"/lists/{list_}/members/{member}", owner)
            members.discard(member)
            return "member_remove"
        self.call("DELETE", f"/lists/{list_}", owner)
        del self.owned[list_]
        self.deleted_lists.add(list_)
        return "list_delete"

    def relate(self, a: str, b: str) -> str | None:
        """``a`` blocks ``b`` (which takes the follows both ways) or mutes them,
        someone undoes a block or a mute, or ``a`` turns a followee's reposts
        off or on; the kind of write made, None if none was."""
        roll = self.rnd.random()
        if roll < 0.45:
            table, path, kind = (
                (self.blocks, "block", "block") if roll < 0.2 else (self.mutes, "mute", "mute")
            )
            undo = self.rnd.random() < 0.4
            if undo:  # an active user's block or mute undone
                standing = sorted(p for p in table if not set(p) & self.suspended)
                if not standing:
                    return None
                a, b = self.rnd.choice(standing)
                self.call("DELETE", f"/users/{b}/{path}", a)
                table.discard((a, b))
                return "un" + kind
            if a == b or (a, b) in table:
                return None
            self.call("POST", f"/users/{b}/{path}", a)
            table.add((a, b))
            if kind == "block":
                for pair in ((a, b), (b, a)):
                    self.follows.discard(pair)
                    self.quiet.discard(pair)
            return kind
        followed = sorted(p for p in self.follows if p[0] == a and p[1] not in self.suspended)
        if not followed:
            return None
        pair = self.rnd.choice(followed)
        on = pair in self.quiet
        self.call("PATCH", f"/users/{pair[1]}/follow", a, {"reposts": on})
        (self.quiet.discard if on else self.quiet.add)(pair)
        return "reposts_on" if on else "reposts_off"


def check_against_oracle(stack: Stack, usernames: list[str]) -> dict[str, int]:
    """Once the job has caught up (every write and refill applied), every
    timeline is exactly the join's newest ``STARLING_TIMELINE_SIZE``. (A
    reader who hides some of a pulled author's reposts reads its list without
    them, and a timeline keeps the replies to users its owner does not follow
    aside, counted by the cap: what Redis shows may then stop short of the cap
    above its floor, the read going on into the database; it is then exactly
    the join's entries at or above the floor.)"""
    stack.settle()
    wanted = set(usernames)
    ids = {
        name: uid for name, uid in stack.sql("SELECT username, id FROM feed_user") if name in wanted
    }
    oracle: dict[int, list[int]] = {uid: [] for uid in ids.values()}
    for owner, tweet_id in stack.sql(ORACLE_SQL):
        if owner in oracle:
            oracle[owner].append(tweet_id)
    bodies = {
        tid: (author, text, original)
        for tid, author, text, original in stack.sql(
            "SELECT t.id, u.username, t.text, t.repost_of_id"
            " FROM feed_tweet t JOIN feed_user u ON u.id = t.author_id"
        )
    }
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    cap = stack.timeline_size
    stats = {"timelines": 0, "with_horizon": 0, "at_the_cap": 0, "entries": 0}
    for name, uid in ids.items():
        full = sorted(set(oracle[uid]), reverse=True)
        found = store.timeline(generation, uid)
        assert found is not None, f"{name} has no timeline"
        shown = found.ids
        assert len(shown) == len(set(shown)), f"{name}: duplicate entries"
        # Exact: the join's newest `cap`, whatever was trimmed, deleted or unfollowed.
        full, screened = _above_floor(stack, generation, uid, found, full, name)
        if screened:
            stats["screened"] = stats.get("screened", 0) + 1
        assert shown == full[:cap], f"{name}: timeline differs from the join"
        stats["timelines"] += 1
        stats["entries"] += len(shown)
        stats["with_horizon"] += found.horizon > 0
        stats["at_the_cap"] += len(full) > cap
        for tweet_id, body in zip(shown[:5], store.bodies(shown[:5]), strict=True):
            assert body is not None
            _, text, original = bodies[tweet_id]
            cached = json.loads(body)
            assert cached.get("text", "") == text and cached.get("repost_of") == original
    stats.update(check_mentions(stack, ids))
    stats.update(check_counts(stack))
    return stats


def check_mentions(stack: Stack, ids: dict[str, int]) -> dict[str, int]:
    """Every mentions timeline in Redis (owner -u) is exactly the mentions
    view's newest ``STARLING_TIMELINE_SIZE``, but those left idle (a
    tombstone: their reads go to the database until regenerated)."""
    view = _views(stack, MENTIONS_SQL)
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    cap = stack.timeline_size
    stats = {"mentions": 0, "mentions_entries": 0, "mentions_idle": 0}
    for name, uid in ids.items():
        full = view.get(uid, [])
        if _idle(stack, generation, -uid):
            stats["mentions_idle"] += 1
            continue
        found = store.timeline(generation, -uid)
        if found is None:
            assert not full, f"{name}: no mentions timeline"
            continue
        # Exact: no lists, no replies aside (a removal or a filter change that
        # left it short was refilled before the job caught up).
        assert found.ids == full[:cap], f"{name}: mentions differ from the view"
        stats["mentions"] += 1
        stats["mentions_entries"] += len(found.ids)
    return stats


def check_lists(stack: Stack, deleted: set[int]) -> dict[str, int]:
    """Every list's timeline in Redis (owner -L) is exactly the list view's
    newest ``STARLING_TIMELINE_SIZE`` (above its floor when the list keeps
    replies aside or screens pulled lists, as a home timeline), but those of
    idle owners (a tombstone); a deleted list leaves no key."""
    view = _views(stack, LIST_SQL)
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    cap = stack.timeline_size
    stats = {"lists": 0, "lists_entries": 0, "lists_idle": 0, "lists_at_the_cap": 0}
    for (list_,) in stack.sql("SELECT id FROM feed_list"):
        owner = -list_
        full = view.get(owner, [])
        if _idle(stack, generation, owner):
            stats["lists_idle"] += 1
            continue
        found = store.timeline(generation, owner)
        if found is None:
            assert not full, f"list {list_}: no timeline"
            continue
        assert len(found.ids) == len(set(found.ids)), f"list {list_}: duplicate entries"
        full, _ = _above_floor(stack, generation, owner, found, full, f"list {list_}")
        assert found.ids == full[:cap], f"list {list_}: timeline differs from the view"
        stats["lists"] += 1
        stats["lists_entries"] += len(found.ids)
        stats["lists_at_the_cap"] += len(full) > cap
    for list_ in deleted:
        owner = -list_
        tag = store.shards.tag_of(owner)
        assert not store.redis.exists(
            keys.timeline(generation, owner, tag), keys.filters(generation, owner, tag)
        ), f"deleted list {list_} left keys"
    return stats


def _views(stack: Stack, sql: str) -> dict[int, list[int]]:
    """A view's rows (owner, entry) by owner, newest first."""
    view: dict[int, list[int]] = {}
    for owner, tweet_id in stack.sql(sql):
        view.setdefault(owner, []).append(tweet_id)
    return {owner: sorted(ts, reverse=True) for owner, ts in view.items()}


def _idle(stack: Stack, generation: int, owner: int) -> bool:
    """Whether ``owner``'s timeline is an idle tombstone."""
    store = stack.store
    return store.redis.get(keys.timeline(generation, owner, store.shards.tag_of(owner))) == IDLE


def _above_floor(
    stack: Stack, generation: int, owner: int, found: Timeline, full: list[int], what: str
) -> tuple[list[int], bool]:
    """The view (``full``, newest first) a timeline ``found`` must show: all of
    it, or, when the timeline keeps replies aside or its reads screen pulled
    lists and it shows fewer than the cap, the view at or above its floor
    (reads go on into the database below it); and whether it was cut so."""
    shown, store = found.ids, stack.store
    if (
        len(shown) < stack.timeline_size
        and len(full) > len(shown)
        and (_screens_lists(stack, generation, owner) or store.with_replies(generation, [owner]))
    ):
        assert found.horizon > 0, f"{what}: short"
        return [t for t in full if t >= found.horizon], True
    return full, False


def _screens_lists(stack: Stack, generation: int, uid: int) -> bool:
    """Whether ``uid``'s reads screen the pulled lists they merge (hidden users,
    or a pulled author followed with reposts off)."""
    redis, tag = stack.store.redis, stack.store.shards.tag_of(uid)
    members = redis.smembers(keys.pulls(generation, uid, tag))
    if not members:
        return False
    quiet = any(m[:1] in (b"-", "-") for m in members)
    return quiet or bool(redis.exists(keys.filters(generation, uid, tag)))


def check_counts(stack: Stack) -> dict[str, int]:
    """Every tweet's counts in Redis are those of the tables (none where all
    three are 0); returns how many tweets have some (``counted``), and how
    many have replies (``answered``)."""
    want = {t: tuple(three) for t, *three in stack.sql(COUNTS_SQL) if any(three)}
    every = [t for (t,) in stack.sql("SELECT id FROM feed_tweet WHERE repost_of_id IS NULL")]
    got = {}
    for t, raw in zip(every, stack.store.counts(every), strict=True):
        if raw is not None:
            counts = json.loads(raw)
            got[t] = (counts["likes"], counts["reposts"], counts["replies"])
    assert got == want, "counts differ from the tables"
    return {"counted": len(want), "answered": sum(1 for c in want.values() if c[2])}


def go_idle(stack: Stack, names: list[str]) -> None:
    """The users stop reading: a month later the hourly sweep drops their timelines."""
    long_ago = datetime.now(UTC) - timedelta(days=DEFAULT_ACTIVE_DAYS + 1)
    for name in names:
        stack.sql("UPDATE feed_user SET last_active = ? WHERE username = ?", long_ago, name)
    assert json.loads(stack.manage("drop_idle_timelines", "--json")) == {"dropped": len(names)}


def come_back(stack: Stack, tokens: dict[str, str]) -> None:
    """The users read again: the database answers, the timelines are regenerated."""
    for name, token in tokens.items():
        read_while_dropped(stack, name, token)
    check_against_oracle(stack, sorted(tokens))


def pulled_authors(stack: Stack) -> tuple[set[int], set[int]]:
    """(authors with a list: pulled at some point, authors pulled now: in
    someone's set of pulls)."""
    store = stack.store
    generation = store.active_generation()
    assert generation is not None
    lists = store.redis.scan_iter(keys.list_prefix(generation) + "*")
    listed = {keys.id_of(k) for k in lists}
    pulled: set[int] = set()
    for key in store.redis.scan_iter(keys.pulls_prefix(generation) + "*"):
        pulled |= {abs(int(a)) for a in store.redis.smembers(key)}  # '-a': reposts off
    return listed, pulled


def read_while_dropped(stack: Stack, name: str, token: str) -> None:
    """A returning user's first read: answered by the database at once."""
    headers = {"Authorization": f"Bearer {token}"}
    response = requests.get(f"{stack.base}/api/v1/timeline", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["X-Starling-Source"] == "fallback", name


def seqs_on_the_topics(stack: Stack) -> Counter[int]:
    """How many times each outbox seq is on the changelogs (all records, from 0)."""
    bootstrap = stack.env["KAFKA_BOOTSTRAP_SERVERS"]
    prefix = stack.env["STARLING_TOPIC_PREFIX"]
    topics = (prefix + events.TWEETS, prefix + events.FOLLOWS)
    reader = EndOffsetReader(bootstrap)
    try:
        ends = reader.end_offsets(topics)
    finally:
        reader.close()
    seen: Counter[int] = Counter()
    for part in ranges({}, ends):
        for batch in read_range(bootstrap, part, 60):
            for pairs in batch.column("headers").to_pylist():
                headers = {h["key"]: h["value"] for h in pairs}
                if events.HEADER_SEQ in headers:
                    seen[int(headers[events.HEADER_SEQ])] += 1
    return seen


def outbox_seqs(stack: Stack, after: int) -> list[int]:
    return [
        s for (s,) in stack.sql("SELECT id FROM feed_outboxevent WHERE id > ? ORDER BY id", after)
    ]
