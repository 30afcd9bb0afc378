-- Drop idle users' timelines (fanout.store.timelines.TimelineStore.drop_idle), home and
-- mentions (owner -u), and their lists' (owners -L): each one becomes a tombstone (IDLE;
-- its pairs and replies go, its followees stay), which no write goes to, unless its
-- regeneration is pending (the user is back). Arguments (after the prefixes): generation,
-- then owners: user ids u (u and -u go) and list owners -L (-L alone goes).
-- Returns how many home timelines were dropped.

local gen = arg(1)
local dropped = 0

-- Whether `owner`'s timeline became a tombstone.
local function drop(owner)
  local key = P.timeline .. gen .. ':' .. T .. owner
  if redis.call('STRLEN', key) < HEADER
     or redis.call('EXISTS', P.regeneration .. gen .. ':' .. T .. owner) == 1 then
    return false
  end
  redis.call('SET', key, IDLE)
  local user = gen .. ':' .. T .. owner
  redis.call('DEL', P.reposts .. user, P.aside .. user, P.shown .. user)
  return true
end

for i = 2, nargs() do
  if is_list(arg(i)) then
    drop(arg(i))  -- a list: not counted
  else
    if drop(arg(i)) then dropped = dropped + 1 end
    drop('-' .. arg(i))
  end
end
return dropped
