-- fast/policy.lua - FG.CHECK of policy.lua on plain doubles (see
-- fast/prelude.lua), for a key whose state already has the policy's
-- numbers (or none) and a policy whose exact lists are empty: what nearly
-- every check meets. Anything else (a changed policy to carry over, a
-- listed identity to look up, WAIT, a number outside the fast range) is
-- left to policy.lua, as is every refusal. The states and replies are
-- policy.lua's (its top); the decision is policy.c's, step for step:
-- every limit decides at the same instant, all or nothing, the longest
-- wait answers a denial and the fewest units left an admission, the
-- penalty box counts denials, shadow mode allows what it would deny.
--
-- fast(keys, argv, command, i): FG.CHECK's reply, or nil.

--@ prelude
--@ buckets
--@ windows

-- A limit of the rules, with its state: alg, a, b (the numbers), rule (the
-- text "alg,a,b" the state repeats), and tat (the TAT's text) or start,
-- count, prev; then the fields check() fills as it decides (made here, so
-- that the table is allocated once, at its size).
local function limit_of(rule)
    local alg, a, b = string.match(rule, '^([TLGFS]),([1-9]%d*),([1-9]%d*)$')
    a, b = small_int(a or ''), small_int(b or '')
    if not a or not b then return nil end
    if alg == 'F' or alg == 'S' then
        -- waits in ns stay exact: windows below 52 days
        if b > 4e12 or (alg == 'S' and a * b >= 4503599627370496) then return nil end
    elseif a * b >= 4503599627370496 then
        return nil
    end
    return {alg = alg, a = a, b = b, rule = rule, tat = '0', start = 0, count = 0, prev = 0,
            ok = false, wait = 0, reset = 0, left = 0, n1 = 0, n2 = 0, n3 = 0, expires_us = false}
end

-- The rules' text (encode_rules): shadow, ban, after, within, limits.
local function rules_of(text)
    local shadow, ban, after, within, rest = string.match(text or '', '^([01])|(%d+),(%d+),(%d+)|(.+)$')
    ban, after, within = small_int(ban or ''), small_int(after or ''), small_int(within or '')
    if not ban or not after or not within or ban * 1000 >= 4503599627370496 then return nil end
    local limits = {}
    for rule in string.gmatch(rest, '[^|]+') do
        local l = limit_of(rule)
        if l == nil or #limits == 8 then return nil end
        limits[#limits + 1] = l
    end
    return shadow == '1', ban, after, within, limits
end

-- The state's values of each limit, when the state is of these rules
-- exactly (rescale would keep it as it is): true, else nil.
local function read_limits(text, limits)
    local k = 0
    for part in string.gmatch(text, '[^|]+') do
        k = k + 1
        local l = limits[k]
        -- "<rule>,<values>": the rule compared in place, the values read
        -- from where they start
        if l == nil or string.find(part, l.rule, 1, true) ~= 1 or string.byte(part, #l.rule + 1) ~= 44 then
            return nil
        end
        local from = #l.rule + 2
        if l.alg == 'F' or l.alg == 'S' then
            local a, b, c = string.match(part, '^(%d+),(%d+),?(%d*)$', from)
            l.start, l.count = small_int(a or ''), small_int(b or '')
            l.prev = l.alg == 'S' and small_int(c or '') or (c == '' and 0 or nil)
            if not l.start or not l.count or not l.prev or l.count * l.b >= 4503599627370496 or
                l.prev * l.b >= 4503599627370496 then
                return nil
            end
        else
            local tat = string.sub(part, from)
            if tat ~= '0' and not string.find(tat, '^[1-9]%d*$') then return nil end
            l.tat = tat
        end
    end
    return k == #limits or nil
end

-- One limit decided at now: allowed, retry and reset (ns), remaining, and
-- the state an admission leaves (a window's start, count and prev, or a
-- bucket's TAT relative to now); nil outside the fast range.
local function decide_limit(l, now, seconds, past, cost)
    if l.alg == 'F' or l.alg == 'S' then
        local allowed, remaining, retry, reset, start, after, prev
        if l.alg == 'F' then
            allowed, remaining, retry, reset, start, after = fixed_decide(l.start, l.count, l.a, l.b, now, cost)
        else
            allowed, remaining, retry, reset, start, after, prev =
                sliding_decide(l.start, l.count, l.prev, l.a, l.b, now, cost)
        end
        if retry * 1000 >= 4503599627370496 or reset * 1000 >= 4503599627370496 then return nil end
        return allowed, retry < 0 and -1 or retry * 1000, reset * 1000, remaining, start, after, prev or 0
    end
    local tat = 0
    if l.tat ~= '0' then
        tat = tat_since(l.tat, seconds, past)
        if tat == nil then return nil end
    end
    return bucket_decide(tat, l.a, l.b, cost)
end

-- policy.c's fg_policy_expires_at_us of the state after the check.
local function neutral_at(limits, banned, denials, dstart, ban, within)
    local at = banned
    for _, l in ipairs(limits) do
        local e = 0
        if l.alg == 'F' then
            if l.count > 0 then e = l.start + l.b end
        elseif l.alg == 'S' then
            if l.count > 0 or l.prev > 0 then e = l.start + l.b * (l.count > 0 and 2 or 1) end
        elseif l.expires_us then
            e = l.expires_us
        elseif l.tat ~= '0' then
            e = tonumber(string.sub(l.tat, 1, -10)) * 1000000 + math.ceil(tonumber(string.sub(l.tat, -9)) / 1000)
        end
        if e > at then at = e end
    end
    if denials > 0 and ban > 0 and dstart + within > at then at = dstart + within end
    return at
end

local function encode(name, limits, banned, denials, dstart)
    -- strings joined as they come: a table and its concat cost more for a
    -- few parts; the penalty's numbers are formatted only when it has any
    local text = 'p1|' .. name .. '|0|0|0'
    if banned ~= 0 or denials ~= 0 or dstart ~= 0 then
        text = string.format('p1|%s|%.0f|%.0f|%.0f', name, banned, denials, dstart)
    end
    for _, l in ipairs(limits) do
        if l.alg == 'F' then
            text = text .. string.format('|%s,%.0f,%.0f', l.rule, l.start, l.count)
        elseif l.alg == 'S' then
            text = text .. string.format('|%s,%.0f,%.0f,%.0f', l.rule, l.start, l.count, l.prev)
        else
            text = text .. '|' .. l.rule .. ',' .. l.tat
        end
    end
    return text
end

local function check(keys, argv, i)
    local name = argv[i]
    if name == nil or #name > 64 or not string.find(name, '^[%w_%-%./]+$') then return nil end
    local cost, at, rules_text, n = 1, nil, nil, #argv
    for j = i + 1, n, 2 do
        local word, v = string.upper(argv[j]), argv[j + 1]
        if v == nil then return nil end
        if word == 'COST' then
            cost = small_int(v)
            if cost == nil then return nil end
        elseif word == 'AT' then
            at = small_time(v)
            if at == nil then return nil end
        elseif word == 'RULES' then
            rules_text = v
        elseif word ~= 'ID' then
            return nil
        end
    end
    if rules_text == nil then
        if #keys ~= 4 then return nil end
        local d = redis.pcall('HMGET', keys[2], 'rules', 'nallow', 'ndeny')
        if d.err or not d[1] or (tonumber(d[2]) or 0) > 0 or (tonumber(d[3]) or 0) > 0 then return nil end
        rules_text = d[1]
    end
    local shadow, ban, after, within, limits = rules_of(rules_text)
    if shadow == nil then return nil end
    local now, skew = decision_time(at)
    local seconds, past = bucket_now(now)
    local key = keys[1]
    local v = redis.pcall('GET', key)
    local banned, denials, dstart = 0, 0, 0
    if v then
        if type(v) ~= 'string' then return nil end
        local state_name, b, d, s, rest = string.match(v, '^p1|([^|]+)|(%d+)|(%d+)|(%d+)|(.+)$')
        banned, denials, dstart = small_int(b or ''), small_int(d or ''), small_int(s or '')
        if state_name ~= name or not banned or not denials or not dstart or not read_limits(rest, limits) then
            return nil
        end
        -- rescale keeps the penalty's numbers only while there is a penalty
        if (ban == 0 and (banned > 0 or denials > 0 or dstart > 0)) or banned > now + ban then return nil end
    end

    local allowed, decider, limit, retry, reset, remaining, by = false, 0, 0, -1, 0, 0, 'penalty'
    local changed = false
    if now < banned then
        retry = (banned - now) * 1000
        if retry >= 4503599627370496 then return nil end
        reset = retry
        for _, l in ipairs(limits) do
            local ok, _, r = decide_limit(l, now, seconds, past, 0)
            if ok == nil then return nil end
            if r > reset then reset = r end
        end
    else
        -- every limit decides; the denier waits longest (-1: never fits)
        local denier = nil
        for k, l in ipairs(limits) do
            local ok, w, r, left, n1, n2, n3 = decide_limit(l, now, seconds, past, cost)
            if ok == nil then return nil end
            l.ok, l.wait, l.reset, l.left, l.n1, l.n2, l.n3 = ok, w, r, left, n1, n2, n3
            if not ok and (denier == nil or (limits[denier].wait ~= -1 and (w == -1 or limits[denier].wait < w))) then
                denier = k
            end
        end
        if denier == nil then
            allowed, decider = true, 1
            for k = 2, #limits do if limits[k].left < limits[decider].left then decider = k end end
            if cost > 0 then -- every limit charged
                changed = true
                for _, l in ipairs(limits) do
                    if l.alg == 'F' or l.alg == 'S' then
                        l.start, l.count, l.prev = l.n1, l.n2, l.n3
                    else
                        l.tat, l.expires_us = tat_text(l.n1, now, seconds, past)
                    end
                end
            end
        else
            decider, retry = denier, limits[denier].wait
            for _, l in ipairs(limits) do -- the limits that allowed answer as if not charged
                if l.ok then
                    local _, _, r, left = decide_limit(l, now, seconds, past, 0)
                    l.reset, l.left = r, left
                end
            end
        end
        limit, remaining, reset, by = limits[decider].a, limits[1].left, limits[1].reset, 'limit:' .. decider
        for k = 2, #limits do
            if limits[k].left < remaining then remaining = limits[k].left end
            if limits[k].reset > reset then reset = limits[k].reset end
        end
        if not allowed and cost > 0 and ban > 0 then -- policy.c's count_denial
            changed = true
            if denials == 0 or (dstart <= now and now - dstart >= within) then denials, dstart = 0, now end
            denials = denials + 1
            if denials >= after then
                banned, denials, dstart = now + ban, 0, 0
                if retry ~= -1 and retry < ban * 1000 then retry = ban * 1000 end
                if reset < ban * 1000 then reset = ban * 1000 end
            end
        end
    end
    local shadow_denied = shadow and not allowed
    if shadow_denied then allowed, retry = true, -1 end

    if changed then
        local neutral = neutral_at(limits, banned, denials, dstart, ban, within)
        if neutral <= now then
            if v then redis.call('DEL', key) end
        else
            local err = store(key, encode(name, limits, banned, denials, dstart), neutral, skew)
            if err then return err end
        end
    end
    return {allowed and 1 or 0, limit, remaining, ms_ceil(retry, 1000000), ms_ceil(reset, 1000000), by,
            shadow_denied and 1 or 0}
end

local function fast(keys, argv, command, i)
    if command == 'FG.CHECK' then return check(keys, argv, i) end
    return nil
end
