-- A home timeline as readers see it: the user's timeline merged with the lists
-- of the pulled authors the user follows (fanout.model.join). Each holds exactly its
-- share of the join at or above its horizon, so together they hold the join at
-- or above the highest horizon (the floor); the newest `cap` of those entries
-- are visible. They are disjoint: an author is pushed to a follower or pulled.
-- Nothing is sorted: counts are binary searches, a page is a k-way walk.

-- First index in s[a..b] whose id is above x (b + 1 if none).
local function above(s, a, b, x)
  while a <= b do
    local mid = math.floor((a + b) / 2)
    if id_at(s, mid) <= x then a = mid + 1 else b = mid - 1 end
  end
  return a
end

-- The lists a call was given (see given_lists), or nil: the script reads them.
-- Lists live in their authors' shards: with more than one shard the caller
-- fetches them and passes them in (arguments from `at` on: how many, then
-- author and packed list pairs, '' for a list that is missing).
local function given_lists(at)
  if arg(at) == '-' then return nil end
  local given = {n = tonumber(arg(at))}
  for i = at + 1, at + 2 * given.n, 2 do given[arg(i)] = arg(i + 1) end
  return given
end

-- The sources of a view: {s = packed, lo, n} (entries lo..n are at or above the
-- floor), the floor and the version (the timeline's plus its lists').
-- With `given` lists that are not the ones the user reads, returns nil and the
-- authors the user reads: the caller fetches their lists and calls again.
local function view(gen, uid, s, given)
  local h = read_header(s)
  local sources, floor, version = {{s = s, n = count(s)}}, h.horizon, h.version
  local authors = redis.call('SMEMBERS', P.pulls .. gen .. ':' .. T .. uid)
  if given then
    local same = #authors == given.n
    for _, author in ipairs(authors) do same = same and given[author] ~= nil end
    if not same then return nil, authors end
  end
  for _, author in ipairs(authors) do
    local l
    if given then l = given[author] else l = redis.call('GET', P.list .. gen .. ':' .. author) end
    if l and #l >= HEADER then
      local lh = read_header(l)
      if lh.horizon > floor then floor = lh.horizon end
      version = version + lh.version
      sources[#sources + 1] = {s = l, n = count(l)}
    end
  end
  for _, src in ipairs(sources) do src.lo = above(src.s, 1, src.n, floor - 1) end
  return sources, floor, version
end

-- How many entries of the view are above x.
local function count_above(sources, x)
  local total = 0
  for _, src in ipairs(sources) do total = total + src.n - above(src.s, src.lo, src.n, x) + 1 end
  return total
end

-- Up to `want` entries at or below `top`, newest first.
local function take(sources, top, want)
  local pos, head = {}, {}
  for i, src in ipairs(sources) do
    pos[i] = above(src.s, src.lo, src.n, top) - 1
    head[i] = pos[i] >= src.lo and id_at(src.s, pos[i]) or -1
  end
  local out = {}
  while #out < want do
    local best, best_id = 0, -1
    for i = 1, #sources do
      if head[i] > best_id then best, best_id = i, head[i] end
    end
    if best == 0 then break end
    out[#out + 1] = best_id
    local src = sources[best]
    pos[best] = pos[best] - 1
    head[best] = pos[best] >= src.lo and id_at(src.s, pos[best]) or -1
  end
  return out
end
