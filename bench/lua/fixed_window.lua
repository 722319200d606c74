-- Fixed window counter: INCR, and PEXPIRE on the first hit of a window
-- (baseline for FG.FIXED). Written for the floodgate benchmark.
--
-- KEYS[1]  counter key
-- ARGV[1]  limit       requests per window
-- ARGV[2]  window_ms   window length; the window starts at the first hit
--
-- Returns { allowed (1|0), remaining }.

local limit = tonumber(ARGV[1])

local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end

if n > limit then
  return { 0, 0 }
end
return { 1, limit - n }
