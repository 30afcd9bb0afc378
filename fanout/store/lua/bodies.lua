#!lua flags=allow-cross-slot-keys,no-writes
-- Tweet bodies on one Redis Cluster node, whatever their slots
-- (fanout.store.timelines.TimelineStore.bodies): one call per node instead of one
-- MGET per slot. ARGV: the bodies' keys, all served by this node (a key that
-- is not, during a resharding, fails the call: the caller reads them again
-- with redirects followed). Returns the bodies, false where there is none.

local out = {}
for i, key in ipairs(ARGV) do out[i] = redis.call('GET', key) or false end
return out
