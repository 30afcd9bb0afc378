"""The Redis timeline store: the one module that knows the Redis layout.

Keys (``g`` is a generation number, see DESIGN.md decision 8):

| key | type | holds |
| --- | --- | --- |
| ``tl:{g}:{user_id}`` | string | a home timeline, packed (below) |
| ``tw:{tweet_id}`` | string | a tweet's JSON body, shared by all generations |
| ``starling:generation`` | string | the active generation |
| ``starling:gen:{g}`` | hash | a generation's metadata; its absence means Redis lost it |
| ``starling:wm:{g}`` | hash | the fanout watermark of a generation |
| ``starling:deadletters`` | hash | bad changelog records, by ``topic/partition/offset`` |
| ``starling:generations`` | string | the last generation number handed out |
| ``starling:handover`` | string | a rebuilt generation waiting for the fanout job to take it over |
| ``starling:rebuild`` | hash | the state of the last rebuild (stage, progress, summary) |
| ``starling:tokens:{user_id}`` | string | tokens issued before this Unix time are refused |
| ``starling:regen:{g}:{user_id}`` | string | regenerating: cold until the watermark passes it |

**Packed timelines.** A timeline is a string: an 8-byte big-endian horizon
(see :mod:`fanout.join`), then tweet ids as 8-byte big-endian integers in
ascending order. It holds between ``cap`` and ``cap + SLACK`` ids; readers
take the newest ``cap``. Appending the newest tweet (the common case) is an
``APPEND``; trimming happens once per ``SLACK`` appends. This costs about 11
bytes per entry where a sorted set costs 129 (skiplist) or 21 (listpack,
2.5x slower to write): see docs/decisions.md D10 for the figures.

Every write is idempotent, so replaying a micro-batch changes nothing.
The scripts reach keys they do not declare (timelines are chosen inside the
script), which a single Redis allows and Redis Cluster does not.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from fanout.config import StarlingConfig
from fanout.join import SLACK, Mutation, Op
from fanout.redis_conn import HotScript, client

ACTIVE_GENERATION = "starling:generation"
GENERATION_COUNTER = "starling:generations"
HANDOVER = "starling:handover"
REBUILD_STATUS = "starling:rebuild"
DEAD_LETTERS = "starling:deadletters"
_ID = struct.Struct(">Q")

#: Lua shared by the scripts: packed-timeline helpers.
_LUA_LIB = r"""
local function pk(id) return struct.pack('>I8', id) end
local function upk(s, pos) return (struct.unpack('>I8', s, pos or 1)) end

-- decode a packed timeline into (horizon, {ids ascending})
local function decode(s)
  if not s then return 0, {} end
  local out = {}
  for pos = 9, #s, 8 do out[#out + 1] = upk(s, pos) end
  return upk(s, 1), out
end

local function encode(horizon, ids)
  local parts = {pk(horizon)}
  for i = 1, #ids do parts[#parts + 1] = pk(ids[i]) end
  return table.concat(parts)
end
"""

_APPLY = (
    _LUA_LIB
    + r"""
-- ARGV: generation, cap, slack, then ops (see encode_ops)
local gen, cap, slack = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('EXISTS', 'starling:gen:' .. gen) == 0 then
  return redis.error_reply('NOGEN generation ' .. gen .. ' is not in Redis (was Redis flushed?)')
end
local limit = cap + slack
local added, removed, created = 0, 0, 0

local function keep_newest(horizon, ids)
  if #ids > limit then
    local kept = {}
    for i = #ids - cap + 1, #ids do kept[#kept + 1] = ids[i] end
    return kept[1], kept
  end
  return horizon, ids
end

