-- A home timeline as readers see it: the user's timeline merged with the lists
-- of the pulled authors the user follows (fanout.model.join). Each holds exactly its
-- share of the join at or above its horizon, so together they hold the join at
-- or above the highest horizon (the floor); the newest `cap` of those entries
-- are visible. Their raw entries are disjoint (an author is pushed to a follower
-- or pulled), but not their originals: a pushed repost of a pulled author's post,
-- reposts of one original by a pushed and a pulled author. Per original only the
-- greatest entry across the sources is in the view: each source's pairs say which
-- of its winners are reposts of what, and the others are hidden. A user who
-- reads no pulled author reads one source, whose winners are the view.
-- Nothing is sorted but the hidden entries: counts are binary searches, a page
-- is a k-way walk. A list's pairs carry a third number, the original's author
-- (`by`): a reader with hidden users (docs/decisions.md D28), or who follows the
-- author with reposts off (a pulls member '-author'), reads the list without
-- the reposts that leaves out, the per-original rule applied to what is left.
-- So does a list with replies (its answers, `ac:`, docs/decisions.md D29): a
-- reader sees a list's reply only if it answers the reader or someone the
-- reader follows (the reader's followees, `tf:`), and no entry whose original
-- answers one of its hidden users. The timeline's user's own entries are never
-- hidden (a list -L's owner o may be a pulled member of it: `user_of`), its
-- replies still shown only if they answer someone followed (a member).

-- First index in the ascending table t whose value is above x (#t + 1 if none).
local function above_in(t, x)
  local a, b = 1, #t
  while a <= b do
    local mid = math.floor((a + b) / 2)
    if t[mid] <= x then a = mid + 1 else b = mid - 1 end
  end
  return a
end

-- The lists a call was given (see given_lists), or nil: the script reads them.
-- Lists live in their authors' shards: with more than one shard the caller
-- fetches them and passes them in (arguments from `at` on: how many, then
-- author, packed list, its pairs triples and its answers, '' for one missing).
local function given_lists(at)
  if arg(at) == '-' then return nil end
  local given = {n = tonumber(arg(at)), pairs = {}, answers = {}}
  for i = at + 1, at + 4 * given.n, 4 do
    given[arg(i)] = arg(i + 1)
    given.pairs[arg(i)] = arg(i + 2)
    given.answers[arg(i)] = arg(i + 3)
  end
  return given
end

-- The `k` ids packed in `s` from its byte `from` on, as numbers: one struct call
-- per 200 (a call per id costs several times more).
local formats = {}
local function bulk_ids(s, from, k)
  local out, o = {}, 0
  while k > 0 do
    local m = math.min(k, 200)
    local f = formats[m]
    if not f then
      f = '>' .. string.rep('I8', m)
      formats[m] = f
    end
    local got = {struct.unpack(f, s, from)}
    for x = 1, m do out[o + x] = got[x] end
    from, k, o = got[m + 1], k - m, o + m
  end
  return out
end

-- The entries of the sources at or above `b` that are not in the view, ascending,
-- and as a set: the `dropped` ones (screened out of their lists), and per
-- original every winner of a source but the greatest across them (a source's
-- repost winners are the last entries of its runs of pairs; a post o is the
-- entry of original o, hidden by any repost of o). Whether an entry at or above
-- `b` is hidden depends on the entries above it only.
local function hidden(sources, b, dropped)
  local best, losers, reposted = {}, {}, {}
  for _, e in ipairs(dropped) do
    if e >= b then losers[#losers + 1] = e end
  end
  for i, src in ipairs(sources) do
    local p, w = src.p, i == 1 and 2 or 3  -- a timeline's records, a list's (with by)
    local flat = src.flat or ((p and #p > 0) and bulk_ids(p, 1, #p / 8)) or {}
    for x = 1, #flat, w do
      local o, e = flat[x], flat[x + 1]
      if flat[x + w] ~= o and e >= b then  -- the last of o's run: o's winner here
        local was = best[o]
        if was == nil then
          best[o] = e
          if o >= b then reposted[#reposted + 1] = o end
        elseif e > was then
          losers[#losers + 1] = was
          best[o] = e
        else
          losers[#losers + 1] = e
        end
      end
    end
  end
  -- The posts among those originals: one pass over each source's entries in
  -- their range (a post is hidden by a repost of it in another source).
  if #reposted > 0 then
    local low, high = math.huge, -1
    for _, o in ipairs(reposted) do
      if o < low then low = o end
      if o > high then high = o end
    end
    for _, src in ipairs(sources) do
      local from = above(src.s, src.lo, src.n, b - 1)
      local len = src.n - from + 1
      if len > 0 and id_at(src.s, from) <= high and id_at(src.s, src.n) >= low then
        local ids = bulk_ids(src.s, HEADER + (from - 1) * 8 + 1, len)
        for _, id in ipairs(ids) do
          if best[id] then losers[#losers + 1] = id end
        end
      end
    end
  end
  table.sort(losers)
  local set = {}
  for _, id in ipairs(losers) do set[id] = true end
  return losers, set
end

-- How many of the sources' entries are at or above `b`.
local function entries_from(sources, b)
  local total = 0
  for _, src in ipairs(sources) do
    total = total + src.n - above(src.s, src.lo, src.n, b - 1) + 1
  end
  return total
end

-- An id above the floor with at least `k` of the sources' entries at or above
-- it, as high as a few steps find (ids are minted in time order: each step
-- interpolates between the last two), and how many entries are at or above it;
-- or the floor (and nil).
local function bound(sources, floor, k)
  local oldest, top = math.huge, floor
  for _, src in ipairs(sources) do
    if src.n >= src.lo then
      oldest = math.min(oldest, id_at(src.s, src.lo))
      top = math.max(top, id_at(src.s, src.n))
    end
  end
  if oldest >= top then return floor end
  local b_lo, c_lo = oldest, entries_from(sources, floor)  -- none between the two
  local b_hi, c_hi = top + 1, 0
  for _ = 1, 4 do
    if c_lo <= k then break end
    local b = b_lo + math.floor((b_hi - b_lo) * (c_lo - k) / (c_lo - c_hi))
    if b <= b_lo or b >= b_hi then break end
    local c = entries_from(sources, b)
    if c >= k then b_lo, c_lo = b, c else b_hi, c_hi = b, c end
  end
  if b_lo > oldest then return b_lo, c_lo end
  return floor, nil
end

-- A pulled author's list (its pairs `p`) as a reader sees it, from the `floor`
-- up (below it the list shows nothing): without the entries `skip(entry,
-- original, by)` leaves out; a winner left out gives its place to the next
-- entry of its original. The list is not rewritten (that would cost a pass over
-- all of it): returns what changes, the records of the pairs that stay
-- (original, entry, by, ...: one per original, its winner), the winners left out
-- (in the list, hidden by the view) and the entries that take their places (not
-- in the list: a source of their own), ascending; and the set of the entries
-- the pairs name.
local function screened(p, skip, floor)
  local recs = bulk_ids(p, 1, #p / 8)  -- original, entry, by, ...
  local kept, dropped, taking, named = {}, {}, {}, {}
  local n, x = #recs, 1
  while x <= n do
    local o, last = recs[x], x  -- o's run: records x .. last
    while last + 3 <= n and recs[last + 3] == o do last = last + 3 end
    for k = x, last, 3 do named[recs[k + 1]] = true end
    local won = last  -- the winner left: the newest entry not left out
    while won >= x and skip(recs[won + 1], o, recs[won + 2]) do
      won = won - 3
    end
    local e = won >= x and recs[won + 1] or nil
    if e and e ~= o then
      kept[#kept + 1], kept[#kept + 2], kept[#kept + 3] = o, e, recs[won + 2]
    end
    if won ~= last and recs[last + 1] >= floor then
      dropped[#dropped + 1] = recs[last + 1]
      if e and e >= floor then taking[#taking + 1] = e end
    end
    x = last + 3
  end
  table.sort(taking)
  return kept, dropped, taking, named
end

-- The sources of a view: {s = packed, lo, n} (entries lo..n are at or above the
-- floor), the floor and the version (the timeline's plus its lists').
-- With `given` lists that are not the ones the user reads, returns nil and the
-- authors the user reads: the caller fetches their lists and calls again.
local function view(gen, uid, s, given, cap)
  local h = read_header(s)
  local sources, floor, version = {{s = s, n = count(s)}}, h.horizon, h.version
  local members = redis.call('SMEMBERS', P.pulls .. gen .. ':' .. T .. uid)
  local authors, quiet = {}, {}
  for i, m in ipairs(members) do
    if string.sub(m, 1, 1) == '-' then
      authors[i] = string.sub(m, 2)
      quiet[authors[i]] = true
    else
      authors[i] = m
    end
  end
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
      sources[#sources + 1] = {s = l, n = count(l), author = author}
    end
  end
  for _, src in ipairs(sources) do src.lo = above(src.s, 1, src.n, floor - 1) end
  -- A pulled author's list's pairs and answers: given by the caller, or read here.
  local function list_pairs(author)
    if given then return given.pairs[author] end
    return redis.call('GET', P.list_reposts .. gen .. ':' .. author)
  end
  local function list_answers(author)
    if given then return given.answers[author] end
    return redis.call('GET', P.list_answers .. gen .. ':' .. author)
  end
  -- The lists the reader may not see all of (its hidden users, reposts off,
  -- replies), from the floor up; the hidden users as a set, once.
  local f = #sources > 1 and redis.call('GET', P.filters .. gen .. ':' .. T .. uid) or nil
  local hides = {}
  if f then
    for _, id in ipairs(bulk_ids(f, 1, #f / 8)) do hides[id] = true end
  end
  local follows  -- the reader's followees, read once if a list has replies
  local reader = tonumber(uid)
  local user = user_of(uid)  -- whose entries the filter leaves in (a list's: its owner's)
  local dropped, lists = {}, #sources
  for i = 2, lists do
    local src = sources[i]
    local a = src.lo <= src.n and list_answers(src.author) or nil
    if a and #a == 0 then a = nil end
    if (f or quiet[src.author] or a) and src.lo <= src.n then
      local ans = {}  -- entry -> the user its original answers
      if a then
        for pos = 1, #a, 16 do
          local e, u = struct.unpack('>I8I8', a, pos)
          ans[e] = u
        end
        follows = follows or redis.call('GET', P.followees .. gen .. ':' .. T .. uid) or ''
      end
      local mine = tonumber(src.author) == user  -- never hidden by the filter
      -- A reply shows if it answers the reader or someone the reader follows.
      local function unseen(e)
        local u = ans[e]
        return u ~= nil and ((hides[u] and not mine) or (u ~= reader and not holds(follows, u)))
      end
      local q = quiet[src.author]
      local function skip(e, o, by)
        if e == o then return unseen(e) end
        if mine then return q end
        local u = ans[e]
        return q or hides[by] or (u ~= nil and hides[u])
      end
      local p = list_pairs(src.author)
      src.read = true  -- its pairs are src.p or src.flat
      local named = {}
      if p and #p > 0 then  -- no reposts: none of them to leave out
        local out, taking
        src.flat, out, taking, named = screened(p, skip, floor)
        for _, e in ipairs(out) do dropped[#dropped + 1] = e end
        if #taking > 0 then
          local packed = {string.rep('\0', HEADER)}
          for j, id in ipairs(taking) do packed[j + 1] = pk(id) end
          sources[#sources + 1] = {s = table.concat(packed), lo = 1, n = #taking, read = true}
        end
      end
      -- Replies that are winners of their own (no repost of them in the list).
      for e in pairs(ans) do
        if e >= floor and not named[e] and unseen(e) then dropped[#dropped + 1] = e end
      end
    end
  end
  table.sort(dropped)
  sources.hidden, sources.hide = dropped, {}
  for _, e in ipairs(dropped) do sources.hide[e] = true end
  if #sources > 1 then  -- reposts may repeat an original across the sources
    local any, shown = false, 0
    for _, src in ipairs(sources) do
      if src.lo <= src.n then shown = shown + 1 end
    end
    for i, src in ipairs(sources) do
      -- A source with nothing at or above the floor shows nothing and hides
      -- nothing (every entry of its pairs is below the floor too): its pairs
      -- are not read. Nor are any when one source shows (a source's winners
      -- are one per original already).
      if shown > 1 and src.lo <= src.n then
        if i == 1 then
          src.p = redis.call('GET', P.reposts .. gen .. ':' .. T .. uid)
        elseif not src.read then
          src.p = list_pairs(src.author)
        end
        any = any or (src.p and #src.p > 0) or (src.flat and #src.flat > 0)
      end
    end
    if any then
      -- A read needs the newest cap + 1 entries of the view exactly (which are
      -- visible, and that more exist): the hidden entries from a bound with
      -- twice that many entries above it, or from the floor if that many do not
      -- stay. Counts below the bound are then over cap either way.
      local b, from_b = bound(sources, floor, 2 * (cap + 1))
      local hid, set = hidden(sources, b, dropped)
      if from_b and from_b - #hid <= cap then
        hid, set = hidden(sources, floor, dropped)
      end
      sources.hidden, sources.hide = hid, set
    end
  end
  return sources, floor, version
end

-- How many entries of the view are above x.
local function count_above(sources, x)
  local h = sources.hidden
  return entries_from(sources, x + 1) - (#h - above_in(h, x) + 1)
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
    if not sources.hide[best_id] then out[#out + 1] = best_id end
    local src = sources[best]
    pos[best] = pos[best] - 1
    head[best] = pos[best] >= src.lo and id_at(src.s, pos[best]) or -1
  end
  return out
end
