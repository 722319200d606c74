-- Moving window (a log of timestamps) as the python `limits` package keeps
-- it in Redis (its "moving window" strategy: a LIST, newest first, at most
-- limit entries). Written for the floodgate benchmark from the published
-- algorithm; not the limits package's code and not floodgate's.
--
-- KEYS[1]  the log (LIST of timestamps, seconds)
-- ARGV[1]  timestamp  the client's clock, seconds (limits sends time.time())
-- ARGV[2]  limit      requests per window
-- ARGV[3]  expiry     the window, whole seconds
-- ARGV[4]  amount     entries this request takes
--
-- The algorithm as published: LINDEX of the entry at position limit -
-- amount (the oldest one that would still count); the request is refused
-- when it is within the window; otherwise amount copies of the timestamp
-- are LPUSHed, the list is LTRIMmed back to the limit and given EXPIRE of
-- the window. LINDEX walks the list: the cost grows with the limit.
--
-- Returns 1 (admitted) or nil (refused), as limits' true/false.

local timestamp = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local expiry = tonumber(ARGV[3])
local amount = tonumber(ARGV[4])

local oldest = redis.call('LINDEX', KEYS[1], limit - amount)
if oldest and tonumber(oldest) >= timestamp - expiry then
  return false
end

local stamps = {}
for i = 1, amount do stamps[i] = ARGV[1] end
redis.call('LPUSH', KEYS[1], unpack(stamps))
redis.call('LTRIM', KEYS[1], 0, limit)
redis.call('EXPIRE', KEYS[1], expiry)
return true
