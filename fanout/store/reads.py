"""The timeline store's reads: a home-timeline page, a user's visible ids.

Part of :class:`fanout.store.timelines.TimelineStore`. On one shard a read is one
script call (``fanout/store/lua/read_page.lua``), through a connection of its own
(:class:`fanout.store.redis_conn.HotScript`). With more shards the pulled authors'
lists and the tweet bodies lie in other shards than the user's: the script
says which lists it needs and returns the page's ids, and the store fetches
lists and bodies from their nodes (docs/decisions.md D20).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from fanout.store import keys
from fanout.store.ops import unpack_ids
from fanout.store.redis_conn import Client, Command, HotScript, command, run, script_command
from fanout.store.scripts import Script


@dataclass(frozen=True)
class Timeline:
    horizon: int
    ids: list[int]  # newest first, at most cap
    version: int = 0  # entries that arrived below its newest (see fanout.store.ops)


@dataclass(frozen=True)
class Page:
    """A home-timeline page as the read script returns it."""

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
        user_id: int,
        *,
        count: int,
        max_id: int | None = None,
        since_id: int | None = None,
        issued_at: float = 0.0,
    ) -> Page:
        """A page of a home timeline.

        One script call (one round trip) on one shard. With more shards the
        pulled authors' lists and the bodies are in other shards: the script
        says which lists the user reads (a second call gets them passed in,
        after one pipelined fetch), and returns the page's ids, whose bodies
        come from :meth:`bodies`. Round trips per read: 2 for a user who reads
        no pulled author (the script, the bodies), 4 for one who does; on a
        cluster of N primaries the bodies' and the lists' fetches take up to
        one round trip per node each (1 + N and 2 + 2N).
        """
        fixed = [user_id, count, max_id or 0, since_id or 0, self.cap, int(issued_at), *_today()]
        if self._read_page_hot is not None:
            return _page(self._read_page_hot(*fixed, "-"))
        tag = self.shards.tag_of(user_id)
        try:
            raw = self._with_lists(
                lambda given: self._read_page_script(args=fixed + given, tag=tag)
            )
            if raw[0] != b"ok":
                return _page(raw)
            bodies = [b for b in self.bodies(unpack_ids(raw[5])) if b is not None]  # None: deleted
        except RedisClusterException as exc:  # e.g. a slot no node serves: not a RedisError
            raise redis.RedisError(str(exc)) from exc
        raw[5] = b'{"tweets":[' + b",".join(bodies) + b'],"next_max_id":' + raw[9] + b"}"
        return _page(raw)

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
            for author, (packed, pairs) in zip(
                authors, self._lists(int(raw[1]), authors), strict=True
            ):
                given += [str(author), packed or b"", pairs or b""]
            raw = None
        raise redis.RedisError("the user's pulled authors kept changing during the read")

    def _lists(
        self, generation: int, authors: Sequence[int]
    ) -> list[tuple[bytes | None, bytes | None]]:
        """The pulled authors' lists and their pairs (None where missing)."""
        tag = self.shards.tag_of
        commands = []
        for a in authors:
            commands.append(command("GET", keys.author_list(generation, a, tag(a))))
            commands.append(command("GET", keys.list_reposts(generation, a, tag(a))))
        got = run(self.redis, commands)
        return list(zip(got[::2], got[1::2], strict=True))

    def bodies(self, tweets: Sequence[int]) -> list[bytes | None]:
        """The tweets' bodies (None where deleted). On a cluster, one script call
        per node holding some (``fanout/store/lua/bodies.lua``), pipelined: a page's
        bodies are in as many slots as it has tweets, and one ``MGET`` per slot
        cost 45 commands for a 50-tweet page. While slots move, a node may no
        longer hold a key it was sent: then each slot's are read with
        redirects followed."""
        names = [keys.tweet(t, self.shards.tag_of(t)) for t in tweets]
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

    def read_page_command(self, user_id: int, *, count: int) -> list[str]:
        """The Redis command :meth:`read_page` sends for a first page (``EVALSHA``
        and its arguments), for a benchmark to send with ``redis-benchmark``. The
        script is loaded into Redis first. One shard on a single Redis only."""
        if self._read_page_hot is None:
            raise ValueError("read_page_command needs one shard on a single Redis")
        self.redis.script_load(self._read_page_script.source.text)
        args = self._read_page_script.arguments([user_id, count, 0, 0, self.cap, 0, *_today(), "-"])
        return ["EVALSHA", self._read_page_script.sha, "0", *map(str, args)]

    def timeline(self, generation: int, user_id: int) -> Timeline | None:
        return self.timelines(generation, [user_id])[0]

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
