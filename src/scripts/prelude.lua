-- prelude.lua - what every floodgate server script shares: exact 64-bit
-- integers, the module's argument grammar, the clock and the replies.
--
-- The scripts are the second dialect of the remote backend: on a server
-- that cannot load floodgate.so they answer what its commands answer, to
-- the nanosecond. The build puts this file, after base.lua, in front of
-- each family's file that needs it (ratelimit.lua, policy.lua), so a
-- script is one self-contained chunk for EVALSHA, and once in front of all
-- of them for the Functions library.
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
    local v = tonumber(s)
    -- strtod's underflow to zero is ERANGE, which the server's reader refuses
    if v == 0 and string.find(body, '[1-9]') then fail('ERR ' .. name .. ' must be a number') end
    return v
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

local ERR_OVERFLOW = 'ERR overflow: these parameters exceed 64-bit time arithmetic'
local ERR_INVALID = 'ERR invalid rate-limit parameters'

-- A key's value when it is a string (nil when absent), WRONGTYPE otherwise.
local function get_string(key)
    local ok, v = pcall(redis.call, 'GET', key)
    if not ok then fail(WRONGTYPE) end
    if v == false then return nil end
    return v
end

-- ----------------------------------------------------------- the limits

-- The cores of the rate limits, which the rate-limit commands
-- (ratelimit.lua) and the policies (policy.lua) both decide with, as the
-- module's commands and policies share src/core. A state is passed in and
-- the decision and the state to store come out; nothing here reads or
-- writes a key. A decision's fields: allowed, limit, remaining, retry_ns
-- (-1: none), reset_ns.

-- a * b against c * d, all >= 0, exactly (128-bit products): -1, 0 or 1.
local function cmp_products(a, b, c, d)
    local x, y = wide_mul(a, b), wide_mul(c, d)
    for k = 8, 1, -1 do
        if x[k] ~= y[k] then return x[k] < y[k] and -1 or 1 end
    end
    return 0
end

-- floor(a * b / d) for a, b >= 0 and d > 0, when that is below 2^53: the
-- double quotient is within an ulp or two, and the products settle it.
local function floor_muldiv(a, b, d)
    local q = floor(to_double(a) * to_double(b) / to_double(d))
    while q > 0 and cmp_products(q, d, a, b) > 0 do q = q - 1 end
    while cmp_products(q + 1, d, a, b) <= 0 do q = q + 1 end
    return q
end

-- The bucket's parameters: capacity and emission interval T (ns), by
-- core/params.c's fg_param_bucket and fg_param_gcra.
local INT64_HALF_DOUBLE = 4611686018427387904 -- (double)INT64_MAX / 2

local function bucket_params(argv, i, rate_name)
    local capacity = integer_arg(argv[i], 'capacity', INT64_MIN, INT64_MAX)
    local rate = decimal_arg(argv[i + 1], rate_name)
    capacity = integer_arg(argv[i], 'capacity', 1, INT64_MAX)
    number_param(rate, rate_name, 1e9, '1e+09')
    local ns = 1e9 / rate
    if ns > INT64_HALF_DOUBLE then fail('ERR ' .. rate_name .. ' is too slow') end
    local emission = ns < 1 and 1 or of_double(floor(ns + 0.5))
    return {capacity = capacity, emission = emission}, i + 2
end

local function gcra_params(argv, i)
    local capacity = integer_arg(argv[i], 'capacity', INT64_MIN, INT64_MAX)
    local count = decimal_arg(argv[i + 1], 'count')
    local period = decimal_arg(argv[i + 2], 'period_ms')
    capacity = integer_arg(argv[i], 'capacity', 1, INT64_MAX)
    number_param(count, 'count', 1e18, '1e+18')
    number_param(period, 'period_ms', 1e12, '1e+12')
    local ns = period * 1e6 / count
    if ns > INT64_HALF_DOUBLE then
        fail('ERR count is too small for period_ms: the emission interval overflows 64-bit nanoseconds')
    end
    if ns < 0.5 then
        fail('ERR rate too high: count per period_ms must leave at least one nanosecond per unit')
    end
    return {capacity = capacity, emission = of_double(floor(ns + 0.5))}, i + 3
