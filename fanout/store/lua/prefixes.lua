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
