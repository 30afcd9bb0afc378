-- One home-timeline page in one call (fanout.timelines.TimelineStore.read_page):
-- active generation, token revocation, cursors, the bodies, the watermark.
-- Arguments (after the prefixes): user_id, count, max_id (0: none), since_id (0: none),
-- cap, token issued-at (Unix seconds), today (days since the epoch), seen TTL (seconds).
-- Returns {status, generation, watermark, applied_at, event_time, page JSON, version,
-- partial, first}:
--   ok       the page (JSON), its next_max_id set whenever older entries exist
--            (above since_id, when given);
--            partial = '1' when Redis ran out of entries before `count` while the
--            join has older ones (a timeline waiting for its refill): the caller
--            fills the page from the database
--   beyond   max_id is below what Redis keeps and older entries exist: the
--            caller continues from the database
--   cold     no timeline in the active generation (a dropped one: the user was
--            idle), or one being regenerated
--   nogen    no active generation; revoked: the token was revoked
-- The watermark is the contiguous one: every seq up to it is applied.
-- first = '1' on the user's first read of the day (Redis says so with one write a
-- day, not one per read): the caller records the activity in the database.

local uid, count_wanted = arg(1), tonumber(arg(2))
local max_id, since_id, cap = tonumber(arg(3)), tonumber(arg(4)), tonumber(arg(5))
local valid_after = redis.call('GET', P.tokens .. uid)
if valid_after and tonumber(arg(6)) < tonumber(valid_after) then return {'revoked'} end
local gen = redis.call('GET', P.active)
if not gen then return {'nogen'} end
local first = '0'
if redis.call('GET', P.seen .. uid) ~= arg(7) then
  redis.call('SET', P.seen .. uid, arg(7), 'EX', arg(8))
  first = '1'
end
local wm = redis.call('HMGET', P.watermark .. gen, 'contiguous', 'applied_at', 'event_time')
local head = {gen, wm[1] or '0', wm[2] or '0', wm[3] or '0'}
local s = redis.call('GET', P.timeline .. gen .. ':' .. uid)
-- A timeline being regenerated stays cold until the job has applied its reset.
local regen = redis.call('GET', P.regeneration .. gen .. ':' .. uid)
if not s or #s < HEADER or (regen and tonumber(head[2]) < tonumber(regen)) then
  return {'cold', head[1], head[2], head[3], head[4], '', '0', '0', first}
end
local h = read_header(s)
local version = num(h.version)
local n = count(s)
local lo, hi = math.max(1, n - cap + 1), n   -- only the newest cap entries are visible
local older = n > cap or h.horizon > 0       -- the join has entries below the visible ones
local function first_above(x)               -- first index whose id > x
  local a, b = 1, n
  while a <= b do
    local mid = math.floor((a + b) / 2)
    if id_at(s, mid) <= x then a = mid + 1 else b = mid - 1 end
  end
  return a
end
if max_id > 0 then
  hi = math.min(hi, first_above(max_id) - 1)
  if hi < lo and older and (n == 0 or max_id < id_at(s, lo)) then
    return {'beyond', head[1], head[2], head[3], head[4], '', version, '0', first}
  end
end
-- The join may have entries between since_id (or the start) and the oldest
-- visible one that Redis does not show: pages continue into the database.
local below = older and (n == 0 or since_id < id_at(s, lo))
if since_id > 0 then lo = math.max(lo, first_above(since_id)) end
local keys, last = {}, nil
local stop = math.max(lo, hi - count_wanted + 1)
for i = hi, stop, -1 do
  last = id_at(s, i)
  keys[#keys + 1] = P.tweet .. num(last)
end
local parts = {}
if #keys > 0 then
  for _, body in ipairs(redis.call('MGET', unpack(keys))) do
    if body then parts[#parts + 1] = body end  -- a body gone = a tweet deleted
  end
end
local nxt = 'null'
if last and (stop > lo or below) then nxt = num(last - 1) end
local partial = (below and #keys < count_wanted and stop == lo) and '1' or '0'
-- An empty page of a timeline with older entries: continue from the top.
if partial == '1' and not last then nxt = num(max_id > 0 and max_id or 2 ^ 53 - 1) end
return {'ok', head[1], head[2], head[3], head[4],
        '{"tweets":[' .. table.concat(parts, ',') .. '],"next_max_id":' .. nxt .. '}',
        version, partial, first}
