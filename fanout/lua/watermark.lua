-- Record a micro-batch as applied (fanout.timelines.TimelineStore.record_watermark).
-- KEYS[1]: the watermark hash. ARGV: batch_id, seq, contiguous, marks (JSON), applied_at,
-- event_time, offsets (JSON), then counter name/increment pairs. Nothing moves for a
-- batch not newer than the last one recorded, so a replayed batch counts once; `seq`
-- (the highest applied) and `contiguous` (every seq up to it applied) never go back.

local last = tonumber(redis.call('HGET', KEYS[1], 'batch_id') or '-1')
local batch = tonumber(ARGV[1])
if batch <= last then return 0 end
for _, field in ipairs({{'seq', 2}, {'contiguous', 3}}) do
  local name, value = field[1], tonumber(ARGV[field[2]])
  if value > tonumber(redis.call('HGET', KEYS[1], name) or '0') then
    redis.call('HSET', KEYS[1], name, ARGV[field[2]])
  end
end
redis.call('HSET', KEYS[1], 'batch_id', ARGV[1], 'marks', ARGV[4], 'applied_at', ARGV[5],
           'offsets', ARGV[7])
if tonumber(ARGV[6]) > 0 then redis.call('HSET', KEYS[1], 'event_time', ARGV[6]) end
for i = 8, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