local function add_slow(key, new, h)
  local horizon, ids = decode(redis.call('GET', key))
  if h > horizon then
    horizon = h
    local kept = {}
    for i = 1, #ids do if ids[i] >= h then kept[#kept + 1] = ids[i] end end
    ids = kept
  end
  local merged, i, j, n = {}, 1, 1, 0
  while i <= #ids or j <= #new do
    local a, b = ids[i], new[j]
    if b ~= nil and b < horizon then j = j + 1
    elseif b == nil or (a ~= nil and a < b) then merged[#merged + 1] = a; i = i + 1
    elseif a == b then merged[#merged + 1] = a; i = i + 1; j = j + 1
    else merged[#merged + 1] = b; j = j + 1; n = n + 1 end
  end
  horizon, merged = keep_newest(horizon, merged)
  redis.call('SET', key, encode(horizon, merged))
  return n
end

local function ids_of(blob)
  local out = {}
  for pos = 1, #blob, 8 do out[#out + 1] = upk(blob, pos) end
  return out
end

-- blob: packed ids, ascending
local function trim(key, len)
  if len > (limit + 1) * 8 then
    local tail = redis.call('GETRANGE', key, len - cap * 8, -1)
    redis.call('SET', key, string.sub(tail, 1, 8) .. tail)
  end
end

-- Insert ids into an existing timeline without a horizon change. Only the
-- entries from the first new id on are rewritten (SETRANGE): when two
-- executors interleave their writes, that is a handful of entries, not 800.
local function add_inside(key, blob)
  local s = redis.call('GET', key)
  local horizon, n = upk(s, 1), (#s - 8) / 8
  local new = {}
  for pos = 1, #blob, 8 do
    local id = upk(blob, pos)
    if id >= horizon then new[#new + 1] = id end
  end
  if #new == 0 then return 0 end
  local lo, hi = 1, n
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if upk(s, mid * 8 + 1) < new[1] then lo = mid + 1 else hi = mid - 1 end
  end
  local merged, added, i, j = {}, 0, lo, 1
  while i <= n or j <= #new do
    local a = i <= n and upk(s, i * 8 + 1) or nil
    local b = new[j]
    if b == nil or (a ~= nil and a < b) then merged[#merged + 1] = pk(a); i = i + 1
    elseif a == b then merged[#merged + 1] = pk(a); i = i + 1; j = j + 1
    else merged[#merged + 1] = pk(b); j = j + 1; added = added + 1 end
  end
  if added == 0 then return 0 end
  trim(key, redis.call('SETRANGE', key, lo * 8, table.concat(merged)))
  return added
end

-- blob: packed ids, ascending
local function add(key, blob, h)
  if h == 0 and #blob > 0 then
    local last = redis.call('GETRANGE', key, -8, -1)
    if last == '' then
      created = created + 1
      return add_slow(key, ids_of(blob), h)
    end
    -- A header-only timeline's last 8 bytes are its horizon: ids above it go at the end too.
    if upk(blob, 1) > upk(last) then
      trim(key, redis.call('APPEND', key, blob))
      return #blob / 8
    end
    return add_inside(key, blob)
  elseif redis.call('EXISTS', key) == 0 then
    created = created + 1
  end
  return add_slow(key, ids_of(blob), h)
end

local function remove(key, blob)
  local s = redis.call('GET', key)
  if not s or #s <= 8 then return 0 end
  if #blob == 8 then
    local target, lo, hi = upk(blob, 1), 1, (#s - 8) / 8
    while lo <= hi do
      local mid = math.floor((lo + hi) / 2)
      local v = upk(s, mid * 8 + 1)
      if v == target then
        redis.call('SET', key, string.sub(s, 1, mid * 8) .. string.sub(s, mid * 8 + 9))
        return 1
      elseif v < target then lo = mid + 1 else hi = mid - 1 end
    end
    return 0
  end
  local drop = {}
  for pos = 1, #blob, 8 do drop[upk(blob, pos)] = true end
  local horizon, ids = decode(s)
  local kept = {}
  for i = 1, #ids do if not drop[ids[i]] then kept[#kept + 1] = ids[i] end end
  if #kept == #ids then return 0 end
  redis.call('SET', key, encode(horizon, kept))
  return #ids - #kept
end

local prefix = 'tl:' .. gen .. ':'
local i = 4
while i <= #ARGV do
  local op = ARGV[i]
  if op == '1' then                       -- add: owner, horizon, packed ids
    added = added + add(prefix .. ARGV[i + 1], ARGV[i + 3], tonumber(ARGV[i + 2]))
    i = i + 4
  elseif op == '2' then                   -- remove: owner, packed ids
    removed = removed + remove(prefix .. ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  elseif op == '3' then                   -- put a tweet body: id, body
    redis.call('SET', 'tw:' .. ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  else                                    -- 4: delete tweet bodies: packed ids
    local blob = ARGV[i + 1]
    for pos = 1, #blob, 8 do redis.call('DEL', 'tw:' .. string.format('%.0f', upk(blob, pos))) end
    i = i + 2
  end
end
return {added, removed, created}
"""
)

_READ_IDS = (
    _LUA_LIB
    + r"""
-- KEYS[1]: timeline; ARGV: cap. Returns {horizon, newest-first ids as strings} or false.
local s = redis.call('GET', KEYS[1])
if not s then return false end
local horizon, ids = decode(s)
local out, cap = {string.format('%.0f', horizon)}, tonumber(ARGV[1])
for i = #ids, math.max(1, #ids - cap + 1), -1 do out[#out + 1] = string.format('%.0f', ids[i]) end
return out
"""
)

_READ_PAGE = (
    _LUA_LIB
    + r"""
-- One home-timeline page in one call: generation, revocation, cursors, bodies.
-- ARGV: user_id, count, max_id (0: none), since_id (0: none), cap, token issued-at (s)
-- Returns {status, generation, wm seq, wm applied_at, wm event_time, page JSON}
-- status: ok | cold (no timeline in the active generation) | nogen | revoked
local uid, count = ARGV[1], tonumber(ARGV[2])
local max_id, since_id, cap = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local valid_after = redis.call('GET', 'starling:tokens:' .. uid)
if valid_after and tonumber(ARGV[6]) < tonumber(valid_after) then return {'revoked'} end
local gen = redis.call('GET', 'starling:generation')
if not gen then return {'nogen'} end
local wm = redis.call('HMGET', 'starling:wm:' .. gen, 'seq', 'applied_at', 'event_time')
local head = {gen, wm[1] or '0', wm[2] or '0', wm[3] or '0'}
local s = redis.call('GET', 'tl:' .. gen .. ':' .. uid)
-- A timeline being regenerated stays cold until the job has applied its events.
local regen = redis.call('GET', 'starling:regen:' .. gen .. ':' .. uid)
if not s or (regen and tonumber(head[2]) < tonumber(regen)) then
  return {'cold', head[1], head[2], head[3], head[4]}
end
local n = (#s - 8) / 8
local lo, hi = math.max(1, n - cap + 1), n   -- only the newest cap entries are visible
local function first_above(x)               -- first index whose id > x
  local a, b = 1, n
  while a <= b do
    local mid = math.floor((a + b) / 2)
    if upk(s, mid * 8 + 1) <= x then a = mid + 1 else b = mid - 1 end
  end
  return a
end
if max_id > 0 then hi = math.min(hi, first_above(max_id) - 1) end
if since_id > 0 then lo = math.max(lo, first_above(since_id)) end
local keys, last = {}, nil
local stop = math.max(lo, hi - count + 1)
for i = hi, stop, -1 do
  last = upk(s, i * 8 + 1)
  keys[#keys + 1] = 'tw:' .. string.format('%.0f', last)
end
local parts = {}
if #keys > 0 then
  for _, body in ipairs(redis.call('MGET', unpack(keys))) do
    if body then parts[#parts + 1] = body end  -- a body gone = a tweet deleted
  end
end
local nxt = 'null'
if last and stop > lo then nxt = string.format('%.0f', last - 1) end
return {'ok', head[1], head[2], head[3], head[4],
        '{"tweets":[' .. table.concat(parts, ',') .. '],"next_max_id":' .. nxt .. '}'}
"""
)

_WATERMARK = r"""
-- KEYS[1]: watermark hash. ARGV: batch_id, seq, applied_at, event_time, offsets, then
-- counter name/increment pairs. Counters move only for a batch newer than the last one.
local last = tonumber(redis.call('HGET', KEYS[1], 'batch_id') or '-1')
local batch = tonumber(ARGV[1])
if batch <= last then return 0 end
local seq = tonumber(ARGV[2])
if seq > tonumber(redis.call('HGET', KEYS[1], 'seq') or '0') then
  redis.call('HSET', KEYS[1], 'seq', ARGV[2])
end
redis.call('HSET', KEYS[1], 'batch_id', ARGV[1], 'applied_at', ARGV[3], 'offsets', ARGV[5])
if tonumber(ARGV[4]) > 0 then redis.call('HSET', KEYS[1], 'event_time', ARGV[4]) end
for i = 6, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


def timeline_key(generation: int, user_id: int) -> str:
    return f"tl:{generation}:{user_id}"


def tweet_key(tweet_id: int) -> str:
    return f"tw:{tweet_id}"


def generation_key(generation: int) -> str:
    return f"starling:gen:{generation}"


def watermark_key(generation: int) -> str:
    return f"starling:wm:{generation}"


class GenerationMissing(RuntimeError):
    """The generation being written is not in Redis: Redis lost its data."""


@dataclass(frozen=True)
class Timeline:
    horizon: int
    ids: list[int]  # newest first, at most cap


@dataclass(frozen=True)
class ApplyStats:
    added: int = 0
    removed: int = 0
    created: int = 0
    calls: int = 0

    def __add__(self, other: ApplyStats) -> ApplyStats:
        return ApplyStats(
            self.added + other.added,
            self.removed + other.removed,
            self.created + other.created,
            self.calls + other.calls,
        )


@dataclass(frozen=True)
class Page:
    """A home-timeline page as the read script returns it."""

    status: str  # ok | cold | nogen | revoked
    generation: int | None = None
    watermark_seq: int = 0
    applied_at: float = 0.0
    event_time: float = 0.0
    body: bytes = b""  # the response JSON, assembled by the script


@dataclass(frozen=True)
class Watermark:
    seq: int
    batch_id: int
    applied_at: float
    event_time: float
    offsets: dict[str, Any]
    counters: dict[str, int]


def store_for(config: StarlingConfig, *, timeout: float = 5.0) -> TimelineStore:
    """The store with the configured Redis, cap and slack."""
    return TimelineStore(
        client(config.redis_url, timeout=timeout),
        cap=config.timeline_size,
        slack=config.timeline_slack,
    )


class TimelineStore:
    """Reads and idempotent bulk writes of timelines, bodies and bookkeeping."""

    #: Ids per script call: bounds how long one call blocks Redis (a few ms).
    CHUNK = 4000
    #: Script calls per round trip.
    PIPELINE = 16

    def __init__(self, client: redis.Redis, *, cap: int, slack: int = SLACK) -> None:
        self.redis = client
        self.cap = cap
        self.slack = slack
        self._apply = client.register_script(_APPLY)
        self._read_ids = client.register_script(_READ_IDS)
        self._read_page = HotScript(client, _READ_PAGE)
        self._watermark = client.register_script(_WATERMARK)

    # --- generations ---------------------------------------------------------

    def active_generation(self) -> int | None:
        raw = self.redis.get(ACTIVE_GENERATION)
        return int(raw) if raw is not None else None

    def generation_exists(self, generation: int) -> bool:
        return bool(self.redis.exists(generation_key(generation)))

    def create_generation(self, generation: int, **meta: str | float) -> None:
        self.redis.hset(generation_key(generation), "created_at", time.time())
        for name, value in meta.items():
            self.redis.hset(generation_key(generation), name, value)

    def activate(self, generation: int) -> None:
        if not self.generation_exists(generation):
            raise GenerationMissing(f"generation {generation} does not exist")
        self.redis.set(ACTIVE_GENERATION, generation)

    def ensure_active_generation(self) -> int:
        """The active generation, creating generation 1 on a Redis that has none."""
        active = self.active_generation()
        if active is None:
            self.create_generation(1, state="active")
            self.redis.set(ACTIVE_GENERATION, 1, nx=True)
            active = self.active_generation()
        assert active is not None
        return active

    def new_generation(self, **meta: str | float) -> int:
        """A fresh generation number (above every one in use), created with ``meta``."""
        number = int(self.redis.incr(GENERATION_COUNTER))
        floor = self.active_generation() or 0
        if number <= floor:  # the counter was lost (FLUSHALL) or predates it
            self.redis.set(GENERATION_COUNTER, floor + 1)
            number = floor + 1
        self.create_generation(number, **meta)
        return number

    def generation_meta(self, generation: int) -> dict[str, str]:
        raw = self.redis.hgetall(generation_key(generation))
        return {_text(k): _text(v) for k, v in raw.items()}

    def set_generation_meta(self, generation: int, **meta: str | float) -> None:
        self.redis.hset(generation_key(generation), mapping=meta)  # type: ignore[arg-type]

    def revoke_tokens(self, user_id: int, valid_after: int, ttl: int) -> None:
        """Refuse the user's tokens issued before ``valid_after`` (Unix seconds) on
        the read path; kept ``ttl`` seconds, after which those tokens expired anyway."""
        self.redis.set(f"starling:tokens:{user_id}", valid_after, ex=max(1, ttl))

    def rebuild_status(self) -> dict[str, str]:
        """The last rebuild's state, stage and summary (what spark.rebuild publishes)."""
        return {_text(k): _text(v) for k, v in self.redis.hgetall(REBUILD_STATUS).items()}

    def request_handover(self, generation: int) -> None:
        """Ask the fanout job to carry on in ``generation`` (see spark.fanout)."""
        self.set_generation_meta(generation, state="ready")
        self.redis.set(HANDOVER, generation)

    def pending_handover(self) -> int | None:
        raw = self.redis.get(HANDOVER)
        if raw is None:
            return None
        generation = int(raw)
        return generation if self.generation_exists(generation) else None

    def switch(self, new: int, old: int | None) -> None:
        """Make ``new`` the active generation: one atomic step for readers."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(ACTIVE_GENERATION, new)
        pipe.hset(generation_key(new), mapping={"state": "active", "activated_at": time.time()})
        if old is not None and old != new:
            pipe.hset(generation_key(old), mapping={"state": "retired", "retired_at": time.time()})
        pipe.delete(HANDOVER)
        pipe.execute()

    def drop_generation(self, generation: int, *, batch: int = 2000) -> int:
        """Delete a generation's timelines and bookkeeping; returns keys deleted.
        UNLINK in batches: Redis frees the memory in the background."""
        deleted = 0
        for pattern in (f"tl:{generation}:*", f"starling:regen:{generation}:*"):
            keys: list[bytes] = []
            for key in self.redis.scan_iter(match=pattern, count=batch):
                keys.append(key)
                if len(keys) >= batch:
                    deleted += int(self.redis.unlink(*keys))
                    keys = []
            if keys:
                deleted += int(self.redis.unlink(*keys))
        deleted += int(self.redis.unlink(generation_key(generation), watermark_key(generation)))
        return deleted

    def seed_watermark(self, generation: int, *, seq: int, offsets: Mapping[str, Any]) -> None:
        """A rebuilt generation's starting watermark: the snapshot (batch -1, so the
        fanout job's first micro-batch counts as newer)."""
        now = time.time()
        self.redis.hset(
            watermark_key(generation),
            mapping={
                "batch_id": -1,
                "seq": seq,
                "applied_at": now,
                "event_time": now,
                "offsets": orjson.dumps(offsets),
            },
        )

    def write_timelines(self, generation: int, timelines: Iterable[tuple[int, bytes]]) -> int:
        """Set packed timelines (a rebuild's output), pipelined; returns how many."""
        return self._set_many((timeline_key(generation, o), p) for o, p in timelines)

    def write_bodies(self, bodies: Iterable[tuple[int, bytes]]) -> int:
        """Put tweet bodies in the cache where missing (bodies never change)."""
        return self._set_many(((tweet_key(t), b) for t, b in bodies), nx=True)

    def _set_many(self, items: Iterable[tuple[str, bytes]], *, nx: bool = False) -> int:
        """SET each key, 1,000 commands per round trip; returns how many."""
        n = 0
        pipe = self.redis.pipeline(transaction=False)
        for key, value in items:
            pipe.set(key, value, nx=nx)
            n += 1
            if n % 1000 == 0:
                pipe.execute()
        pipe.execute()
        return n

    def packed_timelines(self, generation: int, owners: Sequence[int]) -> list[bytes | None]:
        """The raw packed timelines of ``owners`` (None where missing), pipelined."""
        out: list[bytes | None] = []
        for start in range(0, len(owners), 1000):
            pipe = self.redis.pipeline(transaction=False)
            for owner in owners[start : start + 1000]:
                pipe.get(timeline_key(generation, owner))
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
        ops, deleted = group_by_timeline(mutations)
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
                raise
            for added, removed, created in results:
                total += ApplyStats(int(added), int(removed), int(created), 1)
        return total

    def record_watermark(
        self,
        generation: int,
        *,
        batch_id: int,
        seq: int,
        event_time: float,
        offsets: Mapping[str, Any],
        counters: Mapping[str, int],
    ) -> bool:
        """Record a micro-batch as applied; a replayed batch changes nothing."""
        args: list[Any] = [batch_id, seq, time.time(), event_time, orjson.dumps(offsets)]
        for name, value in counters.items():
            args += [name, int(value)]
        return bool(self._watermark(keys=[watermark_key(generation)], args=args))

    def dead_letter(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Set bad records aside, keyed by ``topic/partition/offset`` (idempotent)."""
        mapping = {f"{r['topic']}/{r['partition']}/{r['offset']}": orjson.dumps(r) for r in records}
        if mapping:
            self.redis.hset(DEAD_LETTERS, mapping=mapping)  # type: ignore[arg-type]
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
        raw = self._read_page(user_id, count, max_id or 0, since_id or 0, self.cap, int(issued_at))
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
        )

    def timeline(self, generation: int, user_id: int) -> Timeline | None:
        raw = self._read_ids(keys=[timeline_key(generation, user_id)], args=[self.cap])
        if not raw:
            return None
        values = [int(v) for v in raw]
        return Timeline(horizon=values[0], ids=values[1:])

    def watermark(self, generation: int) -> Watermark | None:
        raw = self.redis.hgetall(watermark_key(generation))
        if not raw:
            return None
        data = {k.decode() if isinstance(k, bytes) else k: v for k, v in raw.items()}
        known = {"seq", "batch_id", "applied_at", "event_time", "offsets"}
        return Watermark(
            seq=int(data.get("seq", 0)),
            batch_id=int(data.get("batch_id", -1)),
            applied_at=float(data.get("applied_at", 0)),
            event_time=float(data.get("event_time", 0)),
            offsets=orjson.loads(data["offsets"]) if "offsets" in data else {},
            counters={k: int(v) for k, v in data.items() if k not in known},
        )

    def dead_letters(self) -> list[dict[str, Any]]:
        return [orjson.loads(v) for v in self.redis.hgetall(DEAD_LETTERS).values()]

    def dead_letter_count(self) -> int:
        return int(self.redis.hlen(DEAD_LETTERS))


@dataclass(frozen=True, slots=True)
class TimelineOp:
    """One timeline's share of a batch: add (after raising the horizon) or remove."""

    op: Op
    owner: int
    tweets: tuple[int, ...]  # ascending
    horizon: int = 0


def group_by_timeline(mutations: Iterable[Mutation]) -> tuple[list[TimelineOp], list[int]]:
    """Regroup a batch's mutations per timeline, keeping each timeline's order.

    Consecutive adds to one timeline merge (their ids united, the higher
    horizon kept), and so do consecutive removes; an add and a remove never
    swap. A follower receiving five tweets in a micro-batch then costs one
    write, not five. Returns the timeline ops and the tweet ids whose bodies
    go (applied after every timeline op).
    """
    per_owner: dict[int, list[list[Any]]] = {}
    deleted: list[int] = []
    for m in mutations:
        if m.op is Op.DELETE_BODY:
            deleted.extend(m.tweets)
            continue
        for owner in m.owners:
            ops = per_owner.setdefault(owner, [])
            if ops and ops[-1][0] is m.op:
                ops[-1][2].update(m.tweets)
                ops[-1][1] = max(ops[-1][1], m.horizon)
            else:
                ops.append([m.op, m.horizon if m.op is Op.ADD else 0, set(m.tweets)])
    out = [
        TimelineOp(op, owner, tuple(sorted(ids)), horizon)
        for owner, ops in per_owner.items()
        for op, horizon, ids in ops
    ]
    return out, deleted


#: Upper bounds (seconds) of the micro-batch duration histogram (/metrics).
BATCH_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


def batch_duration_counters(seconds: float) -> dict[str, int]:
    """A micro-batch's duration as Prometheus histogram counters (cumulative
    buckets ``batch_le_<bound>``, ``batch_ms`` the sum), kept with the
    watermark so a replayed batch is not counted twice."""
    counters = {f"batch_le_{bound:g}": int(seconds <= bound) for bound in BATCH_BUCKETS}
    counters["batch_ms"] = int(seconds * 1000)
    return counters


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def pack_ids(ids: Sequence[int]) -> bytes:
    return struct.pack(f">{len(ids)}Q", *ids)


def encode_ops(
    bodies: Mapping[int, bytes], ops: Sequence[TimelineOp], deleted: Sequence[int], chunk: int
) -> list[list[Any]]:
    """The script arguments, cut into calls of about ``chunk`` ids each."""
    chunks: list[list[Any]] = []
    current: list[Any] = []
    weight = 0
    for tweet_id, body in bodies.items():
        current += [3, tweet_id, body]
        weight += 1
        if weight >= chunk:
            chunks.append(current)
            current, weight = [], 0
    for op in ops:
        if op.op is Op.ADD:
            current += [1, op.owner, op.horizon, pack_ids(op.tweets)]
        else:
            current += [2, op.owner, pack_ids(op.tweets)]
        weight += 1 + len(op.tweets)
        if weight >= chunk:
            chunks.append(current)
            current, weight = [], 0
    if deleted:
        current += [4, pack_ids(sorted(set(deleted)))]
    if current:
        chunks.append(current)
    return chunks


def pack_timeline(horizon: int, ids_ascending: Sequence[int]) -> bytes:
    """The packed form of a timeline (what the scripts write), for rebuilds and tests."""
    return struct.pack(f">{len(ids_ascending) + 1}Q", horizon, *ids_ascending)


def unpack_timeline(packed: bytes) -> tuple[int, list[int]]:
    """(horizon, ids ascending) of a packed timeline."""
    values = struct.unpack(f">{len(packed) // 8}Q", packed)
    return values[0], list(values[1:])


def visible(ids_ascending: Sequence[int], cap: int) -> list[int]:
    """What readers see of a timeline: its newest ``cap`` ids, newest first."""
    return list(reversed(ids_ascending[-cap:])) if cap else []
