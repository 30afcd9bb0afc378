-- luacheck settings for the Redis scripts in fanout/store/lua (Lua 5.1 inside Redis).
std = "lua51"
read_globals = { "redis", "struct", "cjson", "cmsgpack", "bit", "KEYS", "ARGV" }
max_line_length = 100

-- fanout/store/scripts.py runs each script after the shared parts it needs
-- (packed.lua, prefixes.lua, merged.lua): their helpers are the scripts' globals, and a
-- part defines helpers that each script uses some of.
local packed = {
  "HEADER", "IDLE", "pk", "upk", "num", "count", "id_at", "new_header", "read_header", "pack_header",
  "decode", "encode", "PAIR", "pair_at", "holds", "above",
}
local prefixes = { "P", "T", "arg", "nargs", "MAX_USER", "is_list", "user_of" }
local merged = {
  "above_in", "given_lists", "bulk_ids", "hidden", "screened", "view", "count_above",
  "take",
}
local function both(a, b)
  local out = {}
  for _, v in ipairs(a) do out[#out + 1] = v end
  for _, v in ipairs(b) do out[#out + 1] = v end
  return out
end
files["fanout/store/lua/packed.lua"] = { ignore = { "211" } }
files["fanout/store/lua/prefixes.lua"] = { ignore = { "211" } }
files["fanout/store/lua/merged.lua"] = { ignore = { "211" }, read_globals = both(packed, prefixes) }
files["fanout/store/lua/apply.lua"] = { read_globals = both(packed, prefixes) }
local entries = { "NO_COUNTS", "repost_of", "compose_into", "compose", "render" }
files["fanout/store/lua/entries.lua"] = { ignore = { "211" }, read_globals = both(packed, prefixes) }
files["fanout/store/lua/read_page.lua"] = {
  read_globals = both(both(both(packed, prefixes), merged), entries),
}
files["fanout/store/lua/drop_idle.lua"] = { read_globals = both(packed, prefixes) }
files["fanout/store/lua/read_ids.lua"] = { read_globals = both(both(packed, prefixes), merged) }
