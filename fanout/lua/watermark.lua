-- Record a micro-batch as applied (fanout.timelines.TimelineStore.record_watermark).
-- KEYS[1]: the watermark hash. ARGV: batch_id, seq, contiguous, marks (JSON), applied_at,
-- event_time, offsets (JSON), then counter name/increment pairs. Nothing moves for a
-- batch not newer than the last one recorded, so a replayed batch counts once; `seq`
-- (the highest applied) and `contiguous` (every seq up to it applied) never go back.
-- One write (HSET) per batch: replicas and the AOF see one command, not one per counter.

local names = {'batch_id', 'seq', 'contiguous'}
for i = 8, #ARGV, 2 do names[#names + 1] = ARGV[i] end
local now = redis.call('HMGET', KEYS[1], unpack(names))
local batch = tonumber(ARGV[1])
if batch <= tonumber(now[1] or '-1') then return 0 end
local out = {'batch_id', ARGV[1], 'marks', ARGV[4], 'applied_at', ARGV[5], 'offsets', ARGV[7]}
for i, field in ipairs({{'seq', 2}, {'contiguous', 3}}) do
  if tonumber(ARGV[field[2]]) > tonumber(now[i + 1] or '0') then
    out[#out + 1] = field[1]
    out[#out + 1] = ARGV[field[2]]
  end
end
if tonumber(ARGV[6]) > 0 then
  out[#out + 1] = 'event_time'
  out[#out + 1] = ARGV[6]
end
for i = 8, #ARGV, 2 do
  out[#out + 1] = ARGV[i]
  out[#out + 1] = string.format('%d', tonumber(now[3 + (i - 6) / 2] or '0') + tonumber(ARGV[i + 1]))
end
redis.call('HSET', KEYS[1], unpack(out))
return 1
