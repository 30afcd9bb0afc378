-- One user's visible ids (fanout.timelines.TimelineStore.timeline), the pulled
-- authors' lists merged in (fanout/lua/merged.lua).
-- Arguments (after the prefixes): generation, user id, cap.
-- Returns {floor, version, ids newest first, as decimal strings}, or false if the
-- timeline is missing or dropped (an idle user's tombstone).

local gen, uid, cap = arg(1), arg(2), tonumber(arg(3))
local s = redis.call('GET', P.timeline .. gen .. ':' .. uid)
if not s or #s < HEADER then return false end
local sources, floor, version = view(gen, uid, s)
local out = {num(floor), num(version)}
for _, id in ipairs(take(sources, math.huge, cap)) do out[#out + 1] = num(id) end
return out
