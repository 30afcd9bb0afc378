"""The timeline store's reads: a timeline's page, a user's visible ids.

Part of :class:`fanout.store.timelines.TimelineStore`. On one shard a read is one
script call (``fanout/store/lua/read_page.lua``), through a connection of its own
(:class:`fanout.store.redis_conn.HotScript`). With more shards the pulled authors'
lists and the tweet bodies lie in other shards than the user's: the script
says which lists it needs and returns the page's ids, and the store fetches
lists and bodies from their nodes (docs/decisions.md D20).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from fanout.store import keys
from fanout.store.ops import unpack_ids, unpack_pairs
from fanout.store.redis_conn import Client, Command, HotScript, command, run, script_command
from fanout.store.scripts import Script


@dataclass(frozen=True)
class Timeline:
    horizon: int
    ids: list[int]  # newest first, at most cap
    version: int = 0  # entries that arrived below its newest (see fanout.store.ops)


@dataclass(frozen=True)
class Page:
    """A timeline's page as the read script returns it."""

    status: str  # ok | beyond | cold | nogen | revoked
    generation: int | None = None
    watermark_seq: int = 0  # contiguous: every seq up to it is applied
    applied_at: float = 0.0
    event_time: float = 0.0
    body: bytes = b""  # the response JSON, assembled by the script
    version: int = 0  # the timeline's version (pollers re-read when it changes)
    #: Redis ran out of entries before the page was full while the join has
    #: older ones: the rest of the page comes from the database.
    partial: bool = False
    #: The user's first read of the day: the caller records the activity.
    first: bool = False


