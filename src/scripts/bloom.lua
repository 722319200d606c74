-- bloom.lua - Bloom filters as a server script: BF.RESERVE, BF.ADD,
-- BF.MADD, BF.INSERT, BF.EXISTS, BF.MEXISTS, BF.INFO and BF.CARD with the
-- arguments, replies and error strings of src/module/t_bloom.c (its
-- parsers, in its order) and the chain of src/core/bloom.c (the levels'
-- capacities and rates of fg_bloom_level_plan, a level full after
-- `capacity` adds that answered 1, fg_bloom_add's order of checks, the
-- estimate of fg_bloom_cardinality), which this file mirrors
-- (docs/scripts.md, "Bloom filters"; tests/integration/test_scripts_bloom.py
-- holds its answers to the module's).
--@ no prelude
--
-- State: one string key, no TTL (a filter is data, as on the module):
--
--   bytes [0, HEAD)          "fgbf1 <error> <capacity0> <expansion> <levels>
--                            <adds of the newest level>", padded with spaces
--   then per level           "<bits> <k>" padded to LEVEL_HEAD bytes, then its
--                            bits (a multiple of 8), read and written with
--                            BITFIELD_RO and BITFIELD
--
-- One key, so a call declares only the key it names, a cluster keeps the
-- whole filter in the key's slot with no derived keys, and FCALL takes the
-- key alone. The price is a bound: a Redis string holds 512 MB
-- (proto-max-bulk-len), which is also the module's default
-- floodgate.max-structure-size, so the whole filter is refused past it
-- with the module's words. Each level's geometry is stored when the level
-- is made, never computed again: a replica, a restore or a server with
-- another libm reads the bits where they were written, so no change of
-- platform can make a false negative. Older levels hold exactly their
-- capacity (bloom.c's chain), so only the newest level's adds are kept.
--
-- Levels are classic Bloom filters, not bloom.c's cache-line blocks (a
-- script pays per call, not per cache miss): k probes among a level's m
-- bits, m and k the smallest for which the classic rate (1 - e^(-kn/m))^k
-- at n offered items is SIZING_MARGIN x the level's target, n being the
-- capacity plus the items a false positive hides while the level fills
-- (about capacity x t / (k + 1)). 9.7 bits per item at 1% (BF.INFO's Size
-- over capacity), where the module's blocks take 10.0.
--
-- Hash: redis.sha1hex (C speed, on every server, in Functions too). Two
-- 52-bit numbers from its first 104 bits, exact in doubles, give the k
-- probes of a level by enhanced double hashing (Dillinger and Manolios:
-- x += y, y += j, mod m), which avoids plain double hashing's repeated
-- probes when y is 0 mod m. math.fmod keeps every step exact (all below
-- 2^45). SHA1 is not keyed: whoever knows it can craft false positives, as
-- with the module's XXH3.

local HEAD = 80
local LEVEL_HEAD = 16
local MAX_LEVELS = 64
local MAX_CAPACITY = 1099511627776 -- 2^40: FG_BLOOM_MAX_CAPACITY
local MAX_EXPANSION = 32768
local MIN_ERROR = 1e-9
local MAX_LEVEL_BITS = 8796093022208 -- 1 TiB: FG_BLOOM_MAX_BYTES
local MAX_BYTES = 536870912 -- a Redis string; the module's default max-structure-size
local SIZING_MARGIN = 0.97 -- as bloom.c: room for one filter's randomness
local FIRST_SHARE = 0.8
local LATER_SHARE = 0.2 * 6 / (math.pi * math.pi)
local DEFAULTS = {error = 0.01, capacity = 100, expansion = 2, nonscaling = false, nocreate = false}
local GET_OPS = 1000 -- per BITFIELD_RO: unpack takes at most about 8000 values
local fmod, floor = math.fmod, math.floor

local ERR_FULL = 'ERR non scaling filter is full'
local ERR_NO_LEVEL = 'ERR problem inserting into filter'
local ERR_TOO_BIG = 'ERR filter too big: its bits would exceed 1 TiB'
local ERR_NOT_FOUND = 'ERR not found'
local INFO_FIELDS = {'capacity', 'size', 'filters', 'items', 'expansion'}
local INFO_TITLES = {'Capacity', 'Size', 'Number of filters', 'Number of items inserted',
                     'Expansion rate'}

local function arity(name) fail("ERR wrong number of arguments for '" .. name .. "' command") end

-- The module's argv from the script's: a[1] the key, a[j] for j >= 2 its
-- arguments, and the module's argc.
local function module_args(keys, argv, first)
    local a = {keys[1]}
    for j = first, #argv do a[j - first + 2] = argv[j] end
    return a, #argv - first + 3
end

local function integer_of(s) return int64_text(s) and tonumber(s) or nil end

-- ------------------------------------------------------------- geometry

-- Level i's capacity and target rate (fg_bloom_level_plan); nil when its
-- capacity would pass MAX_CAPACITY.
local function plan(f, i)
    local c = f.capacity0
    for _ = 1, i do
        if c > floor(MAX_CAPACITY / f.expansion) then return nil end
        c = c * f.expansion
    end
    if i == 0 then return c, f.expansion == 0 and f.error or FIRST_SHARE * f.error end
    return c, LATER_SHARE * f.error / (i * i)
end

-- The bits (a multiple of 8) and probes of a level: of the two k around
-- log2(1 / t), the one that needs fewer bits (see the top).
local function geometry(capacity, error)
    local t = SIZING_MARGIN * error
    local k0 = -math.log(t) / math.log(2)
    local best_m, best_k
    for k = math.max(1, floor(k0)), math.max(1, math.ceil(k0)) do
        local offered = capacity / (1 - t / (k + 1))
        local m = math.ceil(-k * offered / math.log(1 - t ^ (1 / k)) / 8) * 8
        if best_m == nil or m < best_m then best_m, best_k = m, k end
    end
    return best_m, best_k
end

local function padded(text, width) return text .. string.rep(' ', width - #text) end

-- ---------------------------------------------------------------- state

-- The filter at key, nil when the key is missing; WRONGTYPE for any other
-- value. f.levels[i] = {bits = the bit offset of its first bit, m, k,
-- capacity}; f.bytes: the filter's size, where a next level would go.
local function load(key)
    local head = redis.call('GETRANGE', key, 0, HEAD + LEVEL_HEAD - 1)
    if head == '' then
        if redis.call('EXISTS', key) == 1 then fail(WRONGTYPE) end
        return nil
    end
    local e, c0, x, n, items =
        string.match(string.sub(head, 1, HEAD), '^fgbf1 (%S+) (%d+) (%d+) (%d+) (%d+) *$')
    if e == nil or tonumber(n) < 1 then fail(WRONGTYPE) end
    local f = {key = key, error = tonumber(e), capacity0 = tonumber(c0), expansion = tonumber(x),
               items = tonumber(items), levels = {}, bytes = HEAD}
    local level_head = string.sub(head, HEAD + 1)
    for i = 0, tonumber(n) - 1 do
        if i > 0 then level_head = redis.call('GETRANGE', key, f.bytes, f.bytes + LEVEL_HEAD - 1) end
        local m, k = string.match(level_head, '^(%d+) (%d+) *$')
        if m == nil then fail(WRONGTYPE) end
        f.levels[i + 1] = {bits = (f.bytes + LEVEL_HEAD) * 8, m = tonumber(m), k = tonumber(k),
                           capacity = plan(f, i)}
        f.bytes = f.bytes + LEVEL_HEAD + tonumber(m) / 8
    end
    return f
end

local function save_head(f)
    redis.call('SETRANGE', f.key, 0, padded(string.format('fgbf1 %.17g %d %d %d %d', f.error,
        f.capacity0, f.expansion, #f.levels, f.items), HEAD))
end

-- Opens the next level as planned, writing its geometry; or the refusal
-- (too_big when its bits cannot be had, the size bound), nothing written.
local function open_level(f, too_big)
    local i = #f.levels
    local capacity, error = plan(f, i)
    if i >= MAX_LEVELS or capacity == nil then return ERR_NO_LEVEL end
    local m, k = geometry(capacity, error)
    if m > MAX_LEVEL_BITS then return too_big end
    local bytes = f.bytes + LEVEL_HEAD + m / 8
    if bytes > MAX_BYTES then
        return string.format('ERR too large: the structure would take %d bytes, above ' ..
                             'floodgate.max-structure-size (%d)', bytes, MAX_BYTES)
    end
    redis.call('SETRANGE', f.key, f.bytes, padded(m .. ' ' .. k, LEVEL_HEAD))
    f.levels[i + 1] = {bits = (f.bytes + LEVEL_HEAD) * 8, m = m, k = k, capacity = capacity}
    f.bytes = bytes
    f.items = 0
    return nil
end

-- A new filter of options o at key (the first level's head written, the
-- header left to the caller); or the refusal, nothing written.
local function create(key, o)
    local f = {key = key, error = o.error, capacity0 = o.capacity,
               expansion = o.nonscaling and 0 or o.expansion, items = 0, levels = {}, bytes = HEAD}
    local refusal = open_level(f, ERR_TOO_BIG)
    if refusal then return nil, refusal end
    return f
end

-- ---------------------------------------------------------------- items

-- The item's two 52-bit hashes.
local function hashes(item)
    local h = redis.sha1hex(item)
    return tonumber(string.sub(h, 1, 8), 16) * 1048576 + tonumber(string.sub(h, 9, 13), 16),
           tonumber(string.sub(h, 14, 21), 16) * 1048576 + tonumber(string.sub(h, 22, 26), 16)
end

-- Appends level l's probes of the item to offsets (see the top).
local function probes(l, a, b, offsets)
    local x, y = fmod(a, l.m), fmod(b, l.m)
    for j = 1, l.k do
        offsets[#offsets + 1] = l.bits + x
        x = fmod(x + y, l.m)
        y = fmod(y + j, l.m)
    end
end

-- The bits at offsets.
local function get_bits(key, offsets)
    local values = {}
    for s = 1, #offsets, GET_OPS do
        local ops = {}
        for j = s, math.min(s + GET_OPS - 1, #offsets) do
            ops[#ops + 1] = 'GET'
            ops[#ops + 1] = 'u1'
            ops[#ops + 1] = offsets[j]
        end
        for _, v in ipairs(redis.call('BITFIELD_RO', key, unpack(ops))) do values[#values + 1] = v end
    end
    return values
end

local function set_bits(key, offsets)
    local ops = {}
    for _, offset in ipairs(offsets) do
        ops[#ops + 1] = 'SET'
        ops[#ops + 1] = 'u1'
        ops[#ops + 1] = offset
        ops[#ops + 1] = 1
    end
    redis.call('BITFIELD', key, unpack(ops))
end

-- The item's probes of every level and their bits: held[i] whether level
-- i has all its probes set, offsets[i] and bits[i] its probes and bits.
local function lookup(f, item)
    local a, b = hashes(item)
    local all, offsets = {}, {}
    for i, l in ipairs(f.levels) do
        offsets[i] = {}
        probes(l, a, b, offsets[i])
        for _, o in ipairs(offsets[i]) do all[#all + 1] = o end
    end
    local got, held, bits, at = get_bits(f.key, all), {}, {}, 0
    for i, l in ipairs(f.levels) do
        held[i], bits[i] = true, {}
        for j = 1, l.k do
            bits[i][j] = got[at + j]
            held[i] = held[i] and got[at + j] == 1
        end
        at = at + l.k
    end
    return held, offsets, bits, a, b
end

local function contains(f, item)
    local held = lookup(f, item)
    for i = #held, 1, -1 do
        if held[i] then return true end
    end
    return false
end

-- fg_bloom_add: 1 added (its bits set in the newest level, a level opened
-- first when that one is full), 0 when any level may hold it (nothing
-- written); or nil and the refusal, nothing written.
local function add(f, item)
    local held, offsets, bits, a, b = lookup(f, item)
    local n = #f.levels
    for i = n, 1, -1 do
        if held[i] then return 0 end
    end
    local unset = {}
    if f.items >= f.levels[n].capacity then
        if f.expansion == 0 then return nil, ERR_FULL end
        local refusal = open_level(f, ERR_NO_LEVEL)
        if refusal then return nil, refusal end
        probes(f.levels[n + 1], a, b, unset)
    else
        for j, o in ipairs(offsets[n]) do
            if bits[n][j] == 0 then unset[#unset + 1] = o end
        end
    end
    set_bits(f.key, unset)
    f.items = f.items + 1
    return 1
end

local function adds(f)
    local n = 0
    for i, l in ipairs(f.levels) do n = n + (i < #f.levels and l.capacity or f.items) end
    return n
end

-- ------------------------------------------------------------ commands

local commands = {}

-- The adds of BF.ADD, BF.MADD and BF.INSERT (t_bloom.c's add_to_key): the
-- filter, created with o when the key is empty, then the items a[from..]
-- in order up to the first that does not fit, whose refusal is its answer.
local function add_items(key, a, from, o, multi)
    local f = load(key)
    local changed = false
    if f == nil then
        if o.nocreate then fail(ERR_NOT_FOUND) end
        local refusal
        f, refusal = create(key, o)
        if f == nil then fail(refusal) end
        changed = true
    end
    local answers = {}
    for j = from, #a do
        local r, refusal = add(f, a[j])
        if r == nil then
            answers[#answers + 1] = {err = refusal}
            break
        end
        answers[#answers + 1] = r
        changed = changed or r == 1
    end
    if changed then save_head(f) end
    if multi then return answers end
    return answers[1]
end

-- BF.RESERVE key error_rate capacity [EXPANSION expansion] [NONSCALING],
-- checked in t_bloom.c's parse_reserve's order.
commands['BF.RESERVE'] = function(keys, argv, first)
    local a, argc = module_args(keys, argv, first)
    if argc < 4 or argc > 7 then arity('bf.reserve') end
    local o = {expansion = DEFAULTS.expansion}
    o.error = server_double(a[2])
    if o.error == nil then fail('ERR bad error rate') end
    if not (o.error > 0 and o.error < 1) then fail('ERR (0 < error rate range < 1) ') end
    if o.error < MIN_ERROR then fail('ERR error rate must be at least 1e-09') end
    o.capacity = integer_of(a[3])
    if o.capacity == nil then fail('ERR bad capacity') end
    if o.capacity < 1 then fail('ERR (capacity should be larger than 0)') end
    if o.capacity > MAX_CAPACITY then fail('ERR capacity must be at most ' .. MAX_CAPACITY) end
    local nonscaling, expansion
    for j = argc - 1, 4, -1 do
        local word = string.upper(a[j])
        if word == 'NONSCALING' then nonscaling = j end
        if word == 'EXPANSION' then expansion = j end
    end
    o.nonscaling = nonscaling ~= nil
    if expansion == argc - 1 then fail('ERR no expansion') end
    if expansion then
        if o.nonscaling then fail('Nonscaling filters cannot expand') end
        o.expansion = integer_of(a[expansion + 1])
        if o.expansion == nil or o.expansion < 1 or o.expansion > MAX_EXPANSION then
            fail('ERR bad expansion')
        end
    end
    for j = 4, argc - 1 do
        if string.upper(a[j]) ~= 'NONSCALING' and not (expansion and (j == expansion or j == expansion + 1)) then
            fail('ERR syntax error: the options are EXPANSION expansion and NONSCALING')
        end
    end
    if load(keys[1]) then fail('ERR item exists') end
    local f, refusal = create(keys[1], o)
    if f == nil then fail(refusal) end
    save_head(f)
    return {ok = 'OK'}
end

-- BF.ADD key item
commands['BF.ADD'] = function(keys, argv, first)
    local a, argc = module_args(keys, argv, first)
    if argc ~= 3 then arity('bf.add') end
    return add_items(keys[1], a, 2, DEFAULTS, false)
end

-- BF.MADD key item [item ...]
commands['BF.MADD'] = function(keys, argv, first)
    local a, argc = module_args(keys, argv, first)
    if argc < 3 then arity('bf.madd') end
    return add_items(keys[1], a, 2, DEFAULTS, true)
end

-- BF.INSERT key [CAPACITY c] [ERROR e] [EXPANSION x] [NOCREATE]
-- [NONSCALING] ITEMS item [item ...], read as t_bloom.c's parse_insert
-- reads it: options by their first letters, the items after the first
-- argument that starts with "i".
commands['BF.INSERT'] = function(keys, argv, first)
    local a, argc = module_args(keys, argv, first)
    if argc < 4 then arity('bf.insert') end
    local o = {error = DEFAULTS.error, capacity = DEFAULTS.capacity, expansion = DEFAULTS.expansion,
               nonscaling = false, nocreate = false}
    local pos, items = 2, nil
    while pos < argc and items == nil do
        local word = string.lower(a[pos])
        local letter = string.sub(word, 1, 1)
        if letter == 'i' then
            pos = pos + 1
            items = pos
        elseif letter == 'e' or letter == 'c' then
            pos = pos + 1
            if pos == argc then arity('bf.insert') end
            if letter == 'c' then
                o.capacity = integer_of(a[pos])
                if o.capacity == nil then fail('Bad capacity') end
            elseif string.sub(word, 2, 2) == 'r' then
                o.error = server_double(a[pos])
                if o.error == nil then fail('Bad error rate') end
            else
                o.expansion = integer_of(a[pos])
                if o.expansion == nil then fail('Bad expansion') end
            end
            pos = pos + 1
        elseif letter == 'n' then
            if string.sub(word, 3, 3) == 'c' then o.nocreate = true else o.nonscaling = true end
            pos = pos + 1
        else
            fail('Unknown argument received')
        end
    end
    if items == nil or items == argc then arity('bf.insert') end
    if not (o.error >= MIN_ERROR and o.error < 1) or o.capacity < 1 or o.expansion < 1 then
        fail('Bad argument received')
    end
    if o.capacity > MAX_CAPACITY then fail('ERR capacity must be at most ' .. MAX_CAPACITY) end
    if o.expansion > MAX_EXPANSION then fail('Bad expansion') end
    return add_items(keys[1], a, items, o, true)
end

-- BF.EXISTS key item
commands['BF.EXISTS'] = function(keys, argv, first)
    local a, argc = module_args(keys, argv, first)
    if argc ~= 3 then arity('bf.exists') end
    local f = load(keys[1])
    return f and contains(f, a[2]) and 1 or 0
end

-- BF.MEXISTS key item [item ...]
commands['BF.MEXISTS'] = function(keys, argv, first)
    local a, argc = module_args(keys, argv, first)
    if argc < 3 then arity('bf.mexists') end
    local f = load(keys[1])
    local answers = {}
    for j = 2, #a do answers[#answers + 1] = f and contains(f, a[j]) and 1 or 0 end
    return answers
end

-- BF.INFO key [CAPACITY|SIZE|FILTERS|ITEMS|EXPANSION]: Size is the
-- filter's string, header and level heads included.
commands['BF.INFO'] = function(keys, argv, first)
    local a, argc = module_args(keys, argv, first)
    if argc ~= 2 and argc ~= 3 then arity('bf.info') end
    local f = load(keys[1])
    if f == nil then fail(ERR_NOT_FOUND) end
    local capacity = 0
    for _, l in ipairs(f.levels) do capacity = capacity + l.capacity end
    local values = {capacity, f.bytes, #f.levels, adds(f), f.expansion > 0 and f.expansion or false}
    if argc == 3 then
        for i, name in ipairs(INFO_FIELDS) do
            if string.lower(a[2]) == name then return {values[i]} end
        end
        fail('Invalid information value')
    end
    local reply = {}
    for i, title in ipairs(INFO_TITLES) do
        reply[#reply + 1] = {ok = title}
        reply[#reply + 1] = values[i]
    end
    return reply
end

-- The rate of level l after n adds by the classic formula (bloom.c's
-- level_rate).
local function level_rate(l, n) return (1 - math.exp(-l.k * n / l.m)) ^ l.k end

-- BF.CARD key: fg_bloom_cardinality's estimate, the adds plus the new items
-- a false positive hid, each add standing for 1 / (1 - rate) offers at the
-- rate of its moment (64 steps a level, the older levels' rates included).
commands['BF.CARD'] = function(keys, argv, first)
    local _, argc = module_args(keys, argv, first)
    if argc ~= 2 then arity('bf.card') end
    local f = load(keys[1])
    if f == nil then return 0 end
    local n, pass = 0, 1
    for i, l in ipairs(f.levels) do
        local items = i < #f.levels and l.capacity or f.items
        for s = 0, 63 do
            local hidden = (1 - pass) + pass * level_rate(l, items * (s + 0.5) / 64)
            n = n + (items / 64) / (hidden < 0.999 and 1 - hidden or 0.001)
        end
        pass = pass * (1 - level_rate(l, items))
    end
    return math.max(floor(n + 0.5), adds(f))
end
