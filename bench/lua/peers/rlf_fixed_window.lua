-- Fixed window as rate-limiter-flexible's RateLimiterRedis (Node) keeps it:
-- one counter whose window starts at its first request. Written for the
-- floodgate benchmark from the published algorithm; not
-- rate-limiter-flexible's code and not floodgate's.
--
-- KEYS[1]  the counter (STRING)
-- ARGV[1]  points    units this request consumes
-- ARGV[2]  duration  the window, whole seconds
--
-- The algorithm as published: SET key 0 EX duration NX (creates the
-- window), INCRBY points, PTTL; a counter found without an expiry gets one
-- again. The decision (consumed > points of the limiter) is the client's:
-- the server only counts.
--
-- Returns { consumed, pttl (ms) }.

redis.call('SET', KEYS[1], 0, 'EX', ARGV[2], 'NX')
local consumed = redis.call('INCRBY', KEYS[1], ARGV[1])
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -1 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  pttl = tonumber(ARGV[2]) * 1000
end
return { consumed, pttl }
