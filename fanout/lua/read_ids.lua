-- One timeline's visible ids (fanout.timelines.TimelineStore.timeline).
-- KEYS[1]: the timeline. ARGV[1]: the cap.
-- Returns {horizon, version, ids newest first, as decimal strings}, or false if missing
-- or dropped (an idle user's tombstone).

local s = redis.call('GET', KEYS[1])
if not s or #s < HEADER then return false end
local h, ids = decode(s)
local out, cap = {num(h.horizon), num(h.version)}, tonumber(ARGV[1])
for i = #ids, math.max(1, #ids - cap + 1), -1 do out[#out + 1] = num(ids[i]) end
return out