end

-- core/gcra.c's fg_gcra_decide, on a stored TAT (0: none). Returns the
-- decision and the TAT to store.
local function gcra_decide(tat_ns, p, now_us, cost)
    local now = mul(now_us, 1000)
    local tolerance = mul(p.emission, p.capacity)
    if now == nil or tolerance == nil then fail(ERR_OVERFLOW) end
    local tat = max(tat_ns, now)
    local d = {limit = p.capacity}
    local function units_left(ttl)
        if not lt(ttl, tolerance) then return 0 end
        return div(sub(tolerance, ttl), p.emission)
    end
    if lt(p.capacity, cost) then
        local ttl = sub(tat, now)
        d.allowed, d.retry_ns, d.remaining, d.reset_ns = false, -1, units_left(ttl), ttl
        return d, tat_ns
    end
    local new_tat = add(tat, mul(p.emission, cost))
    if new_tat == nil then fail(ERR_OVERFLOW) end
    local diff = add(sub(now, new_tat), tolerance)
    local ttl, next_tat
    d.allowed = sign(diff) >= 0
    if d.allowed then
        d.retry_ns = -1
        ttl = sub(new_tat, now)
        next_tat = sign(cost) > 0 and new_tat or tat_ns
    else
        d.retry_ns = neg(diff)
        ttl = sub(tat, now)
        next_tat = tat_ns
    end
    d.remaining, d.reset_ns = units_left(ttl), ttl
    return d, next_tat
end

-- A TAT's expiry: the TAT rounded up to the microsecond (gcra.c's
-- fg_gcra_expires_at_us).
local function tat_expires_us(tat_ns) return ceil_div(tat_ns, 1000) end

-- A window family's parameters (t_ratelimit.c's parse_window, then
-- core/params.c's fg_param_window): both read, then the limit's range, then
-- window_ms in whole microseconds, the nearest.
local function window_params(argv, i, max_limit)
    integer_arg(argv[i], 'limit', INT64_MIN, INT64_MAX)
    decimal_arg(argv[i + 1], 'window_ms')
    local limit = integer_arg(argv[i], 'limit', 1, max_limit)
    return {limit = limit, window = duration_us(argv[i + 1], 'window_ms')}, i + 2
end

-- Start of the window holding t >= 0: windows start at multiples of W.
local function window_start(t, w) return sub(t, mod(t, w)) end

-- The expiry of a state whose last window ends at `a + b` (saturated: such
-- a window cannot end anyway).
local function saturating_add(a, b) return add(a, b) or INT64_MAX end

-- Microseconds from now to `until_us` (after now), in nanoseconds.
local function ns_until(until_us, now_us)
    return mul(sub(until_us, now_us), 1000) or fail(ERR_OVERFLOW)
end

-- core/fixed_window.c. The state: {start = window_start_us, count}; count 0
-- is the empty state.

-- fixed_current_window: the window now is judged in, and what it holds. A
-- stored window ahead of the aligned one (the clock stepped back) is kept.
local function fixed_window(cur, p, now)
    local aligned = window_start(now, p.window)
    local stored = cur.start
    if sign(stored) > 0 then stored = window_start(stored, p.window) end
    local w = {start = stored, count = cur.count}
    if sign(cur.count) == 0 or lt(stored, aligned) then w.start, w.count = aligned, 0 end
    w.finish = add(w.start, p.window)
    if w.finish == nil then fail(ERR_OVERFLOW) end
    return w
end

-- fg_fixed_decide: the decision and the state an admission leaves.
local function fixed_decide(cur, p, now, cost)
    local w = fixed_window(cur, p, now)
    local to_end = ns_until(w.finish, now)
    local after = add(w.count, cost)
    local allowed = after ~= nil and le(after, p.limit)
    if not allowed then after = w.count end
    local d = {allowed = allowed, limit = p.limit, remaining = max(sub(p.limit, after), 0),
               retry_ns = (allowed or lt(p.limit, cost)) and -1 or to_end,
               reset_ns = sign(after) > 0 and to_end or 0}
    if not (allowed and sign(cost) > 0) then return d, cur end
    return d, {start = w.start, count = after}
