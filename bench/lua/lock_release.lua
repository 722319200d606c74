-- Release of a SET NX PX lock: delete the key only when it still holds our
-- owner id (compare-and-delete; baseline for FG.UNLOCK). Written for the
-- floodgate benchmark.
--
-- KEYS[1]  lock key, set with SET key owner NX PX lease_ms
-- ARGV[1]  owner     the id the lock was taken with
--
-- Returns 1 when released, 0 when the key is gone or someone else holds it
-- (our lease ran out).

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
