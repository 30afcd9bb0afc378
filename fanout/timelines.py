"""The Redis timeline store: the only way Starling reads or writes Redis data.

Key names come from :mod:`fanout.keys`, the Lua from ``fanout/lua/`` (loaded
by :mod:`fanout.scripts`), the packed format and the batching of writes from
:mod:`fanout.timeline_ops`. Timelines belong to a *generation* (a rebuild
writes a new one and switches readers to it at once; their lifecycle is
:mod:`fanout.generations`, part of this store); tweet bodies are shared by
all generations.

Every write is idempotent, so replaying a micro-batch changes nothing.

The store runs on a single Redis or a Redis Cluster. Its keys are spread
over shards (:class:`fanout.keys.Shards`: one on a single Redis), and each
script call touches the keys of one shard, which it declares, so a cluster
routes it to one node. A batch's writes go shard by shard, pipelined per
node (:func:`fanout.redis_conn.run`); what a call needs from another shard
(a pulled author's list, whether a tweet was deleted) is read beforehand
and passed in. Reads on a cluster cost more round trips: see
:meth:`TimelineStore.read_page`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from fanout import keys
from fanout.config import StarlingConfig
from fanout.generations import GenerationMissing, GenerationStore
from fanout.join import SLACK, Mutation
from fanout.redis_conn import Client, Command, HotScript, command, connect, is_cluster, run
from fanout.scripts import Script, explain
from fanout.timeline_ops import (
    HEADER,
    IDLE,
    OpCode,
    encode_ops,
    group_by_timeline,
    is_timeline,
    pack_ids,
    split_by_shard,
    unpack_ids,
)
from fanout.watermark import Watermark


@dataclass(frozen=True)
class Timeline:
    horizon: int
    ids: list[int]  # newest first, at most cap
    version: int = 0  # entries that arrived below its newest (see fanout.timeline_ops)


@dataclass(frozen=True)
class ApplyStats:
    added: int = 0
    removed: int = 0
    created: int = 0
    short: int = 0  # timelines left short and queued for a refill
    calls: int = 0
    #: Writes to timelines not in Redis (idle users'), not made.
    skipped: int = 0

    def __add__(self, other: ApplyStats) -> ApplyStats:
        return ApplyStats(
            self.added + other.added,
            self.removed + other.removed,
            self.created + other.created,
            self.short + other.short,
            self.calls + other.calls,
            self.skipped + other.skipped,
        )

    @classmethod
    def of(cls, result: Sequence[Any]) -> ApplyStats:
        """The stats of one apply-script call (its reply)."""
        added, removed, created, short, skipped = (int(v) for v in result)
        return cls(added, removed, created, short, 1, skipped)


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


def store_for(config: StarlingConfig, *, timeout: float = 5.0) -> TimelineStore:
    """The store with the configured Redis, cap and slack."""
    return TimelineStore(
        connect(config, timeout=timeout),
        cap=config.timeline_size,
        slack=config.timeline_slack,
        shards=config.shards,
    )


class TimelineStore(GenerationStore):
    """Reads and idempotent bulk writes of timelines, bodies and bookkeeping."""

    #: Units of work per script call (ids, body bytes, ops: timeline_ops.encode_ops):
    #: bounds how long one call blocks Redis (a few ms; under 50 even when every
    #: op of a call rewrites its timeline).
    CHUNK = 4000
    #: Script calls per round trip.
    PIPELINE = 16

    def __init__(
        self, client: Client, *, cap: int, slack: int = SLACK, shards: keys.Shards | None = None
    ) -> None:
        #: The raw client, for tests and diagnostics; Starling's code uses the methods.
        self.redis = client
        self.cap = cap
        self.slack = slack
        self.shards = shards or keys.Shards()
        if is_cluster(client) and self.shards.count == 1:
            raise ValueError("a Redis Cluster needs more than one shard (STARLING_REDIS_SHARDS)")
        #: Whether scripts read pulled authors' lists and bodies themselves (one
        #: shard), or are given them (see read_page).
        self.one_shard = self.shards.count == 1
        self._apply = Script(client, "apply")
        self._read_ids = Script(client, "read_ids")
        self._read_page_script = Script(client, "read_page")
        self._read_page_hot = (
            HotScript(client, "read_page")
            if self.one_shard and isinstance(client, redis.Redis)
            else None
        )
        self._drop_idle = Script(client, "drop_idle")
        self._watermark = Script(client, "watermark")
        self._bodies = Script(client, "bodies")

    def revoke_tokens(self, user_id: int, valid_after: int, ttl: int) -> None:
        """Refuse the user's tokens issued before ``valid_after`` (Unix seconds) on
        the read path; kept ``ttl`` seconds, after which those tokens expired anyway."""
        key = keys.tokens(user_id, self.shards.tag_of(user_id))
        self.redis.set(key, valid_after, ex=max(1, ttl))

    def write_timelines(self, generation: int, timelines: Iterable[tuple[int, bytes]]) -> int:
        """Set packed timelines (a rebuild's output), pipelined; returns how many."""
        tag = self.shards.tag_of
        return self._set_many((keys.timeline(generation, o, tag(o)), p) for o, p in timelines)

    def write_lists(self, generation: int, lists: Iterable[tuple[int, bytes]]) -> int:
        """Set pulled authors' packed lists (a rebuild's output); returns how many."""
        tag = self.shards.tag_of
        return self._set_many((keys.author_list(generation, a, tag(a)), p) for a, p in lists)

    def write_pulls(self, generation: int, pulls: Iterable[tuple[int, Sequence[int]]]) -> int:
        """Set each owner's pulled authors (a rebuild's output), 1,000 owners per
        round trip; returns how many owners."""
        n = 0
        commands: list[Command] = []
        for owner, authors in pulls:
            key = keys.pulls(generation, owner, self.shards.tag_of(owner))
            commands += [command("DEL", key), command("SADD", key, *authors)]
            n += 1
            if len(commands) >= 2000:
                run(self.redis, commands, per_trip=2000)
                commands.clear()
        run(self.redis, commands, per_trip=2000)
        return n

    def write_bodies(self, bodies: Iterable[tuple[int, bytes]]) -> int:
        """Put tweet bodies in the cache. A body never changes, and the fanout
        job writes the same bytes (``events.tweet_json``), so overwriting one
        that is there changes nothing."""
        return self._set_many((keys.tweet(t, self.shards.tag_of(t)), b) for t, b in bodies)

    def _set_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        """SET each key, 1,000 per ``MSET`` (per shard); returns how many. One
        command per thousand keys costs the client a fifth of what a pipeline
        of single SETs does (measured: ~850,000 against ~165,000 keys/s)."""
        n = 0
        per_shard: dict[int, list[str | bytes]] = {}
        pending = 0
        for key, value in items:
            chunk = per_shard.setdefault(keys.slot(key) if not self.one_shard else 0, [])
            chunk += (key, value)
            n += 1
            pending += 1
            if pending >= 16_000:
                self._mset(per_shard)
                per_shard.clear()
                pending = 0
        self._mset(per_shard)
        return n

    def _mset(self, per_shard: Mapping[int, list[str | bytes]]) -> None:
        commands: list[Command] = []
        for chunk in per_shard.values():
            for start in range(0, len(chunk), 2000):
                pairs = chunk[start : start + 2000]
                commands.append(command("MSET", str(pairs[0]), *pairs[1:]))
        run(self.redis, commands, per_trip=16)

    def packed_timelines(self, generation: int, owners: Sequence[int]) -> list[bytes | None]:
        """The raw packed timelines of ``owners`` (None where missing or dropped),
        pipelined."""
        raws = self._per_timeline(generation, owners, "GET")
        return [raw if raw is None or is_timeline(raw) else None for raw in raws]

    def _per_timeline(self, generation: int, owners: Sequence[int], name: str) -> list[Any]:
        """Command ``name`` on each of the owners' timeline keys, 1,000 per round trip."""
        tag = self.shards.tag_of
        names = [keys.timeline(generation, o, tag(o)) for o in owners]
        return run(self.redis, [command(name, k) for k in names])

    # --- writes ----------------------------------------------------------------

    def apply(
        self, generation: int, bodies: Mapping[int, bytes], mutations: Iterable[Mutation]
    ) -> ApplyStats:
        """Apply tweet bodies, then the mutations grouped per timeline; idempotent.

        In three steps, each pipelined over the shards: the bodies (deleted
        ones first), the pulled authors' lists, the timelines. A read then
        never finds an id without its body, nor a pulled author without a list,
        and a deleted tweet leaves every timeline at once.

        Raises :class:`GenerationMissing` if ``generation`` is not in Redis
        (nothing is written then: a flushed Redis is not silently refilled
        with partial timelines).
        """
        ops, deleted = group_by_timeline(mutations, keep=self.cap + self.slack)
        split = split_by_shard(bodies, ops, deleted, self.shards)
        total = self._apply_calls(
            generation,
            [
                (tag, chunk)
                for tag, (shard_bodies, shard_deleted) in split.bodies.items()
                for chunk in encode_ops(shard_bodies, (), shard_deleted, self.CHUNK)
            ],
        )
        total += self._apply_calls(
            generation,
            [
                (tag, chunk)
                for tag, lists in split.lists.items()
                for chunk in encode_ops({}, lists, (), self.CHUNK)
            ],
        )
        versions = self._list_versions(generation, split.unpulled)
        return total + self._apply_calls(
            generation,
            [
                (tag, chunk)
                for tag, timeline_ops in split.timelines.items()
                for chunk in encode_ops({}, timeline_ops, (), self.CHUNK, versions)
            ],
        )

    def _apply_calls(self, generation: int, calls: Sequence[tuple[str, list[Any]]]) -> ApplyStats:
        """Apply-script calls (shard tag, operations), :data:`PIPELINE` per round trip."""
        prefix = [generation, self.cap, self.slack]
        commands = [_call(self._apply, tag, prefix + chunk) for tag, chunk in calls]
        try:
            results = run(self.redis, commands, per_trip=self.PIPELINE)
        except redis.ResponseError as exc:
            if "NOGEN" in str(exc):
                raise GenerationMissing(str(exc)) from None
            raise explain(exc, "apply") from None
        total = ApplyStats()
        for result in results:
            total += ApplyStats.of(result)
        return total

    def _list_versions(self, generation: int, authors: Iterable[int]) -> dict[int, int]:
        """The versions of pulled authors' lists (0 where there is none)."""
        wanted = sorted(set(authors))
        tag = self.shards.tag_of
        names = [keys.author_list(generation, a, tag(a)) for a in wanted]
        raws = run(self.redis, [command("GETRANGE", k, 24, 31) for k in names])
        return {
            a: int.from_bytes(raw, "big") if raw and len(raw) == 8 else 0
            for a, raw in zip(wanted, raws, strict=True)
        }

    def release_resets(self, generation: int, contiguous: int) -> ApplyStats:
        """Apply the refills (resets) whose seq the contiguous watermark has reached,
        shard by shard, leaving out their tweets deleted since (whose bodies are
        gone). Only the fanout job deletes bodies, and it calls this between
        micro-batches: nothing is deleted between the check and the release."""
        tags = self.shards.tags()
        queues = [keys.resets(generation, tag) for tag in tags]
        due = run(self.redis, [command("ZRANGEBYSCORE", k, "-inf", contiguous) for k in queues])
        waiting = {tag: members for tag, members in zip(tags, due, strict=True) if members}
        if not waiting:
            return ApplyStats()
        tweets = sorted({t for members in waiting.values() for m in members for t in _reset_ids(m)})
        bodies = run(
            self.redis, [command("EXISTS", keys.tweet(t, self.shards.tag_of(t))) for t in tweets]
        )
        deleted = pack_ids([t for t, there in zip(tweets, bodies, strict=True) if not there])
        return self._apply_calls(
            generation,
            [(tag, [OpCode.RELEASE_RESETS, contiguous, deleted]) for tag in waiting],
        )

    def record_watermark(
        self,
        generation: int,
        *,
        batch_id: int,
        seq: int,
        marks: Mapping[str, int],
        contiguous: int,
        event_time: float,
        offsets: Mapping[str, Any],
        counters: Mapping[str, int],
    ) -> bool:
        """Record a micro-batch as applied; a replayed batch changes nothing.
        ``marks`` are the relay marks applied so far per ``topic/partition`` and
        ``contiguous`` what they make certain (see fanout.watermark)."""
        args: list[Any] = [
            batch_id,
            seq,
            contiguous,
            orjson.dumps(dict(marks)),
            time.time(),
            event_time,
            orjson.dumps(offsets),
        ]
        for name, value in counters.items():
            args += [name, int(value)]
        recorded = bool(self._watermark(keys=[keys.watermark(generation)], args=args))
        if recorded:
            self.copy_watermark(
                generation,
                batch_id=batch_id,
                contiguous=contiguous,
                applied_at=float(args[4]),
                event_time=event_time,
            )
        return recorded

    def dead_letter(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Set bad records aside, keyed by ``topic/partition/offset`` (idempotent)."""
        mapping = {_position(r): orjson.dumps(r) for r in records}
        if mapping:
            self.redis.hset(keys.DEAD_LETTERS, mapping=mapping)  # type: ignore[arg-type]
        return len(mapping)

    # --- reads -----------------------------------------------------------------

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
        come from one pipelined ``MGET`` per shard. Calls per read: 2 for a
        user who reads no pulled author (the script, the bodies), 4 for one
        who does; on a cluster, the bodies' and the lists' fetches take one
        round trip per node they touch.
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

    def _with_lists(self, call: Any) -> Any:
        """A read script's reply, given the pulled authors' lists it asks for
        (``{'lists', generation, authors}``: fetched from their shards). The
        lists a user reads can change between the calls: the script then asks
        again."""
        given: list[Any] = ["0"]
        for _ in range(5):
            raw = call(given)
            if not raw or raw[0] != b"lists":
                return raw
            authors = [int(a) for a in raw[2:]]
            given = [str(len(authors))]
            for author, packed in zip(authors, self._lists(int(raw[1]), authors), strict=True):
                given += [str(author), packed or b""]
        raise redis.RedisError("the user's pulled authors kept changing during the read")

    def _lists(self, generation: int, authors: Sequence[int]) -> list[bytes | None]:
        tag = self.shards.tag_of
        names = [keys.author_list(generation, a, tag(a)) for a in authors]
        return run(self.redis, [command("GET", k) for k in names])

    def bodies(self, tweets: Sequence[int]) -> list[bytes | None]:
        """The tweets' bodies (None where deleted). On a cluster, one script call
        per node holding some (``fanout/lua/bodies.lua``), pipelined: a page's
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
        lists takes two more calls (see read_page)."""
        lists = ["-" if self.one_shard else "0"]
        raws = self._read_ids_calls(generation, [(o, lists) for o in owners])
        for i, raw in enumerate(raws):
            if raw and raw[0] == b"lists":
                owner = owners[i]
                raws[i] = self._with_lists(
                    lambda given, o=owner: self._read_ids_calls(generation, [(o, given)])[0]
                )
        return [_timeline(raw) for raw in raws]

    def _read_ids_calls(self, generation: int, calls: Sequence[tuple[int, list[Any]]]) -> list[Any]:
        commands = [
            _call(self._read_ids, self.shards.tag_of(o), [generation, o, self.cap, *given])
            for o, given in calls
        ]
        return run(self.redis, commands)

    def contiguous_watermark(self, generation: int) -> int:
        """Every seq up to this one is applied in ``generation`` (0 if unknown)."""
        return int(self.redis.hget(keys.watermark(generation), "contiguous") or 0)

    def watermark(self, generation: int) -> Watermark | None:
        raw = self.redis.hgetall(keys.watermark(generation))
        if not raw:
            return None
        data = {k.decode() if isinstance(k, bytes) else k: v for k, v in raw.items()}
        known = {"seq", "contiguous", "marks", "batch_id", "applied_at", "event_time", "offsets"}
        return Watermark(
            seq=int(data.get("seq", 0)),
            contiguous=int(data.get("contiguous", 0)),
            marks=orjson.loads(data["marks"]) if "marks" in data else {},
            batch_id=int(data.get("batch_id", -1)),
            applied_at=float(data.get("applied_at", 0)),
            event_time=float(data.get("event_time", 0)),
            offsets=orjson.loads(data["offsets"]) if "offsets" in data else {},
            counters={k: int(v) for k, v in data.items() if k not in known},
        )

    def dropped(self, generation: int, owners: Sequence[int]) -> set[int]:
        """Those of ``owners`` whose timeline was dropped (idle users), pipelined."""
        lengths = self._per_timeline(generation, owners, "STRLEN")
        return {o for o, n in zip(owners, lengths, strict=True) if 0 < n < HEADER.size}

    def write_dropped(self, generation: int, owners: Iterable[int]) -> int:
        """Write dropped timelines (tombstones), as a rebuild keeps idle users idle."""
        tag = self.shards.tag_of
        return self._set_many((keys.timeline(generation, o, tag(o)), IDLE) for o in owners)

    def _by_shard(self, ids: Iterable[int]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i in ids:
            out.setdefault(self.shards.tag_of(i), []).append(i)
        return out

    def drop_idle(self, generation: int, user_ids: Sequence[int], *, batch: int = 1000) -> int:
        """Drop the timelines of idle users (a tombstone each, which the job does
        not write to), except those being regenerated; returns how many went."""
        commands: list[Command] = []
        for tag, owners in self._by_shard(user_ids).items():
            for start in range(0, len(owners), batch):
                args = [generation, *owners[start : start + batch]]
                commands.append(_call(self._drop_idle, tag, args))
        return sum(int(n) for n in run(self.redis, commands, per_trip=16))

    def pulled_authors(self, user_id: int) -> tuple[int, ...]:
        """The pulled authors whose lists the user's reads merge in (in the active
        generation), ascending."""
        generation = self.active_generation()
        if generation is None:
            return ()
        key = keys.pulls(generation, user_id, self.shards.tag_of(user_id))
        return tuple(sorted(int(a) for a in self.redis.smembers(key)))

    def request_refill(self, *user_ids: int) -> None:
        """Queue timelines for a refill from the database (the apply script does
        this itself for the timelines it leaves short)."""
        run(
            self.redis,
            [command("SADD", keys.refill(t), *o) for t, o in self._by_shard(user_ids).items()],
        )

    def take_refills(self, limit: int) -> list[int]:
        """Up to ``limit`` queued refills, removed from the queue (from the
        shards with the most waiting first)."""
        tags = self.shards.tags()
        sizes = self._refill_sizes()
        commands: list[Command] = []
        wanted = 0
        for size, tag in sorted(zip(sizes, tags, strict=True), reverse=True):
            if not size or wanted >= limit:
                break
            n = min(size, limit - wanted)
            wanted += n
            commands.append(command("SPOP", keys.refill(tag), n))
        return [int(u) for popped in run(self.redis, commands) for u in popped or []]

    def _refill_sizes(self) -> list[int]:
        commands = [command("SCARD", keys.refill(t)) for t in self.shards.tags()]
        return [int(n) for n in run(self.redis, commands)]

    def pending_refills(self) -> int:
        return sum(self._refill_sizes())

    def pending_resets(self, generation: int) -> int:
        """Refills (resets) in Redis waiting for the watermark to reach them."""
        queues = [keys.resets(generation, tag) for tag in self.shards.tags()]
        return sum(int(n) for n in run(self.redis, [command("ZCARD", k) for k in queues]))

    def clear_dead_letters(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Forget these dead letters (as :meth:`dead_letters` returned them);
        records set aside since stay. Returns how many were forgotten."""
        fields = [_position(r) for r in records]
        return int(self.redis.hdel(keys.DEAD_LETTERS, *fields)) if fields else 0

    def dead_letters(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for v in self.redis.hgetall(keys.DEAD_LETTERS).values()]

    def dead_letter_count(self) -> int:
        return int(self.redis.hlen(keys.DEAD_LETTERS))


def _call(script: Script, tag: str, args: list[Any]) -> Command:
    """A :func:`fanout.redis_conn.run` command calling ``script`` on shard ``tag``."""
    return Script.route(tag), lambda c: script(args=args, client=c, tag=tag)


def _bodies_call(script: Script, names: list[str]) -> Command:
    """A :func:`fanout.redis_conn.run` command reading ``names`` (on one node)."""
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


def _reset_ids(member: bytes) -> list[int]:
    """The tweet ids of a reset waiting in Redis (apply.lua's op 5 packs it: owner,
    horizon, seq, as_of, how many pulled authors, them, then the ids; 8 bytes each)."""
    start = 40 + 8 * int.from_bytes(member[32:40], "big")
    return unpack_ids(member[start:])


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


def _position(record: Mapping[str, Any]) -> str:
    """A dead letter's field: where the record was, ``topic/partition/offset``."""
    return f"{record['topic']}/{record['partition']}/{record['offset']}"
