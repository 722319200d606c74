-- Reentrant lock in a hash, in the style of Redisson's RLock (baseline for
-- FG.LOCK ... REENTRANT). Written for the floodgate benchmark from the
-- description of the data model: the key is a hash of owner -> hold count,
-- and its TTL is the lease.
--
-- KEYS[1]  lock key (a hash)
-- ARGV[1]  lease_ms
-- ARGV[2]  owner
--
-- Returns nil when granted (a new hold, or one more hold of the owner),
-- else the remaining lease in ms, which a waiter uses as its longest sleep.

if redis.call('EXISTS', KEYS[1]) == 0
    or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
return redis.call('PTTL', KEYS[1])
