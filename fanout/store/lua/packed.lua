-- Packed timelines (see fanout/store/ops.py): a 32-byte header of four
-- 8-byte big-endian numbers (horizon, fence, top, version), then tweet ids
-- as 8-byte big-endian integers, ascending.

local HEADER = 32
-- What an idle user's dropped timeline leaves (shorter than any header).
local IDLE = 'idle'

local function pk(id) return struct.pack('>I8', id) end
local function upk(s, pos) return (struct.unpack('>I8', s, pos or 1)) end
local function num(id) return string.format('%.0f', id) end

-- how many ids a packed timeline holds, and the i-th (1-based, ascending)
local function count(s) return (#s - HEADER) / 8 end
local function id_at(s, i) return upk(s, HEADER + (i - 1) * 8 + 1) end

-- First index of the ids `a` to `b` (1-based) of packed timeline `s` whose id is
-- above `x` (b + 1 if none).
local function above(s, a, b, x)
  while a <= b do
    local mid = math.floor((a + b) / 2)
    if id_at(s, mid) <= x then a = mid + 1 else b = mid - 1 end
  end
  return a
end

local function new_header() return {horizon = 0, fence = 0, top = 0, version = 0} end

local function read_header(s)
  return {horizon = upk(s, 1), fence = upk(s, 9), top = upk(s, 17), version = upk(s, 25)}
end

local function pack_header(h)
  return pk(h.horizon) .. pk(h.fence) .. pk(h.top) .. pk(h.version)
end

-- decode a packed timeline into (header, {ids ascending})
local function decode(s)
  local out = {}
  for pos = HEADER + 1, #s, 8 do out[#out + 1] = upk(s, pos) end
  return read_header(s), out
end

local function encode(h, ids)
  local parts = {pack_header(h)}
  for i = 1, #ids do parts[#parts + 1] = pk(ids[i]) end
  return table.concat(parts)
end

-- Pairs strings (see fanout/store/ops.py): 16-byte records (original, entry),
-- ascending; the i-th record's original and entry (1-based).
local PAIR = 16
local function pair_at(p, i)
  local o, e = struct.unpack('>I8I8', p, (i - 1) * PAIR + 1)
  return o, e
end

-- Whether the packed ascending ids `s` (a filter: fanout.store.keys.filters)
-- hold `id`.
local function holds(s, id)
  local lo, hi = 1, #s / 8
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local v = upk(s, (mid - 1) * 8 + 1)
    if v == id then return true end
    if v < id then lo = mid + 1 else hi = mid - 1 end
  end
  return false
end
