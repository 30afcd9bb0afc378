"""The Redis timeline store: the only way Starling reads or writes Redis data.

Key names come from :mod:`fanout.keys`, the Lua from ``fanout/lua/`` (loaded
by :mod:`fanout.scripts`), the packed format and the batching of writes from
:mod:`fanout.timeline_ops`. Timelines belong to a *generation* (a rebuild
writes a new one and switches readers to it at once; their lifecycle is
:mod:`fanout.generations`, part of this store); tweet bodies are shared by
all generations.

Every write is idempotent, so replaying a micro-batch changes nothing.
The scripts reach keys they do not declare (timelines are chosen inside the
script), which a single Redis allows and Redis Cluster does not.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from fanout import keys
from fanout.config import StarlingConfig
from fanout.generations import GenerationMissing, GenerationStore
from fanout.join import SLACK, Mutation
from fanout.redis_conn import HotScript, client
from fanout.scripts import Script, explain
from fanout.timeline_ops import (
    HEADER,
    IDLE,
    OpCode,
    encode_ops,
    group_by_timeline,
    is_timeline,
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
        client(config.redis_url, timeout=timeout),
        cap=config.timeline_size,
        slack=config.timeline_slack,
    )


class TimelineStore(GenerationStore):
    """Reads and idempotent bulk writes of timelines, bodies and bookkeeping."""

    #: Units of work per script call (ids, body bytes, ops: timeline_ops.encode_ops):
    #: bounds how long one call blocks Redis (a few ms; under 50 even when every
    #: op of a call rewrites its timeline).
    CHUNK = 4000
    #: Script calls per round trip.
    PIPELINE = 16

    def __init__(self, client: redis.Redis, *, cap: int, slack: int = SLACK) -> None:
        #: The raw client, for tests and diagnostics; Starling's code uses the methods.
        self.redis = client
        self.cap = cap
        self.slack = slack
        self._apply = Script(client, "apply")
        self._read_ids = Script(client, "read_ids")
        self._read_page = HotScript(client, "read_page")
        self._drop_idle = Script(client, "drop_idle")
        self._watermark = Script(client, "watermark")

    def revoke_tokens(self, user_id: int, valid_after: int, ttl: int) -> None:
        """Refuse the user's tokens issued before ``valid_after`` (Unix seconds) on
        the read path; kept ``ttl`` seconds, after which those tokens expired anyway."""
        self.redis.set(keys.tokens(user_id), valid_after, ex=max(1, ttl))

    def write_timelines(self, generation: int, timelines: Iterable[tuple[int, bytes]]) -> int:
        """Set packed timelines (a rebuild's output), pipelined; returns how many."""
        return self._set_many((keys.timeline(generation, o), p) for o, p in timelines)

    def write_lists(self, generation: int, lists: Iterable[tuple[int, bytes]]) -> int:
        """Set pulled authors' packed lists (a rebuild's output); returns how many."""
        return self._set_many((keys.author_list(generation, a), p) for a, p in lists)

    def write_pulls(self, generation: int, pulls: Iterable[tuple[int, Sequence[int]]]) -> int:
        """Set each owner's pulled authors (a rebuild's output), 1,000 owners per
        round trip; returns how many owners."""
        n = 0
        pipe = self.redis.pipeline(transaction=False)
        for owner, authors in pulls:
            pipe.delete(keys.pulls(generation, owner))
            pipe.sadd(keys.pulls(generation, owner), *authors)
            n += 1
            if n % 1000 == 0:
                pipe.execute()
        pipe.execute()
        return n

    def write_bodies(self, bodies: Iterable[tuple[int, bytes]]) -> int:
        """Put tweet bodies in the cache. A body never changes, and the fanout
        job writes the same bytes (``events.tweet_json``), so overwriting one
        that is there changes nothing."""
        return self._set_many((keys.tweet(t), b) for t, b in bodies)

    def _set_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        """SET each key, 1,000 per ``MSET``; returns how many. One command per
        thousand keys costs the client a fifth of what a pipeline of single
        SETs does (measured: ~850,000 against ~165,000 keys/s)."""
        n = 0
        chunk: list[str | bytes] = []
        for key, value in items:
            chunk += (key, value)
            n += 1
            if len(chunk) == 2000:
                self.redis.execute_command("MSET", *chunk)
                chunk.clear()
        if chunk:
            self.redis.execute_command("MSET", *chunk)
        return n

    def packed_timelines(self, generation: int, owners: Sequence[int]) -> list[bytes | None]:
        """The raw packed timelines of ``owners`` (None where missing or dropped),
        pipelined."""
        raws = self._per_timeline(generation, owners, "GET")
        return [raw if raw is None or is_timeline(raw) else None for raw in raws]

    def _per_timeline(self, generation: int, owners: Sequence[int], command: str) -> list[Any]:
        """``command`` on each of the owners' timeline keys, 1,000 per round trip."""
        out: list[Any] = []
        for start in range(0, len(owners), 1000):
            pipe = self.redis.pipeline(transaction=False)
            for owner in owners[start : start + 1000]:
                pipe.execute_command(command, keys.timeline(generation, owner))
            out += pipe.execute()
        return out

    # --- writes ----------------------------------------------------------------

    def apply(
        self, generation: int, bodies: Mapping[int, bytes], mutations: Iterable[Mutation]
    ) -> ApplyStats:
        """Apply tweet bodies, then the mutations grouped per timeline; idempotent.

        Raises :class:`GenerationMissing` if ``generation`` is not in Redis
        (nothing is written then: a flushed Redis is not silently refilled
        with partial timelines).
        """
        ops, deleted = group_by_timeline(mutations, keep=self.cap + self.slack)
        chunks = encode_ops(bodies, ops, deleted, self.CHUNK)
        total = ApplyStats()
        prefix = [generation, self.cap, self.slack]
        for start in range(0, len(chunks), self.PIPELINE):
            pipe = self.redis.pipeline(transaction=False)
            for chunk in chunks[start : start + self.PIPELINE]:
                self._apply(args=prefix + chunk, client=pipe)
            try:
                results = pipe.execute()
            except redis.ResponseError as exc:
                if "NOGEN" in str(exc):
                    raise GenerationMissing(str(exc)) from None
                raise explain(exc, "apply") from None
            for result in results:
                total += ApplyStats.of(result)
        return total

    def release_resets(self, generation: int, contiguous: int) -> ApplyStats:
        """Apply the refills (resets) whose seq the contiguous watermark has reached."""
        args = [generation, self.cap, self.slack, OpCode.RELEASE_RESETS, contiguous]
        try:
            return ApplyStats.of(self._apply(args=args))
        except redis.ResponseError as exc:
            if "NOGEN" in str(exc):
                raise GenerationMissing(str(exc)) from None
            raise

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
        return bool(self._watermark(keys=[keys.watermark(generation)], args=args))

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
        """A page of a home timeline in one script call (one round trip)."""
        raw = self._read_page(
            user_id, count, max_id or 0, since_id or 0, self.cap, int(issued_at), *_today()
        )
        assert isinstance(raw, list)
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

    def read_page_command(self, user_id: int, *, count: int) -> list[str]:
        """The Redis command :meth:`read_page` sends for a first page (``EVALSHA``
        and its arguments), for a benchmark to send with ``redis-benchmark``. The
        script is loaded into Redis first."""
        self.redis.script_load(self._read_page.script.source.text)
        args = self._read_page.script.arguments([user_id, count, 0, 0, self.cap, 0, *_today()])
        return ["EVALSHA", self._read_page.script.sha, "0", *map(str, args)]

    def timeline(self, generation: int, user_id: int) -> Timeline | None:
        return _timeline(self._read_ids(args=[generation, user_id, self.cap]))

    def timelines(self, generation: int, owners: Sequence[int]) -> list[Timeline | None]:
        """:meth:`timeline` of each owner, 1,000 script calls per round trip."""
        out: list[Timeline | None] = []
        for start in range(0, len(owners), 1000):
            pipe = self.redis.pipeline(transaction=False)
            for owner in owners[start : start + 1000]:
                self._read_ids(args=[generation, owner, self.cap], client=pipe)
            out += [_timeline(raw) for raw in pipe.execute()]
        return out

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
        return self._set_many((keys.timeline(generation, o), IDLE) for o in owners)

    def drop_idle(self, generation: int, user_ids: Sequence[int], *, batch: int = 1000) -> int:
        """Drop the timelines of idle users (a tombstone each, which the job does
        not write to), except those being regenerated; returns how many went."""
        dropped = 0
        for start in range(0, len(user_ids), batch):
            chunk = list(user_ids[start : start + batch])
            dropped += int(self._drop_idle(args=[generation, *chunk]))
        return dropped

    def pulled_authors(self, user_id: int) -> tuple[int, ...]:
        """The pulled authors whose lists the user's reads merge in (in the active
        generation), ascending."""
        generation = self.active_generation()
        if generation is None:
            return ()
        return tuple(sorted(int(a) for a in self.redis.smembers(keys.pulls(generation, user_id))))

    def request_refill(self, *user_ids: int) -> None:
        """Queue timelines for a refill from the database (the apply script does
        this itself for the timelines it leaves short)."""
        if user_ids:
            self.redis.sadd(keys.REFILL, *user_ids)

    def take_refills(self, limit: int) -> list[int]:
        """Up to ``limit`` queued refills, removed from the queue."""
        return [int(u) for u in self.redis.spop(keys.REFILL, limit) or []]

    def pending_refills(self) -> int:
        return int(self.redis.scard(keys.REFILL))

    def clear_dead_letters(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Forget these dead letters (as :meth:`dead_letters` returned them);
        records set aside since stay. Returns how many were forgotten."""
        fields = [_position(r) for r in records]
        return int(self.redis.hdel(keys.DEAD_LETTERS, *fields)) if fields else 0

    def dead_letters(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for v in self.redis.hgetall(keys.DEAD_LETTERS).values()]

    def dead_letter_count(self) -> int:
        return int(self.redis.hlen(keys.DEAD_LETTERS))


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
