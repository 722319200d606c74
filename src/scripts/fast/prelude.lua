-- fast/prelude.lua - what the fast paths share: the limits decided on plain
-- doubles, for the values nearly every call has.
--
-- Why. The exact scripts cost what their size costs: every EVALSHA runs
-- the whole chunk again, and the prelude and a family create a hundred
-- functions and tables before the first decision, whose int64 arithmetic
-- then takes a call per operation. A peer's script is twenty lines. So
-- the build (scripts/gen-scripts.sh) puts a family's fast path,
-- fast/<family>.lua, in front of its exact script: it answers a call
-- itself when every number of it is small enough for a double to hold
-- exactly, and otherwise returns nil before it has written anything, and
-- the exact code decides as before. Nothing here refuses: an argument the
-- exact code would refuse, or one outside the fast range, falls through,
-- so every error text stays the prelude's.
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
--
-- What a call pays for. Each EVALSHA makes every function of the chunk
-- again, some 50 ns each in Lua 5.1, so a fast path makes only those its
-- command uses: the rules are in three files, this one (what every fast
-- path uses), fast/buckets.lua and fast/windows.lua, and a fast file
-- takes one where it needs it by a line "--@ <name>", which the build
-- replaces by fast/<name>.lua: fast/ratelimit.lua takes the buckets inside
-- its bucket branch, so a window check never makes them.

if redis.replicate_commands then redis.replicate_commands() end -- 6.2: effects, for TIME

-- A function that captures a local declared early (an alias such as
-- `local floor = math.floor`, or a constant) costs Lua 5.1 a walk over
-- every captured local declared since: with aliases, the fast paths'
-- closures took 4 us more of every call. So they name math.* and
-- string.* directly, and 2^52, the bound below which a sum of two values
-- stays exact, is written out: 4503599627370496.

-- A decimal integer as Redis writes one, below 2^52; else nil.
local function small_int(s)
    if s == '0' then return 0 end -- the commonest, at the price of a compare
    if #s > 16 or not string.find(s, '^[1-9]%d*$') then return nil end
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

