-- Sliding window counter as the python `limits` package keeps it in Redis
-- (its "sliding window" strategy: two counters, the previous window's and
-- the current one's, the count weighted by the previous window's share
-- still inside). Written for the floodgate benchmark from the published
-- algorithm; not the limits package's code and not floodgate's.
--
-- KEYS[1]  previous window's counter (STRING)
-- KEYS[2]  current window's counter (STRING; same hash tag as KEYS[1])
-- ARGV[1]  limit    requests per window
-- ARGV[2]  expiry   the window, whole seconds
-- ARGV[3]  amount   units this request takes
--
-- The algorithm as published, in milliseconds: the current counter lives
-- two windows; once its PTTL is under one window it has become the
-- previous window (RENAME) and a new current counter starts at 0 with the
-- rest of its time plus one window. The count is floor(previous *
-- previous PTTL / window) + current; the request passes when count +
-- amount is within the limit, and is added with INCRBY (or SET ... PX two
-- windows for a new counter).
--
-- Returns 1 (admitted) or nil (refused), as limits' true/false.

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local amount = tonumber(ARGV[3])

if amount > limit then return false end

local cur_ttl = tonumber(redis.call('PTTL', KEYS[2]))
if cur_ttl > 0 and cur_ttl < window then
  redis.call('RENAME', KEYS[2], KEYS[1])
  redis.call('SET', KEYS[2], 0, 'PX', cur_ttl + window)
end

local prev = tonumber(redis.call('GET', KEYS[1])) or 0
local prev_ttl = tonumber(redis.call('PTTL', KEYS[1])) or 0
local cur = tonumber(redis.call('GET', KEYS[2])) or 0
cur_ttl = tonumber(redis.call('PTTL', KEYS[2])) or 0
if prev_ttl < 0 then prev_ttl = 0 end
if cur_ttl < 0 then cur_ttl = 0 end

if math.floor(prev * prev_ttl / window) + cur + amount > limit then
  return false
end

if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('INCRBY', KEYS[2], amount)
else
  redis.call('SET', KEYS[2], amount, 'PX', window * 2)
end
return true
