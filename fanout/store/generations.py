"""Generations of the timelines in Redis, and their bookkeeping.

Timelines belong to a *generation*: a rebuild writes a new one and switches
readers to it in one step. This is the part of the timeline store
(:class:`fanout.store.timelines.TimelineStore`) that creates, activates, hands
over, switches and drops generations and claims regenerations of single
timelines (the rebuild's status and requests are :mod:`fanout.store.rebuilds`).

With more than one shard (fanout.store.keys.Shards), every shard holds its own
copy of the active generation's pointer, of each generation's marker and
of the watermark's read fields, so that a script touches one shard only.
The rebuild's switch then moves one shard at a time: each user's reads
switch at once (a user's keys are in one shard), different users' a few
milliseconds apart. On a single Redis the switch is one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from fanout.model import ids
from fanout.store import keys
from fanout.store.redis_conn import Client, Command, command, is_cluster, run, text
from fanout.store.scripts import Script


class GenerationState:
    """What a generation's ``state`` field says. A rebuild creates it
    ``building``; its hand-over makes it ``ready`` (the fanout job catches it
    up) and the switch ``active``, the one before it ``retired``. A generation
    that will never be handed over goes ``dropping`` before it is deleted.
    The moves out of ``building`` are compare-and-set
    (:meth:`GenerationStore.move_generation`): a generation cannot be both
    handed over and deleted."""

    BUILDING = "building"
    READY = "ready"
    ACTIVE = "active"
    RETIRED = "retired"
    DROPPING = "dropping"


class GenerationMissing(RuntimeError):
    """The generation being written is not in Redis: Redis lost its data."""


class GenerationStore:
    """Generations and their bookkeeping (mixed into the timeline store)."""

    redis: Client
    shards: keys.Shards
    _copy_watermark: Script
    _compare_set: Script

    def _per_shard(self, name: str, key: Any, *args: Any) -> None:
        """Command ``name`` on ``key(tag)`` in every shard, when there is more than one."""
        if self.shards.count == 1:
            return
        run(self.redis, [command(name, key(tag), *args) for tag in self.shards.tags()])

    def _point_shards(self, generation: int, *, only_missing: bool = False) -> None:
        """Point every shard's reads at ``generation``."""
        extra = ("NX",) if only_missing else ()
        self._per_shard("SET", keys.active_generation, generation, *extra)

    def active_generation(self) -> int | None:
        raw = self.redis.get(keys.ACTIVE_GENERATION)
        return int(raw) if raw is not None else None

    def generation_exists(self, generation: int) -> bool:
        return bool(self.redis.exists(keys.generation(generation)))

    def create_generation(self, generation: int, **meta: str | float) -> None:
        # Set once: the job's checkpoint directory is named by it (spark.stream.supervisor).
        self.redis.hsetnx(keys.generation(generation), "created_at", time.time())
        for name, value in meta.items():
            self.redis.hset(keys.generation(generation), name, value)
        self._per_shard("SET", lambda tag: keys.generation(generation, tag), 1)

    def ensure_active_generation(self) -> int:
        """The active generation, creating generation 1 on a Redis that has none."""
        active = self.active_generation()
        if active is None:
            self.create_generation(1, state=GenerationState.ACTIVE)
            self.redis.set(keys.ACTIVE_GENERATION, 1, nx=True)
            active = self.active_generation()
        assert active is not None
        self._point_shards(active, only_missing=True)  # a new cluster, or a node that lost them
        return active

    def new_generation(self, **meta: str | float) -> int:
        """A fresh generation number (above every one in use), created with ``meta``."""
        number = int(self.redis.incr(keys.GENERATION_COUNTER))
        floor = self.active_generation() or 0
        if number <= floor:  # the counter was lost (FLUSHALL) or predates it
            self.redis.set(keys.GENERATION_COUNTER, floor + 1)
            number = floor + 1
        self.create_generation(number, **meta)
        return number

    def generation_meta(self, generation: int) -> dict[str, str]:
        raw = self.redis.hgetall(keys.generation(generation))
        return {text(k): text(v) for k, v in raw.items()}

    def set_generation_meta(self, generation: int, **meta: str | float) -> None:
        self.redis.hset(keys.generation(generation), mapping=meta)  # type: ignore[arg-type]

    def move_generation(self, generation: int, state: str, *, expect: str) -> bool:
        """Set the generation's state to ``state`` if it is ``expect`` (one
        step); False if it was not."""
        key = keys.generation(generation)
        return bool(self._compare_set(keys=[key], args=["state", expect, "state", state]))

    def newest_generation(self) -> int:
        """The highest generation number given out (0 if none): the counter's,
        or the active generation's if the counter is behind it."""
        top = int(self.redis.get(keys.GENERATION_COUNTER) or 0)
        return max(top, self.active_generation() or 0)

    def generations(self, *fields: str) -> dict[int, dict[str, str]]:
        """``fields`` of the metadata of every generation Redis has, by number
        (those up to the counter: one round trip per shard, no SCAN)."""
        numbers = range(1, self.newest_generation() + 1)
        replies = run(
            self.redis, [command("HMGET", keys.generation(n), "state", *fields) for n in numbers]
        )
        return {
            n: {name: text(v) for name, v in zip(("state", *fields), reply, strict=True) if v}
            for n, reply in zip(numbers, replies, strict=True)
            if reply[0] is not None
        }

    def claim_regeneration(self, generation: int, user_id: int, *, window: int) -> bool:
        """Claim the regeneration of one timeline for ``window`` seconds (False if
        already claimed). Until :meth:`regenerating_until` names its seq, reads of
        the timeline stay cold."""
        key = keys.regeneration(generation, user_id, self.shards.tag_of(user_id))
        return bool(self.redis.set(key, ids.MAX_ID, nx=True, ex=window))

    def regenerating_until(self, generation: int, user_id: int, seq: int, *, window: int) -> None:
        """Reads of the timeline stay cold until the watermark reaches ``seq``."""
        key = keys.regeneration(generation, user_id, self.shards.tag_of(user_id))
        self.redis.set(key, seq, ex=window)

    def continue_regeneration(self, generation: int, user_id: int, seq: int) -> bool:
        """A regeneration asked for again (its reset was stale) now waits for the
        reset at ``seq``; False if the timeline is not being regenerated."""
        key = keys.regeneration(generation, user_id, self.shards.tag_of(user_id))
        return bool(self.redis.set(key, seq, xx=True, keepttl=True))

    def release_regeneration(self, generation: int, user_id: int) -> None:
        self.redis.delete(keys.regeneration(generation, user_id, self.shards.tag_of(user_id)))

    def request_handover(self, generation: int) -> bool:
        """Ask the fanout job to carry on in ``generation`` (see spark.stream.job); False
        if the generation is no longer ``building`` (it is being deleted)."""
        if not self.move_generation(
            generation, GenerationState.READY, expect=GenerationState.BUILDING
        ):
            return False
        self.redis.set(keys.HANDOVER, generation)
        return True

    def pending_handover(self) -> int | None:
        """The generation handed over to the fanout job, if it is still ``ready``
        (not one being deleted, nor one whose metadata was lost)."""
        raw = self.redis.get(keys.HANDOVER)
        if raw is None:
            return None
        generation = int(raw)
        state = self.redis.hget(keys.generation(generation), "state")
        return generation if state is not None and text(state) == GenerationState.READY else None

    def switch(self, new: int, old: int | None) -> None:
        """Make ``new`` the active generation: one atomic step for each user's reads
        (for all users at once on a single Redis)."""
        self._point_shards(new)
        if is_cluster(self.redis):  # keys in several slots: no transaction
            self.redis.set(keys.ACTIVE_GENERATION, new)
            self.set_generation_meta(new, state=GenerationState.ACTIVE, activated_at=time.time())
            if old is not None and old != new:
                self.set_generation_meta(old, state=GenerationState.RETIRED, retired_at=time.time())
            self.redis.delete(keys.HANDOVER)
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(keys.ACTIVE_GENERATION, new)
        active = {"state": GenerationState.ACTIVE, "activated_at": time.time()}
        pipe.hset(keys.generation(new), mapping=active)  # type: ignore[arg-type]
        if old is not None and old != new:
            retired = {"state": GenerationState.RETIRED, "retired_at": time.time()}
            pipe.hset(keys.generation(old), mapping=retired)  # type: ignore[arg-type]
        pipe.delete(keys.HANDOVER)
        pipe.execute()

    def drop_generation(self, generation: int, *, batch: int = 2000) -> int:
        """Delete a generation's timelines and bookkeeping; returns keys deleted.
        UNLINK in batches: Redis frees the memory in the background."""
        deleted = 0
        per_shard = [keys.resets(generation, tag) for tag in self.shards.tags()]
        per_shard += [
            key
            for tag in self.shards.tags()
            if tag
            for key in (keys.generation(generation, tag), keys.watermark(generation, tag))
        ]
        deleted += sum(int(n) for n in run(self.redis, [command("UNLINK", k) for k in per_shard]))
        prefixes = (
            keys.timeline_prefix(generation),
            keys.regeneration_prefix(generation),
            keys.list_prefix(generation),
            keys.pulls_prefix(generation),
            keys.reposts_prefix(generation),
            keys.list_reposts_prefix(generation),
            keys.filters_prefix(generation),
            *(
                f"{p}{generation}:"
                for p in (
                    keys.FOLLOWEES_PREFIX,
                    keys.ASIDE_PREFIX,
                    keys.SHOWN_REPLIES_PREFIX,
                    keys.LIST_ANSWERS_PREFIX,
                )
            ),
        )
        for prefix in prefixes:
            found: list[bytes] = []
            for key in self.redis.scan_iter(match=prefix + "*", count=batch):
                found.append(key)
                if len(found) >= batch:
                    deleted += int(self.redis.unlink(*found))
                    found = []
            if found:
                deleted += int(self.redis.unlink(*found))
        deleted += int(self.redis.unlink(keys.generation(generation), keys.watermark(generation)))
        return deleted

    def seed_watermark(
        self,
        generation: int,
        *,
        seq: int,
        marks: Mapping[str, int],
        contiguous: int,
        offsets: Mapping[str, Any],
    ) -> None:
        """A rebuilt generation's starting watermark: the snapshot (batch -1, so the
        fanout job's first micro-batch counts as newer)."""
        now = time.time()
        self.redis.hset(
            keys.watermark(generation),
            mapping={
                "batch_id": -1,
                "seq": seq,
                "contiguous": contiguous,
                "marks": orjson.dumps(dict(marks)),
                "applied_at": now,
                "event_time": now,
                "offsets": orjson.dumps(offsets),
            },
        )
        self.copy_watermark(
            generation, batch_id=-1, contiguous=contiguous, applied_at=now, event_time=now
        )

    def copy_watermark(
        self,
        generation: int,
        *,
        batch_id: int,
        contiguous: int,
        applied_at: float,
        event_time: float,
        after: int | None = None,
    ) -> list[str]:
        """Give every shard what its reads need of the watermark, and the batch it
        belongs to (with more than one shard; on one, reads use the watermark).

        Written after the batch's writes, a shard's copy reaches a replica after
        them (a primary replicates in order): a failover that lost some of a
        batch's writes lost that batch's copy too (:meth:`applied_batch`).
        ``after`` is the batch each copy must hold already: a copy behind it
        stays behind (``copy_watermark.lua``), so a later batch cannot hide the
        loss. None sets every copy (a rebuilt generation's seed). Returns the
        tags of the shards whose copies stayed behind."""
        fields: tuple[str | float, ...] = (
            "batch_id", batch_id, "contiguous", contiguous, "applied_at", applied_at
        )  # fmt: skip
        if event_time > 0:
            fields += ("event_time", event_time)
        if self.shards.count == 1:
            return []
        if after is None:
            self._per_shard("HSET", lambda tag: keys.watermark(generation, tag), *fields)
            return []
        tags = list(self.shards.tags())
        held = run(
            self.redis,
            [self._copy_command(keys.watermark(generation, tag), [after, *fields]) for tag in tags],
        )
        return [tag for tag, ok in zip(tags, held, strict=True) if not ok]

    def _copy_command(self, key: str, args: list[Any]) -> Command:
        return key, lambda c: self._copy_watermark(keys=[key], args=args, client=c)

    def applied_batch(self, generation: int) -> int | None:
        """The last micro-batch every shard holds all the writes of (None: no
        watermark yet). With several shards, the lowest of their copies: a shard
        whose primary failed over may have lost the last batches' writes."""
        raw = self.redis.hget(keys.watermark(generation), "batch_id")
        if raw is None:
            return None
        if self.shards.count == 1:
            return int(raw)
        copies = run(
            self.redis,
            [
                command("HGET", keys.watermark(generation, tag), "batch_id")
                for tag in self.shards.tags()
            ],
        )
        return min(int(raw), *(int(c) if c is not None else -1 for c in copies))
