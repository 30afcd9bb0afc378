-- Drop idle users' timelines (fanout.store.timelines.TimelineStore.drop_idle): each one
-- becomes a tombstone (IDLE; its pairs go), which no write goes to, unless its regeneration is
-- pending (the user is back). Arguments (after the prefixes): generation, user ids.
-- Returns how many timelines were dropped.

local gen = arg(1)
local dropped = 0
for i = 2, nargs() do
  local key = P.timeline .. gen .. ':' .. T .. arg(i)
  if redis.call('STRLEN', key) >= HEADER
     and redis.call('EXISTS', P.regeneration .. gen .. ':' .. T .. arg(i)) == 0 then
    redis.call('SET', key, IDLE)
    redis.call('DEL', P.reposts .. gen .. ':' .. T .. arg(i))
    dropped = dropped + 1
  end
end
return dropped
