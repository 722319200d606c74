-- fast/buckets.lua - the bucket rules of the fast paths (see
-- fast/prelude.lua), included ("--@ buckets") where a bucket is decided:
-- a TAT relative to now, and gcra.c's decision on it.

-- A stored TAT (decimal ns, 10 to 19 digits) relative to now, in ns, and
-- never before it; nil outside the fast range. `seconds` and `past` are
-- now split as bucket_now gives them.
local function tat_since(text, seconds, past)
    if type(text) ~= 'string' or #text < 10 or #text > 19 or not string.find(text, '^[1-9]%d*$') then
        return nil
    end
    local tat = (tonumber(string.sub(text, 1, -10)) - seconds) * 1000000000 + (tonumber(string.sub(text, -9)) - past)
    if tat >= 4503599627370496 then return nil end
    return tat > 0 and tat or 0
end

-- now (us) as whole seconds and the ns past them.
local function bucket_now(now)
    local seconds = math.floor(now / 1000000)
    return seconds, (now - seconds * 1000000) * 1000
end

-- A TAT relative to now as its decimal ns, and its expiry (us): gcra.c's
-- fg_gcra_expires_at_us, the TAT rounded up to the microsecond.
local function tat_text(tat, now, seconds, past)
    local ns = tat + past
    local carry = math.floor(ns / 1000000000)
    seconds = seconds + carry
    -- %d is the cheaper conversion, and exact wherever C's long holds the
    -- seconds (past 2038 on a 32-bit server, %.0f is)
    return string.format(seconds < 2147483648 and '%d%09d' or '%.0f%09.0f', seconds, ns - carry * 1000000000),
           now + math.ceil(tat / 1000)
end

-- gcra_decide on a TAT relative to now (>= 0) and a tolerance (capacity *
-- emission) below 2^52: allowed, retry (ns, -1: none), reset (ns),
-- remaining, and the TAT an admission leaves; nil outside the fast range.
local function bucket_decide(tat, capacity, emission, cost)
    local tolerance = capacity * emission
    local allowed, retry, ttl, new_tat = false, -1, tat, tat
    if capacity >= cost then
        new_tat = tat + emission * cost
        if new_tat >= 4503599627370496 then return nil end
        local diff = tolerance - new_tat
        allowed = diff >= 0
        if allowed then ttl = new_tat else retry = -diff end
    end
    return allowed, retry, ttl, ttl < tolerance and math.floor((tolerance - ttl) / emission) or 0, new_tat
end

