-- GCRA as go-redis/redis_rate (v10) runs it: one STRING holding the
-- theoretical arrival time (TAT). Written for the floodgate benchmark from
-- the published algorithm (redis_rate's lua.go, after rwz/redis-gcra); not
-- redis_rate's code and not floodgate's.
--
-- KEYS[1]  the TAT (STRING: seconds since 2017-01-01 as a Lua number)
-- ARGV[1]  burst    how many requests may pass at once (the capacity)
-- ARGV[2]  rate     requests per period
-- ARGV[3]  period   seconds (a float)
-- ARGV[4]  cost     units this request takes
--
-- The algorithm as published: redis.replicate_commands() (TIME makes the
-- script non-deterministic); now = TIME as float seconds, rebased to
-- 2017-01-01 so that microseconds stay within a double; emission interval
-- T = period / rate; tat = max(stored or now, now); new_tat = tat + T *
-- cost; the request passes when now >= new_tat - T * burst, and then
-- new_tat is stored with EX ceil(new_tat - now) seconds. Floats are
-- returned as strings.
--
-- Returns { allowed units, remaining, retry_after (s), reset_after (s) };
-- retry_after is -1 when allowed.

redis.replicate_commands()

local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local EPOCH_2017 = 1483228800
local t = redis.call('TIME')
local now = (tonumber(t[1]) - EPOCH_2017) + tonumber(t[2]) / 1000000

local interval = period / rate
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end

local new_tat = tat + interval * cost
local slack = now - (new_tat - interval * burst)
local remaining = slack / interval

if remaining < 0 then
  return { 0, 0, tostring(-slack), tostring(tat - now) }
end

local reset_after = new_tat - now
if reset_after > 0 then
  redis.call('SET', KEYS[1], new_tat, 'EX', math.ceil(reset_after))
end
return { cost, remaining, tostring(-1), tostring(reset_after) }
