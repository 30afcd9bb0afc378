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

-- The original a repost's body names (as text); nil for a post's.
local function repost_of(body) return string.match(body, ',"repost_of":(%d+)}$') end

-- The tweet object of an entry's body, given its original's body (a repost's)
-- and the counts text; nil if a repost's original is gone.
local function compose(body, original, counts)
  counts = counts or NO_COUNTS
  local o = repost_of(body)
  if not o then
    local sep = string.sub(body, -2, -2) == '{' and '' or ','
    return string.sub(body, 1, -2) .. sep .. '"repost_of":null,"counts":' .. counts .. '}'
  end
  if not original then return nil end
  local c = string.find(body, ',"created_at":', 1, true)
  local a = string.find(original, '"author":', 1, true)
  local t = string.find(original, ',"text":', 1, true)
  local oc = string.find(original, ',"created_at":', 1, true)
  if not (c and a and t and oc) or oc < t then return nil end
  local r = #body - #o - 13  -- where ,"repost_of":O} starts
  return string.sub(body, 1, c - 1) .. ',"text":' .. string.sub(original, t + 8, oc - 1)
         .. ',"created_at":' .. string.sub(body, c + 14, r - 1)
         .. ',"repost_of":{"id":' .. o .. ',"author":' .. string.sub(original, a + 9, t - 1)
         .. ',"created_at":' .. string.sub(original, oc + 14, -2)
         .. '},"counts":' .. counts .. '}'
end

-- The tweet objects of entries `ids` (bodies and counts in this call's shard):
-- two MGETs, the bodies, then the counts and the reposts' originals.
local function render(ids)
  if #ids == 0 then return {} end
  local names = {}
  for i = 1, #ids do names[i] = P.tweet .. T .. num(ids[i]) end
  local bodies = redis.call('MGET', unpack(names))
  local more, originals = {}, {}
  for i = 1, #ids do
    if bodies[i] then
      local o = repost_of(bodies[i])
      originals[i] = o
      more[#more + 1] = P.counts .. T .. (o or num(ids[i]))
      if o then more[#more + 1] = P.tweet .. T .. o end
    end
  end
  if #more == 0 then return {} end
  local got = redis.call('MGET', unpack(more))
  local out, k = {}, 1
  for i = 1, #ids do
    if bodies[i] then
      local counts, original = got[k] or nil, nil
      k = k + 1
      if originals[i] then
        original = got[k] or nil
        k = k + 1
      end
      local tweet = compose(bodies[i], original, counts)
      if tweet then out[#out + 1] = tweet end
    end
  end
  return out
end
