-- fast/windows.lua - the window rules of the fast paths (see
-- fast/prelude.lua), included ("--@ windows") where a window is decided:
-- fixed.c's and sliding.c's decisions in microseconds.

-- fixed_decide on a stored window (start 0 and count 0: none): allowed,
-- remaining, retry (us, -1: none), reset (us), and the state an admission
-- leaves (start, count).
local function fixed_decide(start, count, limit, w, now, cost)
    if start > 0 then start = start - start % w end
    local aligned = now - now % w
    if count == 0 or start < aligned then start, count = aligned, 0 end
    local to_end = start + w - now
    local after = count + cost
    local allowed = after <= limit
    if not allowed then after = count end
    return allowed, limit > after and limit - after or 0,
           (allowed or limit < cost) and -1 or to_end, after > 0 and to_end or 0, start, after
end

-- sliding_first_fit.
local function first_fit(weight, free, w)
    if free >= weight then return 0 end
    return w - math.floor(free * w / weight)
end

-- sliding_view and sliding_decide, every count times the window below
-- 2^52 (the caller's check): allowed, remaining, retry (us, -1: none),
-- reset (us), and the state an admission leaves (start, count, prev).
local function sliding_decide(stored, n, p, limit, w, now, cost)
    local aligned = now - now % w
    local start, elapsed, count, prev = aligned, now - aligned, 0, 0
    if n > 0 or p > 0 then
        if stored > 0 then stored = stored - stored % w end
        if stored >= aligned - w then
            if aligned < stored then
                start, elapsed, count, prev = stored, 0, n, p
            elseif stored == aligned then
                count, prev = n, p
            else
                prev = n
            end
        end
    end
    local weight = prev - math.floor(prev * elapsed / w)
    local fits = count <= limit and cost <= limit - count and weight <= limit - count - cost
    local after = fits and count + cost or count
    local retry = -1
    if not fits and cost <= limit then
        local e = w
        if count <= limit - cost then e = first_fit(prev, limit - count - cost, w) end
        if e < w then
            retry = start + e - now
        else
            retry = start + w + (count == 0 and 0 or first_fit(count, limit - cost, w)) - now
        end
    end
    local windows = after > 0 and 2 or (prev > 0 and 1 or 0)
    local remaining = 0
    if after < limit and limit - after > weight then remaining = limit - after - weight end
    return fits, remaining, retry, windows == 0 and 0 or start + w * windows - now, start, after, prev
end
