-- policy.lua - named policies as a server script: FG.POLICY SET, DEL, GET,
-- ALLOW, DENY, UNLIST and FG.CHECK, with the module's replies.
--
-- Mirrors src/core/policy.c (the decision, the penalty box, shadow mode and
-- the carrying over of a key's state to changed numbers), src/core/
-- policy_check.c (the lists, then the state) and src/module/t_policy.c and
-- policy_registry.c (the grammar, the replies). The limits themselves are
-- the prelude's cores, as the module's are src/core's.
--
-- Where things live. The module keeps policies outside the keyspace; a
-- script can only reach keys, and in a cluster only keys of one slot, so:
--
--   fg:policy:{name}         HASH  the definition: v (its version), rules
--                                  (the converted numbers, read by every
--                                  check), limits and penalty (the words, for
--                                  GET), allow and deny (the lists' kinds),
--                                  nallow and ndeny (their sizes)
--   fg:policy:{name}:allow   SET   the exact allow list
--   fg:policy:{name}:deny    SET   the exact deny list
--   fg:policies              SET   the names, for FG.POLICY LIST (kept by
--                                  the library beside SET and DEL: another
--                                  slot)
--
-- The three keys of a policy share the hash tag of its name, so one script
-- reaches all of them. They are configuration, like the module's registry,
-- and have no expiry; under an allkeys-* eviction policy they could be
-- evicted, which docs/scripts.md warns of (volatile-* never touches them).
-- Bloom lists need the module (a Bloom filter as a script is issue 28's).
--
-- FG.CHECK's KEYS are the state key and, on one server, the policy's three
-- keys: the check then reads the definition and the lists itself, in the
-- same atomic step, as the module does. In a cluster the state key's slot
-- is not the policy's: the library first asks FG.POLICY LOOKUP on the
-- policy's slot for the rules and the lists' verdict, answers a listed
-- identity itself (core/policy_check.c: lists never read the state), and
-- sends the check with RULES <rules> and the state key alone.
--
-- A key's state: the STRING
--   p1|<policy>|<banned_until_us>|<denials>|<denials_start_us>|<limit>|...
-- each limit "<alg>,<a>,<b>,<state...>": T, L or G (token, leaky, GCRA:
-- a = capacity, b = emission ns, then the TAT), F (fixed: a = limit, b =
-- window us, then window start and count) or S (sliding: then window start,
-- count and the previous count). Rules are "<shadow>|<ban_us>,<after>,
-- <within_us>|<alg>,<a>,<b>|...".

local MAX_LIMITS = 8
local MAX_AFTER = 1000000
local MAX_DURATION_US = 1000000000000000 -- 10^12 ms
local MAX_EMISSION_NS = big(1073741824, 0) -- 2^62
local ERR_POLICY_NAME = "ERR policy name must be 1 to 64 letters, digits, '_', '-', '.' or '/'"

local function is_bucket(alg) return alg == 'T' or alg == 'L' or alg == 'G' end

local function valid_name(name)
    return #name >= 1 and #name <= 64 and string.find(name, '^[%w_%-%./]+$') ~= nil
end

-- ---------------------------------------------------- 128-bit arithmetic

-- The few places policy.c computes in __int128 (carrying a bucket's or a
-- sliding window's usage over): products of two int64 as 16-bit limbs
-- (the prelude's wide_mul), compared, added and divided by an int64.

local function wide_of(v) -- v >= 0
    return wide_mul(v, 1)
end

local function wide_cmp(x, y)
    for k = 8, 1, -1 do
        if x[k] ~= y[k] then return x[k] < y[k] and -1 or 1 end
    end
    return 0
end

local function wide_add(x, y)
    local r, carry = {}, 0
    for k = 1, 8 do
        local t = x[k] + y[k] + carry
        carry = floor(t / 65536)
        r[k] = t - carry * 65536
    end
    return r
end

local function wide_sub(x, y) -- x >= y
    local r, borrow = {}, 0
    for k = 1, 8 do
        local t = x[k] - y[k] - borrow
        borrow = t < 0 and 1 or 0
        r[k] = t + borrow * 65536
    end
    return r
end

local function wide_approx(x)
    local v = 0
    for k = 8, 1, -1 do v = v * 65536 + x[k] end
    return v
end

-- The value of x when it fits int64, else nil.
local function wide_value(x)
    if x[5] + x[6] + x[7] + x[8] ~= 0 or x[4] >= 32768 then return nil end
    return join(x[4] * 65536 + x[3], x[2] * 65536 + x[1])
end

-- floor(x / d) for d >= 1, saturated at INT64_MAX: a double estimate taken
-- low, then corrected exactly (as the prelude's divmod).
local function wide_div(x, d)
    local estimate = wide_approx(x) / to_double(d)
    if estimate >= 9.2e18 then
        local limit = wide_mul(INT64_MAX, d)
        if wide_cmp(x, limit) >= 0 then return INT64_MAX end
    end
    local q = floor(estimate) - 4096
    if q < 0 then q = 0 end
    q = of_double(q)
    local r = wide_sub(x, wide_mul(q, d))
    local k = floor(wide_approx(r) / to_double(d))
    q = add(q, k)
    r = wide_sub(r, wide_mul(k, d))
    local dw = wide_of(d)
    while wide_cmp(r, dw) >= 0 do q, r = add(q, 1), wide_sub(r, dw) end
    return q
end

-- ------------------------------------------------------------ the rules

local ALGORITHMS = {
    TOKEN = {alg = 'T', nparams = 2, params = 'capacity refill_per_sec'},
    LEAKY = {alg = 'L', nparams = 2, params = 'capacity leak_per_sec'},
    GCRA = {alg = 'G', nparams = 3, params = 'capacity count period_ms'},
    FIXED = {alg = 'F', nparams = 2, params = 'limit window_ms'},
    SLIDING = {alg = 'S', nparams = 2, params = 'limit window_ms'},
}
local WORD_OF = {T = 'TOKEN', L = 'LEAKY', G = 'GCRA', F = 'FIXED', S = 'SLIDING'}

-- A user's word in an error: at most 64 bytes, control bytes as '?'.
local function quoted(w)
    return (string.gsub(string.sub(w, 1, 64), '[%c\127]', '?'))
end

-- One limit's numbers, read and converted as the command of its algorithm
-- reads them: {alg, a, b}.
local function limit_numbers(spec, argv, i)
    if spec.alg == 'T' or spec.alg == 'L' then
        local p = bucket_params(argv, i, spec.alg == 'T' and 'refill_per_sec' or 'leak_per_sec')
        return {alg = spec.alg, a = p.capacity, b = p.emission}
    elseif spec.alg == 'G' then
        local p = gcra_params(argv, i)
        return {alg = 'G', a = p.capacity, b = p.emission}
    end
    local p = window_params(argv, i, INT64_MAX)
    return {alg = spec.alg, a = p.limit, b = p.window}
end

-- FG.POLICY SET's rules (policy_registry.c's parser): the rules, and the
-- words GET answers.
local function parse_rules(argv, first)
    local rules = {limits = {}, shadow = false, ban = 0, after = 0, within = 0}
    local words = {limits = {}, penalty = '', allow = 'exact', deny = 'exact'}
    local seen = {}
    local function once(rule)
        if seen[rule] then fail('ERR ' .. rule .. ' given twice') end
        seen[rule] = true
    end
    local i = first
    local n = #argv
    while i <= n do
        local w = string.upper(argv[i])
        if w == 'LIMIT' then
            if #rules.limits == MAX_LIMITS then fail('ERR a policy needs 1 to 8 LIMIT rules') end
            if i + 1 > n then fail('ERR LIMIT needs an algorithm') end
            local word = string.upper(argv[i + 1])
            local spec = ALGORITHMS[word]
            if spec == nil then
                fail("ERR unknown algorithm '" .. quoted(argv[i + 1]) ..
                     "' (TOKEN, LEAKY, GCRA, FIXED, SLIDING)")
            end
            if i + 1 + spec.nparams > n then fail('ERR LIMIT ' .. word .. ' needs ' .. spec.params) end
            rules.limits[#rules.limits + 1] = limit_numbers(spec, argv, i + 2)
            local given = {word}
            for k = 1, spec.nparams do given[k + 1] = argv[i + 1 + k] end
            words.limits[#words.limits + 1] = table.concat(given, ' ')
            i = i + 2 + spec.nparams
        elseif w == 'PENALTY' then
            once('PENALTY')
            if i + 1 > n then fail('ERR PENALTY needs ban_ms') end
            rules.ban = duration_us(argv[i + 1], 'ban_ms')
            local ban_word, after_word, within_word = argv[i + 1], nil, nil
            i = i + 2
            while i <= n do
                local opt = string.upper(argv[i])
                if opt ~= 'AFTER' and opt ~= 'WITHIN' then break end
                if (opt == 'AFTER' and after_word) or (opt == 'WITHIN' and within_word) then
                    fail('ERR ' .. opt .. ' given twice')
                end
                if i + 1 > n then fail('ERR ' .. opt .. ' needs a value') end
                if opt == 'AFTER' then
                    rules.after = integer_arg(argv[i + 1], 'AFTER', 1, MAX_AFTER)
                    after_word = argv[i + 1]
                else
                    rules.within = duration_us(argv[i + 1], 'WITHIN')
                    within_word = argv[i + 1]
                end
                i = i + 2
            end
            if after_word == nil then rules.after = 1 end
            if within_word == nil then rules.within = rules.ban end
            words.penalty = ban_word .. ' ' .. (after_word or '1') .. ' ' .. (within_word or ban_word)
        elseif w == 'SHADOW' then
            once('SHADOW')
            rules.shadow = true
            i = i + 1
        elseif w == 'ALLOWLIST' or w == 'DENYLIST' then
            once(w)
            local kind = argv[i + 1] and string.upper(argv[i + 1])
            if kind == 'BLOOM' then
                fail('ERR ' .. w .. ' BLOOM needs the floodgate module: the script backend keeps EXACT lists')
            end
            if kind ~= 'EXACT' then fail('ERR ' .. w .. ' takes EXACT or BLOOM error capacity') end
            i = i + 2
        else
            fail("ERR unknown rule '" .. quoted(argv[i]) .. "'")
        end
    end
    if #rules.limits == 0 then fail('ERR a policy needs 1 to 8 LIMIT rules') end
    for _, l in ipairs(rules.limits) do
        if is_bucket(l.alg) and lt(MAX_EMISSION_NS, l.b) then
            fail("ERR these rules are out of the core's ranges")
        end
    end
    return rules, words
end

local function encode_rules(r)
    local parts = {r.shadow and '1' or '0', tostr(r.ban) .. ',' .. tostr(r.after) .. ',' .. tostr(r.within)}
    for _, l in ipairs(r.limits) do
        parts[#parts + 1] = l.alg .. ',' .. tostr(l.a) .. ',' .. tostr(l.b)
    end
    return table.concat(parts, '|')
end

local function fields(s, sep)
    local out = {}
    for f in string.gmatch(s, '[^' .. sep .. ']+') do out[#out + 1] = f end
    return out
end

-- The rules as encode_rules wrote them (the library passes them back
-- unchanged in a cluster): nil for anything else.
local function decode_rules(s)
    local parts = fields(s, '|')
    if #parts < 3 or #parts > 2 + MAX_LIMITS then return nil end
    local pen = fields(parts[2], ',')
    if #pen ~= 3 then return nil end
    local r = {shadow = parts[1] == '1', ban = parse_int(pen[1]), after = parse_int(pen[2]),
               within = parse_int(pen[3]), limits = {}}
    if not (r.ban and r.after and r.within) then return nil end
    for k = 3, #parts do
        local f = fields(parts[k], ',')
        local a, b = parse_int(f[2] or ''), parse_int(f[3] or '')
        if #f ~= 3 or not WORD_OF[f[1]] or not a or not b or sign(a) < 1 or sign(b) < 1 then return nil end
        r.limits[#r.limits + 1] = {alg = f[1], a = a, b = b}
    end
    return r
end

-- ------------------------------------------------------------ the state

local function bucket_p(l) return {capacity = l.a, emission = l.b} end
local function window_p(l) return {limit = l.a, window = l.b} end

-- A full limit of the rules' limit l.
local function fresh_limit(l)
    local s = {alg = l.alg, a = l.a, b = l.b}
    if is_bucket(l.alg) then s.tat = 0 else s.start, s.count, s.prev = 0, 0, 0 end
    return s
end

local function same_limit(x, y)
    return x.alg == y.alg and cmp(x.a, y.a) == 0 and cmp(x.b, y.b) == 0
end

local function same_limit_state(x, y)
    if not same_limit(x, y) then return false end
    if is_bucket(x.alg) then return cmp(x.tat, y.tat) == 0 end
    return cmp(x.start, y.start) == 0 and cmp(x.count, y.count) == 0 and
           (x.alg == 'F' or cmp(x.prev, y.prev) == 0)
end

local function same_state(x, y)
    if #x.limits ~= #y.limits or cmp(x.banned, y.banned) ~= 0 or cmp(x.denials, y.denials) ~= 0 or
        cmp(x.dstart, y.dstart) ~= 0 then
        return false
    end
    for k = 1, #x.limits do
        if not same_limit_state(x.limits[k], y.limits[k]) then return false end
    end
    return true
end

local function copy_limit(s)
    return {alg = s.alg, a = s.a, b = s.b, tat = s.tat, start = s.start, count = s.count, prev = s.prev}
end

local function copy_state(s)
    local c = {name = s.name, banned = s.banned, denials = s.denials, dstart = s.dstart, limits = {}}
    for k = 1, #s.limits do c.limits[k] = copy_limit(s.limits[k]) end
    return c
end

local function encode_state(s)
    local parts = {'p1', s.name, tostr(s.banned), tostr(s.denials), tostr(s.dstart)}
    for _, l in ipairs(s.limits) do
        local f = {l.alg, tostr(l.a), tostr(l.b)}
        if is_bucket(l.alg) then
            f[4] = tostr(l.tat)
        else
            f[4], f[5] = tostr(l.start), tostr(l.count)
            if l.alg == 'S' then f[6] = tostr(l.prev) end
        end
        parts[#parts + 1] = table.concat(f, ',')
    end
    return table.concat(parts, '|')
end

-- The state a key holds (nil when none); WRONGTYPE for any other value.
local function decode_state(v)
    local parts = fields(v, '|')
    if parts[1] ~= 'p1' or #parts < 6 or #parts > 5 + MAX_LIMITS then fail(WRONGTYPE) end
    local s = {name = parts[2], banned = parse_int(parts[3]), denials = parse_int(parts[4]),
               dstart = parse_int(parts[5]), limits = {}}
    if not (s.banned and s.denials and s.dstart) then fail(WRONGTYPE) end
    for k = 6, #parts do
        local f = fields(parts[k], ',')
        local l = {alg = f[1], a = parse_int(f[2] or ''), b = parse_int(f[3] or '')}
        local words = is_bucket(l.alg) and 4 or (l.alg == 'F' and 5 or 6)
        if not WORD_OF[l.alg] or #f ~= words or not l.a or not l.b then fail(WRONGTYPE) end
        if is_bucket(l.alg) then
            l.tat = parse_int(f[4])
        else
            l.start, l.count = parse_int(f[4]), parse_int(f[5])
            l.prev = l.alg == 'S' and parse_int(f[6]) or 0
        end
        if (is_bucket(l.alg) and not l.tat) or (not is_bucket(l.alg) and not (l.start and l.count and l.prev)) then
            fail(WRONGTYPE)
        end
        s.limits[#s.limits + 1] = l
    end
    return s
end

local function fresh_state(name, rules)
    local s = {name = name, banned = 0, denials = 0, dstart = 0, limits = {}}
    for k, l in ipairs(rules.limits) do s.limits[k] = fresh_limit(l) end
    return s
end

-- fixed_window.c's and sliding_window.c's fg_*_expires_at_us: a window's
-- end, and for a sliding window that counts now, the next one's.
local function fixed_expires_at_us(st, p) return add(st.start, p.window) or INT64_MAX end

local function sliding_expires_at_us(st, p)
    local finish = add(st.start, p.window) or INT64_MAX
    if sign(st.count) > 0 then finish = add(finish, p.window) or INT64_MAX end
    return finish
end

-- policy.c's limit_expires_at_us.
local function limit_expires_at(l)
    if is_bucket(l.alg) then return sign(l.tat) > 0 and tat_expires_us(l.tat) or 0 end
    if l.alg == 'F' then
        if sign(l.count) == 0 then return 0 end
        return fixed_expires_at_us({start = l.start, count = l.count}, window_p(l))
    end
    if sign(l.count) == 0 and sign(l.prev) == 0 then return 0 end
    return sliding_expires_at_us({start = l.start, count = l.count, prev = l.prev}, window_p(l))
end

-- policy.c's fg_policy_expires_at_us.
local function expires_at(s, rules)
    local at = s.banned
    for _, l in ipairs(s.limits) do at = max(at, limit_expires_at(l)) end
    if sign(s.denials) > 0 and sign(rules.ban) > 0 then
        at = max(at, add(s.dstart, rules.within) or INT64_MAX)
    end
    return at
end

-- ------------------------------------------------------------- deciding

-- One limit's decision (policy.c's limit_decide): the decision and the
-- limit's state after it.
local function limit_decide(l, now_us, cost)
    local next_l = copy_limit(l)
    local d
    if is_bucket(l.alg) then
        d, next_l.tat = gcra_decide(l.tat, bucket_p(l), now_us, cost)
    elseif l.alg == 'F' then
        local st
        d, st = fixed_decide({start = l.start, count = l.count}, window_p(l), now_us, cost)
        next_l.start, next_l.count = st.start, st.count
    else
        local st
        d, st = sliding_decide({start = l.start, count = l.count, prev = l.prev}, window_p(l), now_us, cost)
        next_l.start, next_l.count, next_l.prev = st.start, st.count, st.prev
    end
    return d, next_l
end

local function waits_longer(x, y)
    if cmp(y.retry_ns, -1) == 0 then return false end
    return cmp(x.retry_ns, -1) == 0 or lt(y.retry_ns, x.retry_ns)
end

local function answer_by_limit(d, decider, allowed)
    local out = {allowed = allowed, by = 'limit', index = decider, limit = d[decider].limit,
                 retry_ns = allowed and -1 or d[decider].retry_ns,
                 remaining = d[1].remaining, reset_ns = d[1].reset_ns}
    for k = 2, #d do
        out.remaining = min(out.remaining, d[k].remaining)
        out.reset_ns = max(out.reset_ns, d[k].reset_ns)
    end
    return out
end

-- policy.c's count_denial, on the state `s` being built.
local function count_denial(rules, now_us, s, out)
    if sign(rules.ban) == 0 then return end
    local window_over = le(s.dstart, now_us) and not lt(sub(now_us, s.dstart), rules.within)
    if sign(s.denials) == 0 or window_over then
        s.denials, s.dstart = 0, now_us
    end
    s.denials = add(s.denials, 1)
    if lt(s.denials, rules.after) then return end
    local ban_ns = mul(rules.ban, 1000)
    s.banned = add(now_us, rules.ban)
    if s.banned == nil then fail(ERR_OVERFLOW) end
    s.denials, s.dstart = 0, 0
    out.banned_now = true
    if cmp(out.retry_ns, -1) ~= 0 then out.retry_ns = max(out.retry_ns, ban_ns) end
    out.reset_ns = max(out.reset_ns, ban_ns)
end

local function decide_by_limits(cur, rules, now_us, cost, after)
    local d, charged = {}, {}
    for k, l in ipairs(cur.limits) do d[k], charged[k] = limit_decide(l, now_us, cost) end
    local denier = nil
    for k = 1, #d do
        if not d[k].allowed and (denier == nil or waits_longer(d[k], d[denier])) then denier = k end
    end
    if denier == nil then
        for k = 1, #d do after.limits[k] = charged[k] end
        local fewest = 1
        for k = 2, #d do if lt(d[k].remaining, d[fewest].remaining) then fewest = k end end
        return answer_by_limit(d, fewest, true)
    end
    for k, l in ipairs(cur.limits) do -- the limits that allowed answer as if charged
        if d[k].allowed then
            local peek = limit_decide(l, now_us, 0)
            d[k].remaining, d[k].reset_ns = peek.remaining, peek.reset_ns
        end
    end
    local out = answer_by_limit(d, denier, false)
    if sign(cost) > 0 then count_denial(rules, now_us, after, out) end
    return out
end

local function decide_banned(cur, now_us)
    local ban_ns = mul(sub(cur.banned, now_us), 1000)
    if ban_ns == nil then fail(ERR_OVERFLOW) end
    local reset_ns = ban_ns
    for _, l in ipairs(cur.limits) do reset_ns = max(reset_ns, (limit_decide(l, now_us, 0)).reset_ns) end
    return {allowed = false, by = 'penalty', limit = 0, remaining = 0, retry_ns = ban_ns, reset_ns = reset_ns}
end

-- policy.c's decide: the answer and the state after it.
local function decide(cur, rules, now_us, cost)
    local after = copy_state(cur)
    local out
    if lt(now_us, cur.banned) then
        out = decide_banned(cur, now_us)
    else
        out = decide_by_limits(cur, rules, now_us, cost, after)
    end
    if rules.shadow and not out.allowed then
        out.allowed, out.retry_ns, out.shadow_denied = true, -1, true
    end
    out.changed = not same_state(after, cur)
    return out, after
end

-- ------------------------------------------------------- carrying over

-- policy.c's carry_bucket: the used time scaled by the emission intervals.
local function carry_bucket(tat, from, to, now_us)
    local now_ns = mul(now_us, 1000)
    local used = sub(tat, now_ns)
    if sign(used) <= 0 then return 0 end
    local scaled = wide_div(wide_mul(used, to.b), from.b)
    local whole = wide_mul(to.a, to.b)
    if wide_cmp(wide_of(scaled), whole) > 0 then scaled = wide_value(whole) or INT64_MAX end
    if sign(scaled) == 0 then return 0 end
    return add(now_ns, scaled) or INT64_MAX
end

local function carry_fixed(l, from_w, to_w, now_us)
    if cmp(from_w, to_w) == 0 then return l.start, l.count end
    if sign(l.count) > 0 and not lt(window_start(l.start, from_w), window_start(now_us, from_w)) then
        return window_start(now_us, to_w), l.count
    end
    return 0, 0
end

-- policy.c's sliding_usage: the estimate at now, rounded up, saturated.
local function sliding_usage(l, w, now_us)
    local current = window_start(now_us, w)
    local stored = window_start(l.start, w)
    local elapsed, count, prev = sub(now_us, current), l.count, l.prev
    if lt(current, stored) then
        elapsed = 0
    elseif cmp(sub(current, stored), w) == 0 then
        prev, count = count, 0
    elseif cmp(stored, current) ~= 0 then
        return 0
    end
    local numerator = wide_add(wide_mul(prev, sub(w, elapsed)), wide_of(sub(w, 1)))
    local weighted = wide_div(numerator, w)
    local total = wide_add(wide_of(count), wide_of(weighted))
    return wide_value(total) or INT64_MAX
end

local function carry_sliding(l, from_w, to_w, now_us)
    if cmp(from_w, to_w) == 0 then return l.start, l.count, l.prev end
    local used = sliding_usage(l, from_w, now_us)
    if sign(used) > 0 then return window_start(now_us, to_w), used, 0 end
    return 0, 0, 0
end

local function carry_limit(old, l, now_us)
    local out = fresh_limit(l)
    if old == nil or old.alg ~= l.alg then return out end
    if same_limit(old, l) then return copy_limit(old) end
    if is_bucket(l.alg) then
        out.tat = carry_bucket(old.tat, old, l, now_us)
    elseif l.alg == 'F' then
        out.start, out.count = carry_fixed(old, old.b, l.b, now_us)
    else
        out.start, out.count, out.prev = carry_sliding(old, old.b, l.b, now_us)
    end
    return out
end

-- policy.c's fg_policy_rescale: the state under the rules, and whether it
-- changed.
local function rescale(cur, rules, now_us)
    local s = {name = cur.name, banned = 0, denials = 0, dstart = 0, limits = {}}
    for k, l in ipairs(rules.limits) do s.limits[k] = carry_limit(cur.limits[k], l, now_us) end
    if sign(rules.ban) > 0 then
        s.banned = min(cur.banned, add(now_us, rules.ban) or INT64_MAX)
        s.denials, s.dstart = cur.denials, cur.dstart
    end
    return s, not same_state(s, cur)
end

-- -------------------------------------------------------------- FG.CHECK

local function check_options(argv, first)
    local o = {cost = 1}
    local i = first
    while i <= #argv do
        local w = string.upper(argv[i])
        if w ~= 'COST' and w ~= 'ID' and w ~= 'WAIT' and w ~= 'AT' and w ~= 'RULES' then
            fail('ERR syntax error: the options are COST n, ID identity, WAIT timeout_ms and AT unix_us')
        end
        if i + 1 > #argv then fail('ERR ' .. w .. ' needs a value') end
        local v = argv[i + 1]
        if w == 'COST' then
            o.cost = integer_arg(v, 'COST', 0, INT64_MAX)
        elseif w == 'ID' then
            o.id = v
        elseif w == 'WAIT' then
            o.wait = integer_arg(v, 'WAIT', 1, 86400000)
        elseif w == 'AT' then
            o.at = integer_arg(v, 'AT', 0, MAX_AT_US)
        else
            o.rules = v
        end
        i = i + 2
    end
    if o.wait and o.at then fail('ERR WAIT and AT cannot be combined') end
    return o
end

-- The definition of a policy at its key: its rules (nil when there is
-- none), and whether its lists hold anything (their sizes, kept beside the
-- rules, spare a check two SISMEMBERs in the common case of empty lists).
local function read_definition(key)
    local d = redis.call('HMGET', key, 'rules', 'nallow', 'ndeny')
    if not d[1] then return nil end
    return decode_rules(d[1]), (tonumber(d[2]) or 0) > 0, (tonumber(d[3]) or 0) > 0
end

local function missing(name) fail("ERR no such policy '" .. name .. "'") end

-- policy_check.c's answer of a list: no state read.
local function list_answer(allowed)
    return {allowed and 1 or 0, 0, 0, -1, 0, allowed and 'allowlist' or 'denylist', 0}
end

-- Stores the state after a check (t_policy.c's store): deleted once
-- neutral, else written with its absolute expiry.
local function store_state(key, existed, s, rules, now_us, skew)
    local neutral = expires_at(s, rules)
    if le(neutral, now_us) then
        if existed then redis.call('DEL', key) end
        return
    end
    redis.call('SET', key, encode_state(s), 'PXAT', tostr(expiry_ms(neutral, skew)))
end

local function reply_decision(r)
    local by = r.by == 'limit' and 'limit:' .. r.index or r.by
    return {r.allowed and 1 or 0, out(r.limit), out(r.remaining), out(ns_to_ms_ceil(r.retry_ns)),
            out(ns_to_ms_ceil(r.reset_ns)), by, r.shadow_denied and 1 or 0}
end

local commands = {}

-- FG.CHECK policy key [COST n] [ID identity] [WAIT timeout_ms] [AT unix_us]
-- [RULES <rules>]. KEYS: the state key, then (on one server) the policy's
-- definition, allow and deny keys. WAIT is the library's (it retries);
-- here it is read and checked only, as the module ignores it in a script.
commands['FG.CHECK'] = function(keys, argv, i)
    local name = argv[i]
    if name == nil then fail("ERR wrong number of arguments for 'fg.check' command") end
    if not valid_name(name) then fail(ERR_POLICY_NAME) end
    local o = check_options(argv, i + 1)
    local key = keys[1]
    local rules
    if o.rules then
        rules = decode_rules(o.rules)
        if rules == nil then fail('ERR RULES: not rules of FG.POLICY LOOKUP') end
    else
        if #keys ~= 4 then fail("ERR FG.CHECK takes the state key and the policy's three keys, or RULES") end
        local allows, denies
        rules, allows, denies = read_definition(keys[2])
        if rules == nil then missing(name) end
        local identity = o.id or key
        if denies and redis.call('SISMEMBER', keys[4], identity) == 1 then return list_answer(false) end
        if allows and redis.call('SISMEMBER', keys[3], identity) == 1 then return list_answer(true) end
    end
    local now_us, skew = decision_time(o.at)
    local v = get_string(key)
    local cur, existed, rescaled = nil, v ~= nil, false
    if existed then
        cur = decode_state(v)
        if cur.name ~= name then fail("ERR key holds the state of policy '" .. cur.name .. "'") end
        cur, rescaled = rescale(cur, rules, now_us)
    else
        cur = fresh_state(name, rules)
    end
    local result, after = decide(cur, rules, now_us, o.cost)
    if rescaled or result.changed then store_state(key, existed, after, rules, now_us, skew) end
    return reply_decision(result)
end

-- ------------------------------------------------------------ FG.POLICY

local policy_commands = {}

local function policy_name(argv, i)
    local name = argv[i]
    if name == nil then fail("ERR wrong number of arguments for 'fg.policy' command") end
    if not valid_name(name) then fail(ERR_POLICY_NAME) end
    return name
end

-- SET name rule... KEYS: definition, allow, deny. The lists stay (they are
-- exact on both sides); the version moves, which a cluster's library
-- watches.
policy_commands.SET = function(keys, argv, i)
    if #argv < i + 1 then fail("ERR wrong number of arguments for 'FG.POLICY|SET' command") end
    local name = policy_name(argv, i)
    local rules, words = parse_rules(argv, i + 1)
    -- As the module: a bucket whose capacity times its interval overflows
    -- fails every check, so it is refused now (decided at time 0).
    decide(fresh_state(name, rules), rules, 0, 1)
    redis.call('HSET', keys[1], 'rules', encode_rules(rules), 'limits', table.concat(words.limits, '\n'),
               'penalty', words.penalty, 'allow', 'exact', 'deny', 'exact')
    redis.call('HINCRBY', keys[1], 'v', 1)
    return {ok = 'OK'}
end

policy_commands.DEL = function(keys, argv, i)
    policy_name(argv, i)
    return redis.call('DEL', keys[1], keys[2], keys[3]) > 0 and 1 or 0
end

local function list_reply(key)
    return {'exact', redis.call('SCARD', key)}
end

policy_commands.GET = function(keys, argv, i)
    local name = policy_name(argv, i)
    local def = redis.call('HMGET', keys[1], 'rules', 'limits', 'penalty')
    if not def[1] then missing(name) end
    local limits = {}
    for line in string.gmatch(def[2], '[^\n]+') do limits[#limits + 1] = fields(line, ' ') end
    local penalty = def[3] ~= '' and fields(def[3], ' ') or {}
    local rules = decode_rules(def[1])
    return {'name', name, 'limits', limits, 'penalty', penalty, 'shadow', rules.shadow and 1 or 0,
            'allowlist', list_reply(keys[2]), 'denylist', list_reply(keys[3]),
            'allowed', 0, 'denied', 0, 'banned', 0, 'shadow_denied', 0, 'waited', 0}
end

-- An exact list's change: items added (SADD) or removed (SREM), counted;
-- the list's size kept beside the rules for the checks.
local function change_list(keys, name, which, argv, first, op)
    if redis.call('EXISTS', keys[1]) == 0 then missing(name) end
    local key = which == 'ALLOW' and keys[2] or keys[3]
    local changed = 0
    for k = first, #argv do changed = changed + redis.call(op, key, argv[k]) end
    redis.call('HSET', keys[1], which == 'ALLOW' and 'nallow' or 'ndeny', redis.call('SCARD', key))
    return changed
end

local function add_items(keys, argv, i, which)
    local name = policy_name(argv, i)
    if #argv < i + 1 then fail("ERR wrong number of arguments for 'fg.policy|" .. string.lower(which) .. "' command") end
    return change_list(keys, name, which, argv, i + 1, 'SADD')
end

policy_commands.ALLOW = function(keys, argv, i) return add_items(keys, argv, i, 'ALLOW') end
policy_commands.DENY = function(keys, argv, i) return add_items(keys, argv, i, 'DENY') end

-- UNLIST name ALLOW|DENY item...
policy_commands.UNLIST = function(keys, argv, i)
    local name = policy_name(argv, i)
    local which = argv[i + 1] and string.upper(argv[i + 1])
    if #argv < i + 2 then fail("ERR wrong number of arguments for 'fg.policy|unlist' command") end
    if which ~= 'ALLOW' and which ~= 'DENY' then fail('ERR FG.POLICY UNLIST takes ALLOW or DENY') end
    return change_list(keys, name, which, argv, i + 2, 'SREM')
end

-- LOOKUP name identity: a cluster library's first step of a check, on the
-- policy's slot: {rules, listed} where listed is 'deny', 'allow' or ''.
policy_commands.LOOKUP = function(keys, argv, i)
    local name = policy_name(argv, i)
    local identity = argv[i + 1]
    if identity == nil then fail("ERR wrong number of arguments for 'fg.policy|lookup' command") end
    local rules = redis.call('HGET', keys[1], 'rules')
    if not rules then missing(name) end
    local listed = ''
    if redis.call('SISMEMBER', keys[3], identity) == 1 then
        listed = 'deny'
    elseif redis.call('SISMEMBER', keys[2], identity) == 1 then
        listed = 'allow'
    end
    return {rules, listed}
end

commands['FG.POLICY'] = function(keys, argv, i)
    local sub_command = policy_commands[string.upper(argv[i] or '')]
    if sub_command == nil then
        fail("ERR unknown subcommand '" .. quoted(argv[i] or '') .. "'. Try FG.POLICY HELP.")
    end
    return sub_command(keys, argv, i + 1)
end
