-- uv.lua - unique counters as a server script: FG.UVCREATE, FG.UVADD,
-- FG.UVADDAT, FG.UVCOUNT and FG.UVEXPORT on native HyperLogLog keys.
--
-- Mirrors src/core/uv_keys.c (the bucket keys and which of them a call
-- declares), the bucket walk of src/core/uv.c (fg_uv_registers_between:
-- whole kept buckets, the coarsest first, an edge off the grid refused)
-- and src/module/t_uv.c's arguments and messages, on the module's default
-- tiers. docs/scripts.md, "Unique counters" says what differs;
-- tests/integration/test_scripts_uv.py holds the counts to the module's.
--
-- Called as EVALSHA <sha> <n> <counter> <its bucket keys> <command> <the
-- command's other arguments>: the library declares every bucket the call
-- may need at its own clock, a minute either way (uv_keys.h), and the
-- script takes those the server's clock needs. A key it needs but was not
-- given is refused, so a clock more than a minute off is an error, never
-- a count of other buckets.
--
-- State. A counter is its buckets, one HyperLogLog per minute, hour and
-- day (UTC), kept as the module keeps its tiers: the current bucket and
-- the 59 minutes, 47 hours or 30 days before it. Each key expires when
-- its bucket leaves the tier. A bucket key is <base>:uv:<width>:<start
-- second>, base the counter's name when it has a hash tag, "{name}" when
-- not, so every bucket is in the name's slot; the name itself holds
-- nothing (a value there is another family's: WRONGTYPE, as on the
-- module). Why not the module's staircase: it costs a register scan per
-- call that Lua cannot make fast, and PFCOUNT of whole buckets is what
-- the server does natively; the price is that windows are whole buckets.
--
-- Windows. BETWEEN is cut into whole kept buckets, the coarsest first,
-- from its start (core/uv.c's walk); an edge on no kept bucket's boundary
-- is refused with the module's message, so a count is the count of the
-- window asked for. The one exception is an end after the current second:
-- the last bucket is taken whole (past now it holds only items added
-- ahead of the clock). LAST n unit starts at the start of the finest kept
-- bucket that holds its first second, and runs to now: never shorter
-- than asked, longer by at most the part of one bucket before its start.

local UV_TIERS = {{width = 60, count = 60}, {width = 3600, count = 48}, {width = 86400, count = 31}}
local UV_GRID = 'minutes for the last 60 minutes, hours for the last 48 hours, days for the last 31 days'
local UV_SPAN = 604800
local UV_MAX_US = 4294967295999999
local UV_FUTURE = 60 -- seconds an add may be ahead of the clock
local UV_NAME_MAX = 64
local UV_UNITS = {SECONDS = 1, SECOND = 1, MINUTES = 60, MINUTE = 60, HOURS = 3600, HOUR = 3600,
                  DAYS = 86400, DAY = 86400}
local UV_OPTIONS = {{'SPAN', 1, 15552000, UV_SPAN}, {'MINUTES', 0, 1440, 60}, {'HOURS', 0, 744, 48},
                    {'DAYS', 0, 1100, 31}, {'TZOFFSET', -86400, 86400, 0}}

local function arity(name) fail("ERR wrong number of arguments for '" .. name .. "' command") end

local function server_second() return floor(server_us() / 1000000) end

-- ------------------------------------------------------------ keys

-- A counter: its name, the prefix of its buckets and the keys the call
-- declared (uv_keys.c's fg_uv_keys_base). A value under its name is
-- `taken`: WRONGTYPE, or FG.UVCREATE's "key exists".
local function counter(name, keys, taken)
    if #name == 0 or #name > UV_NAME_MAX then
        fail("ERR counter names are 1 to 64 bytes on the script backend: '" .. string.sub(name, 1, 100) .. "'")
    end
    local open = string.find(name, '{', 1, true)
    local close = open and string.find(name, '}', open + 1, true)
    local base = name
    if not (close and close > open + 1) then
        if string.find(name, '}', 1, true) then
            fail("ERR counter '" .. name .. "' keeps no slot for its buckets: a name without a hash tag must not hold '}'")
        end
        base = '{' .. name .. '}'
    end
    if redis.call('EXISTS', name) == 1 then fail(taken or WRONGTYPE) end
    local declared = {}
    for _, k in ipairs(keys) do declared[k] = true end
    return {name = name, base = base, declared = declared}
end

-- A key the call needs, which it must have declared.
local function need(c, key)
    if not c.declared[key] then
        fail("ERR key '" .. key .. "' is needed but not declared: the client's clock is more than a minute from the server's")
    end
    return key
end

local function bucket_key(c, tier, b)
    return need(c, c.base .. ':uv:' .. tier.width .. ':' .. string.format('%d', b * tier.width))
end

-- Whether bucket b of a tier is kept at second now (core/uv.c's retained).
local function kept(tier, b, now) return b >= floor(now / tier.width) - tier.count + 1 end

-- Whether any bucket of the counter exists: a counter with none is
-- missing, counted as empty without a window to check.
local function exists(c, keys)
    local mine = {}
    for _, k in ipairs(keys) do
        if string.sub(k, 1, #c.base + 4) == c.base .. ':uv:' then mine[#mine + 1] = k end
    end
    return #mine > 0 and redis.call('EXISTS', unpack(mine)) > 0
end

-- ---------------------------------------------------------------- add

local function add_items(keys, argv, i, at)
    local c = counter(keys[1], keys)
    local now = server_second()
    local t = at and floor(at / 1000000) or now
    local targets = {}
    for _, tier in ipairs(UV_TIERS) do
        local b = floor(t / tier.width)
        if kept(tier, b, now) then
            local key = bucket_key(c, tier, b)
            local kind = redis.call('TYPE', key)
            kind = type(kind) == 'table' and kind.ok or kind
            if kind ~= 'none' and (kind ~= 'string' or redis.call('GETRANGE', key, 0, 3) ~= 'HYLL') then
                fail(WRONGTYPE)
            end
            targets[#targets + 1] = {key, (b + tier.count) * tier.width * 1000}
        end
    end
    local changed = 0
    for _, target in ipairs(targets) do
        for first = i, #argv, 1000 do -- unpack's stack is bounded
            if redis.call('PFADD', target[1], unpack(argv, first, math.min(first + 999, #argv))) == 1 then
                changed = 1
                redis.call('PEXPIREAT', target[1], string.format('%d', target[2]))
            end
        end
    end
    return changed
end

local commands = {}

commands['FG.UVADD'] = function(keys, argv, i)
    if #keys < 1 or i > #argv then arity('fg.uvadd') end
    return add_items(keys, argv, i, nil)
end

commands['FG.UVADDAT'] = function(keys, argv, i)
    if #keys < 1 or i + 1 > #argv then arity('fg.uvaddat') end
    local at = integer_arg(argv[i], 'unix_us', 0, UV_MAX_US)
    if at > server_us() + UV_FUTURE * 1000000 then fail('ERR unix_us is more than 60 seconds in the future') end
    return add_items(keys, argv, i + 1, at)
end

-- FG.UVCREATE's options as the module reads them; a counter is its
-- buckets, so there is nothing to write, and tiers other than the
-- defaults need the module.
commands['FG.UVCREATE'] = function(keys, argv, i)
    if #keys < 1 then arity('fg.uvcreate') end
    local given = {}
    while i <= #argv do
        local word, option = string.upper(argv[i]), nil
        for _, o in ipairs(UV_OPTIONS) do if o[1] == word then option = o end end
        if option == nil then fail("ERR unknown option '" .. string.sub(argv[i], 1, 100) .. "'") end
        if given[word] then fail('ERR ' .. word .. ' given twice') end
        if i == #argv then fail('ERR ' .. word .. ' needs a value') end
        given[word] = integer_arg(argv[i + 1], word, option[2], option[3])
        i = i + 2
    end
    if given.TZOFFSET and given.TZOFFSET % 60 ~= 0 then fail('ERR TZOFFSET must be whole minutes') end
    for _, o in ipairs(UV_OPTIONS) do
        if given[o[1]] and given[o[1]] ~= o[4] then
            fail('ERR FG.UVCREATE ' .. o[1] .. ' needs the floodgate module: the script backend keeps '
                 .. 'SPAN 604800, MINUTES 60, HOURS 48, DAYS 31 and TZOFFSET 0')
        end
    end
    local c = counter(keys[1], keys, 'ERR key exists')
    if exists(c, keys) then fail('ERR key exists') end
    return {ok = 'OK'}
end

-- ------------------------------------------------------------ windows

-- "LAST n unit" or "BETWEEN start_us end_us" at argv[i..i+2] (t_uv.c's
-- parse_window).
local function parse_window(argv, i)
    local word = string.upper(argv[i])
    if word == 'LAST' then
        local n = integer_arg(argv[i + 1], 'n', 1, 15552000)
        local unit = UV_UNITS[string.upper(argv[i + 2])]
        if unit == nil then fail('ERR unit must be SECONDS, MINUTES, HOURS or DAYS') end
        return {last = true, seconds = n * unit}
    end
    if word ~= 'BETWEEN' then fail('ERR window must be LAST n unit or BETWEEN start_us end_us') end
    local a = integer_arg(argv[i + 1], 'start_us', 0, UV_MAX_US + 1)
    local b = integer_arg(argv[i + 2], 'end_us', 0, UV_MAX_US + 1)
    local w = {start = floor(a / 1000000), stop = floor(b / 1000000)}
    if w.start >= w.stop then fail('ERR BETWEEN start must be before end (in whole seconds)') end
    return w
end

-- Whether a kept bucket of some tier starts at t (core/uv.c's on_kept_grid).
local function on_kept_grid(t, now)
    for _, tier in ipairs(UV_TIERS) do
        local b = floor(t / tier.width)
        if b * tier.width == t and kept(tier, b, now) then return true end
    end
    return false
end

-- The bucket keys of counter c's window at second now, into out.
local function cover(c, w, now, out)
    local t1, t2 = w.start, w.stop
    if w.last then
        if w.seconds > UV_SPAN then
            fail(string.format("ERR LAST window of %d seconds is longer than the SPAN of '%s' (%d seconds)",
                               w.seconds, c.name, UV_SPAN))
        end
        local first = now - w.seconds + 1
        for _, tier in ipairs(UV_TIERS) do -- the days keep more than the span
            local b = floor(first / tier.width)
            if kept(tier, b, now) then t1 = b * tier.width break end
        end
        t2 = math.huge
    end
    local cursor = t1
    while cursor < t2 and cursor <= now + UV_FUTURE do
        local found = nil
        for k = #UV_TIERS, 1, -1 do
            local tier = UV_TIERS[k]
            local b = floor(cursor / tier.width)
            if b * tier.width == cursor and kept(tier, b, now) and (cursor + tier.width <= t2 or t2 > now) then
                found = {tier, b}
                break
            end
        end
        if found == nil then
            local edge = (cursor == t1 and not on_kept_grid(t1, now)) and t1 or t2
            local days = UV_TIERS[3]
            local oldest = (floor(now / days.width) - days.count + 1) * days.width
            if edge < oldest then
                fail(string.format("ERR BETWEEN edge %d is older than what '%s' keeps: its oldest time is %d (%s)",
                                   edge * 1000000, c.name, oldest * 1000000, UV_GRID))
            end
            fail(string.format("ERR BETWEEN edge %d is not on the grid of '%s' (%s)", edge * 1000000, c.name, UV_GRID))
        end
        out[#out + 1] = bucket_key(c, found[1], found[2])
        cursor = (found[2] + 1) * found[1].width
    end
end

-- The bucket keys of every counter's window ("key window [key ...]": the
-- first counter is keys[1]), the first counter, and the server's second.
local function window_keys(keys, argv, i, name)
    if #keys < 1 or i + 2 > #argv then arity(name) end
    local w = parse_window(argv, i)
    local now = server_second()
    local names = {keys[1]}
    for j = i + 3, #argv do names[#names + 1] = argv[j] end
    local out, first = {}, nil
    for _, n in ipairs(names) do
        local c = counter(n, keys)
        first = first or c
        if exists(c, keys) then cover(c, w, now, out) end
    end
    return out, first
end

-- A bucket holding something else than a HyperLogLog is WRONGTYPE in the
-- module's words.
local function hll_call(...)
    local r = redis.pcall(...)
    if type(r) == 'table' and r.err then
        if string.find(r.err, '^WRONGTYPE') then fail(WRONGTYPE) end
        fail(r.err)
    end
    return r
end

commands['FG.UVCOUNT'] = function(keys, argv, i)
    local out = window_keys(keys, argv, i, 'fg.uvcount')
    if #out == 0 then return 0 end
    return hll_call('PFCOUNT', unpack(out))
end

-- The union's HyperLogLog, merged into the counter's temporary key and
-- deleted there: PFMERGE gives what the buckets hold, sparse when they
-- are (the library makes it dense, as the module answers).
commands['FG.UVEXPORT'] = function(keys, argv, i)
    local out, c = window_keys(keys, argv, i, 'fg.uvexport')
    local tmp = need(c, c.base .. ':uv:tmp')
    redis.call('DEL', tmp)
    hll_call('PFMERGE', tmp, unpack(out))
    local hll = redis.call('GET', tmp)
    redis.call('DEL', tmp)
    return hll
end
