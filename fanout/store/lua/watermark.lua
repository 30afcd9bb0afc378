-- Record a micro-batch as applied (fanout.store.timelines.TimelineStore.record_watermark).
-- KEYS[1]: the watermark hash. ARGV: batch_id, seq, contiguous, marks (JSON), applied_at,
-- event_time, offsets (JSON), then counter name/increment pairs. Returns 1 if the batch
-- is newer than the last one recorded, else 0.
-- A batch not newer than the last one recorded is one run again: it counts once (no
-- counter, batch id or offsets move). It still moves what it applied: a rewind drops
-- the offsets of the batches it runs again, so a batch run again may hold more records
-- than it first did (all the log has by then); without that, those records would show
-- as applied only after the next batch past the old last one. `seq` (the highest
-- applied), `contiguous` (every seq up to it applied) and `event_time` never go back;
-- `marks` are the caller's merge of the recorded ones and the batch's, never behind.
-- One write (HSET) per batch: replicas and the AOF see one command, not one per counter.

local names = {'batch_id', 'seq', 'contiguous', 'event_time'}
for i = 8, #ARGV, 2 do names[#names + 1] = ARGV[i] end
local now = redis.call('HMGET', KEYS[1], unpack(names))
local newer = tonumber(ARGV[1]) > tonumber(now[1] or '-1')
local out = {'marks', ARGV[4]}
for i, field in ipairs({{'seq', 2}, {'contiguous', 3}, {'event_time', 6}}) do
  if tonumber(ARGV[field[2]]) > tonumber(now[i + 1] or '0') then
    out[#out + 1] = field[1]
    out[#out + 1] = ARGV[field[2]]
  end
end
if newer then
  for _, pair in ipairs({{'batch_id', 1}, {'applied_at', 5}, {'offsets', 7}}) do
    out[#out + 1] = pair[1]
    out[#out + 1] = ARGV[pair[2]]
  end
  for i = 8, #ARGV, 2 do
    out[#out + 1] = ARGV[i]
    local total = tonumber(now[4 + (i - 6) / 2] or '0') + tonumber(ARGV[i + 1])
    out[#out + 1] = string.format('%d', total)
  end
end
redis.call('HSET', KEYS[1], unpack(out))
return newer and 1 or 0
