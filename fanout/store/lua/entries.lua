-- A page's entries as tweet objects (fanout.store.reads.compose is the Python twin,
-- for the reads whose bodies lie in other shards):
--   a post's body {"id","author","text","created_at"} gets "repost_of":null and
--   its counts; a repost's {"id","author","created_at","repost_of":O} gets the
--   original's text, {"id","author","created_at"} of the original as repost_of,
--   and the original's counts. Counts are the ct: text, {"likes":0,...} if none.
-- An entry whose body is gone, or a repost whose original's body is gone (a
-- tweet deleted: its body goes first), is skipped.
-- Bodies are JSON written by fanout.model.events (tweet_json, repost_json): a
-- string's text never holds an unescaped quote, so the markers below are found
-- where the fields are.

local NO_COUNTS = '{"likes":0,"reposts":0,"replies":0}'

-- The original a repost's body names (as text); nil for a post's (whose body
-- ends with a string: the byte before its brace is a quote, not a digit).
local function repost_of(body)
  local last = string.byte(body, -2)
  if not last or last < 48 or last > 57 then return nil end
  return string.match(body, ',"repost_of":(%d+)}$')
end

-- The tweet object of an entry's body, given its original's body (a repost's)
-- and the counts text, as pieces appended to `out` (one concatenation for a
-- whole page: no intermediate strings); false if a repost's original is gone.
local function compose_into(out, body, original, counts)
  counts = counts or NO_COUNTS
  local n = #out
  local o = repost_of(body)
  if not o then
    out[n + 1] = string.sub(body, 1, -2)
    out[n + 2] = string.byte(body, -2) == 123 and '"repost_of":null,"counts":'  -- {}
                 or ',"repost_of":null,"counts":'
    out[n + 3] = counts
    out[n + 4] = '}'
    return true
  end
  if not original then return false end
  local c = string.find(body, ',"created_at":', 1, true)
  local a = string.find(original, '"author":', 1, true)
  local t = string.find(original, ',"text":', 1, true)
  local oc = string.find(original, ',"created_at":', 1, true)
  if not (c and a and t and oc) or oc < t then return false end
  local r = #body - #o - 13  -- where ,"repost_of":O} starts
  out[n + 1] = string.sub(body, 1, c - 1)
  out[n + 2] = ',"text":'
  out[n + 3] = string.sub(original, t + 8, oc - 1)
  out[n + 4] = ',"created_at":'
  out[n + 5] = string.sub(body, c + 14, r - 1)
  out[n + 6] = ',"repost_of":{"id":'
  out[n + 7] = o
  out[n + 8] = ',"author":'
  out[n + 9] = string.sub(original, a + 9, t - 1)
  out[n + 10] = ',"created_at":'
  out[n + 11] = string.sub(original, oc + 14, -2)
  out[n + 12] = '},"counts":'
  out[n + 13] = counts
  out[n + 14] = '}'
  return true
end

-- The tweet object of an entry (compose_into's, as one string), or nil.
local function compose(body, original, counts)
  local out = {}
  if compose_into(out, body, original, counts) then return table.concat(out) end
  return nil
end

-- The tweet objects of entries `ids` (bodies and counts in this call's shard),
-- as their JSON array's text: two MGETs, the bodies, then the counts and the
-- reposts' originals.
local function render(ids)
  if #ids == 0 then return '[]' end
  local names, texts, tweets, counted = {}, {}, P.tweet .. T, P.counts .. T
  for i = 1, #ids do
    texts[i] = num(ids[i])
    names[i] = tweets .. texts[i]
  end
  local bodies = redis.call('MGET', unpack(names))
  local more, originals = {}, {}
  for i = 1, #ids do
    if bodies[i] then
      local o = repost_of(bodies[i])
      originals[i] = o
      more[#more + 1] = counted .. (o or texts[i])
      if o then more[#more + 1] = tweets .. o end
    end
  end
  if #more == 0 then return '[]' end
  local got = redis.call('MGET', unpack(more))
  local out, k = {'['}, 1
  for i = 1, #ids do
    if bodies[i] then
      local counts, original = got[k] or nil, nil
      k = k + 1
      if originals[i] then
        original = got[k] or nil
        k = k + 1
      end
      local before = #out
      if before > 1 then out[before + 1] = ',' end
      if not compose_into(out, bodies[i], original, counts) then
        out[before + 1] = nil  -- the comma goes with it
      end
    end
  end
  out[#out + 1] = ']'
  return table.concat(out)
end
