-- Token bucket as Spring Cloud Gateway's RedisRateLimiter kept it before
-- its single-hash layout: two STRING keys, request_rate_limiter.{id}.tokens
-- and request_rate_limiter.{id}.timestamp (hash-tagged). Written for the
-- floodgate benchmark from the published algorithm; not Spring's code and
-- not floodgate's.
--
-- KEYS[1]  tokens key
-- KEYS[2]  timestamp key (same hash tag)
-- ARGV[1]  replenish rate   tokens per second
-- ARGV[2]  burst capacity   bucket size
-- ARGV[3]  requested        tokens this request takes
--
-- Same algorithm as spring_token_bucket.lua: TIME in whole seconds, a TTL
-- of floor(capacity / rate * 2) seconds (nothing stored when it is 0), two
-- GET, then both keys rewritten with SETEX on every call.
--
-- Returns { allowed (1|0), tokens left }.

local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])

local now = tonumber(redis.call('TIME')[1])
local ttl = math.floor(capacity / rate * 2)

local tokens = tonumber(redis.call('GET', KEYS[1])) or capacity
local stamp = tonumber(redis.call('GET', KEYS[2])) or 0

local elapsed = now - stamp
if elapsed < 0 then elapsed = 0 end
local available = math.min(capacity, tokens + elapsed * rate)

local granted = 0
if available >= requested then
  available = available - requested
  granted = 1
end

if ttl > 0 then
  redis.call('SETEX', KEYS[1], ttl, available)
  redis.call('SETEX', KEYS[2], ttl, now)
end

return { granted, available }
