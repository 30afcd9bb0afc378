"""Generations of the timelines in Redis, and their bookkeeping.

Timelines belong to a *generation*: a rebuild writes a new one and switches
readers to it in one step. This is the part of the timeline store
(:class:`fanout.timelines.TimelineStore`) that creates, activates, hands
over, switches and drops generations, records the rebuild's status and
claims regenerations of single timelines.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson
import redis

from fanout import ids, keys


class GenerationMissing(RuntimeError):
    """The generation being written is not in Redis: Redis lost its data."""


class GenerationStore:
    """Generations and their bookkeeping (mixed into the timeline store)."""

    redis: redis.Redis

    def active_generation(self) -> int | None:
        raw = self.redis.get(keys.ACTIVE_GENERATION)
        return int(raw) if raw is not None else None

    def generation_exists(self, generation: int) -> bool:
        return bool(self.redis.exists(keys.generation(generation)))

    def create_generation(self, generation: int, **meta: str | float) -> None:
        # Set once: the job's checkpoint directory is named by it (spark.supervisor).
        self.redis.hsetnx(keys.generation(generation), "created_at", time.time())
        for name, value in meta.items():
            self.redis.hset(keys.generation(generation), name, value)

    def activate(self, generation: int) -> None:
        if not self.generation_exists(generation):
            raise GenerationMissing(f"generation {generation} does not exist")
        self.redis.set(keys.ACTIVE_GENERATION, generation)

    def ensure_active_generation(self) -> int:
        """The active generation, creating generation 1 on a Redis that has none."""
        active = self.active_generation()
        if active is None:
            self.create_generation(1, state="active")
            self.redis.set(keys.ACTIVE_GENERATION, 1, nx=True)
            active = self.active_generation()
        assert active is not None
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

    def claim_regeneration(self, generation: int, user_id: int, *, window: int) -> bool:
        """Claim the regeneration of one timeline for ``window`` seconds (False if
        already claimed). Until :meth:`regenerating_until` names its seq, reads of
        the timeline stay cold."""
        key = keys.regeneration(generation, user_id)
        return bool(self.redis.set(key, ids.MAX_ID, nx=True, ex=window))

    def regenerating_until(self, generation: int, user_id: int, seq: int, *, window: int) -> None:
        """Reads of the timeline stay cold until the watermark reaches ``seq``."""
        self.redis.set(keys.regeneration(generation, user_id), seq, ex=window)

    def continue_regeneration(self, generation: int, user_id: int, seq: int) -> bool:
        """A regeneration asked for again (its reset was stale) now waits for the
        reset at ``seq``; False if the timeline is not being regenerated."""
        key = keys.regeneration(generation, user_id)
        return bool(self.redis.set(key, seq, xx=True, keepttl=True))

    def release_regeneration(self, generation: int, user_id: int) -> None:
        self.redis.delete(keys.regeneration(generation, user_id))

    def publish_rebuild_status(self, **fields: Any) -> None:
        """Record the running rebuild's state, stage or summary (the admin shows it)."""
        mapping = {**fields, "updated_at": time.time()}
        self.redis.hset(keys.REBUILD_STATUS, mapping=mapping)  # type: ignore[arg-type]

    def count_records_read(self, n: int) -> None:
        """Add ``n`` to the running rebuild's records read (by its read tasks)."""
        self.redis.hincrby(keys.REBUILD_STATUS, keys.REBUILD_RECORDS_READ, n)

    def records_read(self) -> int:
        """How many changelog records the running rebuild's read tasks have
        gone through so far (each adds its own as it goes)."""
        raw = self.redis.hget(keys.REBUILD_STATUS, keys.REBUILD_RECORDS_READ)
        return int(raw) if raw else 0

    def clear_rebuild_status(self) -> None:
        self.redis.delete(keys.REBUILD_STATUS)

    def rebuild_status(self) -> dict[str, str]:
        """The last rebuild's state, stage and summary (what spark.rebuild publishes)."""
        return {text(k): text(v) for k, v in self.redis.hgetall(keys.REBUILD_STATUS).items()}

    def request_handover(self, generation: int) -> None:
        """Ask the fanout job to carry on in ``generation`` (see spark.job)."""
        self.set_generation_meta(generation, state="ready")
        self.redis.set(keys.HANDOVER, generation)

    def pending_handover(self) -> int | None:
        raw = self.redis.get(keys.HANDOVER)
        if raw is None:
            return None
        generation = int(raw)
        return generation if self.generation_exists(generation) else None

    def switch(self, new: int, old: int | None) -> None:
        """Make ``new`` the active generation: one atomic step for readers."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(keys.ACTIVE_GENERATION, new)
        pipe.hset(keys.generation(new), mapping={"state": "active", "activated_at": time.time()})
        if old is not None and old != new:
            pipe.hset(keys.generation(old), mapping={"state": "retired", "retired_at": time.time()})
        pipe.delete(keys.HANDOVER)
        pipe.execute()

    def drop_generation(self, generation: int, *, batch: int = 2000) -> int:
        """Delete a generation's timelines and bookkeeping; returns keys deleted.
        UNLINK in batches: Redis frees the memory in the background."""
        deleted = 0
        deleted += int(self.redis.unlink(keys.resets(generation)))
        prefixes = (
            keys.timeline_prefix(generation),
            keys.regeneration_prefix(generation),
            keys.list_prefix(generation),
            keys.pulls_prefix(generation),
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


def text(value: bytes | str) -> str:
    """A Redis reply as text."""
    return value.decode() if isinstance(value, bytes) else value
