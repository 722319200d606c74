-- Release of the hash lock of hash_lock_acquire.lua: one hold less; the last
-- one deletes the key and publishes on the lock's channel, which wakes the
-- waiters (they subscribe when an acquire fails). Written for the floodgate
-- benchmark. Redisson's own release also keeps a "latch" key so that a
-- retried release is not applied twice; this one does not (it is cheaper).
--
-- KEYS[1]  lock key (a hash)
-- KEYS[2]  channel of the lock
-- ARGV[1]  owner
-- ARGV[2]  lease_ms, renewed while holds remain
--
-- Returns the holds left (0: released), or -1 when the owner holds nothing.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if left > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return left
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], '0')
return 0
