-- prelude.lua - what every floodgate server script shares: exact 64-bit
-- integers, the module's argument grammar, the clock and the replies.
--
-- The scripts are the second dialect of the remote backend: on a server
-- that cannot load floodgate.so they answer what its commands answer, to
-- the nanosecond. The build puts this file in front of each family's file
-- (ratelimit.lua, ...), so a script is one self-contained chunk for
-- EVALSHA, and once in front of all of them for the Functions library.
--
-- Integers. Lua 5.1 has only doubles, exact up to 2^53, while the core
-- computes in int64 nanoseconds (a time since the epoch is ~2^61). A value
-- here is a plain number when |v| < 2^53, the common case and a fast one,
-- and otherwise a table {h, l} meaning h * 2^32 + l (0 <= l < 2^32,
-- -2^31 <= h < 2^31). Every operation takes and gives either form, keeps
-- the result canonical (a number whenever it fits) and answers nil where
-- the core would overflow int64, so the scripts carry the core's checked
-- arithmetic (src/core/checked.h) exactly.

local B32 = 4294967296         -- 2^32
local EXACT = 9007199254740992 -- 2^53
local floor = math.floor

if redis.replicate_commands then redis.replicate_commands() end -- 6.2: effects, for TIME

local function big(h, l) return {h, l} end

-- {h, l} of any value.
local function parts(v)
    if type(v) == 'number' then
        local h = floor(v / B32)
        return h, v - h * B32
    end
    return v[1], v[2]
end

-- The canonical value of h * 2^32 + l for any integer l (|l| < 2^53), nil
-- outside int64.
local function join(h, l)
    local c = floor(l / B32)
    h, l = h + c, l - c * B32
    if h < -2147483648 or h > 2147483647 then return nil end
    if h >= -2097152 and h < 2097152 then return h * B32 + l end -- |v| < 2^53
    return big(h, l)
end