class TimelineReads:
    """Reads of the timeline store (mixed into it)."""

    redis: Client
    shards: keys.Shards
    cap: int
    one_shard: bool
    _read_ids: Script
    _read_page_script: Script
    _read_page_hot: HotScript | None
    _bodies: Script

    def read_page(
        self,
        owner: int,
        *,
        count: int,
        max_id: int | None = None,
        since_id: int | None = None,
        issued_at: float = 0.0,
        reader: int | None = None,
    ) -> Page:
        """A page of a timeline: user u's home timeline (``owner`` u) or
        mentions (-u, docs/decisions.md D30), read by ``reader`` (u; by
        default the owner), whose token revocation the read checks and whose
        first read of the day it reports.

        One script call (one round trip) on one shard. With more shards the
        pulled authors' lists and the bodies are in other shards: the script
        says which lists the user reads (a second call gets them passed in,
        after one pipelined fetch of the lists and their pairs), and returns
        the page's ids, whose tweet objects :meth:`render` makes. Round trips
        per read: 3 for a user who reads no pulled author (the script, the
        bodies, the reposts' originals and the counts), 5 for one who does; on a
        cluster of N primaries the bodies' and the lists' fetches take up to
        one round trip per node each (1 + 2N and 2 + 3N).
        """
        user = owner if reader is None else reader
        bounds = [count, max_id or 0, since_id or 0, self.cap]
        fixed = [owner, user, *bounds, int(issued_at), *_today()]
        if self._read_page_hot is not None:
            return _page(self._read_page_hot(*fixed, "-"))
        tag = self.shards.tag_of(owner)  # the reader's too (-u is in u's shard)
        try:
            raw = self._with_lists(
                lambda given: self._read_page_script(args=fixed + given, tag=tag)
            )
            if raw[0] != b"ok":
                return _page(raw)
            tweets = self.render(unpack_ids(raw[5]))
        except RedisClusterException as exc:  # e.g. a slot no node serves: not a RedisError
            raise redis.RedisError(str(exc)) from exc
        raw[5] = b'{"tweets":[' + b",".join(tweets) + b'],"next_max_id":' + raw[9] + b"}"
        return _page(raw)

    def render(self, ids: Sequence[int]) -> list[bytes]:
        """The tweet objects of entries (:func:`compose`), their bodies, the
        reposts' originals and the counts fetched from their shards (what
        ``fanout/store/lua/entries.lua`` does inside a one-shard read); deleted
        ones left out."""
        bodies = self.bodies(ids)
        originals = [repost_of(b) if b is not None else None for b in bodies]
        reposted = sorted({o for o in originals if o is not None})
        wanted = [o or t for t, o, b in zip(ids, originals, bodies, strict=True) if b is not None]
        tag = self.shards.tag_of
        got = self._get_many(  # the originals' bodies and the counts: one fetch
            [keys.tweet(o, tag(o)) for o in reposted] + [keys.counts(t, tag(t)) for t in wanted]
        )
        found = dict(zip(reposted, got[: len(reposted)], strict=True))
        counted = dict(zip(wanted, got[len(reposted) :], strict=True))
        out: list[bytes] = []
        for t, o, body in zip(ids, originals, bodies, strict=True):
            if body is None:
                continue
            tweet = compose(body, found.get(o) if o else None, counted.get(o or t))
            if tweet is not None:
                out.append(tweet)
        return out

    def _with_lists(self, call: Any, raw: Any = None) -> Any:
        """A read script's reply, given the pulled authors' lists it asks for
        (``{'lists', generation, authors}``: fetched from their shards). The
        lists a user reads can change between the calls: the script then asks
        again. ``raw``: the reply of a call already made with no lists."""
        given: list[Any] = ["0"]
        for _ in range(5):
            if raw is None:
                raw = call(given)
            if not raw or raw[0] != b"lists":
                return raw
            authors = [int(a) for a in raw[2:]]
            given = [str(len(authors))]
            for author, (packed, pairs, answers) in zip(
                authors, self._lists(int(raw[1]), authors), strict=True
            ):
                given += [str(author), packed or b"", pairs or b"", answers or b""]
            raw = None
        raise redis.RedisError("the user's pulled authors kept changing during the read")

    def _lists(
        self, generation: int, authors: Sequence[int]
    ) -> list[tuple[bytes | None, bytes | None, bytes | None]]:
        """The pulled authors' lists, their pairs and their answers (None where
        missing)."""
        tag = self.shards.tag_of
        commands = []
        for a in authors:
            commands.append(command("GET", keys.author_list(generation, a, tag(a))))
            commands.append(command("GET", keys.list_reposts(generation, a, tag(a))))
            commands.append(command("GET", keys.list_answers(generation, a, tag(a))))
        got = run(self.redis, commands)
        return list(zip(got[::3], got[1::3], got[2::3], strict=True))

    def bodies(self, tweets: Sequence[int]) -> list[bytes | None]:
        """The tweets' bodies (None where deleted). On a cluster, one script call
        per node holding some (``fanout/store/lua/bodies.lua``), pipelined: a page's
        bodies are in as many slots as it has tweets, and one ``MGET`` per slot
        cost 45 commands for a 50-tweet page. While slots move, a node may no
        longer hold a key it was sent: then each slot's are read with
        redirects followed."""
        return self._get_many([keys.tweet(t, self.shards.tag_of(t)) for t in tweets])

    def counts(self, tweet_ids: Sequence[int]) -> list[bytes | None]:
        """The originals' counts texts (``{"likes":L,"reposts":R,"replies":N}``,
        None where there are none: all 0), read like :meth:`bodies`."""
        return self._get_many([keys.counts(t, self.shards.tag_of(t)) for t in tweet_ids])

    def _get_many(self, names: list[str]) -> list[bytes | None]:
        """The values of string keys of any shards (None where missing)."""
        if not names:
            return []
        if not isinstance(self.redis, RedisCluster):
            return cast(list[bytes | None], self.redis.mget(names))
        per_node: dict[str, list[int]] = {}
        for i, name in enumerate(names):
            per_node.setdefault(self.redis.get_node_from_key(name).name, []).append(i)
        calls = [_bodies_call(self._bodies, [names[i] for i in at]) for at in per_node.values()]
        try:
            replies = run(self.redis, calls)
        except redis.RedisError:
            return cast(list[bytes | None], self.redis.mget_nonatomic(names))
        found: list[bytes | None] = [None] * len(names)
        for at, values in zip(per_node.values(), replies, strict=True):
            for i, value in zip(at, values, strict=True):
                found[i] = value or None
        return found

    def read_page_command(self, user_id: int, *, count: int, owner: int | None = None) -> list[str]:
        """The Redis command :meth:`read_page` sends for a first page (``EVALSHA``
        and its arguments) of ``owner``'s timeline (by default the user's home)
        read by the user, for a benchmark to send with ``redis-benchmark``. The
        script is loaded into Redis first. One shard on a single Redis only."""
        if self._read_page_hot is None:
            raise ValueError("read_page_command needs one shard on a single Redis")
        self.redis.script_load(self._read_page_script.source.text)
        args = self._read_page_script.arguments(
            [user_id if owner is None else owner, user_id, count, 0, 0, self.cap, 0, *_today(), "-"]
        )
        return ["EVALSHA", self._read_page_script.sha, "0", *map(str, args)]

    def timeline(self, generation: int, user_id: int) -> Timeline | None:
        """The user's visible entries: per original its greatest entry (the
        winners of the timeline and its pulled authors' lists merged)."""
        return self.timelines(generation, [user_id])[0]

    def timeline_reposts(
        self, generation: int, owners: Sequence[int]
    ) -> list[list[tuple[int, int]]]:
        """Each owner's timeline's pairs, (original, entry) ascending (see
        fanout.store.ops): its reposts in scope and its posts that a repost
        hides; [] where there are none. Winners and pairs together are the
        timeline's raw entries (:func:`fanout.store.ops.raw_entries`)."""
        tag = self.shards.tag_of
        raws = run(
            self.redis,
            [command("GET", keys.timeline_reposts(generation, o, tag(o))) for o in owners],
        )
        return [unpack_pairs(raw) if raw else [] for raw in raws]

    def timelines(self, generation: int, owners: Sequence[int]) -> list[Timeline | None]:
        """:meth:`timeline` of each owner, 1,000 script calls per round trip (per
        node). With more than one shard, an owner who reads pulled authors'
        lists takes one more script call, after its lists are fetched (see
        read_page)."""
        lists = ["-" if self.one_shard else "0"]
        raws = self._read_ids_calls(generation, [(o, lists) for o in owners])
        for i, raw in enumerate(raws):
            if raw and raw[0] == b"lists":
                owner = owners[i]
                raws[i] = self._with_lists(
                    lambda given, o=owner: self._read_ids_calls(generation, [(o, given)])[0], raw
                )
        return [_timeline(raw) for raw in raws]

    def _read_ids_calls(self, generation: int, calls: Sequence[tuple[int, list[Any]]]) -> list[Any]:
        commands = [
            script_command(self._read_ids, self.shards.tag_of(o), [generation, o, self.cap, *given])
            for o, given in calls
        ]
        return run(self.redis, commands)


