-- fast/ratelimit.lua - the checks of ratelimit.lua on plain doubles (see
-- fast/prelude.lua): FG.TOKEN, FG.LEAKY, FG.GCRA, CL.THROTTLE, FG.FIXED,
-- FG.SLIDING and FG.SLIDELOG, with the states and replies ratelimit.lua
-- describes.
--
-- fast(keys, argv, command, i): the reply of `command` on keys[1] with its
-- arguments at argv[i..], or nil for the exact code to answer. One
-- function, a branch for each kind of limit, so that a call makes the
-- rules of its own kind only (fast/prelude.lua, "What a call pays for").

--@ prelude

-- COST n and AT unix_us from argv[i..] (prelude.lua's options): cost and
-- AT (nil: none), or nil outside the fast range.
local function options(argv, i)
    local cost, at, n = 1, nil, #argv
    while i <= n do
        local word, v = string.upper(argv[i]), argv[i + 1]
        if v == nil then return nil end
        if word == 'COST' then
            cost = small_int(v)
        elseif word == 'AT' then
            at = small_time(v)
            if at == nil then return nil end
        else
            return nil
        end
        if cost == nil then return nil end
        i = i + 2
    end
    return cost, at
end

local function fast(keys, argv, command, i)
    local key, n = keys[1], #argv
    if command == 'FG.TOKEN' or command == 'FG.LEAKY' or command == 'FG.GCRA' or command == 'CL.THROTTLE' then
--@ buckets
        -- capacity, emission interval (ns), cost and AT: bucket_params,
        -- gcra_params, throttle_params, then the options
        local capacity, emission, cost, at
        if command == 'CL.THROTTLE' then
            if n < i + 2 or n > i + 3 then return nil end
            local burst, count, period = small_int(argv[i]), small_int(argv[i + 1]), small_int(argv[i + 2])
            if not (burst and count and period) or count < 1 or period < 1 or period > 9000000 then
                return nil
            end
            emission, cost = period * 1000000000 / count, 1
            if argv[i + 3] then cost = small_int(argv[i + 3]) end
            if emission < 1 or cost == nil then return nil end
            capacity, emission = burst + 1, math.floor(emission)
        else
            capacity = small_int(argv[i] or '')
            if capacity == nil or capacity < 1 then return nil end
            local ns
            if command == 'FG.GCRA' then
                local count, period = small_decimal(argv[i + 1] or ''), small_decimal(argv[i + 2] or '')
                if not count or not period or count > 1e18 or period > 1e12 then return nil end
                ns = period * 1e6 / count
                if ns < 0.5 then return nil end
                i = i + 3
            else
                local rate = small_decimal(argv[i + 1] or '')
                if not rate or rate > 1e9 then return nil end
                ns = 1e9 / rate
                i = i + 2
            end
            cost, at = options(argv, i)
            if cost == nil then return nil end
            emission = ns < 1 and 1 or math.floor(ns + 0.5)
        end
        if capacity * emission >= 4503599627370496 then return nil end

        local now, skew = decision_time(at)
        local seconds, past = bucket_now(now)
        local v = redis.pcall('GET', key)
        local tat = 0
        if v then
            tat = tat_since(v, seconds, past)
            if tat == nil then return nil end
        end
        local allowed, retry, ttl, remaining, new_tat = bucket_decide(tat, capacity, emission, cost)
        if allowed == nil then return nil end
        if allowed and cost > 0 then
            local text, expires_us = tat_text(new_tat, now, seconds, past)
            local err = store(key, text, expires_us, skew)
            if err then return err end
        end
        if command == 'CL.THROTTLE' then
            -- redis-cell's whole seconds, plus one if any millisecond is left
            local function cell_seconds(ns)
                if ns < 0 then return -1 end
                local s = math.floor(ns / 1000000000)
                if math.floor((ns - s * 1000000000) / 1000000) > 0 then s = s + 1 end
                return s
            end
            return {allowed and 0 or 1, capacity, remaining, cell_seconds(retry), cell_seconds(ttl)}
        end
        return {allowed and 1 or 0, capacity, remaining, ms_ceil(retry, 1000000), math.ceil(ttl / 1000000)}
    end

    if command ~= 'FG.FIXED' and command ~= 'FG.SLIDING' and command ~= 'FG.SLIDELOG' then return nil end
    -- limit, window (us), cost and AT
    local limit, w = small_int(argv[i] or ''), nil
    if limit == nil or limit < 1 or limit > (command == 'FG.SLIDELOG' and 100000 or 4503599627370496) then
        return nil
    end
    local ms = small_decimal(argv[i + 1] or '')
    if not ms or ms > 1e12 then return nil end
    -- the nearest microsecond (duration_us)
    w = math.floor(ms * 1000)
    if ms * 1000 - w >= 0.5 then w = w + 1 end
    if w < 1 then return nil end
    local cost, at = options(argv, i + 2)
    if cost == nil then return nil end

    if command == 'FG.SLIDELOG' then
        if cost > 1000 then return nil end
        -- the log's member of a unit: its time in 16 digits, its index in 5;
        -- a member's time and index, nil for one not ours or out of range
        local function slog_entry(member)
            local ts, k = string.match(member or '', '^(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d):(%d%d%d%d%d)$')
            ts = ts and tonumber(ts)
            if ts == nil or ts >= 4503599627370496 then return nil end
            return ts, tonumber(k)
        end
        -- slidelog.decide: the log's size, what the window counts, its
        -- newest unit, and the effect of an admission, each one call
        local now, skew = decision_time(at)
        local len = redis.pcall('ZCARD', key)
        if type(len) ~= 'number' then return nil end
        local horizon = now - w
        local counted, newest, newest_k, stamp = len, nil, nil, now
        if len > 0 then
            if horizon >= 0 then counted = redis.call('ZLEXCOUNT', key, '[' .. string.format('%016.0f', horizon + 1), '+') end
            newest, newest_k = slog_entry(redis.call('ZRANGE', key, -1, -1)[1])
            if newest == nil then return nil end
            if newest > now then stamp = newest end
        end
        local allowed = counted <= limit and cost <= limit - counted
        local writes = allowed and cost > 0
        local counted_after = writes and counted + cost or counted
        local retry, reset = -1, 0
        if not allowed and cost <= limit then
            local ts = slog_entry(redis.call('ZRANGE', key, len - limit + cost - 1, len - limit + cost - 1)[1])
            if ts == nil then return nil end
            retry = ts + w - now
        end
        if counted_after > 0 then reset = (writes and stamp or newest) + w - now end
        if writes then
            -- what no longer counts goes; nothing to drop when all of it counts
            if horizon >= 0 and counted < len then
                redis.call('ZREMRANGEBYLEX', key, '-', '(' .. string.format('%016.0f', horizon + 1))
            end
            local k = (len > 0 and stamp == newest) and newest_k + 1 or 0
            local args = {}
            for j = 0, cost - 1 do
                args[2 * j + 1] = 0
                args[2 * j + 2] = string.format('%016.0f:%05d', stamp, k + j)
            end
            local r = redis.pcall('ZADD', key, unpack(args))
            if type(r) == 'table' and r.err then return r end
            local us = stamp + w + skew
            redis.call('PEXPIREAT', key, us > 0 and math.ceil(us / 1000) or 0)
        end
        return {allowed and 1 or 0, limit, limit > counted_after and limit - counted_after or 0,
                ms_ceil(retry, 1000), ms_ceil(reset, 1000)}
    end

    if command == 'FG.SLIDING' and limit * w >= 4503599627370496 then return nil end
--@ windows
    -- a stored count: 0 or a decimal without a leading zero, below 2^52
    local function count_of(s)
        if string.byte(s) == 48 and s ~= '0' then return nil end
        return small_int(s)
    end
    local now, skew = decision_time(at)
    local v = redis.pcall('GET', key)
    if v and type(v) ~= 'string' then return nil end
    if command == 'FG.FIXED' then
        local start, count = 0, 0
        if v then
            local a, b = string.match(v, '^f1:([1-9]%d*):([1-9]%d*)$')
            start, count = small_int(a or ''), small_int(b or '')
            if not start or not count then return nil end
        end
        local allowed, remaining, retry, reset, next_start, after = fixed_decide(start, count, limit, w, now, cost)
        if allowed and cost > 0 then
            local err = store(key, string.format('f1:%.0f:%.0f', next_start, after), next_start + w, skew)
            if err then return err end
        end
        return {allowed and 1 or 0, limit, remaining, ms_ceil(retry, 1000), math.ceil(reset / 1000)}
    end

    local stored, c, p = 0, 0, 0
    if v then
        local a, b, d = string.match(v, '^s1:([1-9]%d*):(%d+):(%d+)$')
        stored, c, p = small_int(a or ''), count_of(b or ''), count_of(d or '')
        if not stored or not c or not p or (c == 0 and p == 0) or c * w >= 4503599627370496 or
            p * w >= 4503599627370496 then
            return nil
        end
    end
    local fits, remaining, retry, reset, start, after, prev = sliding_decide(stored, c, p, limit, w, now, cost)
    if fits and cost > 0 then
        local err = store(key, string.format('s1:%.0f:%.0f:%.0f', start, after, prev), start + 2 * w, skew)
        if err then return err end
    end
    return {fits and 1 or 0, limit, remaining, ms_ceil(retry, 1000), math.ceil(reset / 1000)}
end
