-- One timeline page in one call (fanout.store.timelines.TimelineStore.read_page):
-- active generation, token revocation, cursors, the pulled authors' lists
-- (fanout/store/lua/merged.lua), the entries as tweet objects with their counts
-- (fanout/store/lua/entries.lua), the watermark.
-- Arguments (after the prefixes): owner (the timeline: user u's home timeline u, or
-- u's mentions -u, which reads no pulled author), user_id (the reader, whose token
-- and activity are checked and recorded: u), count, max_id (0: none), since_id
-- (0: none), cap, token issued-at (Unix seconds), today (days since the epoch), seen
-- TTL (seconds), then the lists: '-' (one shard: the script reads the lists and the
-- bodies itself), or as given_lists reads them (shards: the caller fetches the bodies).
-- Returns {status, generation, watermark, applied_at, event_time, page, version,
-- partial, first, next_max_id}; the page is its JSON, or (given lists) its ids packed
-- and next_max_id beside them:
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
--   lists    the lists given are not the user's: {'lists', generation, authors} to fetch
-- The watermark is the contiguous one: every seq up to it is applied.
-- first = '1' on the user's first read of the day (Redis says so with one write a
-- day, not one per read): the caller records the activity in the database.

local owner, uid, count_wanted = arg(1), arg(2), tonumber(arg(3))
local max_id, since_id, cap = tonumber(arg(4)), tonumber(arg(5)), tonumber(arg(6))
local given = given_lists(10)
local valid_after = redis.call('GET', P.tokens .. T .. uid)
if valid_after and tonumber(arg(7)) < tonumber(valid_after) then return {'revoked'} end
local gen = redis.call('GET', P.active .. T)
if not gen then return {'nogen'} end
local s = redis.call('GET', P.timeline .. gen .. ':' .. T .. owner)
local sources, floor, version
if s and #s >= HEADER then
  sources, floor, version = view(gen, owner, s, given, cap)
  if not sources then return {'lists', gen, unpack(floor)} end  -- nothing written yet
end
local first = '0'
if redis.call('GET', P.seen .. T .. uid) ~= arg(8) then
  redis.call('SET', P.seen .. T .. uid, arg(8), 'EX', arg(9))
  first = '1'
end
local wm = redis.call('HMGET', P.watermark .. gen .. T, 'contiguous', 'applied_at', 'event_time')
local head = {gen, wm[1] or '0', wm[2] or '0', wm[3] or '0'}
-- A timeline being regenerated stays cold until the job has applied its reset.
local regen = redis.call('GET', P.regeneration .. gen .. ':' .. T .. owner)
if not sources or (regen and tonumber(head[2]) < tonumber(regen)) then
  return {'cold', head[1], head[2], head[3], head[4], '', '0', '0', first}
end
local n = count_above(sources, -1)
local visible = math.min(n, cap)             -- the newest cap entries are visible
local older = n > cap or floor > 0           -- the join has entries below the visible ones
local skip = max_id > 0 and count_above(sources, max_id) or 0
if max_id > 0 and skip >= visible and older then
  return {'beyond', head[1], head[2], head[3], head[4], '', num(version), '0', first}
end
-- The join may have entries between since_id (or the start) and the oldest
-- visible one that Redis does not show: pages continue into the database.
local above_since = since_id > 0 and count_above(sources, since_id) or n
local below = older and (n == 0 or above_since >= visible)
local window = math.min(visible, above_since)  -- the page's entries: ranks skip..window-1
local ids = take(sources, max_id > 0 and max_id or math.huge,
                 math.max(0, math.min(count_wanted, window - skip)))
local last = ids[#ids]
local more = skip + #ids < window
local nxt = 'null'
if last and (more or below) then nxt = num(last - 1) end
local partial = (below and #ids < count_wanted and not more) and '1' or '0'
-- An empty page of a timeline with older entries: continue from the top.
if partial == '1' and not last then nxt = num(max_id > 0 and max_id or 2 ^ 53 - 1) end
if given then  -- the bodies are in their tweets' shards: the caller fetches them
  local packed = {}
  for i = 1, #ids do packed[i] = pk(ids[i]) end
  return {'ok', head[1], head[2], head[3], head[4], table.concat(packed), num(version), partial,
          first, nxt}
end
-- The entries as tweet objects (fanout/store/lua/entries.lua): a body gone is a
-- tweet deleted, skipped.
return {'ok', head[1], head[2], head[3], head[4],
        '{"tweets":' .. render(ids) .. ',"next_max_id":' .. nxt .. '}',
        num(version), partial, first}
