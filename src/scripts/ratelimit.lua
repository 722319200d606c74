-- ratelimit.lua - the rate-limit commands as a server script: FG.TOKEN,
-- FG.LEAKY, FG.GCRA, CL.THROTTLE, FG.FIXED, FG.SLIDING, FG.SLIDELOG,
-- FG.PEEK, FG.REFUND, FG.RESET and FG.INSPECT, with their replies.
--
-- Mirrors src/core/gcra.c, fixed_window.c, sliding_window.c, sliding_log.c
-- and src/module/t_ratelimit.c: the same rules in the same order, on the
-- prelude's exact integers. tests/integration/test_scripts_differential.py
-- holds the two equal at explicit instants.
--
-- Called as EVALSHA <sha> 1 <key> <command> <the command's other arguments>,
-- the command named as the module names it (FG.TOKEN, FG.PEEK, ...), so the
-- library sends the module's commands unchanged but for that header
-- (src/client/remote/scripts.c). The Functions library registers one
-- function per command over the same code (functions.lua).
--
-- State. Without the module there is no type of our own, so each family
-- keeps a plain value its commands recognise:
--
--   bucket    STRING  the TAT in decimal nanoseconds, as redis-cell keeps it
--   fixed     STRING  "f1:<window_start_us>:<count>"
--   sliding   STRING  "s1:<window_start_us>:<count>:<prev_count>"
--   slidelog  ZSET    one member per admitted unit, scored by its time (us)
--
-- (the digit after the letter is the format's version). Every write gives
-- the key an absolute expiry (PXAT) at the moment its state is empty again,
-- in the same command, so no key is ever left without one; the script
-- replicates as effects, which carry those absolute times.

-- ------------------------------------------------------------- bucket

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

local function token_params(argv, i) return bucket_params(argv, i, 'refill_per_sec') end
local function leaky_params(argv, i) return bucket_params(argv, i, 'leak_per_sec') end

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

-- redis-cell's: integers, period in seconds, T truncated from a double.
local function throttle_params(argv, i)
    local max_burst = integer_arg(argv[i], 'max_burst', 0, sub(INT64_MAX, 1))
    local count = integer_arg(argv[i + 1], 'count', 1, INT64_MAX)
    local period = integer_arg(argv[i + 2], 'period', 1, div(INT64_MAX, 1000000000))
    local emission = to_double(mul(period, 1000000000)) / to_double(count)
    if emission < 1 then
        fail('ERR rate too high: count per period must leave at least one nanosecond per unit')
    end
    return {capacity = add(max_burst, 1), emission = of_double(floor(emission))}, i + 3
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

-- core/gcra.c's fg_gcra_refund: units given back, and the TAT to store (0:
-- the bucket is full again).
local function gcra_refund(tat_ns, p, now_us, units)
    local now = mul(now_us, 1000)
    if now == nil or mul(p.emission, p.capacity) == nil then fail(ERR_OVERFLOW) end
    local outstanding = lt(now, tat_ns) and sub(tat_ns, now) or 0
    local give = mul(min(units, p.capacity), p.emission)
    if not lt(give, outstanding) then
        return min(units, ceil_div(outstanding, p.emission)), 0
    end
    return min(units, p.capacity), sub(tat_ns, give)
end

-- The stored TAT of a bucket key: 0 when absent, WRONGTYPE when the key
-- holds anything but a positive decimal (of at most 19 digits, leading
-- zeros too, as t_ratelimit.c's read_redis_cell_state reads redis-cell's).
local function read_tat(key)
    local v = get_string(key)
    if v == nil then return 0 end
    local digits = #v <= 19 and string.match(v, '^0*(%d+)$')
    local tat = digits and parse_int(digits)
    if not tat or sign(tat) <= 0 then fail(WRONGTYPE) end
    return tat
end

-- A TAT's expiry: the TAT rounded up to the microsecond (gcra.c's
-- fg_gcra_expires_at_us).
local function tat_expires_us(tat_ns) return ceil_div(tat_ns, 1000) end

local bucket = {}

function bucket.decide(key, p, now_us, skew, cost, commit)
    local tat = read_tat(key)
    local d, next_tat = gcra_decide(tat, p, now_us, cost)
    if commit and d.allowed and sign(cost) > 0 then
        redis.call('SET', key, tostr(next_tat), 'PXAT',
                   tostr(expiry_ms(tat_expires_us(next_tat), skew)))
    end
    return d
end

function bucket.refund(key, p, now_us, skew, units)
    local tat = read_tat(key)
    if tat == 0 then return 0 end
    local refunded, next_tat = gcra_refund(tat, p, now_us, units)
    if sign(refunded) == 0 then return 0 end
    if next_tat == 0 then
        redis.call('DEL', key)
    else
        redis.call('SET', key, tostr(next_tat), 'PXAT',
                   tostr(expiry_ms(tat_expires_us(next_tat), skew)))
    end
    return refunded
end

function bucket.inspect(key)
    return {'type', 'bucket', 'tat_ns', out(read_tat(key))}
end

-- ------------------------------------------------------------ commands

