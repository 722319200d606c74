-- Sliding window log on a sorted set (baseline for FG.SLIDELOG).
-- Written for the floodgate benchmark.
--
-- KEYS[1]  the log (ZSET: score = admission time in us, member unique)
-- ARGV[1]  limit       requests per window
-- ARGV[2]  window_ms   window length (integer ms)
--
-- Steps: drop entries older than the window (ZREMRANGEBYSCORE), count what is
-- left (ZCARD), admit if under the limit (ZADD), refresh the TTL (PEXPIRE).
-- The clock is the server's (TIME), in microseconds.
--
-- Returns { allowed (1|0), remaining }.

local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - window_ms * 1000))
local count = redis.call('ZCARD', KEYS[1])
if count >= limit then
  return { 0, 0 }
end

-- member = time and count: unique even for two requests in the same microsecond
local ts = string.format('%d', now)
redis.call('ZADD', KEYS[1], ts, ts .. '-' .. count)
redis.call('PEXPIRE', KEYS[1], window_ms)

return { 1, limit - count - 1 }
