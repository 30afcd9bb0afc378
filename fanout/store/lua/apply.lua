-- Apply a batch's timeline operations (fanout.store.timelines.TimelineStore.apply).
-- Arguments (after the prefixes): generation, cap, slack, window (see WINDOW
-- below), the high water (see HIGH below), then operations
-- (see fanout/store/ops.py encode_ops):
--   4 packed-ids                     delete tweet bodies (comes first)
--   3 tweet-id body                  put a tweet body
--  10 tweet-id counts                set an original's counts ('': delete them)
--   1 owner horizon seq ids pairs    merge entries into a timeline (creating it)
--     answers
--   2 owner seq ids pairs            remove entries from a timeline
--   5 owner horizon seq as_of        a refill from the database: kept until the
--     pulled ids pairs answers       watermark reaches its seq (see below)
--   6 watermark deleted-ids          apply the kept refills up to the watermark,
--                                    leaving out the tweets deleted since (packed ids)
--   7 author horizon ids pairs       set a pulled author's list (its answers beside it)
--     answers
--   8 owner seq author quiet         the owner reads the author's list (quiet: '1'
--     ids pairs                      without its reposts): the ids leave the
--                                    timeline (fenced, as by an unfollow)
--   9 owner horizon seq author       the owner stops reading the author's list:
--     list-version ids pairs answers the ids are merged in (an unfollow: none, a fence)
--  11 owner seq hidden               the owner's hidden users (packed ids, ascending)
--  12 owner seq user                 the owner follows the user: its replies aside show
--  13 owner seq user                 the owner unfollows the user: its replies go aside
--  14 owner seq ids author          the post names or answers user u, the owner -u: into
--                                    u's mentions timeline unless u's filter hides the author
--  15 owner seq                      the owner (a deleted list) is gone: kept like a reset
--                                    until the watermark reaches seq, then every key of it
--                                    goes (see drop_owner)
-- `ids` are packed entry ids (ascending), `pairs` the reposts among them: 24-byte
-- records (entry, original, by), '' when there are none; `by` is the user the
-- owner's filter checks the entry against (0: none). `answers`: the entries whose
-- original answers a user other than its author and the owner, as 16-byte records
-- (entry, user), '' when none (see "Replies" below); a user plus OWN marks the entry
-- as the owner's own (a list's owner o's, docs/decisions.md D31): conditional like
-- any reply, but never left out by the filter.
--
-- Filters (docs/decisions.md D28): an owner's hidden users (P.filters, beside the
-- timeline) leave out of every merge the reposts whose `by` they name, before the
-- per-original rule sees them. A change of them empties the timeline above a new
-- horizon (every entry it held is below it) and asks for a refill, which the
-- database computes with the new filter: reads go on into the database until
-- the refill is applied, and a refill read before the change is stale.
--
-- Reposts (fanout/store/ops.py): a timeline or list holds its *winners*, per
-- original the greatest of its raw entries in scope, and beside it (P.reposts,
-- P.list_reposts) the pairs: every repost in scope and (o, o) for a post o that
-- is not its original's winner, sorted. The rules below are on the raw entries;
-- cap, trim, short, horizon, top and version on the winners. A timeline without
-- pairs (no repost in scope) takes the paths it took before reposts; a repost
-- newer than every winner takes a short one (add_newest); anything else with
-- reposts decodes the raw entries, applies the operation and encodes both strings.
-- Every key a call touches is in its shard (the tag T): the caller groups the
-- operations by the shard of their owner, author or tweet, and reads what a call
-- needs from other shards beforehand (the deleted tweets, a list's version).
-- Returns {added, removed, created, short, skipped}. Every operation is idempotent.
--
-- Idle users' timelines are dropped: a tombstone (IDLE) takes their place and
-- no write goes to it (`skipped`); a user coming back reads from the database
-- while a reset regenerates the timeline. While that regeneration is pending
-- (its key exists), the timeline is a placeholder: adds and removals land in
-- it (a removal creates it, to carry its fence), and the reset completes it
-- with the higher of the two horizons (the placeholder misses what came
-- before the regeneration was asked for); a stale one is asked for again
-- through the refill set, the timeline cold until the new one is applied.
--
-- A refill waits for every event before it to be applied: its tweets are
-- merged only when the authors' states that route their deletes already know
-- this follower. Its read saw every seq up to `as_of`; if the fence has passed
-- that (an unfollow, or entries fallen below the horizon, that the read may
-- not have seen) it is dropped and asked for again; so is one whose read left
-- out other pulled authors than the owner reads now. Its tweets deleted since
-- (their bodies are gone; the caller names them) are skipped.
--
-- Pulled authors (fanout.model.join): their followers' timelines hold none of their
-- tweets; each follower's set of pulled authors (P.pulls) names the lists
-- (P.list) its reads merge in (fanout/store/lua/merged.lua). Moving an author in or
-- out of that set bumps the timeline's version by more than the list's: the
-- merged version (the sum) still only grows.
--
-- A timeline holds exactly the join's tweets at or above its horizon, the
-- replies its view leaves out kept aside (docs/decisions.md D29). When view and
-- aside together outgrow cap + slack it keeps their newest cap + slack/2. When
-- removals leave fewer than cap of them above a horizon (a short timeline), its
-- owner goes into the refill set; the web tier answers it with a reset.

local gen, cap, slack = arg(1), tonumber(arg(2)), tonumber(arg(3))
-- add_newest reads a timeline's newest WINDOW winners and pairs (a GETRANGE
-- each; a kilobyte costs a script about a microsecond to read), and the whole
-- strings only when an original is older than what those hold: a repost is
-- most often of a recent tweet, whose entries are among a timeline's newest.
local WINDOW = tonumber(arg(4))
-- The highest seq the job has applied, in any partition: what a trim fences
-- at. What it drops below the horizon may have come from an author's key that
-- ran ahead of the op's own seq (a follow's merge of tweets written after
-- it); a refill read before all of it must not lower the horizon over it.
local HIGH = tonumber(arg(5))
if redis.call('EXISTS', P.generation .. gen .. T) == 0 then
  return redis.error_reply('NOGEN generation ' .. gen .. ' is not in Redis (was Redis flushed?)')
end
local limit = cap + slack
local keep = cap + math.floor(slack / 2)
local added, removed, created, short, skipped = 0, 0, 0, 0, 0

local function regeneration(owner) return P.regeneration .. gen .. ':' .. T .. owner end
local function pulls(owner) return P.pulls .. gen .. ':' .. T .. owner end
local function list_key(author) return P.list .. gen .. ':' .. T .. author end
local function pairs_key(owner) return P.reposts .. gen .. ':' .. T .. owner end
local function list_pairs_key(author) return P.list_reposts .. gen .. ':' .. T .. author end
local function filters_key(owner) return P.filters .. gen .. ':' .. T .. owner end
local function followees_key(owner) return P.followees .. gen .. ':' .. T .. owner end
local function aside_key(owner) return P.aside .. gen .. ':' .. T .. owner end
local function shown_key(owner) return P.shown .. gen .. ':' .. T .. owner end
local function pending(owner) return redis.call('EXISTS', regeneration(owner)) == 1 end

