"""The Redis timeline store: the only way Starling reads or writes Redis data.

Key names come from :mod:`fanout.store.keys`, the Lua from ``fanout/store/lua/`` (loaded
by :mod:`fanout.store.scripts`), the packed format and the batching of writes from
:mod:`fanout.store.ops`. Timelines belong to a *generation* (a rebuild
writes a new one and switches readers to it at once; their lifecycle is
:mod:`fanout.store.generations`, part of this store); tweet bodies are shared by
all generations. The reads are :mod:`fanout.store.reads`, the rebuild's
bulk writes :mod:`fanout.store.bulk`, its dead letters and figures
:mod:`fanout.store.bookkeeping`: parts of this store too.

Every write is idempotent, so replaying a micro-batch changes nothing.

The store runs on a single Redis or a Redis Cluster. Its keys are spread
over shards (:class:`fanout.store.keys.Shards`: one on a single Redis), and each
script call touches the keys of one shard, which it declares, so a cluster
routes it to one node. A batch's writes go shard by shard, pipelined per
node (:func:`fanout.store.redis_conn.run`); what a call needs from another shard
(a pulled author's list, whether a tweet was deleted) is read beforehand
and passed in. Reads on a cluster cost more round trips: see
:meth:`TimelineStore.read_page`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from fanout.config import StarlingConfig
from fanout.model.engagements import Counts
from fanout.model.join import SLACK, Mutation
from fanout.model.owners import is_list
from fanout.model.watermark import Watermark
from fanout.store import keys
from fanout.store.bookkeeping import Bookkeeping
from fanout.store.bulk import TimelineBulk
from fanout.store.generations import GenerationMissing, GenerationStore
from fanout.store.ops import (
    OpCode,
    encode_ops,
    group_by_timeline,
    pack_ids,
    split_by_shard,
    unpack_ids,
    unpack_triples,
)
from fanout.store.reads import TimelineReads
from fanout.store.rebuilds import RebuildChannel
from fanout.store.redis_conn import (
    Client,
    Command,
    HotScript,
    command,
    connect,
    is_cluster,
    run,
    script_command,
)
from fanout.store.scripts import Script, explain

log = logging.getLogger(__name__)


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


def store_for(config: StarlingConfig, *, timeout: float = 5.0) -> TimelineStore:
    """The store with the configured Redis, cap and slack."""
    return TimelineStore(
        connect(config, timeout=timeout),
        cap=config.timeline_size,
        slack=config.timeline_slack,
        shards=config.shards,
    )


class TimelineStore(TimelineReads, TimelineBulk, GenerationStore, RebuildChannel, Bookkeeping):
    """Reads and idempotent bulk writes of timelines, bodies and bookkeeping."""

    #: Units of work per script call (ids, body bytes, ops: timeline_ops.encode_ops):
    #: bounds how long one call blocks Redis (a few ms; under 50 even when every
    #: op of a call rewrites its timeline).
    CHUNK = 4000
    #: Script calls per round trip.
    PIPELINE = 16
    #: How many of a timeline's newest winners and pairs the apply script reads
    #: first for a repost (the whole strings only when its original is older).
    WINDOW = 32

    def __init__(
        self,
        client: Client,
        *,
        cap: int,
        slack: int = SLACK,
        shards: keys.Shards | None = None,
        window: int = WINDOW,
    ) -> None:
        #: The raw client, for tests and diagnostics; Starling's code uses the methods.
        self.redis = client
        self.cap = cap
        self.slack = slack
        self.window = window
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
        self._copy_watermark = Script(client, "copy_watermark")
        self._bodies = Script(client, "bodies")
        self._compare_set = Script(client, "compare_set")
        self._rebuild_request = Script(client, "rebuild_request")

    def revoke_tokens(self, user_id: int, valid_after: int, ttl: int) -> None:
        """Refuse the user's tokens issued before ``valid_after`` (Unix seconds) on
        the read path; kept ``ttl`` seconds, after which those tokens expired anyway."""
        self.revoke_tokens_many([(user_id, valid_after, ttl)])

    def revoke_tokens_many(self, revocations: Iterable[tuple[int, int, int]]) -> int:
        """:meth:`revoke_tokens` for each (user id, valid after, ttl), 1,000 per
        round trip (per node); returns how many."""
        done = 0
        batch: list[Command] = []
        for user_id, valid_after, ttl in revocations:
            key = keys.tokens(user_id, self.shards.tag_of(user_id))
            batch.append(command("SET", key, valid_after, "EX", max(1, ttl)))
            if len(batch) == 1000:
                done += len(run(self.redis, batch))
                batch = []
        return done + (len(run(self.redis, batch)) if batch else 0)

    # --- writes ----------------------------------------------------------------

    def apply(
        self,
        generation: int,
        bodies: Mapping[int, bytes],
        mutations: Iterable[Mutation],
        *,
        counts: Mapping[int, Counts] | None = None,
        high_water: int = 0,
    ) -> ApplyStats:
        """Apply tweet bodies, then the mutations grouped per timeline; idempotent.

        In three steps, each pipelined over the shards: the bodies (deleted
        ones first) and counts, the pulled authors' lists, the timelines. A
        read then never finds an id without its body, nor a pulled author
        without a list, and a deleted tweet leaves every timeline at once.
        ``high_water``: the highest seq the job has applied (a trim fences at
        it: fanout/store/lua/apply.lua). ``counts``: original tweet id ->
        (likes, reposts, replies), absolute
        values (``ct:``, in the tweet's shard; all 0 deletes the key).

        Raises :class:`GenerationMissing` if ``generation`` is not in Redis
        (nothing is written then: a flushed Redis is not silently refilled
        with partial timelines).
        """
        ops, deleted = group_by_timeline(mutations, keep=self.cap + self.slack)
        split = split_by_shard(bodies, ops, deleted, self.shards, counts)
        no_bodies: tuple[dict[int, bytes], list[int]] = ({}, [])
        total = self._apply_calls(
            generation,
            [
                (tag, chunk)
                for tag in {**split.bodies, **split.counts}
                for chunk in encode_ops(
                    split.bodies.get(tag, no_bodies)[0],
                    (),
                    split.bodies.get(tag, no_bodies)[1],
                    self.CHUNK,
                    counts=split.counts.get(tag),
                )
            ],
            high_water,
        )
        total += self._apply_calls(
            generation,
            [
                (tag, chunk)
                for tag, lists in split.lists.items()
                for chunk in encode_ops({}, lists, (), self.CHUNK)
            ],
            high_water,
        )
        versions = self._list_versions(generation, split.unpulled)
        return total + self._apply_calls(
            generation,
            [
                (tag, chunk)
                for tag, timeline_ops in split.timelines.items()
                for chunk in encode_ops({}, timeline_ops, (), self.CHUNK, versions)
            ],
            high_water,
        )

    def _apply_calls(
        self, generation: int, calls: Sequence[tuple[str, list[Any]]], high_water: int = 0
    ) -> ApplyStats:
        """Apply-script calls (shard tag, operations), :data:`PIPELINE` per round
        trip; ``high_water``: the highest seq the job has applied, which a trim
        fences at (fanout/store/lua/apply.lua)."""
        prefix = [generation, self.cap, self.slack, self.window, high_water]
        commands = [script_command(self._apply, tag, prefix + chunk) for tag, chunk in calls]
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

    def release_resets(self, generation: int, contiguous: int, high_water: int = 0) -> ApplyStats:
        """Apply the refills (resets) whose seq the contiguous watermark has reached,
        shard by shard, leaving out their tweets deleted since (whose bodies are
        gone). Only the fanout job deletes bodies, and it calls this between
        micro-batches: nothing is deleted between the check and the release.
        ``high_water``: as for :meth:`apply`."""
        tags = self.shards.tags()
        queues = [keys.resets(generation, tag) for tag in tags]
        due = run(self.redis, [command("ZRANGEBYSCORE", k, "-inf", contiguous) for k in queues])
        waiting = {tag: members for tag, members in zip(tags, due, strict=True) if members}
        if not waiting:
            return ApplyStats()
        # A reset's entries and their originals: a repost of an original deleted
        # since goes with it.
        tweets = sorted({t for members in waiting.values() for m in members for t in _reset_ids(m)})
        bodies = run(
            self.redis, [command("EXISTS", keys.tweet(t, self.shards.tag_of(t))) for t in tweets]
        )
        deleted = pack_ids([t for t, there in zip(tweets, bodies, strict=True) if not there])
        return self._apply_calls(
            generation,
            [(tag, [OpCode.RELEASE_RESETS, contiguous, deleted]) for tag in waiting],
            high_water,
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
        """Record a micro-batch as applied; a replayed batch changes nothing but
        the copies of shards still behind it (a failover lost their writes: see
        ``copy_watermark``). ``marks`` are the relay marks applied so far per
        ``topic/partition`` and ``contiguous`` what they make certain (see
        fanout.model.watermark)."""
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
        behind = self.copy_watermark(
            generation,
            batch_id=batch_id,
            contiguous=contiguous,
            applied_at=float(args[4]),
            event_time=event_time,
            after=batch_id - 1,
        )
        if behind:
            log.warning(
                "%d shards of generation %d lack the writes of batch %d or earlier (a "
                "failover to a replica that had not received them?); their watermark "
                "stays behind until those batches are run again",
                len(behind),
                generation,
                batch_id - 1,
            )
        return recorded

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

    def drop_idle(
        self,
        generation: int,
        user_ids: Sequence[int],
        *,
        batch: int = 1000,
        lists: Sequence[int] = (),
    ) -> int:
        """Drop the timelines of idle users, home and mentions (-u), and of
        ``lists`` (list owners -L: those users' lists), a tombstone each, which
        the job does not write to, except those being regenerated; returns how
        many home timelines went (lists are not counted)."""
        for owner in lists:
            if not is_list(owner):
                raise ValueError(f"{owner} is not a list's timeline owner")
        commands: list[Command] = []
        for tag, owners in self.shards.group([*user_ids, *lists]).items():
            for start in range(0, len(owners), batch):
                args = [generation, *owners[start : start + batch]]
                commands.append(script_command(self._drop_idle, tag, args))
        return sum(int(n) for n in run(self.redis, commands, per_trip=16))

    def pulled_authors(self, user_id: int) -> tuple[int, ...]:
        """The pulled authors whose lists the timeline ``user_id`` (an owner: a
        list's -L too, its pulled members) merges in (in the active generation),
        ascending (a member ``-author``: read without its reposts)."""
        generation = self.active_generation()
        if generation is None:
            return ()
        key = keys.pulls(generation, user_id, self.shards.tag_of(user_id))
        return tuple(sorted(abs(int(a)) for a in self.redis.smembers(key)))

    def screened(self, generation: int, owners: Sequence[int]) -> set[int]:
        """Those of ``owners`` whose timelines and reads in ``generation`` are
        screened (docs/decisions.md D28): they have a filter, or read a pulled
        author's list without its reposts (a pulls member ``-author``). Such a
        view may hold fewer than ``cap`` entries above its floor; reads go on
        into the database below it. Pipelined: two commands per owner."""
        tag = self.shards.tag_of
        commands: list[Command] = []
        for o in owners:
            commands.append(command("EXISTS", keys.filters(generation, o, tag(o))))
            commands.append(command("SMEMBERS", keys.pulls(generation, o, tag(o))))
        replies = run(self.redis, commands)
        out = set()
        for o, filtered, pulls in zip(owners, replies[::2], replies[1::2], strict=True):
            if int(filtered) or any(bytes(m)[:1] == b"-" for m in pulls or ()):
                out.add(o)
        return out

    def request_refill(self, *user_ids: int) -> None:
        """Queue timelines for a refill from the database (the apply script does
        this itself for the timelines it leaves short)."""
        run(
            self.redis,
            [command("SADD", keys.refill(t), *o) for t, o in self.shards.group(user_ids).items()],
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


def _reset_ids(member: bytes) -> list[int]:
    """The tweet ids of a reset waiting in Redis, its entries and their originals
    (apply.lua's op 5 packs it: owner, horizon, seq, as_of, how many pulled
    authors, how many ids, how many reposts, 8 bytes each; then the authors and
    the ids, 8 bytes each; then the (entry, original, by) records of its reposts,
    24 bytes each; then its (entry, user) answers, 16 bytes each). A dropped
    list's (op 15: owner, seq; 16 bytes) has none."""
    if len(member) < 56:
        return []
    start = 56 + 8 * int.from_bytes(member[32:40], "big")
    end = start + 8 * int.from_bytes(member[40:48], "big")
    reposts = member[end : end + 24 * int.from_bytes(member[48:56], "big")]
    return unpack_ids(member[start:end]) + [o for _, o, _ in unpack_triples(reposts)]
