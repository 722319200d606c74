-- ratelimit.lua - the rate-limit commands as a server script: FG.TOKEN,
-- FG.LEAKY, FG.GCRA, CL.THROTTLE, FG.FIXED, FG.SLIDING, FG.SLIDELOG,
-- FG.PEEK, FG.REFUND, FG.RESET and FG.INSPECT, and GCRA, with their replies.
--
-- Mirrors src/core/gcra.c, fixed_window.c, sliding_window.c, sliding_log.c,
-- gcra_compat.c and src/module/t_ratelimit.c, t_gcra.c: the same rules in
-- the same order, on the prelude's exact integers.
-- tests/integration/test_scripts_differential.py holds the two equal at
-- explicit instants.
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
--   slidelog  ZSET    one member per admitted unit, "<ts>:<k>": its time in
--                     us, zero-padded to 16 digits, and its index among the
--                     units of that time, 5 digits; every score 0
--   GCRA      STRING  the TAT in decimal microseconds, as Redis's GCRA
--                     keeps it
--
-- (the digit after the letter is the format's version). The log's equal
-- scores order it by name, which is time order, so ZLEXCOUNT counts what
-- is newer than a time, ZREMRANGEBYLEX drops what is not, and ZRANGE finds
-- the newest or the k-th unit, each in O(log n); scores would be doubles,
-- inexact past 2^53 us (2255), and AT goes to 2^63 ns.
--
-- Every write gives the key an absolute expiry (PXAT, PEXPIREAT) at the
-- moment its state is empty again, in the same command, so no key is ever
-- left without one; the script replicates as effects, which carry those
-- absolute times.
--
-- A bucket's TAT and GCRA's are both decimal strings, where the module
-- keeps the buckets in a type of its own. The checks take any: the buckets
-- read any decimal as a TAT, as CL.THROTTLE reads redis-cell's, and GCRA
-- any string, as Redis's GCRA does (but floodgate's "f1:" and "s1:"
-- states, WRONGTYPE as the module's types are). FG.RESET and FG.INSPECT,
-- which the module answers WRONGTYPE for GCRA's strings, tell them by
-- length: 18 or 19 digits is a bucket's (ns from 1973 on), fewer is GCRA's
-- (us until the year 5138).

-- ------------------------------------------------------------ helpers

-- TYPE's answer, a status reply.
local function key_type(key)
    local kind = redis.call('TYPE', key)
    return type(kind) == 'table' and kind.ok or kind
end

-- ------------------------------------------------------------- bucket

local function token_params(argv, i) return bucket_params(argv, i, 'refill_per_sec') end
local function leaky_params(argv, i) return bucket_params(argv, i, 'leak_per_sec') end

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

-- ------------------------------------------------------------ windows

local SLOG_MAX_LIMIT = 100000 -- sliding_log.h's FG_SLOG_MAX_LIMIT

local function counter_params(argv, i) return window_params(argv, i, INT64_MAX) end
local function slidelog_params(argv, i) return window_params(argv, i, SLOG_MAX_LIMIT) end

-- ------------------------------------------------------------- fixed

-- A key without a window: the prelude's empty state for fixed_decide.
local EMPTY_FIXED = {start = 0, count = 0}

-- The stored state, nil when absent, WRONGTYPE for any other value.
local function read_fixed(key)
    local v = get_string(key)
    if v == nil then return nil end
    local start, count = string.match(v, '^f1:(%d+):(%d+)$')
    start, count = start and parse_int(start), count and parse_int(count)
    if not start or not count or sign(count) <= 0 then fail(WRONGTYPE) end
    return {start = start, count = count}
end

-- Stores a state until its window ends (fg_fixed_expires_at_us).
local function store_fixed(key, s, p, skew)
    redis.call('SET', key, 'f1:' .. tostr(s.start) .. ':' .. tostr(s.count), 'PXAT',
               tostr(expiry_ms(saturating_add(s.start, p.window), skew)))
end

local fixed = {}

function fixed.decide(key, p, now_us, skew, cost, commit)
    local d, next_state = fixed_decide(read_fixed(key) or EMPTY_FIXED, p, now_us, cost)
    if commit and d.allowed then store_fixed(key, next_state, p, skew) end
    return d
end

-- fg_fixed_refund: only the window now is judged in can give units back.
function fixed.refund(key, p, now_us, skew, units)
    local cur = read_fixed(key)
    if cur == nil then return 0 end
    local w = fixed_window(cur, p, now_us)
    local refunded = min(units, w.count)
    if sign(refunded) == 0 then return 0 end
    local left = sub(w.count, refunded)
    if sign(left) == 0 then
        redis.call('DEL', key)
    else
        store_fixed(key, {start = w.start, count = left}, p, skew)
    end
    return refunded
end

function fixed.inspect(key)
    local s = read_fixed(key)
    return {'type', 'fixed', 'window_start_us', out(s.start), 'count', out(s.count)}
end

-- ----------------------------------------------------------- sliding

local function read_sliding(key)
    local v = get_string(key)
    if v == nil then return nil end
    local start, count, prev = string.match(v, '^s1:(%d+):(%d+):(%d+)$')
    start, count, prev = start and parse_int(start), count and parse_int(count),
                         prev and parse_int(prev)
    if not start or not count or not prev or (sign(count) == 0 and sign(prev) == 0) then
        fail(WRONGTYPE)
    end
    return {start = start, count = count, prev = prev}
end

local sliding = {}

-- A state weighs until the end of the next window (fg_sliding_expires_at_us:
-- an admission leaves count > 0).
function sliding.decide(key, p, now_us, skew, cost, commit)
    local d, s = sliding_decide(read_sliding(key), p, now_us, cost)
    if commit and d.allowed then
        local empty_at = saturating_add(saturating_add(s.start, p.window), p.window)
        redis.call('SET', key, 's1:' .. tostr(s.start) .. ':' .. tostr(s.count) .. ':' ..
                   tostr(s.prev), 'PXAT', tostr(expiry_ms(empty_at, skew)))
    end
    return d
end

function sliding.inspect(key)
    local s = read_sliding(key)
    return {'type', 'sliding', 'window_start_us', out(s.start), 'count', out(s.count),
            'prev_count', out(s.prev)}
end

-- ---------------------------------------------------------- slidelog

-- core/sliding_log.c, its ring of timestamps a sorted set (the layout at
-- the top). A unit stamped ts counts while ts > now - window.
local MEMBER = '^(' .. string.rep('%d', 16) .. '):(%d%d%d%d%d)$'
local ZADD_BATCH = 1000 -- members per ZADD: unpack's limit is ~8000 values

-- A time as the members' 16 digits.
local function slog_time(ts)
    local s = tostr(ts)
    return string.rep('0', 16 - #s) .. s
end

-- A member's time and index; WRONGTYPE for a member that is not ours.
local function slog_parse(member)
    local ts, k = string.match(member, MEMBER)
    if ts == nil then fail(WRONGTYPE) end
    return parse_int(string.match(ts, '^0*(%d+)$')), tonumber(k)
end

-- The entry of a rank (0 = oldest, -1 = newest).
local function slog_at(key, rank)
    return slog_parse(redis.call('ZRANGE', key, rank, rank)[1])
end

-- How many units the log holds; WRONGTYPE unless it is a sorted set.
local function slog_len(key)
    local kind = key_type(key)
    if kind == 'none' then return 0 end
    if kind ~= 'zset' then fail(WRONGTYPE) end
    return redis.call('ZCARD', key)
end

-- fg_slog_apply of the effect: drop every unit <= horizon, add n at stamp,
-- numbered on from the newest unit of that time.
local function slog_apply(key, horizon, stamp, k, n)
    if sign(horizon) >= 0 then
        redis.call('ZREMRANGEBYLEX', key, '-', '(' .. slog_time(add(horizon, 1)))
    end
    local t, args = slog_time(stamp), {}
    for j = 0, n - 1 do
        args[#args + 1] = 0
        args[#args + 1] = t .. ':' .. string.format('%05d', k + j)
        if #args == 2 * ZADD_BATCH or j == n - 1 then
            redis.call('ZADD', key, unpack(args))
            args = {}
        end
    end
end

local slidelog = {}

-- fg_slog_decide, and the effect applied when the request is admitted
-- with a cost; the key lives until its newest unit leaves the window.
function slidelog.decide(key, p, now, skew, cost, commit)
    local len = slog_len(key)
    local horizon = sub(now, p.window)
    local counted = len
    if len > 0 and sign(horizon) >= 0 then
        counted = redis.call('ZLEXCOUNT', key, '[' .. slog_time(add(horizon, 1)), '+')
    end
    local allowed = counted <= p.limit and le(cost, p.limit - counted)
    local writes = allowed and sign(cost) > 0
    local newest, newest_k, stamp = nil, nil, now
    if len > 0 then
        newest, newest_k = slog_at(key, -1)
        stamp = max(now, newest)
    end
    local counted_after = writes and counted + cost or counted
    local d = {allowed = allowed, limit = p.limit, remaining = math.max(p.limit - counted_after, 0),
               retry_ns = -1, reset_ns = 0}
    if not allowed and le(cost, p.limit) then
        -- the excess-th oldest counted unit has to leave the window
        local excess = counted + cost - p.limit
        local ts = slog_at(key, len - counted + excess - 1)
        d.retry_ns = ns_until(add(ts, p.window) or fail(ERR_OVERFLOW), now)
    end
    if counted_after > 0 then
        d.reset_ns = ns_until(add(writes and stamp or newest, p.window) or fail(ERR_OVERFLOW), now)
    end
    if commit and writes then
        local k = (len > 0 and cmp(stamp, newest) == 0) and newest_k + 1 or 0
        slog_apply(key, horizon, stamp, k, cost)
        redis.call('PEXPIREAT', key, tostr(expiry_ms(saturating_add(stamp, p.window), skew)))
    end
    return d
end

-- The entries as the module gives them: runs of [ts, count], oldest first.
function slidelog.inspect(key)
    local entries, last = {}, nil
    for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
        local t = string.match(member, MEMBER)
        if t ~= nil and t == last then
            entries[#entries] = entries[#entries] + 1
        else
            entries[#entries + 1] = out((slog_parse(member)))
            entries[#entries + 1] = 1
            last = t
        end
    end
    return {'type', 'slidelog', 'entries', entries}
end

-- ------------------------------------------------------------ commands

-- Each limiter: its family, how its parameters read, and its reply.
local limiters = {
    TOKEN = {command = 'FG.TOKEN', family = bucket, params = token_params, nparams = 2},
    LEAKY = {command = 'FG.LEAKY', family = bucket, params = leaky_params, nparams = 2},
    GCRA = {command = 'FG.GCRA', family = bucket, params = gcra_params, nparams = 3},
    THROTTLE = {command = 'CL.THROTTLE', family = bucket, params = throttle_params, nparams = 3,
                cell = true},
    FIXED = {command = 'FG.FIXED', family = fixed, params = counter_params, nparams = 2},
    SLIDING = {command = 'FG.SLIDING', family = sliding, params = counter_params, nparams = 2},
    SLIDELOG = {command = 'FG.SLIDELOG', family = slidelog, params = slidelog_params, nparams = 2},
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

-- Which family a key holds: nil when absent, WRONGTYPE for any other value
-- (GCRA's strings included: the length tells them, see the top).
local POLICY_STATE

local function family_of(key)
    local kind = key_type(key)
    if kind == 'none' then return nil end
    if kind == 'zset' then
        slog_at(key, -1)
        return slidelog
    end
    if kind ~= 'string' then fail(WRONGTYPE) end
    local v = redis.call('GET', key)
    local tag = string.sub(v, 1, 3)
    if tag == 'f1:' then
        read_fixed(key)
        return fixed
    end
    if tag == 's1:' then
        read_sliding(key)
        return sliding
    end
    if tag == 'p1|' then return POLICY_STATE end
    if not string.find(v, '^[1-9]' .. string.rep('%d', 17) .. '%d?$') then fail(WRONGTYPE) end
    read_tat(key)
    return bucket
end

-- FG.RESET deletes a policy's state too (policy.lua's "p1|..."), as the
-- module's does; FG.INSPECT answers it WRONGTYPE, as the module's.
POLICY_STATE = {inspect = function() fail(WRONGTYPE) end}

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

-- -------------------------------------------------------------- GCRA

-- GCRA key max_burst tokens_per_period period [TOKENS count] [AT unix_us]:
-- the command Redis held out of 8.8, by core/gcra_compat.c's arithmetic
-- (microseconds, the time in whole milliseconds, seconds in the reply) and
-- module/t_gcra.c's arguments, read as the server's own readers read them,
-- with their errors. AT is t_gcra.c's: a last pair, the time truncated to
-- the millisecond, and a key expired by then absent (PEXPIRETIME: 7.0).

local GCRA_NOT_INTEGER = 'ERR value is not an integer or out of range'
local GCRA_COUNT_RANGE = 'ERR value is out of range, value must between 1 and 9223372036854775807'
local GCRA_OVERFLOW = 'ERR GCRA limiting uses microsecond accuracy. Combination of period, ' ..
                      'tokens_per_period and %s would cause an overflow'

local function gcra_integer(s)
    return parse_int(s) or fail(GCRA_NOT_INTEGER)
end

local function gcra_count(s)
    local v = gcra_integer(s)
    if sign(v) <= 0 then fail(GCRA_COUNT_RANGE) end
    return v
end

-- The stored TAT, nil for none: absent, or expired by an explicit time.
local function gcra_read(key, now, explicit)
    local kind = key_type(key)
    if kind == 'none' then return nil end
    if explicit then
        local expire_ms = redis.call('PEXPIRETIME', key)
        if expire_ms >= 0 and expire_ms < div(now, 1000) then return nil end
    end
    if kind ~= 'string' then fail(WRONGTYPE) end
    local v = redis.call('GET', key)
    if string.find(v, '^[fs]1:') then fail(WRONGTYPE) end
    local tat = parse_int(v)
    if tat == nil then fail('ERR Invalid GCRA key') end
    if sign(tat) <= 0 then fail('ERR Negative time is invalid value for GCRA') end
    return tat
end

-- Whole seconds, rounded up through a double, as Redis's GCRA does.
local function ceil_seconds(us) return math.ceil(to_double(us) / 1e6) end

commands['GCRA'] = function(keys, argv, i)
    local key, last = keys[1], #argv
    local argc, at = last - i + 3, nil -- the module's: GCRA, the key, the arguments
    if argc >= 7 and string.upper(argv[last - 1]) == 'AT' then
        at = integer_arg(argv[last], 'AT', 0, MAX_AT_US)
        argc = argc - 2
    end
    if argc < 5 or argc > 7 then fail("ERR wrong number of arguments for 'gcra' command") end

    local max_burst = gcra_integer(argv[i])
    if sign(max_burst) < 0 then fail('ERR value is out of range, must be positive') end
    local capacity = add(max_burst, 1) or INT64_MAX
    local per_period = gcra_count(argv[i + 1])
    local period = server_double(argv[i + 2])
    if period == nil then fail('ERR value is not a valid float') end
    if not (period > 0 and period < 1e12) then fail('ERR period must be > 0 and < 1e12') end
    local tokens = 1
    if argc > 5 then
        if string.upper(argv[i + 3]) ~= 'TOKENS' then fail('ERR syntax error') end
        if argc == 6 then fail('ERR Missing TOKENS value') end
        tokens = gcra_count(argv[i + 4])
    end

    local clock = at or server_us()
    local now = sub(clock, mod(clock, 1000))
    local tat = gcra_read(key, now, at ~= nil) or now
    -- T: period in us over the tokens, x + 0.5 truncated, at least 1
    local emission = max(of_double(floor(period * 1e6 / to_double(per_period) + 0.5)), 1)
    local increment = mul(emission, tokens) or fail(string.format(GCRA_OVERFLOW, 'TOKENS'))
    local variance = mul(emission, capacity) or fail(string.format(GCRA_OVERFLOW, 'max_burst'))
    local new_tat = add(max(now, tat), increment) or fail(string.format(GCRA_OVERFLOW, 'TOKENS'))
    local diff = add(sub(now, new_tat), variance)
    local limited = sign(diff) < 0
    local retry, ttl = -1, sub(tat, now)
    if limited then
        if le(increment, variance) then retry = ceil_seconds(neg(diff)) end
    else
        ttl = sub(new_tat, now)
        redis.call('SET', key, tostr(new_tat), 'PXAT', tostr(us_to_ms_ceil(new_tat)))
    end
    local left = sub(variance, ttl)
    return {limited and 1 or 0, out(capacity), sign(left) > 0 and out(div(left, emission)) or 0,
            retry, ceil_seconds(ttl)}
end
