-- Fixed window as rate-limit-redis (the Redis store of express-rate-limit)
-- keeps it: one counter whose window starts at its first hit. Written for
-- the floodgate benchmark from the published algorithm; not
-- rate-limit-redis' code and not floodgate's.
--
-- KEYS[1]  the counter (STRING)
-- ARGV[1]  reset_on_change  "1": every hit restarts the window
-- ARGV[2]  window_ms
--
-- The algorithm as published: INCR, PTTL, and PEXPIRE window_ms when the
-- counter has no expiry yet (ttl < 0) or the flag asks for it. The
-- decision (hits > limit) is the client's: the server only counts.
--
-- Returns { total hits, ms to expiry }.

local hits = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 or ARGV[1] == '1' then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
  ttl = tonumber(ARGV[2])
end
return { hits, ttl }
