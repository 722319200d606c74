-- fast/prelude.lua - what the fast paths share: the limits decided on plain
-- doubles, for the values nearly every call has.
--
-- Why. The exact scripts cost what their size costs: every EVALSHA runs
-- the whole chunk again, and the prelude and a family create a hundred
-- functions and tables before the first decision, whose int64 arithmetic
-- then takes a call per operation. A peer's script is twenty lines. So
-- the build (scripts/gen-scripts.sh) puts a family's fast path,
-- fast/<family>.lua after this file, in front of its exact script: it
-- answers a call itself when every number of it is small enough for a
-- double to hold exactly, and otherwise returns nil before it has written
-- anything, and the exact code decides as before. Nothing here refuses:
-- an argument the exact code would refuse, or one outside the fast range,
-- falls through, so every error text stays the prelude's.
--
-- The fast range: integers below 2^52 (at most 16 digits); plain
-- decimals (no sign, no exponent); times from 1970-04-27 (10^13 us) to
-- 2096 (4 * 10^15 us). Windows count in microseconds, which a double holds
-- exactly; a bucket's TAT is 19 digits of nanoseconds, past 2^53, so it is
-- read as seconds and nanoseconds and taken relative to now, where a
-- tolerance below 2^52 ns keeps every sum exact. The rules are the
-- prelude's cores, step for step, under their names; differential tests
-- (test_scripts_differential.py, test_scripts_policy.py) hold both paths
-- to the module's answers, within the fast range and beyond it.

if redis.replicate_commands then redis.replicate_commands() end -- 6.2: effects, for TIME

-- Each EVALSHA makes these functions again, and a function that captures
-- a local declared early (an alias such as `local floor = math.floor`, or
-- a constant) costs Lua 5.1 a walk over every captured local declared
-- since: with aliases, the fast paths' closures took 4 us more of every
-- call. So they name math.* and string.* directly, and 2^52, the bound
-- below which a sum of two values stays exact, is written out:
-- 4503599627370496.


-- A decimal integer as Redis writes one, below 2^52; else nil.
local function small_int(s)
    if #s > 16 or not string.find(s, '^[1-9]%d*$') then return s == '0' and 0 or nil end
    local v = tonumber(s)
    return v < 4503599627370496 and v or nil
end

-- A plain positive decimal (digits and at most one dot); else nil.
local function small_decimal(s)
    if #s > 30 or not string.find(s, '^%d*%.?%d*$') then return nil end
    local v = tonumber(s)
    if v == nil or v <= 0 then return nil end
    return v
end

-- AT's value within the fast range; else nil.
local function small_time(s)
    local t = small_int(s)
    return t and t >= 1e13 and t <= 4e15 and t or nil
end

