-- Renew or withdraw a rebuild request, if it is still the one named
-- (fanout.store.generations.GenerationStore.renew_rebuild_request / end_rebuild_request).
-- KEYS[1]: the request (JSON with an "id"). ARGV[1]: the request's id; ARGV[2]: a TTL
-- in milliseconds to renew it for, or 0 to withdraw it. Returns 1 if it was the one
-- named, else 0 (it ended, or another command's request took its place): a command
-- never renews nor withdraws another's.

local raw = redis.call('GET', KEYS[1])
if not raw or cjson.decode(raw)['id'] ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