end

-- core/sliding_window.c. The state: {start, count, prev}. Its 128-bit
-- comparisons are made on prev's weight in whole units, rounded up:
--
--   prev * (W - e) <= free * W   <=>   ceil(prev * (W - e) / W) <= free
--
-- for an integer free, and ceil(prev * (W - e) / W) = prev - floor(prev *
-- e / W), whose product splits over prev = q * W + r into q * e (within
-- int64) and floor(r * e / W) (below W).

-- sliding_roll: the state as it stands at now, rolled to the current
-- window (a step back judges at the start of the stored one).
local function sliding_view(cur, w, now)
    local aligned = window_start(now, w)
    local v = {start = aligned, elapsed = sub(now, aligned), count = 0, prev = 0}
    if cur == nil or (sign(cur.count) == 0 and sign(cur.prev) == 0) then return v end
    local stored = cur.start
    if sign(stored) > 0 then stored = window_start(stored, w) end
    if lt(stored, sub(aligned, w)) then return v end -- stale
    if lt(aligned, stored) then
        v.start, v.elapsed, v.count, v.prev = stored, 0, cur.count, cur.prev
    elseif cmp(stored, aligned) == 0 then
        v.count, v.prev = cur.count, cur.prev
    else
        v.prev = cur.count
    end
    return v
end

-- ceil(prev * (W - elapsed) / W): prev's weight in the sliding window.
local function prev_units(v, w)
    local q, r = divmod(v.prev, w)
    return sub(v.prev, add(mul(q, v.elapsed), floor_muldiv(r, v.elapsed, w)))
end

-- sliding_first_fit: the smallest e in [0, W] with weight * (W - e) <=
-- free * W; floor(free * W / weight) reaches W exactly when free >= weight.
local function first_fit(weight, free, w)
    if not lt(free, weight) then return 0 end
    return w - floor_muldiv(free, w, weight)
end

-- sliding_wait_us: the wait until the denied request fits (cost <= limit).
local function sliding_wait_us(v, p, now, cost)
    local w = p.window
    if le(v.count, sub(p.limit, cost)) then
        local e = first_fit(v.prev, sub(sub(p.limit, v.count), cost), w)
        if e < w then return sub(add(v.start, e) or fail(ERR_OVERFLOW), now) end
    end
    local e = sign(v.count) == 0 and 0 or first_fit(v.count, sub(p.limit, cost), w)
    local at = add(v.start, w)
    at = at and add(at, e)
    return sub(at or fail(ERR_OVERFLOW), now)
end

-- sliding_reset_after: until the end of the next window while the current
-- one counts anything, of the current one while prev does.
local function sliding_reset_ns(v, w, now, count_after)
    local windows = sign(count_after) > 0 and 2 or (sign(v.prev) > 0 and 1 or 0)
    if windows == 0 then return 0 end
    return ns_until(add(v.start, w * windows) or fail(ERR_OVERFLOW), now)
end

-- fg_sliding_decide: the decision and the state an admission leaves.
local function sliding_decide(cur, p, now, cost)
    local v = sliding_view(cur, p.window, now)
    local weight = prev_units(v, p.window)
    local fits = le(v.count, p.limit) and le(cost, sub(p.limit, v.count)) and
                 le(weight, sub(sub(p.limit, v.count), cost))
    local after = fits and add(v.count, cost) or v.count
    local retry = -1
    if not fits and le(cost, p.limit) then
        retry = mul(sliding_wait_us(v, p, now, cost), 1000) or fail(ERR_OVERFLOW)
    end
    local d = {allowed = fits, limit = p.limit, retry_ns = retry,
               reset_ns = sliding_reset_ns(v, p.window, now, after), remaining = 0}
    if lt(after, p.limit) then d.remaining = max(sub(sub(p.limit, after), weight), 0) end
    if not (fits and sign(cost) > 0) then return d, cur end
    return d, {start = v.start, count = after, prev = v.prev}
end
