-- Token bucket as Spring Cloud Gateway's RedisRateLimiter keeps it today
-- (request_rate_limiter.lua on main: one HASH with the fields tokens and
-- timestamp). Written for the floodgate benchmark from the published
-- algorithm, to measure its server cost; not Spring's code and not
-- floodgate's.
--
-- KEYS[1]  the bucket (HASH: tokens, timestamp)
-- ARGV[1]  replenish rate   tokens per second
-- ARGV[2]  burst capacity   bucket size
-- ARGV[3]  requested        tokens this request takes
--
-- The algorithm as published: the clock is the server's TIME in whole
-- seconds (the gateway passes no time of its own); the bucket refills by
-- rate per elapsed second up to the capacity; the key lives
-- floor(capacity / rate * 2) seconds and is not written at all when that
-- is 0. Reads are two HGET, writes two HSET and an EXPIRE, on every call,
-- admitted or not.
--
-- Returns { allowed (1|0), tokens left }.

local bucket = KEYS[1]
local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])

local now = tonumber(redis.call('TIME')[1])
local ttl = math.floor(capacity / rate * 2)

local tokens = tonumber(redis.call('HGET', bucket, 'tokens')) or capacity
local stamp = tonumber(redis.call('HGET', bucket, 'timestamp')) or 0

local elapsed = now - stamp
if elapsed < 0 then elapsed = 0 end
local available = math.min(capacity, tokens + elapsed * rate)

local granted = 0
if available >= requested then
  available = available - requested
  granted = 1
end

if ttl > 0 then
  redis.call('HSET', bucket, 'tokens', available)
  redis.call('HSET', bucket, 'timestamp', now)
  redis.call('EXPIRE', bucket, ttl)
end

return { granted, available }