-- Ids in bulk: one struct call per BULK of them, half the cost of a call per
-- id (Lua's stack bounds how many one call takes).
local BULK = 500
local formats = {}
local function format(m)
  local f = formats[m]
  if not f then
    f = '>' .. string.rep('I8', m)
    formats[m] = f
  end
  return f
end

-- The `k` ids packed in `s` from its byte `from` on, as numbers.
local function unpack_ids(s, from, k)
  if k <= BULK then
    local got = {struct.unpack(format(k), s, from)}
    got[k + 1] = nil  -- where the next id would start
    return got
  end
  local out, o = {}, 0
  while k > 0 do
    local m = math.min(k, BULK)
    local got = {struct.unpack(format(m), s, from)}
    for x = 1, m do out[o + x] = got[x] end
    from, k, o = got[m + 1], k - m, o + m
  end
  return out
end

local function pack_ids(ids)
  local parts = {}
  for x = 1, #ids, BULK do
    local y = math.min(#ids, x + BULK - 1)
    parts[#parts + 1] = struct.pack(format(y - x + 1), unpack(ids, x, y))
  end
  return table.concat(parts)
end

-- The ids packed in `blob`, as numbers.
local function ids_of(blob) return unpack_ids(blob, 1, #blob / 8) end

-- The newest id a timeline holds or held: an entry arriving below it is late.
local function ceiling(h, ids) return math.max(h.top, ids[#ids] or 0) end

-- --- Replies (docs/decisions.md D29) ----------------------------------------
-- Beside a timeline, the replies its owner's followees wrote to users it does
-- not follow (aside: not in the view) and those to users it follows (shown),
-- as 16-byte records (user answered, entry) in entry order: a new reply, the
-- newest, is appended (no copy of the records through the script: a `GET` of
-- a few kilobytes costs a script more than the rest of a delivery). The cap
-- counts the aside: a timeline keeps its newest `keep` of winners and aside
-- together.
local REC = 16
-- Added to the user of an `answers` record (user ids are below 2^32): the entry's
-- actor is the timeline's user (a list's owner o replying, or reposting a reply):
-- the filter leaves it in (o's own entries are never hidden), but a reply still
-- shows only if its user is followed (a member of the list), else it goes aside.
local OWN = 2 ^ 52

-- How many replies the owner's timeline keeps aside.
local function asides(owner) return redis.call('STRLEN', aside_key(owner)) / REC end

-- The records packed in `s`, decoded in bulk: user, entry, user, entry, ...
local function records_of(s) return unpack_ids(s, 1, #s / 8) end

-- The entries kept aside, ascending.
local function aside_entries(owner)
  local flat = records_of(redis.call('GET', aside_key(owner)) or '')
  local out = {}
  for k = 2, #flat, 2 do out[k / 2] = flat[k] end
  return out
end

-- The horizon that keeps the newest `keep` of `nw` winners and the aside
-- records `a` (packed) together, and how many winners it keeps: the keep-th
-- newest of two ascending lists, by a binary search on how many of the kept
-- are aside. `winner(k)`: the k-th newest winner (at least `keep` of them, or
-- all). Nothing is decoded: a full timeline trims every slack/2 entries.
local function cut(nw, winner, a)
  local na = #a / REC
  local function aside(k) return upk(a, #a - k * REC + 9) end  -- the k-th newest
  local lo, hi = math.max(0, keep - nw), math.min(na, keep)  -- the aside kept
  while lo < hi do
    local j = math.floor((lo + hi) / 2)
    if aside(j + 1) > winner(keep - j) then lo = j + 1 else hi = j end
  end
  local k = keep - lo
  if lo == 0 then return winner(k), k end
  if k == 0 then return aside(lo), k end
  return math.min(winner(k), aside(lo)), k
end

-- cut() of winners `ids` (ascending) and the owner's aside: the horizon.
local function cut_ids(owner, ids)
  local n = #ids
  return (cut(n, function(k) return ids[n - k + 1] end, redis.call('GET', aside_key(owner))))
end

-- Index (1-based) of the first record of `s` whose entry is at or above `e`;
-- #s / REC + 1 if none.
local function record_index(s, e)
  local lo, hi = 1, #s / REC
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if upk(s, (mid - 1) * REC + 9) < e then lo = mid + 1 else hi = mid - 1 end
  end
  return lo
end

-- Write records `s` to `key` (none: the key goes).
local function put_records(key, s)
  if #s > 0 then redis.call('SET', key, s) else redis.call('DEL', key) end
end

-- Add distinct records {u, e} to `key` (those it holds stay once); returns how
-- many were new, and the key's length in bytes when it was appended to (else
-- nil). Newer than every record kept (a delivery's reply), they are appended;
-- older ones (a follow's run, a late reply, a batch run again) are placed by
-- binary search in the string as read, written once.
local function insert_records(key, recs)
  for k = 2, #recs do  -- most often ascending already (answers come by entry)
    if recs[k][2] < recs[k - 1][2] then
      table.sort(recs, function(a, b) return a[2] < b[2] end)
      break
    end
  end
  local tail = redis.call('GETRANGE', key, -8, -1)  -- the newest record's entry ('': none)
  local last = #tail == 8 and upk(tail) or 0
  local parts = {}
  if recs[1][2] > last then
    for k, r in ipairs(recs) do parts[k] = struct.pack('>I8I8', r[1], r[2]) end
    return #recs, redis.call('APPEND', key, table.concat(parts))
  end
  local s = redis.call('GET', key) or ''
  local from, n = 1, 0
  for k = 1, #recs do
    local u, e = recs[k][1], recs[k][2]
    local i = record_index(s, e)
    local at = (i - 1) * REC + 1
    if i > #s / REC or upk(s, at + 8) ~= e then
      parts[#parts + 1] = string.sub(s, from, at - 1)
      parts[#parts + 1] = struct.pack('>I8I8', u, e)
      from, n = at, n + 1
    end
  end
  if n == 0 then return 0 end
  parts[#parts + 1] = string.sub(s, from)
  redis.call('SET', key, table.concat(parts))
  return n
end

-- Drop the records of `key` whose entry `leaves` says goes; returns how many went.
local function drop_records(key, leaves)
  local flat = records_of(redis.call('GET', key) or '')
  local kept, gone = {}, 0
  for k = 1, #flat, 2 do
    if leaves(flat[k + 1]) then
      gone = gone + 1
    else
      kept[#kept + 1] = flat[k]
      kept[#kept + 1] = flat[k + 1]
    end
  end
  if gone > 0 then put_records(key, pack_ids(kept)) end
  return gone
end

-- Drop the records of `key` below entry `floor` (a prefix); returns how many went.
local function prune_records(key, floor)
  local s = redis.call('GET', key)
  if not s then return 0 end
  local i = record_index(s, floor)
  if i > 1 then put_records(key, string.sub(s, (i - 1) * REC + 1)) end
  return i - 1
end

-- Drop the replies (aside and shown) below `floor`; returns how many aside went.
local function prune_replies(owner, floor)
  prune_records(shown_key(owner), floor)
  return prune_records(aside_key(owner), floor)
end

-- Take the records of user `u` out of `key`: their entries, ascending. (A
-- scan of the owner's records: at most a timeline's length.)
local function take_run(key, u)
  local flat = records_of(redis.call('GET', key) or '')
  local out, rest = {}, {}
  for k = 1, #flat, 2 do
    if flat[k] == u then
      out[#out + 1] = flat[k + 1]
    else
      rest[#rest + 1] = flat[k]
      rest[#rest + 1] = flat[k + 1]
    end
  end
  if #out > 0 then put_records(key, pack_ids(rest)) end
  return out
end

local function check_short(owner, h, n)
  if n < cap and h.horizon > 0 and n + asides(owner) < cap then
    redis.call('SADD', P.refill .. T, owner)
    short = short + 1
  end
end

-- The fence: the newest seq that removed entries or had entries fall below the
-- horizon (a merge's horizon, a trim). A reset older than it may miss them, or
-- hold what was removed.
local function fence(h, seq) if seq > h.fence then h.fence = seq end end

-- Write a timeline, trimmed to its newest `keep` entries (with the aside)
-- when over `limit`.
local function store(owner, key, h, ids, seq)
  local na = asides(owner)
  if #ids + na > limit then
    h.horizon = na == 0 and ids[#ids - keep + 1] or cut_ids(owner, ids)
    local kept = {}
    for i = 1, #ids do if ids[i] >= h.horizon then kept[#kept + 1] = ids[i] end end
    ids = kept
    prune_replies(owner, h.horizon)
    fence(h, math.max(seq, HIGH))
  end
  if h.top ~= 0 and ids[#ids] ~= nil and ids[#ids] >= h.top then h.top = 0 end
  redis.call('SET', key, encode(h, ids))
  return #ids
end

-- --- Raw entries (reposts) ---------------------------------------------------

-- The `pairs` arguments' records (entry, original, by).
local ARG_PAIR = 24
-- entry -> by of the entries of the operation being applied (its owner's: one
-- operation touches one timeline or list).
local BY = {}

-- entry -> original of the `pairs` argument of an operation (and their `by` in BY).
local function originals_of(blob)
  local out = {}
  for pos = 1, #blob, ARG_PAIR do
    local e, o, by = struct.unpack('>I8I8I8', blob, pos)
    out[e] = o
    BY[e] = by
  end
  return out
end

-- An operation's ids, pairs and answers without the entries the owner's filter
-- hides: reposts of its hidden users' tweets, entries whose original answers one.
local function screen(owner, blob, pblob, ablob)
  if #pblob == 0 and #ablob == 0 then return blob, pblob, ablob end
  local f = redis.call('GET', filters_key(owner))
  if not f then return blob, pblob, ablob end
  local drop, any = {}, false
  for pos = 1, #pblob, ARG_PAIR do
    local e, _, by = struct.unpack('>I8I8I8', pblob, pos)
    if by ~= 0 and holds(f, by) then drop[e], any = true, true end
  end
  for pos = 1, #ablob, REC do
    local e, u = struct.unpack('>I8I8', ablob, pos)
    if u < OWN and holds(f, u) then drop[e], any = true, true end
  end
  if not any then return blob, pblob, ablob end
  local ids, kept, answers = {}, {}, {}
  for pos = 1, #blob, 8 do
    local e = upk(blob, pos)
    if not drop[e] then ids[#ids + 1] = e end
  end
  for pos = 1, #pblob, ARG_PAIR do
    if not drop[upk(pblob, pos)] then
      kept[#kept + 1] = string.sub(pblob, pos, pos + ARG_PAIR - 1)
    end
  end
  for pos = 1, #ablob, REC do
    if not drop[upk(ablob, pos)] then
      answers[#answers + 1] = string.sub(ablob, pos, pos + REC - 1)
    end
  end
  return pack_ids(ids), table.concat(kept), table.concat(answers)
end

-- Sort the replies among an operation's entries (`answers`: (entry, user)
-- records by entry) as the owner's followees say: those to users it follows go
-- into the view (and are recorded as shown), the others aside, where they are
-- not in the view and count towards the cap. `floor`: the timeline's horizon
-- after the operation; entries below it are left in (the merge skips them and
-- fences). Returns the ids for the view, how many went aside, and the aside's
-- length in bytes when they were appended (else nil). This runs once per
-- delivery of a reply: `ids` and `answers` are walked together (both
-- ascending), and the ids for the view are cut from `ids` around the replies
-- that go aside, not decoded and packed again.
local function sort_replies(owner, blob, orig, ablob, floor)
  local tf = redis.call('GET', followees_key(owner)) or ''
  local shown, aside = {}, {}
  local parts, from, pos, nb = {}, 1, 1, #blob
  for at = 1, #ablob, REC do
    local e, u = struct.unpack('>I8I8', ablob, at)
    if u >= OWN then u = u - OWN end  -- the owner's own: as conditional as any
    while pos <= nb and upk(blob, pos) < e do pos = pos + 8 end
    -- a post (a repost shows like any repost) the operation still holds
    if pos <= nb and upk(blob, pos) == e and orig[e] == nil and e >= floor then
      if holds(tf, u) then
        shown[#shown + 1] = {u, e}
      else
        aside[#aside + 1] = {u, e}
        parts[#parts + 1] = string.sub(blob, from, pos - 1)
        from = pos + 8
      end
    end
  end
  if #shown > 0 then insert_records(shown_key(owner), shown) end
  if #aside == 0 then return blob, 0 end
  parts[#parts + 1] = string.sub(blob, from)
  local went, len = insert_records(aside_key(owner), aside)
  return table.concat(parts), went, len
end

-- The raw entries (entry -> original) of winners `ids` and pairs string `p`.
local function raw_of(ids, p)
  local raw = {}
  if p then
    for pos = 1, #p, PAIR do
      local o, e = struct.unpack('>I8I8', p, pos)
      raw[e] = o
    end
  end
  for i = 1, #ids do
    if raw[ids[i]] == nil then raw[ids[i]] = ids[i] end
  end
  return raw
end

-- The winners (ascending) and the pairs string of raw entries (a list's, with
-- each record's `by` from BY, if `listed`).
local function view_of(raw, listed)
  local best = {}
  for e, o in pairs(raw) do
    local b = best[o]
    if b == nil or e > b then best[o] = e end
  end
  local ids = {}
  for _, e in pairs(best) do ids[#ids + 1] = e end
  table.sort(ids)
  local recs = {}
  for e, o in pairs(raw) do
    if e ~= o or best[o] ~= o then recs[#recs + 1] = {o, e} end
  end
  table.sort(recs, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
  local parts = {}
  if listed then
    for i = 1, #recs do
      local o, e = recs[i][1], recs[i][2]
      parts[i] = struct.pack('>I8I8I8', o, e, e ~= o and BY[e] or 0)
    end
  else
    for i = 1, #recs do parts[i] = struct.pack('>I8I8', recs[i][1], recs[i][2]) end
  end
  return ids, table.concat(parts)
end

local function set_of(ids)
  local out = {}
  for i = 1, #ids do out[ids[i]] = true end
  return out
end

-- Drop the raw entries below `floor`; returns how many went.
local function prune(raw, floor)
  local gone = 0
  for e in pairs(raw) do
    if e < floor then
      raw[e] = nil
      gone = gone + 1
    end
  end
  return gone
end

-- Add entries `new` (their originals in `orig`; a post's is itself) at or above
-- `floor` to `raw`; returns how many were new to it.
local function merge_raw(raw, new, orig, floor)
  local n = 0
  for _, e in ipairs(new) do
    if e >= floor and raw[e] == nil then
      raw[e] = orig[e] or e
      n = n + 1
    end
  end
  return n
end

-- Write a timeline (or list) given as raw entries: winners new to it below
-- `top` arrived late (the version moves), then over `limit` it keeps its newest
-- `keep` winners (and the raw entries at or above the oldest of them). `had`:
-- the winners it held. Returns how many winners it holds.
local function store_raw(owner, key, pkey, h, raw, seq, had, top)
  local ids, p = view_of(raw)
  for i = 1, #ids do
    if ids[i] < top and not had[ids[i]] then
      h.version = h.version + 1
      break
    end
  end
  local na = asides(owner)
  if #ids + na > limit then
    h.horizon = na == 0 and ids[#ids - keep + 1] or cut_ids(owner, ids)
    prune(raw, h.horizon)
    prune_replies(owner, h.horizon)
    ids, p = view_of(raw)
    fence(h, math.max(seq, HIGH))
  end
  if h.top ~= 0 and ids[#ids] ~= nil and ids[#ids] >= h.top then h.top = 0 end
  redis.call('SET', key, encode(h, ids))
  if #p > 0 then redis.call('SET', pkey, p) else redis.call('DEL', pkey) end
  return #ids
end

-- Drop the pairs of `pkey` whose entry is below `floor` (a trim raised the horizon).
local function prune_pairs(pkey, floor)
  local p = redis.call('GET', pkey)
  if not p then return end
  local flat, kept, k = unpack_ids(p, 1, #p / 8), {}, 0  -- original, entry, original, ...
  for x = 2, #flat, 2 do
    if flat[x] >= floor then
      kept[k + 1], kept[k + 2] = flat[x - 1], flat[x]
      k = k + 2
    end
  end
  if k == 0 then redis.call('DEL', pkey)
  elseif k < #flat then redis.call('SET', pkey, pack_ids(kept)) end
end

-- Merge `new` (ascending) into `ids`, skipping ids below `floor`.
-- Returns the merged list, how many were added, and whether one arrived late.
local function merge(ids, new, floor, top)
  local merged, i, j, n, late = {}, 1, 1, 0, false
  while i <= #ids or j <= #new do
    local a, b = ids[i], new[j]
    if b ~= nil and b < floor then j = j + 1
    elseif b == nil or (a ~= nil and a < b) then merged[#merged + 1] = a; i = i + 1
    elseif a == b then merged[#merged + 1] = a; i = i + 1; j = j + 1
    else
      merged[#merged + 1] = b; j = j + 1; n = n + 1
      if b < top then late = true end
    end
  end
  return merged, n, late
end

local function add_slow(owner, key, s, new, hm, seq)
  local h, ids = new_header(), {}
  if s then h, ids = decode(s) else created = created + 1 end
  local top = ceiling(h, ids)
  if hm > h.horizon then
    h.horizon = hm
    local kept = {}
    for i = 1, #ids do if ids[i] >= hm then kept[#kept + 1] = ids[i] end end
    ids = kept
    prune_replies(owner, hm)
    fence(h, seq)
  end
  -- A merge that leaves out older tweets (hm > 0), or drops some below the
  -- horizon, fences: a reset read before it has neither, and may not lower
  -- the horizon over them.
  if hm > 0 or (#new > 0 and new[1] < h.horizon) then fence(h, seq) end
  local merged, n, late = merge(ids, new, h.horizon, s and top or 0)
  if late then h.version = h.version + 1 end
  check_short(owner, h, store(owner, key, h, merged, seq))
  return n
end

-- Trim after an APPEND: keep the newest `keep` (a new horizon, the fence moved),
-- and the pairs (of `owner`, if it may have some) at or above it.
local function trim(key, len, seq, owner)
  local na = asides(owner)
  if len + na * 8 > HEADER + limit * 8 then
    local h = read_header(redis.call('GETRANGE', key, 0, HEADER - 1))
    local tail
    if na == 0 then
      tail = redis.call('GETRANGE', key, len - keep * 8, -1)
      h.horizon = upk(tail, 1)
    else
      local akey = aside_key(owner)
      local a = redis.call('GET', akey)
      local t = redis.call('GETRANGE', key, math.max(HEADER, len - keep * 8), -1)
      local k
      h.horizon, k = cut(#t / 8, function(j) return upk(t, #t - j * 8 + 1) end, a)
      tail = string.sub(t, #t - k * 8 + 1)
      local i = record_index(a, h.horizon)
      if i > 1 then put_records(akey, string.sub(a, (i - 1) * REC + 1)) end
      prune_records(shown_key(owner), h.horizon)
    end
    fence(h, math.max(seq, HIGH))
    redis.call('SET', key, pack_header(h) .. tail)
    prune_pairs(pairs_key(owner), h.horizon)
    if na == 0 then prune_replies(owner, h.horizon) end
  end
end

-- Insert ids into a timeline without a horizon change, rewriting only the
-- entries from the first new id on (SETRANGE): for ids a little older than
-- the newest (a tweet that arrived late, a write that follows another of the
-- same micro-batch), that is a handful of entries, not 800. A micro-batch's
-- posts reach a timeline in one write, an append (spark/stream/bundles.py routes
-- every timeline to one task), but a follow's merge of older tweets and a
-- batch run again take this path, so it
-- reads what it needs and decodes and packs in bulk: `t` holds the entries
-- `base` to `n` (the newest ones, or all of them), packed from its byte
-- `off` + 1. Returns nil, having written nothing, when the first new id is
-- older than every entry of `t` but `t` does not start at the oldest entry:
-- the caller then passes the whole timeline.
local function add_inside(owner, key, h, n, t, off, base, blob, seq)
  local new, below = ids_of(blob), false
  if new[1] ~= nil and new[1] < h.horizon then  -- ascending: those below come first
    local all = new
    new, below = {}, true
    for _, id in ipairs(all) do if id >= h.horizon then new[#new + 1] = id end end
  end
  local lo, hi = base, n
  if #new > 0 then
    while lo <= hi do
      local mid = math.floor((lo + hi) / 2)
      if upk(t, off + (mid - base) * 8 + 1) < new[1] then lo = mid + 1 else hi = mid - 1 end
    end
    if lo == base and base > 1 then return nil end
  end
  if below and seq > h.fence then
    fence(h, seq)
    redis.call('SETRANGE', key, 8, pk(h.fence))
  end
  if #new == 0 then return 0 end
  local old = unpack_ids(t, off + (lo - base) * 8 + 1, n - lo + 1)  -- entries lo to n
  local top = math.max(h.top, old[#old] or (n > 0 and upk(t, off + (n - base) * 8 + 1)) or 0)
  -- m counts the merged ids (cheaper than the length operator in this loop).
  local merged, m, n_added, late, i, a = {}, 0, 0, false, 1, old[1]
  for j = 1, #new do
    local b = new[j]
    while a ~= nil and a < b do
      m = m + 1
      merged[m] = a
      i = i + 1
      a = old[i]
    end
    if a ~= b then
      m = m + 1
      merged[m] = b
      n_added = n_added + 1
      if b < top then late = true end
    end
  end
  if n_added == 0 then return 0 end
  for x = i, #old do
    m = m + 1
    merged[m] = old[x]
  end
  if late then h.version = h.version + 1 end
  if h.top ~= 0 and new[#new] >= h.top then h.top = 0 end
  redis.call('SETRANGE', key, 0, pack_header(h))
  trim(key, redis.call('SETRANGE', key, HEADER + (lo - 1) * 8, pack_ids(merged)), seq, owner)
  return n_added
end

-- The general merge of entries with reposts (or into a timeline with pairs):
-- the raw entries decoded, merged, and both strings encoded again (see add_slow).
local function add_raw(owner, key, s, new, orig, hm, seq)
  local pkey = pairs_key(owner)
  local h, ids = new_header(), {}
  local p
  if s then
    h, ids = decode(s)
    p = redis.call('GET', pkey)
  else
    created = created + 1
  end
  local raw, had = raw_of(ids, p), set_of(ids)
  local top = s and ceiling(h, ids) or 0
  if hm > h.horizon then
    h.horizon = hm
    prune(raw, hm)
    prune_replies(owner, hm)
    fence(h, seq)
  end
  if hm > 0 or (#new > 0 and new[1] < h.horizon) then fence(h, seq) end
  local n = merge_raw(raw, new, orig, h.horizon)
  check_short(owner, h, store_raw(owner, key, pkey, h, raw, seq, had, top))
  return n
end

-- Index (1-based) of the first of the records `base` to `last`, packed `stride`
-- bytes apart in `s` from its first byte, whose first 8-byte id is at or above
-- `id`, last + 1 if none: winners (stride 8) or pairs by original (PAIR).
local function index_in(s, base, last, id, stride)
  local lo, hi = base, last
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if upk(s, (mid - base) * stride + 1) < id then lo = mid + 1 else hi = mid - 1 end
  end
  return lo
end

-- Entries newer than every winner (and than `top`), some of them reposts: each
-- one's original's old winner (the last of its run of pairs, or the post itself)
-- leaves the winners, the newest entry of each original joins them at the end,
-- and the pairs get the new reposts (and a displaced post). Each string is read
-- from the first place an original's entries can be (see WINDOW) and written
-- from its first change on (one SETRANGE or APPEND). `h`: the header, `n` ids,
-- `t` the winners `base` to `n`, packed.
local function add_newest(owner, key, h, n, t, base, blob, orig, seq)
  local best, order, posted, recs = {}, {}, {}, {}
  local low = math.huge  -- the oldest original
  for pos = 1, #blob, 8 do
    local e = upk(blob, pos)
    local o = orig[e] or e
    if best[o] == nil then
      order[#order + 1] = o
      if o < low then low = o end
    end
    best[o] = e  -- ascending: the last one is the newest
    if e == o then posted[o] = true else recs[#recs + 1] = {o, e} end
  end
  -- Every entry of an original is at or above it: the winners from `low` on and
  -- the pairs from the last of `low`'s run on are what the searches need (a run
  -- that starts before the window ends in it when the window starts with it).
  if base > 1 and upk(t, 1) > low then
    t, base = redis.call('GETRANGE', key, HEADER, -1), 1
  end
  local pkey = pairs_key(owner)
  local np = redis.call('STRLEN', pkey) / PAIR
  local pbase = math.max(1, np - WINDOW + 1)
  local p = np > 0 and redis.call('GETRANGE', pkey, (pbase - 1) * PAIR, -1) or ''
  if pbase > 1 and upk(p, 1) > low then p, pbase = redis.call('GET', pkey), 1 end
  -- drop: the indexes of the old winners that leave; at: where each original's
  -- new records go in the pairs (after its run: the run's entries are older).
  local drop, fresh, at = {}, {}, {}
  for _, o in ipairs(order) do
    fresh[#fresh + 1] = best[o]
    if posted[o] and best[o] ~= o then recs[#recs + 1] = {o, o} end
    local lo = index_in(p, pbase, np, o, PAIR)
    local run_end = lo - 1
    while run_end < np and upk(p, (run_end + 1 - pbase) * PAIR + 1) == o do
      run_end = run_end + 1
    end
    at[o] = run_end + 1
    if run_end >= lo then  -- the old winner: the run's last repost
      drop[#drop + 1] = index_in(t, base, n, upk(p, (run_end - pbase) * PAIR + 9), 8)
    elseif not posted[o] and o >= h.horizon then  -- the post itself, if it is there
      local i = index_in(t, base, n, o, 8)
      if i <= n and upk(t, (i - base) * 8 + 1) == o then
        drop[#drop + 1] = i
        recs[#recs + 1] = {o, o}
      end
    end
  end
  table.sort(fresh)
  if h.top ~= 0 then redis.call('SETRANGE', key, 16, pk(0)) end  -- every new winner is above
  local len
  if #drop == 0 then
    len = redis.call('APPEND', key, pack_ids(fresh))
  else
    -- The winners from the first dropped one on, without the dropped ones, then
    -- the new ones: at least as long as what it replaces.
    table.sort(drop)
    local parts, next_at = {}, (drop[1] - base) * 8 + 1
    for _, k in ipairs(drop) do
      local off = (k - base) * 8
      parts[#parts + 1] = string.sub(t, next_at, off)
      next_at = off + 9
    end
    parts[#parts + 1] = string.sub(t, next_at)
    parts[#parts + 1] = pack_ids(fresh)
    len = redis.call('SETRANGE', key, HEADER + (drop[1] - 1) * 8, table.concat(parts))
  end
  if #recs > 0 then
    -- The new records in order (original, entry), each original's at its place.
    table.sort(recs, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
    local first = at[recs[1][1]]
    local parts, next_at = {}, (first - pbase) * PAIR + 1
    for _, r in ipairs(recs) do
      local off = (at[r[1]] - pbase) * PAIR
      if off + 1 > next_at then
        parts[#parts + 1] = string.sub(p, next_at, off)
        next_at = off + 1
      end
      parts[#parts + 1] = struct.pack('>I8I8', r[1], r[2])
    end
    parts[#parts + 1] = string.sub(p, next_at)
    redis.call('SETRANGE', pkey, (first - 1) * PAIR, table.concat(parts))
  end
  trim(key, len, seq, owner)
  return #blob / 8
end

-- Merge packed ids (ascending). A plain add of the newest tweets is an APPEND.
local function merge_in(owner, key, s_len, blob, hm, seq, pblob, head)
  if hm == 0 and s_len > 0 then
    if #blob == 0 then return 0 end
    local h = read_header(head or redis.call('GETRANGE', key, 0, HEADER - 1))
    local n = (s_len - HEADER) / 8
    -- With reposts, the newest winners (add_newest searches them); else the newest.
    local base = #pblob > 0 and math.max(1, n - WINDOW + 1) or n
    local t = n > 0 and redis.call('GETRANGE', key, HEADER + (base - 1) * 8, -1) or ''
    local last = n > 0 and upk(t, #t - 7) or 0
    local first = upk(blob, 1)
    if first > math.max(h.top, last) and first >= h.horizon then
      if #pblob > 0 then
        return add_newest(owner, key, h, n, t, base, blob, originals_of(pblob), seq)
      end
      -- Posts newer than every winner are new winners (a repost of one would be
      -- newer still): the pairs need no look.
      local len = redis.call('APPEND', key, blob)
      if h.top ~= 0 then redis.call('SETRANGE', key, 16, pk(0)) end
      trim(key, len, seq, owner)
      return #blob / 8
    end
    if #pblob == 0 and redis.call('EXISTS', pairs_key(owner)) == 0 then
      -- The newest entries first: another executor's share of this batch is there.
      local window = 2 * #blob / 8 + 8
      if n > window then
        local tail = redis.call('GETRANGE', key, s_len - window * 8, -1)
        local added_here = add_inside(owner, key, h, n, tail, 0, n - window + 1, blob, seq)
        if added_here ~= nil then return added_here end
      end
      return add_inside(owner, key, h, n, redis.call('GET', key), HEADER, 1, blob, seq)
    end
    return add_raw(owner, key, redis.call('GET', key), ids_of(blob), originals_of(pblob), 0, seq)
  end
  local s = s_len > 0 and redis.call('GET', key) or nil
  if #pblob == 0 and (not s or redis.call('EXISTS', pairs_key(owner)) == 0) then
    return add_slow(owner, key, s, ids_of(blob), hm, seq)
  end
  return add_raw(owner, key, s, ids_of(blob), originals_of(pblob), hm, seq)
end

-- After replies went aside and the merge added nothing (an add trims, the
-- aside counted): trimmed if the view and the aside together outgrow the
-- limit. `len`, `na`: the timeline's length in bytes and the aside's records,
-- when the caller knows them.
local function settle(owner, key, seq, len, na)
  len = len or redis.call('STRLEN', key)
  na = na or asides(owner)
  if len < HEADER or len + na * 8 <= HEADER + limit * 8 then return end
  local pkey = pairs_key(owner)
  local p = redis.call('GET', pkey)
  if not p then return trim(key, len, seq, owner) end
  local h, ids = decode(redis.call('GET', key))
  store_raw(owner, key, pkey, h, raw_of(ids, p), seq, set_of(ids), ceiling(h, ids))
end

-- Merge packed ids (ascending) with their pairs and answers (see the header).
local function add(owner, key, blob, hm, seq, pblob, ablob)
  blob, pblob, ablob = screen(owner, blob, pblob, ablob)
  local s_len = redis.call('STRLEN', key)
  if s_len > 0 and s_len < HEADER then  -- a tombstone
    if not pending(owner) then
      skipped = skipped + 1
      return 0
    end
    s_len = 0  -- a placeholder replaces it
  end
  if #ablob == 0 then return merge_in(owner, key, s_len, blob, hm, seq, pblob) end
  local head = s_len > 0 and redis.call('GETRANGE', key, 0, HEADER - 1) or nil
  local floor = head and math.max(hm, upk(head)) or hm
  local went, len
  blob, went, len = sort_replies(owner, blob, #pblob > 0 and originals_of(pblob) or {}, ablob,
                                 floor)
  local n = merge_in(owner, key, s_len, blob, hm, seq, pblob, head)
  if went > 0 and n == 0 then
    -- Every entry went aside (the merge returned at once: the timeline and the
    -- aside are as they were left here), or none was new.
    if #blob == 0 and hm == 0 and s_len > 0 then
      settle(owner, key, seq, s_len, len and len / REC)
    else
      settle(owner, key, seq)
    end
  end
  return n + went
end

-- A removal from a timeline with pairs: a winner removed gives its place to the
-- next-newest raw entry of its original (which arrives late: the version moves).
local function remove_raw(owner, key, pkey, s, p, blob, seq, went)
  local h, ids = decode(s)
  local raw = raw_of(ids, p)
  local gone = 0
  for pos = 1, #blob, 8 do
    local e = upk(blob, pos)
    if raw[e] ~= nil then
      raw[e] = nil
      gone = gone + 1
    end
  end
  if gone + went == 0 and seq <= h.fence then return 0 end
  local top, last = ceiling(h, ids), ids[#ids]
  local kept, newp = view_of(raw)
  local had = set_of(ids)
  for i = 1, #kept do
    if kept[i] < top and not had[kept[i]] then
      h.version = h.version + 1
      break
    end
  end
  if last ~= nil and kept[#kept] ~= last then h.top = math.max(h.top, last) end
  fence(h, seq)
  redis.call('SET', key, encode(h, kept))
  if #newp > 0 then redis.call('SET', pkey, newp) else redis.call('DEL', pkey) end
  check_short(owner, h, #kept)
  return gone + went
end

-- A timeline (packed `s`) that keeps nothing of what it held: emptied above a
-- horizon over every entry it held, aside too (the next entries merged in are the
-- view's), fenced (a refill read before this is stale) and refilled; until
-- then it is short, and reads go on into the database. Returns how many
-- entries went.
local function empty(owner, key, s, seq)
  local h, ids = decode(s)
  local a = aside_entries(owner)  -- above them too: they go with the view
  h.top = math.max(h.top, ids[#ids] or 0, a[#a] or 0)
  h.horizon = math.max(h.horizon, h.top + 1)
  h.version = h.version + 1
  fence(h, seq)
  redis.call('SET', key, encode(h, {}))
  redis.call('DEL', pairs_key(owner), aside_key(owner), shown_key(owner))
  check_short(owner, h, 0)
  return #ids
end

local function remove(owner, key, blob, seq)
  local s = redis.call('GET', key)
  if not s or #s < HEADER then
    -- A pending regeneration's reset may predate this removal: the fence says so.
    if seq > 0 and pending(owner) then
      local h = new_header()
      h.fence = seq
      redis.call('SET', key, encode(h, {}))
      created = created + 1
    end
    return 0
  end
  if #blob == 0 then  -- nothing to remove (a pulled author's unfollow): only the fence
    if seq > upk(s, 9) then redis.call('SETRANGE', key, 8, pk(seq)) end
    return 0
  end
  -- An author's newest entries leave (an unfollow, a pull, reposts turned off:
  -- the removals with a seq). With a filter, the timeline may hold older ones of
  -- the author than those: the reposts it left out did not count towards its
  -- trims. It is emptied and refilled.
  if seq > 0 and redis.call('EXISTS', filters_key(owner)) == 1 then
    return empty(owner, key, s, seq)
  end
  local drop = {}
  for pos = 1, #blob, 8 do drop[upk(blob, pos)] = true end
  -- Replies among them leave the records beside the timeline (aside or shown).
  local leaves = function(e) return drop[e] == true end
  drop_records(shown_key(owner), leaves)
  local went = drop_records(aside_key(owner), leaves)
  local pkey = pairs_key(owner)
  local p = redis.call('GET', pkey)
  if p then return remove_raw(owner, key, pkey, s, p, blob, seq, went) end
  local h, ids = decode(s)
  local kept = {}
  for i = 1, #ids do if not drop[ids[i]] then kept[#kept + 1] = ids[i] end end
  local gone = #ids - #kept
  if gone + went == 0 and seq <= h.fence then return 0 end
  if gone > 0 and kept[#kept] ~= ids[#ids] then h.top = math.max(h.top, ids[#ids]) end
  fence(h, seq)
  redis.call('SET', key, encode(h, kept))
  check_short(owner, h, #kept)
  return gone + went
end

-- Post(s) `blob` by `author` into the mentions timeline of user u, the owner -u
-- (docs/decisions.md D30): left out if u's filter hides the author, the
-- timeline made all the same, as by any add.
local function mention(owner, key, blob, seq, author)
  local f = redis.call('GET', filters_key(string.sub(owner, 2)))
  if f and holds(f, author) then blob = '' end
  return add(owner, key, blob, 0, seq, '', '')
end

-- Whether the owner reads exactly these pulled authors' lists (packed ids).
local function same_pulls(owner, blob)
  local have = redis.call('SMEMBERS', pulls(owner))
  if #have ~= #blob / 8 then return false end
  local set = {}
  for _, author in ipairs(have) do set[math.abs(tonumber(author))] = true end
  for pos = 1, #blob, 8 do
    if not set[upk(blob, pos)] then return false end
  end
  return true
end

-- A refill from the database: its entries whose bodies exist (a body gone is a
-- tweet deleted since) merged in, the horizon lowered to what it covers. A
-- refill older than the timeline's last unfollow may still hold that author:
-- it is dropped and asked for again. Onto a placeholder (a regeneration is
-- pending) the horizon is the higher one, and the regeneration is over; a
-- stale one is asked for again (the refill task names the new reset's seq).
local function reset(owner, key, blob, hr, seq, as_of, pulled, deleted, pblob, ablob)
  local s = redis.call('GET', key)
  local regen = regeneration(owner)
  local placeholder = pending(owner)
  if s and #s < HEADER then  -- a tombstone
    if not placeholder then  -- a refill for a timeline dropped since
      skipped = skipped + 1
      return 0
    end
    s = nil
  end
  local h, ids = new_header(), {}
  if s then h, ids = decode(s) end
  if (s and h.fence > as_of) or not same_pulls(owner, pulled) then  -- stale
    if placeholder then  -- asked for again; reads stay cold until the refill task's
      redis.call('SET', regen, num(2 ^ 53 - 1), 'KEEPTTL')  -- reset names its seq
      redis.call('SADD', P.refill .. T, owner)
      short = short + 1
    elseif s then  -- asked for again if the timeline is still short
      check_short(owner, h, #ids)
    end
    return 0
  end
  if not s then created = created + 1 end
  if placeholder then redis.call('DEL', regen) end
  local orig = originals_of(pblob)
  local new = {}
  for pos = 1, #blob, 8 do
    local id = upk(blob, pos)
    -- a repost of an original deleted since is left out with it
    if not deleted[id] and not deleted[orig[id] or id] then new[#new + 1] = id end
  end
  local top = s and ceiling(h, ids) or 0
  local pkey = pairs_key(owner)
  local p = s and redis.call('GET', pkey) or nil
  local raw = (#pblob > 0 or p) and raw_of(ids, p) or nil  -- reposts: on the raw entries
  local had = raw and set_of(ids)
  if not s then
    h.horizon = hr
  elseif not placeholder then
    h.horizon = math.min(h.horizon, hr)
  elseif hr > h.horizon then
    h.horizon = hr
    local fell = prune_replies(owner, hr) > 0
    if raw then
      fell = prune(raw, hr) > 0 or fell
    else
      local kept = {}
      for i = 1, #ids do if ids[i] >= hr then kept[#kept + 1] = ids[i] end end
      fell = fell or #kept < #ids
      ids = kept
    end
    if fell then fence(h, seq) end
  end
  local went = 0
  if #ablob > 0 then
    local sorted
    sorted, went = sort_replies(owner, pack_ids(new), orig, ablob, h.horizon)
    new = ids_of(sorted)
  end
  if raw then
    local n = merge_raw(raw, new, orig, h.horizon)
    check_short(owner, h, store_raw(owner, key, pkey, h, raw, seq, had, top))
    return n + went
  end
  local merged, n, late = merge(ids, new, h.horizon, top)
  if late then h.version = h.version + 1 end
  check_short(owner, h, store(owner, key, h, merged, seq))
  return n + went
end

-- A dropped owner's queued member (op 15): the owner, then the seq.
local DROP_MEMBER = 16

-- Every key of `owner` (a deleted list) in this generation: its timeline, pairs,
-- replies' keys, followees, pulled authors, filter, regeneration, refill-set entry.
local function drop_owner(owner)
  local o = gen .. ':' .. T .. owner
  redis.call('DEL', P.timeline .. o, P.reposts .. o, P.followees .. o, P.aside .. o,
             P.shown .. o, P.pulls .. o, P.filters .. o, P.regeneration .. o)
  redis.call('SREM', P.refill .. T, owner)
end

local function release(watermark, gone)
  local key = P.resets .. gen .. T
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', watermark)
  if #due == 0 then return end  -- no write: most batches have no reset to release
  local deleted = {}
  for _, id in ipairs(ids_of(gone)) do deleted[id] = true end
  local dropped = {}  -- the owners dropped here: their later resets go too
  for _, member in ipairs(due) do
    local owner = struct.unpack('>i8', member, 1)
    if #member == DROP_MEMBER then
      drop_owner(num(owner))
      dropped[owner] = true
    elseif not dropped[owner] then
      local hr, seq, as_of = upk(member, 9), upk(member, 17), upk(member, 25)
      local ids_at = 57 + upk(member, 33) * 8
      local pairs_at = ids_at + upk(member, 41) * 8
      local answers_at = pairs_at + upk(member, 49) * ARG_PAIR
      added = added + reset(num(owner), P.timeline .. gen .. ':' .. T .. num(owner),
                            string.sub(member, ids_at, pairs_at - 1), hr, seq, as_of,
                            string.sub(member, 57, ids_at - 1), deleted,
                            string.sub(member, pairs_at, answers_at - 1),
                            string.sub(member, answers_at))
    end
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', watermark)
  if next(dropped) ~= nil then  -- resets of a dropped owner still waiting go
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. watermark, '+inf')) do
      if dropped[struct.unpack('>i8', member, 1)] then redis.call('ZREM', key, member) end
    end
  end
end

-- A pulled author's list: its newest tweets and their horizon, as the job
-- computed them. An id new to it below the newest it held arrived late. Its
-- entries whose original answers a user (`answers`, (entry, user) records) are
-- kept beside it: a read leaves out the replies its reader does not see.
local function set_list(author, hm, blob, pblob, ablob)
  put_records(P.list_answers .. gen .. ':' .. T .. author, ablob)
  local key, pkey = list_key(author), list_pairs_key(author)
  local old = redis.call('GET', key)
  local h, ids = new_header(), ids_of(blob)
  local p = ''
  if #pblob > 0 then
    local orig, raw = originals_of(pblob), {}
    for _, e in ipairs(ids) do raw[e] = orig[e] or e end
    ids, p = view_of(raw, true)
  end
  if #p > 0 then redis.call('SET', pkey, p) else redis.call('DEL', pkey) end
  if old and #old >= HEADER then
    local oh, held = decode(old)
    local top = ceiling(oh, held)
    local had = {}
    for _, id in ipairs(held) do had[id] = true end
    h.version = oh.version
    for _, id in ipairs(ids) do
      if id < top and not had[id] then h.version = h.version + 1; break end
    end
    if (ids[#ids] or 0) < top then h.top = top end
  end
  h.horizon = hm
  redis.call('SET', key, encode(h, ids))
end

-- Add n to a timeline's version (pollers re-read), if it is in Redis.
local function bump(key, n)
  if redis.call('STRLEN', key) >= HEADER then
    redis.call('SETRANGE', key, 24, pk(upk(redis.call('GETRANGE', key, 24, 31)) + n))
  end
end

-- The owner now reads the author's list (`quiet`: without its reposts, a member
-- '-author'): the author's tweets leave its timeline.
local function pull(owner, key, author, quiet, blob, seq)
  local mark = quiet == '1' and '-' .. author or author
  redis.call('SREM', pulls(owner), quiet == '1' and author or '-' .. author)
  redis.call('SADD', pulls(owner), mark)
  local n = remove(owner, key, blob, seq)
  bump(key, 1)
  return n
end

-- The owner stops reading the author's list: its tweets (if any: none after
-- an unfollow) are merged into the timeline, which is fenced either way. The
-- list's version (in the author's shard) leaves the merged version: the
-- timeline's takes it over.
local function unpull(owner, key, author, listed, blob, hm, seq, pblob, ablob)
  local gone = redis.call('SREM', pulls(owner), author, '-' .. author) > 0
  local n = 0
  if #blob > 0 then
    n = add(owner, key, blob, hm, seq, pblob, ablob)
  else
    remove(owner, key, blob, seq)
  end
  bump(key, 1 + (gone and listed or 0))
  return n
end

-- The owner's hidden users are now `hidden`: what the timeline holds may show
-- what they hide, and miss reposts they no longer hide (left out when merged):
-- it is emptied and refilled.
local function filter(owner, key, seq, hidden)
  local fkey = filters_key(owner)
  local old = redis.call('GET', fkey) or ''
  if old == hidden then return end
  if #hidden > 0 then redis.call('SET', fkey, hidden) else redis.call('DEL', fkey) end
  -- A home timeline's mentions timeline (-owner) hides the same users: emptied and
  -- refilled too. A list (-L) has its own copy of its owner's filter and no sibling.
  for _, o in ipairs(is_list(owner) and {owner} or {owner, '-' .. owner}) do
    local k = o == owner and key or P.timeline .. gen .. ':' .. T .. o
    local s = redis.call('GET', k)
    if s and #s >= HEADER then
      empty(o, k, s, seq)
    elseif not s or pending(o) then
      -- None (it held nothing to hide), or a placeholder: made, fenced, so that
      -- a refill read before the change is stale. (Idle: its regeneration reads
      -- the database.)
      local h = new_header()
      h.fence = seq
      redis.call('SET', k, encode(h, {}))
      created = created + 1
    end
  end
end

-- The owner now follows `user` (packed `u`): the replies to it kept aside
-- join the view (a merge: those below the newest arrive late).
local function followed(owner, key, seq, user, u)
  -- A list is made by its first membership, as by an empty merge (a pulled
  -- member's merges nothing): no entry of its members is missing, none yet.
  if is_list(owner) and redis.call('EXISTS', key) == 0 then add(owner, key, '', 0, seq, '', '') end
  local fkey = followees_key(owner)
  local f = redis.call('GET', fkey) or ''
  if not holds(f, user) then
    local at = index_in(f, 1, #f / 8, user, 8)
    redis.call('SETRANGE', fkey, (at - 1) * 8, u .. string.sub(f, (at - 1) * 8 + 1))
  end
  -- (No timeline, or an idle one's tombstone, has no replies aside: its
  -- regeneration reads the database.)
  local moving = take_run(aside_key(owner), user)
  if #moving == 0 then return 0 end
  local recs = {}
  for k, e in ipairs(moving) do recs[k] = {user, e} end
  insert_records(shown_key(owner), recs)
  local s = redis.call('GET', key)
  if redis.call('EXISTS', pairs_key(owner)) == 1 then
    return add_raw(owner, key, s, moving, {}, 0, seq)
  end
  -- Their count does not change (the cap counts the aside): no trim, no short.
  local h = read_header(s)
  return add_inside(owner, key, h, count(s), s, HEADER, 1, pack_ids(moving), seq)
end

-- The owner no longer follows `user`: the replies to it that showed go aside
-- (no fence, no late entry: they stay counted by the cap).
local function unfollowed(owner, key, user)
  local fkey = followees_key(owner)
  local f = redis.call('GET', fkey)
  if f and holds(f, user) then
    local at = index_in(f, 1, #f / 8, user, 8)
    put_records(fkey, string.sub(f, 1, (at - 1) * 8) .. string.sub(f, at * 8 + 1))
  end
  local moving = take_run(shown_key(owner), user)
  if #moving == 0 then return 0 end
  local recs, away = {}, {}
  for k, e in ipairs(moving) do
    recs[k] = {user, e}
    away[e] = true
  end
  insert_records(aside_key(owner), recs)
  local s = redis.call('GET', key)
  local h, n = read_header(s), count(s)
  local last = n > 0 and id_at(s, n) or nil
  local pkey = pairs_key(owner)
  local p = redis.call('GET', pkey)
  local packed
  if p then
    local raw = raw_of(ids_of(string.sub(s, HEADER + 1)), p)
    for e in pairs(away) do raw[e] = nil end
    local ids
    ids, p = view_of(raw)
    put_records(pkey, p)
    packed = pack_ids(ids)
  else  -- the moved entries cut out of the packed string (each found by a binary search)
    local parts, from = {}, HEADER + 1
    for _, e in ipairs(moving) do  -- ascending
      local at = above(s, 1, n, e - 1)
      if at <= n and id_at(s, at) == e then
        local off = HEADER + (at - 1) * 8
        parts[#parts + 1] = string.sub(s, from, off)
        from = off + 9
      end
    end
    parts[#parts + 1] = string.sub(s, from)
    packed = table.concat(parts)
  end
  local now = #packed > 0 and upk(packed, #packed - 7) or nil
  if last ~= nil and now ~= last then h.top = math.max(h.top, last) end
  redis.call('SET', key, pack_header(h) .. packed)
  return #moving
end

local timelines = P.timeline .. gen .. ':' .. T
local i = 6
while i <= nargs() do
  local op = arg(i)
  BY = {}
  if op == '1' then                       -- add: owner, horizon, seq, ids, pairs, answers
    added = added + add(arg(i + 1), timelines .. arg(i + 1), arg(i + 4),
                        tonumber(arg(i + 2)), tonumber(arg(i + 3)), arg(i + 5), arg(i + 6))
    i = i + 7
  elseif op == '2' then                   -- remove: owner, seq, ids, pairs
    removed = removed + remove(arg(i + 1), timelines .. arg(i + 1), arg(i + 3),
                               tonumber(arg(i + 2)))
    i = i + 5
  elseif op == '5' then                   -- reset: owner, horizon, seq, as_of, pulled, ids,
                                          -- pairs, answers
    -- (the owner signed: -u is a mentions timeline)
    local member = struct.pack('>i8', tonumber(arg(i + 1))) .. pk(tonumber(arg(i + 2)))
                   .. pk(tonumber(arg(i + 3))) .. pk(tonumber(arg(i + 4)))
                   .. pk(#arg(i + 5) / 8) .. pk(#arg(i + 6) / 8) .. pk(#arg(i + 7) / ARG_PAIR)
                   .. arg(i + 5) .. arg(i + 6) .. arg(i + 7) .. arg(i + 8)
    redis.call('ZADD', P.resets .. gen .. T, arg(i + 3), member)
    i = i + 9
  elseif op == '15' then                  -- drop: owner, seq (kept like a reset)
    redis.call('ZADD', P.resets .. gen .. T, arg(i + 2),
               struct.pack('>i8', tonumber(arg(i + 1))) .. pk(tonumber(arg(i + 2))))
    i = i + 3
  elseif op == '7' then                   -- a pulled author's list: author, horizon, ids,
                                          -- pairs, answers
    set_list(arg(i + 1), tonumber(arg(i + 2)), arg(i + 3), arg(i + 4), arg(i + 5))
    i = i + 6
  elseif op == '12' then                  -- followed: owner, seq, user
    added = added + followed(arg(i + 1), timelines .. arg(i + 1), tonumber(arg(i + 2)),
                             tonumber(arg(i + 3)), pk(tonumber(arg(i + 3))))
    i = i + 4
  elseif op == '13' then                  -- unfollowed: owner, seq, user
    unfollowed(arg(i + 1), timelines .. arg(i + 1), tonumber(arg(i + 3)))
    i = i + 4
  elseif op == '8' then                   -- pull: owner, seq, author, quiet, ids, pairs
    removed = removed + pull(arg(i + 1), timelines .. arg(i + 1), arg(i + 3), arg(i + 4),
                             arg(i + 5), tonumber(arg(i + 2)))
    i = i + 7
  elseif op == '14' then                  -- a mention: owner (-u), seq, ids, author
    added = added + mention(arg(i + 1), timelines .. arg(i + 1), arg(i + 3),
                            tonumber(arg(i + 2)), tonumber(arg(i + 4)))
    i = i + 5
  elseif op == '11' then                  -- the owner's hidden users: owner, seq, ids
    filter(arg(i + 1), timelines .. arg(i + 1), tonumber(arg(i + 2)), arg(i + 3))
    i = i + 4
  elseif op == '9' then                   -- unpull: owner, horizon, seq, author, version,
                                          -- ids, pairs, answers
    added = added + unpull(arg(i + 1), timelines .. arg(i + 1), arg(i + 4),
                           tonumber(arg(i + 5)), arg(i + 6),
                           tonumber(arg(i + 2)), tonumber(arg(i + 3)), arg(i + 7), arg(i + 8))
    i = i + 9
  elseif op == '6' then                   -- release the resets up to a watermark
    release(arg(i + 1), arg(i + 2))
    i = i + 3
  elseif op == '3' then                   -- put a tweet body: id, body
    redis.call('SET', P.tweet .. T .. arg(i + 1), arg(i + 2))
    i = i + 3
  elseif op == '10' then                  -- an original's counts: id, JSON text ('': none)
    if arg(i + 2) == '' then redis.call('DEL', P.counts .. T .. arg(i + 1))
    else redis.call('SET', P.counts .. T .. arg(i + 1), arg(i + 2)) end
    i = i + 3
  else                                    -- 4: delete tweet bodies: packed ids
    local blob = arg(i + 1)
    for pos = 1, #blob, 8 do redis.call('DEL', P.tweet .. T .. num(upk(blob, pos))) end
    i = i + 2
  end
end
return {added, removed, created, short, skipped}
