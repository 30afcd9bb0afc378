-- One hit on a fixed-window counter (feed/ratelimit.py).
-- KEYS[1]: the window's counter. ARGV[1]: the window in milliseconds.
-- Returns {hits in this window, milliseconds left in it}.

local n = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if n == 1 or ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {n, ttl}
