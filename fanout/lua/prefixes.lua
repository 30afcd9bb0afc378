-- Key prefixes, passed by fanout/scripts.py from fanout.keys.SCRIPT_PREFIXES as
-- ARGV[1..12]; a script's own arguments follow (arg(1) is ARGV[13]).

local P = {
  timeline = ARGV[1], tweet = ARGV[2], active = ARGV[3], generation = ARGV[4],
  watermark = ARGV[5], regeneration = ARGV[6], tokens = ARGV[7], refill = ARGV[8],
  resets = ARGV[9], seen = ARGV[10], list = ARGV[11], pulls = ARGV[12],
}
local function arg(i) return ARGV[12 + i] end
local function nargs() return #ARGV - 12 end