local function add(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local s = a + b
        if s < EXACT and s > -EXACT then return s end
    end
    local ah, al = parts(a)
    local bh, bl = parts(b)
    return join(ah + bh, al + bl)
end

local function neg(a)
    if type(a) == 'number' then return -a end
    local h, l = parts(a)
    return join(-h, -l)
end

local function sub(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local s = a - b
        if s < EXACT and s > -EXACT then return s end
    end
    local ah, al = parts(a)
    local bh, bl = parts(b)
    return join(ah - bh, al - bl)
end

-- -1, 0 or 1.
local function cmp(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        return a < b and -1 or (a > b and 1 or 0)
    end
    local ah, al = parts(a)
    local bh, bl = parts(b)
    if ah ~= bh then return ah < bh and -1 or 1 end
    return al < bl and -1 or (al > bl and 1 or 0)
end

local function lt(a, b) return cmp(a, b) < 0 end
local function le(a, b) return cmp(a, b) <= 0 end
local function max(a, b) return cmp(a, b) >= 0 and a or b end
local function min(a, b) return cmp(a, b) <= 0 and a or b end
local function sign(a) return cmp(a, 0) end

-- The four 16-bit limbs of 0 <= v < 2^64 given as parts, lowest first.
local function limbs(h, l)
    local l1 = floor(l / 65536)
    local h1 = floor(h / 65536)
    return l - l1 * 65536, l1, h - h1 * 65536, h1
end

-- |a| * |b| as eight 16-bit limbs, lowest first.
local function wide_mul(a, b)
    local ah, al = parts(a)
    local bh, bl = parts(b)
    if ah < 0 then ah, al = parts(neg(a) or big(2147483648, 0)) end
    if bh < 0 then bh, bl = parts(neg(b) or big(2147483648, 0)) end
    local x = {limbs(ah, al)}
    local y = {limbs(bh, bl)}
    local p = {0, 0, 0, 0, 0, 0, 0, 0}
    for i = 1, 4 do
        if x[i] ~= 0 then
            for j = 1, 4 do p[i + j - 1] = p[i + j - 1] + x[i] * y[j] end
        end
    end
    local carry = 0
    for k = 1, 8 do
        local t = p[k] + carry
        carry = floor(t / 65536)
        p[k] = t - carry * 65536
    end
    return p
end

-- a * b, nil when it overflows int64.
local function mul(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local m = a * b
        if m < EXACT and m > -EXACT then return m end
    end
    local negative = (sign(a) < 0) ~= (sign(b) < 0)
    local p = wide_mul(a, b)
    if p[5] + p[6] + p[7] + p[8] ~= 0 then return nil end
    local h, l = p[4] * 65536 + p[3], p[2] * 65536 + p[1]
    if negative then
        if h > 2147483648 or (h == 2147483648 and l > 0) then return nil end
        return join(-h, -l)
    end
    return join(h, l)
end

local function approx(v)
    if type(v) == 'number' then return v end
    return v[1] * B32 + v[2]
end

-- floor(a / b) and a - that * b, for a >= 0 and b > 0. Past 2^53 the
-- double quotient is off by at most a few thousand; it is taken low, so the
-- remainder is exact and small, and corrected in one more step.
local function divmod(a, b)
    if type(a) == 'number' and type(b) == 'number' then
        local q = floor(a / b)
        return q, a - q * b
    end
    local q = floor(approx(a) / approx(b)) - 4096
    if q < 0 then q = 0 end
    q = join(floor(q / B32), q - floor(q / B32) * B32) -- q is integral
    local r = sub(a, mul(q, b))
    local k = floor(approx(r) / approx(b))
    q, r = add(q, k), sub(r, mul(k, b))
    while sign(r) < 0 do q, r = sub(q, 1), add(r, b) end
    while not lt(r, b) do q, r = add(q, 1), sub(r, b) end
    return q, r
end

local function div(a, b) return (divmod(a, b)) end
local function mod(a, b) local _, r = divmod(a, b) return r end

-- Ceiling division for a >= 0, b > 0 (checked.h's fg_ceil_div).
local function ceil_div(a, b)
    local q, r = divmod(a, b)
    if sign(r) ~= 0 then q = add(q, 1) end
    return q
end

-- An integral double of any size as a value (the emission interval a
-- double division gives): exact, since such a double is an integer.
local function of_double(x)
    if x < EXACT and x > -EXACT then return x end
    local h = floor(x / B32)
    return join(h, x - h * B32)
end

-- The nearest double (what C's (double) of an int64 gives).
local function to_double(v) return approx(v) end

local function tostr(v)
    if type(v) == 'number' then return string.format('%.0f', v) end
    local negative = sign(v) < 0
    local m = v
    if negative then m = neg(v) end
    if m == nil then return '-9223372036854775808' end
    local q, r = divmod(m, 1000000000)
    local s = string.format('%.0f%09.0f', q, r)
    return negative and '-' .. s or s
end

-- A reply integer: an integer reply when it fits a double exactly, which is
-- every value but a limit or remaining above 2^53; those come as their
-- decimal string, since a script cannot make a larger integer reply.
local function out(v)
    if type(v) == 'number' then return v end
    return tostr(v)
end

-- ---------------------------------------------------------------- arguments

local function fail(msg) return error({err = msg}, 0) end

-- A decimal integer as Redis reads one (string2ll): no sign but '-', no
-- leading zero, no space, within int64. nil when it is not one.
local function parse_int(s)
    if s == '0' then return 0 end
    if not string.find(s, '^%-?[1-9]%d*$') then return nil end
    local negative = string.sub(s, 1, 1) == '-'
    local digits = negative and string.sub(s, 2) or s
    local n = #digits
    if n <= 15 then return tonumber(s) end
    if n > 19 then return nil end
    local hi = tonumber(string.sub(digits, 1, n - 9))
    local lo = tonumber(string.sub(digits, n - 8))
    if negative then return sub(mul(-hi, 1000000000), lo) end
    local v = mul(hi, 1000000000)
    return v and add(v, lo)
end

-- An integer argument in [lo, hi] (values), with the module's words.
local function integer_arg(s, name, lo, hi)
    local v = parse_int(s)
    if v == nil then fail('ERR ' .. name .. ' must be an integer') end
    if lt(v, lo) or lt(hi, v) then
        fail('ERR ' .. name .. ' must be between ' .. tostr(lo) .. ' and ' .. tostr(hi))
    end
    return v
end

local INT64_MAX = big(2147483647, 4294967295)
local INT64_MIN = big(-2147483648, 0)

-- A plain decimal (args.c's is_plain_decimal: digits, one dot, an optional
-- exponent; no inf, nan or hexadecimal), as strtod reads it.
local function decimal_arg(s, name)
    local body = string.match(s, '^[+-]?([%d.]+)$') or string.match(s, '^[+-]?([%d.]+)[eE][+-]?%d+$')
    if body == nil or not string.find(body, '%d') or string.find(body, '%..*%.') then
        fail('ERR ' .. name .. ' must be a number')
    end
    return tonumber(s)
end

-- A finite number in (0, max] (params.c's fg_param_number); max_text is
-- how C's %g writes max.
local function number_param(v, name, max_value, max_text)
    if v ~= v or v == math.huge or v == -math.huge then fail('ERR ' .. name .. ' must be a number') end
    if not (v > 0 and v <= max_value) then
        fail('ERR ' .. name .. ' must be greater than 0 and at most ' .. max_text)
    end
    return v
end

-- C's round() of x >= 0: halves away from zero (floor(x + 0.5) would
-- round 0.49999999999999994 up); x - floor(x) is exact.
local function round(x)
    local r = floor(x)
    if x - r >= 0.5 then r = r + 1 end
    return r
end

-- Milliseconds, fractions allowed, as whole microseconds, at least one
-- (params.c's fg_param_duration_us).
local function duration_us(s, name)
    local ms = number_param(decimal_arg(s, name), name, 1e12, '1e+12')
    local us = round(ms * 1000)
    if us < 1 then fail('ERR ' .. name .. ' must be at least 0.001 (one microsecond)') end
    return of_double(us)
end

-- The options of every check: COST n and AT unix_us (args.c's parse_options).
local MAX_AT_US = div(INT64_MAX, 1000)

local function options(argv, first)
    local cost, at = 1, nil
    local i = first
    while i <= #argv do
        local word = string.upper(argv[i])
        if word ~= 'COST' and word ~= 'AT' then
            fail('ERR syntax error: the options are COST n and AT unix_us')
        end
        if i + 1 > #argv then fail('ERR ' .. word .. ' needs a value') end
        if word == 'COST' then
            cost = integer_arg(argv[i + 1], 'COST', 0, INT64_MAX)
        else
            at = integer_arg(argv[i + 1], 'AT', 0, MAX_AT_US)
        end
        i = i + 2
    end
    return cost, at
end

-- ------------------------------------------------------------------ clock

-- The server's clock in microseconds since the epoch (exact: < 2^53).
local function server_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A decision's time: AT when given, else the server's; and the skew
-- (server - decision) that keeps a key's TTL counted from the server's
-- clock (t_ratelimit.c's expiry_ms).
local function decision_time(at)
    local server = server_us()
    if at == nil then return server, 0 end
    return at, sub(server, at)
end

-- Microseconds to milliseconds, rounded up (decision.h).
local function us_to_ms_ceil(us) return ceil_div(us, 1000) end

-- Nanoseconds to milliseconds, rounded up; -1 for none (decision.h).
local function ns_to_ms_ceil(ns)
    if sign(ns) < 0 then return -1 end
    return ceil_div(ns, 1000000)
end

-- The absolute expiry (ms) of a state empty at empty_at_us in the
-- decision's time, never before the epoch.
local function expiry_ms(empty_at_us, skew)
    local at = add(empty_at_us, skew) or INT64_MAX
    if sign(at) < 0 then at = 0 end
    return us_to_ms_ceil(at)
end

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local ERR_OVERFLOW = 'ERR overflow: these parameters exceed 64-bit time arithmetic'
local ERR_INVALID = 'ERR invalid rate-limit parameters'

-- A key's value when it is a string (nil when absent), WRONGTYPE otherwise.
local function get_string(key)
    local ok, v = pcall(redis.call, 'GET', key)
    if not ok then fail(WRONGTYPE) end
    if v == false then return nil end
    return v
end

-- The command of argv[1] (the EVALSHA form: argv[2..] are its arguments),
-- or the given one (a function of the library: all of argv). A refusal
-- raised by fail() is the reply; any other error is named as ours.
local function run(command, keys, argv, first)
    local ok, r = pcall(command, keys, argv, first)
    if ok then return r end
    if type(r) == 'table' and r.err then return r end
    -- Redis 7.0's pcall hands an error table over as its message: one of
    -- ours, or the server's for a redis.call (OOM ...), starts with its
    -- code in capitals; Lua's own errors name the script ("user_script:").
    if type(r) == 'string' and string.find(r, '^%u[%u_]* ') then return {err = r} end
    return {err = 'ERR floodgate script failed: ' .. tostring(r)}
end

local function run_named(commands, keys, argv)
    local command = commands[string.upper(argv[1] or '')]
    if command == nil then
        return {err = "ERR unknown command '" .. tostring(argv[1]) .. "' for this floodgate script"}
    end
    return run(command, keys, argv, 2)
end