_REPOST_TAIL = re.compile(rb',"repost_of":(\d+)}\Z')
NO_COUNTS = b'{"likes":0,"reposts":0,"replies":0}'


def repost_of(body: bytes) -> int | None:
    """The original a repost's body names; None for a post's."""
    found = _REPOST_TAIL.search(body)
    return int(found.group(1)) if found else None


def compose(body: bytes, original: bytes | None, counts: bytes | None) -> bytes | None:
    """An entry's tweet object, ``fanout/store/lua/entries.lua``'s ``compose``
    (byte for byte): a post's body with ``"repost_of":null`` and its counts; a
    repost's with the original's text, the original as ``repost_of``
    (id, author, created_at) and the original's counts. None when a repost's
    original body is gone (deleted)."""
    counts = counts or NO_COUNTS
    found = _REPOST_TAIL.search(body)
    if found is None:
        sep = b"" if body[-2:-1] == b"{" else b","
        return body[:-1] + sep + b'"repost_of":null,"counts":' + counts + b"}"
    if original is None:
        return None
    o = found.group(1)
    c = body.find(b',"created_at":')
    a = original.find(b'"author":')
    t = original.find(b',"text":')
    oc = original.find(b',"created_at":')
    if min(c, a, t, oc) < 0 or oc < t:
        return None
    return (
        body[:c]
        + b',"text":'
        + original[t + 8 : oc]
        + b',"created_at":'
        + body[c + 14 : found.start()]
        + b',"repost_of":{"id":'
        + o
        + b',"author":'
        + original[a + 9 : t]
        + b',"created_at":'
        + original[oc + 14 : -1]
        + b'},"counts":'
        + counts
        + b"}"
    )


def _bodies_call(script: Script, names: list[str]) -> Command:
    """A :func:`fanout.store.redis_conn.run` command reading ``names`` (on one node)."""
    return names[0], lambda c: script(args=names, client=c)


def _page(raw: Any) -> Page:
    """A page as the read script returns it (its body the page's JSON)."""
    status = raw[0].decode()
    if len(raw) == 1:
        return Page(status)
    return Page(
        status=status,
        generation=int(raw[1]),
        watermark_seq=int(raw[2]),
        applied_at=float(raw[3]),
        event_time=float(raw[4]),
        body=raw[5] if len(raw) > 5 else b"",
        version=int(raw[6]) if len(raw) > 6 else 0,
        partial=len(raw) > 7 and raw[7] == b"1",
        first=len(raw) > 8 and raw[8] == b"1",
    )


def _timeline(raw: Any) -> Timeline | None:
    """A timeline as the read_ids script returns it."""
    if not raw:
        return None
    values = [int(v) for v in raw]
    return Timeline(horizon=values[0], version=values[1], ids=values[2:])


def _today() -> tuple[int, int]:
    """The read script's activity arguments: the day (since the epoch) and how
    long its mark is kept (two days: it only has to tell today from another day)."""
    return int(time.time() // 86400), 2 * 86400
