-- A shard's copy of the watermark (fanout.store.generations.GenerationStore.copy_watermark).
-- KEYS[1]: the copy. ARGV[1]: the batch the copy must hold already (the one before
-- this batch); ARGV[2..]: field/value pairs, 'batch_id' and this batch first.
-- A copy behind ARGV[1] is a shard that lost that batch's writes (a failover to a
-- replica that had not received them): it stays behind, so the loss shows in the
-- applied batch (the lowest copy) until the batches are run again, instead of being
-- hidden by the next batch's copy. A copy at -1 (none yet, or a rebuilt generation's
-- seed) takes any batch; a copy at this batch or past it (a batch run again) keeps its
-- batch, and takes only a `contiguous` past its own (ARGV[4] is 'contiguous'): a batch
-- run again may hold more than it first did (see watermark.lua).
-- Returns 1 if the copy holds this batch now, 0 if it stayed behind.

local now = redis.call('HMGET', KEYS[1], 'batch_id', 'contiguous')
local held = tonumber(now[1] or '-1')
local batch = tonumber(ARGV[3])
if held >= batch then
  if tonumber(ARGV[5]) > tonumber(now[2] or '0') then
    redis.call('HSET', KEYS[1], 'contiguous', ARGV[5])
  end
  return 1
end
if held ~= -1 and held < tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
