-- Two-key token bucket in the Spring Cloud Gateway style (baseline for
-- FG.TOKEN). Written for the floodgate benchmark; not Spring's code.
--
-- KEYS[1]  tokens key     (e.g. {user:42}.tokens)
-- KEYS[2]  timestamp key  (e.g. {user:42}.timestamp) -- same hash tag as KEYS[1]
-- ARGV[1]  rate           tokens added per second (> 0, fractions allowed)
-- ARGV[2]  capacity       bucket size (> 0)
-- ARGV[3]  requested      tokens this request takes (>= 0)
--
-- The clock is the server's (TIME), in microseconds; the timestamp key stores
-- integer microseconds. Both keys get a TTL of twice the time to fill the
-- bucket, and both are rewritten on every call (allowed or not), as Spring does.
--
-- Returns { allowed (1|0), tokens left (floor) }.

local rate = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local fill_us = capacity / rate * 1000000
local ttl_ms = math.ceil(fill_us * 2 / 1000)
if ttl_ms < 1 then ttl_ms = 1 end

local tokens = tonumber(redis.call('GET', KEYS[1]))
if tokens == nil then tokens = capacity end
local last = tonumber(redis.call('GET', KEYS[2]))
if last == nil then last = 0 end

local elapsed = now - last
if elapsed < 0 then elapsed = 0 end
local filled = tokens + elapsed * rate / 1000000
if filled > capacity then filled = capacity end

local allowed = 0
if filled >= requested then
  filled = filled - requested
  allowed = 1
end

redis.call('SET', KEYS[1], string.format('%.17g', filled), 'PX', ttl_ms)
redis.call('SET', KEYS[2], string.format('%d', now), 'PX', ttl_ms)

return { allowed, math.floor(filled) }
