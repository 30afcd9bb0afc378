-- Drop idle users' timelines (fanout.store.timelines.TimelineStore.drop_idle): each one
-- becomes a tombstone (IDLE; its pairs and replies go, its followees stay), which no write
-- goes to, unless its regeneration is pending (the user is back). Arguments (after the
-- prefixes): generation, user ids.
-- Returns how many timelines were dropped.

local gen = arg(1)
local dropped = 0
for i = 2, nargs() do
  local key = P.timeline .. gen .. ':' .. T .. arg(i)
  if redis.call('STRLEN', key) >= HEADER
     and redis.call('EXISTS', P.regeneration .. gen .. ':' .. T .. arg(i)) == 0 then
    redis.call('SET', key, IDLE)
    local user = gen .. ':' .. T .. arg(i)
    redis.call('DEL', P.reposts .. user, P.aside .. user, P.shown .. user)
    dropped = dropped + 1
  end
end
return dropped
