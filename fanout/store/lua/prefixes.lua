-- Key prefixes, passed by fanout/store/scripts.py from fanout.store.keys.SCRIPT_PREFIXES as
-- ARGV[1..20], then the shard tag T of the call's keys (ARGV[21]; '' on a single
-- Redis, a hash tag in a cluster: see fanout.store.keys.Shards); a script's own
-- arguments follow (arg(1) is ARGV[22]). Every key a call touches carries T.

local P = {
  timeline = ARGV[1], tweet = ARGV[2], active = ARGV[3], generation = ARGV[4],
  watermark = ARGV[5], regeneration = ARGV[6], tokens = ARGV[7], refill = ARGV[8],
  resets = ARGV[9], seen = ARGV[10], list = ARGV[11], pulls = ARGV[12],
  reposts = ARGV[13], list_reposts = ARGV[14], counts = ARGV[15], filters = ARGV[16],
  followees = ARGV[17], aside = ARGV[18], shown = ARGV[19], list_answers = ARGV[20],
}
local T = ARGV[21]
local function arg(i) return ARGV[21 + i] end
local function nargs() return #ARGV - 21 end

-- Timeline owners (fanout/model/owners.py, checked against it by the store's tests):
-- u (1 .. 2^32 - 1) a home timeline, -u its user's mentions, -L list L's timeline,
-- L = (n << 32) | o naming its owner o in its low 32 bits (L < 2^53: exact here).
-- `owner` is a number or its decimal text.
local MAX_USER = 2 ^ 32 - 1
local function is_list(owner) return tonumber(owner) < -MAX_USER end
-- The user whose timeline `owner` is: u for u and -u, a list's owner o.
local function user_of(owner)
  local n = tonumber(owner)
  if n > 0 then return n end
  return (-n) % 2 ^ 32
end
