-- Move a hash from one state to another (fanout.store.generations.GenerationStore.move_generation).
-- KEYS[1]: the hash. ARGV[1]: the field, ARGV[2]: the value it must hold, ARGV[3..]:
-- field/value pairs to set if it does. Returns 1 if they were set, 0 if the field held
-- something else (or the hash is gone): whoever changed it first wins, so a generation
-- being deleted cannot be handed over, nor one handed over be deleted.

if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
return 1