-- Each limiter: its family, how its parameters read, and its reply.
local limiters = {
    TOKEN = {command = 'FG.TOKEN', family = bucket, params = token_params, nparams = 2},
    LEAKY = {command = 'FG.LEAKY', family = bucket, params = leaky_params, nparams = 2},
    GCRA = {command = 'FG.GCRA', family = bucket, params = gcra_params, nparams = 3},
    THROTTLE = {command = 'CL.THROTTLE', family = bucket, params = throttle_params, nparams = 3,
                cell = true},
}

-- redis-cell's rounding: whole seconds, plus one if any millisecond is left.
local function ns_to_cell_seconds(ns)
    if sign(ns) < 0 then return -1 end
    local s, r = divmod(ns, 1000000000)
    if floor(to_double(r) / 1000000) > 0 then s = add(s, 1) end
    return s
end

local function reply(d, cell)
    if cell then
        return {d.allowed and 0 or 1, out(d.limit), out(d.remaining),
                out(ns_to_cell_seconds(d.retry_ns)), out(ns_to_cell_seconds(d.reset_ns))}
    end
    return {d.allowed and 1 or 0, out(d.limit), out(d.remaining),
            out(ns_to_ms_ceil(d.retry_ns)), out(ns_to_ms_ceil(d.reset_ns))}
end

-- The server's arity error names a module command as it was registered.
local function wrong_arity(command)
    fail("ERR wrong number of arguments for '" .. command .. "' command")
end

-- A check (t_ratelimit.c's run_check) of argv[i..]: parameters, then COST
-- and AT, or redis-cell's quantity.
local function run_check(key, lim, argv, i, peek)
    if #argv - i + 1 < lim.nparams then wrong_arity(peek and 'FG.PEEK' or lim.command) end
    local p, rest = lim.params(argv, i)
    local cost, at = 1, nil
    if lim.cell then
        if #argv > rest then wrong_arity(lim.command) end
        if #argv == rest then cost = integer_arg(argv[rest], 'quantity', 0, INT64_MAX) end
    else
        cost, at = options(argv, rest)
    end
    local now_us, skew = decision_time(at)
    local d = lim.family.decide(key, p, now_us, skew, cost, not peek and sign(cost) > 0)
    return reply(d, lim.cell)
end

local PEEKABLE = 'ERR unknown family: use FIXED, SLIDING, SLIDELOG, TOKEN, LEAKY or GCRA'

local commands = {}

for _, lim in pairs(limiters) do
    commands[lim.command] = function(keys, argv, i) return run_check(keys[1], lim, argv, i, false) end
end

-- FG.PEEK and FG.REFUND <family> key args...: the server's arity first
-- (command_docs.c's -5: the family and two arguments at least), then the
-- family.
commands['FG.PEEK'] = function(keys, argv, i)
    if #argv - i < 2 then wrong_arity('FG.PEEK') end
    local lim = limiters[string.upper(argv[i])]
    if lim == nil or lim.cell then fail(PEEKABLE) end
    return run_check(keys[1], lim, argv, i + 1, true)
end

commands['FG.REFUND'] = function(keys, argv, i)
    if #argv - i < 2 then wrong_arity('FG.REFUND') end
    local lim = limiters[string.upper(argv[i])]
    if lim == nil or lim.cell or lim.family.refund == nil then
        fail('ERR FG.REFUND takes TOKEN, LEAKY, GCRA or FIXED')
    end
    if #argv - i < lim.nparams then wrong_arity('FG.REFUND') end
    local p, rest = lim.params(argv, i + 1)
    local units, at = options(argv, rest)
    local now_us, skew = decision_time(at)
    return out(lim.family.refund(keys[1], p, now_us, skew, units))
end

-- Which family a key holds: nil when absent, WRONGTYPE for any other value.
local function family_of(key)
    local kind = redis.call('TYPE', key)
    kind = type(kind) == 'table' and kind.ok or kind
    if kind == 'none' then return nil end
    if kind == 'zset' and limiters.SLIDELOG then return limiters.SLIDELOG.family end
    if kind ~= 'string' then fail(WRONGTYPE) end
    local v = redis.call('GET', key)
    local tag = string.sub(v, 1, 3)
    if tag == 'f1:' and limiters.FIXED then return limiters.FIXED.family end
    if tag == 's1:' and limiters.SLIDING then return limiters.SLIDING.family end
    if #v <= 19 and string.find(v, '^[1-9]%d*$') then return bucket end
    fail(WRONGTYPE)
end

-- FG.RESET key and FG.INSPECT key take nothing after the key.
local function key_only(argv, i, command)
    if #argv >= i then wrong_arity(command) end
end

commands['FG.RESET'] = function(keys, argv, i)
    key_only(argv, i, 'FG.RESET')
    if family_of(keys[1]) == nil then return 0 end
    redis.call('DEL', keys[1])
    return 1
end

-- Field/value pairs as a flat array under both protocols: a script's map
-- reply would lose the module's order of fields.
commands['FG.INSPECT'] = function(keys, argv, i)
    key_only(argv, i, 'FG.INSPECT')
    local family = family_of(keys[1])
    if family == nil then return false end
    local fields = family.inspect(keys[1])
    fields[#fields + 1] = 'pttl'
    fields[#fields + 1] = redis.call('PTTL', keys[1])
    return fields
end
