-- One user's visible ids (fanout.store.timelines.TimelineStore.timeline), the pulled
-- authors' lists merged in (fanout/store/lua/merged.lua).
-- Arguments (after the prefixes): generation, user id, cap, then the lists ('-', or
-- as given_lists reads them).
-- Returns {floor, version, ids newest first, as decimal strings}, false if the
-- timeline is missing or dropped (an idle user's tombstone), or {'lists', authors}
-- if the lists given are not the user's: {'lists', generation, authors}.

local gen, uid, cap = arg(1), arg(2), tonumber(arg(3))
local s = redis.call('GET', P.timeline .. gen .. ':' .. T .. uid)
if not s or #s < HEADER then return false end
local sources, floor, version = view(gen, uid, s, given_lists(4), cap)
if not sources then return {'lists', gen, unpack(floor)} end
local out = {num(floor), num(version)}
for _, id in ipairs(take(sources, math.huge, cap)) do out[#out + 1] = num(id) end
return out