-- The decision's time (AT, or the server's) and the skew, server - AT
-- (prelude.lua's decision_time).
local function decision_time(at)
    local t = redis.call('TIME')
    local server = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if at == nil then return server, 0 end
    return at, server - at
end

-- A wait in ns or us as the reply's milliseconds, rounded up; -1: none.
local function ms_ceil(v, unit) return v < 0 and -1 or math.ceil(v / unit) end

-- Stores a value until the instant `us` of the decision's time (plus the
-- skew: prelude.lua's expiry_ms); a write's error (OOM...) is the reply,
-- as the exact code's run() makes it.
-- The instant goes as a number, which the server writes as %.17g does:
-- exact for an integer below 10^17, and cheaper than a format here.
local function store(key, value, us, skew)
    us = us + skew
    local r = redis.pcall('SET', key, value, 'PXAT', us > 0 and math.ceil(us / 1000) or 0)
    if type(r) == 'table' and r.err then return r end
    return nil
end

-- ---------------------------------------------------------------- buckets

-- A stored TAT (decimal ns, 10 to 19 digits) relative to now, in ns, and
-- never before it; nil outside the fast range. `seconds` and `past` are
-- now split as bucket_now gives them.
local function tat_since(text, seconds, past)
    if type(text) ~= 'string' or #text < 10 or #text > 19 or not string.find(text, '^[1-9]%d*$') then
        return nil
    end
    local tat = (tonumber(string.sub(text, 1, -10)) - seconds) * 1000000000 + (tonumber(string.sub(text, -9)) - past)
    if tat >= 4503599627370496 then return nil end
    return tat > 0 and tat or 0
end

-- now (us) as whole seconds and the ns past them.
local function bucket_now(now)
    local seconds = math.floor(now / 1000000)
    return seconds, (now - seconds * 1000000) * 1000
end

-- A TAT relative to now as its decimal ns, and its expiry (us): gcra.c's
-- fg_gcra_expires_at_us, the TAT rounded up to the microsecond.
local function tat_text(tat, now, seconds, past)
    local ns = tat + past
    local carry = math.floor(ns / 1000000000)
    seconds = seconds + carry
    -- %d is the cheaper conversion, and exact wherever C's long holds the
    -- seconds (past 2038 on a 32-bit server, %.0f is)
    return string.format(seconds < 2147483648 and '%d%09d' or '%.0f%09.0f', seconds, ns - carry * 1000000000),
           now + math.ceil(tat / 1000)
end

-- gcra_decide on a TAT relative to now (>= 0) and a tolerance (capacity *
-- emission) below 2^52: allowed, retry (ns, -1: none), reset (ns),
-- remaining, and the TAT an admission leaves; nil outside the fast range.
local function bucket_decide(tat, capacity, emission, cost)
    local tolerance = capacity * emission
    local allowed, retry, ttl, new_tat = false, -1, tat, tat
    if capacity >= cost then
        new_tat = tat + emission * cost
        if new_tat >= 4503599627370496 then return nil end
        local diff = tolerance - new_tat
        allowed = diff >= 0
        if allowed then ttl = new_tat else retry = -diff end
    end
    return allowed, retry, ttl, ttl < tolerance and math.floor((tolerance - ttl) / emission) or 0, new_tat
end

-- ---------------------------------------------------------------- windows

-- window_ms as whole microseconds, the nearest (duration_us); else nil.
local function window_us(s)
    local ms = small_decimal(s)
    if not ms or ms > 1e12 then return nil end
    local x = ms * 1000
    local us = math.floor(x)
    if x - us >= 0.5 then us = us + 1 end
    return us >= 1 and us or nil
end

-- fixed_decide on a stored window (start 0 and count 0: none): allowed,
-- remaining, retry (us, -1: none), reset (us), and the state an admission
-- leaves (start, count).
local function fixed_decide(start, count, limit, w, now, cost)
    if start > 0 then start = start - start % w end
    local aligned = now - now % w
    if count == 0 or start < aligned then start, count = aligned, 0 end
    local to_end = start + w - now
    local after = count + cost
    local allowed = after <= limit
    if not allowed then after = count end
    return allowed, limit > after and limit - after or 0,
           (allowed or limit < cost) and -1 or to_end, after > 0 and to_end or 0, start, after
end

-- sliding_first_fit.
local function first_fit(weight, free, w)
    if free >= weight then return 0 end
    return w - math.floor(free * w / weight)
end

-- sliding_view and sliding_decide, every count times the window below
-- 2^52 (the caller's check): allowed, remaining, retry (us, -1: none),
-- reset (us), and the state an admission leaves (start, count, prev).
local function sliding_decide(stored, n, p, limit, w, now, cost)
    local aligned = now - now % w
    local start, elapsed, count, prev = aligned, now - aligned, 0, 0
    if n > 0 or p > 0 then
        if stored > 0 then stored = stored - stored % w end
        if stored >= aligned - w then
            if aligned < stored then
                start, elapsed, count, prev = stored, 0, n, p
            elseif stored == aligned then
                count, prev = n, p
            else
                prev = n
            end
        end
    end
    local weight = prev - math.floor(prev * elapsed / w)
    local fits = count <= limit and cost <= limit - count and weight <= limit - count - cost
    local after = fits and count + cost or count
    local retry = -1
    if not fits and cost <= limit then
        local e = w
        if count <= limit - cost then e = first_fit(prev, limit - count - cost, w) end
        if e < w then
            retry = start + e - now
        else
            retry = start + w + (count == 0 and 0 or first_fit(count, limit - cost, w)) - now
        end
    end
    local windows = after > 0 and 2 or (prev > 0 and 1 or 0)
    local remaining = 0
    if after < limit and limit - after > weight then remaining = limit - after - weight end
    return fits, remaining, retry, windows == 0 and 0 or start + w * windows - now, start, after, prev
end
