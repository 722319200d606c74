-- lock.lua - locks, read/write locks, semaphores, multi-key locks and
-- fenced values on a server without the module: the commands of
-- src/module/t_lock.c with the rules of src/core/lock.c, which this file
-- mirrors (docs/locks.md; docs/scripts.md, "Locks").
--@ no prelude
--
-- State. A lock key is a hash: its holders, its queue of waiters and a
-- few fields of its own, in one key so that every command declares just
-- the keys it names and a cluster never needs a second slot.
--
--   m                "<kind> <cap> <token> <seq>": 'lock' or 'semaphore', a
--                    semaphore's capacity (0 for a lock), the last fencing
--                    token given on this key, the last waiter's number (the
--                    queue's order); written only when it changes
--   h<owner>         a hold: "<mode> <count> <expires_us> <token> <grant> <handed>"
--   w<owner>         a waiter: "<seq> <alive_until_us> <mode> <count> <lease_us>
--                    <since_us> <nkeys> <reentrant> <cap>", read as far as its
--                    first two until a call needs the rest (M.full)
--
-- The key expires when its last lease and its last waiter's stay end, so
-- an abandoned lock goes by itself. A call reads the whole hash, so it
-- costs O(holders + waiters); MAX_ENTRIES bounds both (the module's
-- search trees make its calls O(log holders), for up to 100,000).
--
-- Tokens. A grant takes max(last token + 1, now in us): above every token
-- of the key while it exists, and above every earlier one once it has
-- expired, since a lease lasts at least a millisecond and no more than one
-- token a microsecond is given. A restart keeps the key (RDB, AOF); a
-- replica promoted with a clock behind the old master's by more than the
-- time since the key emptied could give a token again (docs/locks.md,
-- "Without the module").
--
-- Waiting. A script cannot block, so the library waits (remote_lock.c),
-- subscribed to the key's channel (the key's name, sharded pub/sub where
-- the server has it, so a cluster keeps it on the key's node). Here, a
-- request with WAIT t that cannot be granted joins the queue, or refreshes
-- its place, for t ms: a waiter that stops asking leaves by itself. As on
-- the module, whatever frees the lock serves the queue at once, in FIFO
-- order: the single-key waiters at the head that now fit are granted there
-- and each is told on the channel, "g <token> <ttl_ms> <count> <owner>"; a
-- multi-key waiter at the head is only told "w <owner>", since this call
-- has not declared its other keys, and takes them with its own FG.MLOCK.
-- A hold granted so is handed, not given: it lasts only as long as its
-- waiter's stay, until the waiter claims it by asking again, which it does
-- on the message with CLAIM (or at its next try, had it missed it), and
-- which gives the hold its lease. A CLAIM that finds no hold changes
-- nothing: it answers [0, 0, 0, -1] while the owner is still queued (the
-- message was not a hand-off: anyone may publish on the channel), and
-- [0, 0, 0, 0] when it comes too late (the waiter's turn came and went). So a waiter that died, whose stay has not ended yet,
-- keeps the lock no longer than that stay, not for a whole lease. One that
-- gives up sends FG.UNWAIT, which takes it out of the queue and gives back
-- a hold handed to it meanwhile.
-- A lease that runs out is noticed by the next call on the key: waiters
-- try again when the holder's lease ends, which their replies tell.

-- Everything below is a field of M, the one local its functions capture.
-- An EVALSHA runs the whole chunk, making every function again, and Lua
-- 5.1 links each captured local by a walk over the chunk's open upvalues:
-- with sixty locals, that walk was most of a call (21 us for an FG.LOCKINFO
-- of a missing key, against 5 for its TIME and HGETALL alone).
local M = {}

M.OWNER_MAX = 256
M.MAX_LEASE_MS = 1000000000000
M.MAX_CAPACITY = 1000000
M.MAX_REENTRY = 1000000000
M.MAX_KEYS = 64
M.MAX_ENTRIES = 1000 -- holders and waiters of one key
M.DEFAULT_STAY_US = 1000000 -- WAIT 0: the queue keeps a waiter a second
M.INT64_MAX = '9223372036854775807'
M.ERR_UPGRADE = 'ERR owner holds a shared lock: release it before asking for the exclusive lock'

-- -------------------------------------------------------------- arguments

-- An integer argument in [lo, hi] (both below 2^53), with the module's words.
function M.integer(s, name, lo, hi)
    if not int64_text(s) then fail('ERR ' .. name .. ' must be an integer') end
    local v = tonumber(s)
    if v < lo or v > hi then
        fail(string.format('ERR %s must be between %d and %d', name, lo, hi))
    end
    return v
end

function M.owner_arg(s)
    if #s < 1 or #s > M.OWNER_MAX then fail('ERR owner must be 1 to 256 bytes') end
    return s
end

function M.lease_arg(s) return M.integer(s, 'lease_ms', 1, M.MAX_LEASE_MS) * 1000 end

-- The options after a request's positional arguments (t_lock.c's
-- parse_lock_options): the request, and WAIT's stay in us or nil. CLAIM,
-- the library's alone, asks only for a hold handed to the owner (below).
function M.lock_options(argv, i, r, mode_options)
    local stay
    while i <= #argv do
        local word = string.upper(argv[i])
        if mode_options and word == 'SHARED' then
            r.mode = 's'
        elseif mode_options and word == 'REENTRANT' then
            r.reentrant = true
        elseif word == 'WAIT' then
            if argv[i + 1] == nil then fail('ERR WAIT needs a timeout_ms') end
            i = i + 1
            stay = M.integer(argv[i], 'timeout_ms', 0, M.MAX_LEASE_MS) * 1000
            if stay == 0 then stay = M.DEFAULT_STAY_US end
        elseif word == 'CLAIM' then
            r.claim = true
        elseif mode_options then
            fail('ERR syntax error: the options are SHARED, REENTRANT and WAIT timeout_ms')
        else
            fail('ERR syntax error: the only option is WAIT timeout_ms')
        end
        i = i + 1
    end
    return stay
end

function M.wrong_arity(command)
    fail("ERR wrong number of arguments for '" .. command .. "' command")
end

-- The arguments after a command's key(s) are argv[i..]: how many.
function M.nargs(argv, i) return #argv - i + 1 end

-- "numkeys key [key ...]" then `after` arguments (or more, unless exact),
-- numkeys at argv[i] and the keys moved to KEYS (t_lock.c's parse_multi,
-- on the command's arguments as the module counts them).
function M.key_count(command, keys, argv, i, after, exact)
    local argc = 1 + #keys + M.nargs(argv, i)
    if argc < 3 + after then M.wrong_arity(command) end
    local n = M.integer(argv[i], 'numkeys', 1, M.MAX_KEYS)
    if n > #keys then fail('ERR numkeys is larger than the number of keys given') end
    if n < #keys then fail('ERR numkeys must be the number of keys the script is given') end
    for a = 2, n do
        for b = 1, a - 1 do
            if keys[a] == keys[b] then fail('ERR duplicate key') end
        end
    end
    local rest = argc - n - 2
    if (exact and rest ~= after) or rest < after then M.wrong_arity(command) end
    return n
end

-- ------------------------------------------------------------------ state

function M.server_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- ceil(us / 1000) ms from now until at_us, 0 when past (fg_lock_ttl_ms).
function M.ttl_ms(at_us, now) return at_us > now and math.ceil((at_us - now) / 1000) or 0 end

function M.holder_text(h)
    return string.format('%s %d %d %d %d %d', h.mode, h.count, h.expires, h.token, h.grant,
                         h.handed and 1 or 0)
end

function M.waiter_text(w)
    return string.format('%d %d %s %d %d %d %d %d %d', w.seq, w.alive, w.mode, w.count, w.lease,
                         w.since, w.nkeys, w.reentrant and 1 or 0, w.cap)
end

-- The state of a lock key; WRONGTYPE for another kind of key, and for a
-- lock of another kind than `kind` (nil: any) while anyone holds or waits.
function M.load(key, kind)
    local flat = redis.call('HGETALL', key)
    local s = {key = key, kind = nil, cap = 0, token = 0, seq = 0, grants = 0,
               holders = {}, nholders = 0, waiters = {}, nwaiters = 0, dirty = {}}
    for i = 1, #flat, 2 do
        local f, v = flat[i], flat[i + 1]
        local tag, owner = string.sub(f, 1, 1), string.sub(f, 2)
        if tag == 'h' then
            local mode, count, expires, token, grant_no, handed =
                string.match(v, '^(%a) (%d+) (%d+) (%d+) (%d+) (%d)$')
            s.holders[owner] = {owner = owner, mode = mode, count = tonumber(count),
                                expires = tonumber(expires), token = tonumber(token),
                                grant = tonumber(grant_no), handed = handed == '1'}
            s.nholders = s.nholders + 1
            if s.holders[owner].grant > s.grants then s.grants = s.holders[owner].grant end
        elseif tag == 'w' then
            local seq, alive = string.match(v, '^(%d+) (%d+)')
            s.waiters[owner] = {owner = owner, seq = tonumber(seq), alive = tonumber(alive), raw = v}
            s.nwaiters = s.nwaiters + 1
        elseif f == 'm' then
            local kind, cap, token, seq = string.match(v, '^(%a+) (%d+) (%d+) (%d+)$')
            s.kind, s.cap, s.token, s.seq, s.meta = kind, tonumber(cap), tonumber(token), tonumber(seq), v
        end
    end
    if #flat > 0 and s.kind == nil then fail(WRONGTYPE) end
    if kind and s.kind and s.kind ~= kind then fail(WRONGTYPE) end
    return s
end

-- A field to write (a string) or delete (false) when the state is saved.
function M.mark(s, field, value) s.dirty[field] = value end

function M.put_holder(s, h)
    if s.holders[h.owner] == nil then s.nholders = s.nholders + 1 end
    s.holders[h.owner] = h
    M.mark(s, 'h' .. h.owner, M.holder_text(h))
end

function M.drop_holder(s, owner)
    s.holders[owner] = nil
    s.nholders = s.nholders - 1
    M.mark(s, 'h' .. owner, false)
end

function M.drop_waiter(s, owner)
    s.waiters[owner] = nil
    s.nwaiters = s.nwaiters - 1
    M.mark(s, 'w' .. owner, false)
end

-- Writes what changed, and the key's expiry: its last lease end or
-- waiter's stay; an empty state is no key at all.
function M.save(s)
    if next(s.dirty) == nil then return end
    local latest = 0
    for _, h in pairs(s.holders) do if h.expires > latest then latest = h.expires end end
    for _, w in pairs(s.waiters) do if w.alive > latest then latest = w.alive end end
    if latest == 0 then
        redis.call('DEL', s.key)
        return
    end
    local sets, dels = {}, {}
    for f, v in pairs(s.dirty) do
        if v then
            sets[#sets + 1] = f
            sets[#sets + 1] = v
        else
            dels[#dels + 1] = f
        end
    end
    local meta = string.format('%s %d %d %d', s.kind, s.cap, s.token, s.seq)
    if meta ~= s.meta then
        sets[#sets + 1] = 'm'
        sets[#sets + 1] = meta
    end
    if #dels > 0 then redis.call('HDEL', s.key, unpack(dels)) end
    if #sets > 0 then redis.call('HSET', s.key, unpack(sets)) end
    redis.call('PEXPIREAT', s.key, math.ceil(latest / 1000))
end

-- Removes the holds whose lease ended and the waiters whose stay did.
function M.prune(s, now)
    local pruned = false
    for owner, h in pairs(s.holders) do
        if h.expires <= now then M.drop_holder(s, owner) pruned = true end
    end
    for owner, w in pairs(s.waiters) do
        if w.alive <= now then M.drop_waiter(s, owner) pruned = true end
    end
    return pruned
end

function M.used(s)
    local n = 0
    for _, h in pairs(s.holders) do n = n + h.count end
    return n
end

-- The holders, or the waiters, in order (grant, or arrival).
function M.in_order(t, field)
    local list = {}
    for _, e in pairs(t) do list[#list + 1] = e end
    table.sort(list, function(a, b) return a[field] < b[field] end)
    return list
end

-- ---------------------------------------------------------------- deciding

-- A decision (lock.c's fg_lock_decide) of request r = {kind, mode, owner,
-- count, cap, lease, reentrant} on a pruned state: {outcome = 'granted' |
-- 'reentered' | 'busy' | 'never', busy_until (busy), why (never), hold}.
function M.lease_end(now, lease) return math.max(now + lease, 1) end

function M.add_to_hold(held, r, now)
    return {outcome = 'reentered', hold = {owner = held.owner, mode = held.mode,
            count = held.count + r.count, expires = math.max(held.expires, M.lease_end(now, r.lease)),
            token = held.token, grant = held.grant, handed = held.handed}}
end

function M.grant(r, now)
    return {outcome = 'granted', hold = {owner = r.owner, mode = r.mode, count = r.count,
            expires = M.lease_end(now, r.lease), token = 0, grant = 0, handed = false}}
end

function M.latest_end(s)
    local t = 0
    for _, h in pairs(s.holders) do if h.expires > t then t = h.expires end end
    return t
end

function M.soonest_end(s)
    local t
    for _, h in pairs(s.holders) do if t == nil or h.expires < t then t = h.expires end end
    return t or 0
end

function M.lock_decide(s, r, now, ahead)
    local mine = s.holders[r.owner]
    if mine and mine.mode == 's' and r.mode == 'x' then return {outcome = 'never', why = M.ERR_UPGRADE} end
    if mine and r.reentrant then
        if mine.count > M.MAX_REENTRY - r.count then
            return {outcome = 'never', why = 'ERR reentrancy limit reached'}
        end
        return M.add_to_hold(mine, r, now)
    end
    local writer = false
    for _, h in pairs(s.holders) do if h.mode == 'x' then writer = true break end end
    local blocked, busy_until = true, 0
    if s.nholders > 0 and (r.mode == 'x' or writer) then
        busy_until = M.latest_end(s)
    elseif mine then
        busy_until = mine.expires
    elseif s.nholders >= M.MAX_ENTRIES then
        busy_until = M.soonest_end(s)
    else
        blocked = false
    end
    if blocked or ahead then return {outcome = 'busy', busy_until = busy_until} end
    return M.grant(r, now)
end

-- When `needed` permits are back: the lease end at which the running sum
-- of counts, in lease order, reaches it (lock.c's permits_back_at).
function M.permits_back_at(s, needed)
    local list = M.in_order(s.holders, 'expires')
    local sum = 0
    for _, h in ipairs(list) do
        sum = sum + h.count
        if sum >= needed then return h.expires end
    end
    return 0
end

function M.semaphore_decide(s, r, now, ahead)
    if r.count > r.cap then return {outcome = 'never', why = 'ERR permits exceed the capacity'} end
    local needed = M.used(s) + r.count - r.cap
    local mine = s.holders[r.owner]
    if needed > 0 then return {outcome = 'busy', busy_until = M.permits_back_at(s, needed)} end
    if mine == nil and s.nholders >= M.MAX_ENTRIES then return {outcome = 'busy', busy_until = M.soonest_end(s)} end
    if ahead then return {outcome = 'busy', busy_until = 0} end
    if mine then return M.add_to_hold(mine, r, now) end
    return M.grant(r, now)
end

function M.decide(s, r, now, ahead)
    if r.kind == 'lock' then return M.lock_decide(s, r, now, ahead) end
    return M.semaphore_decide(s, r, now, ahead)
end

-- The token a grant takes now (fg_lock_next_token, per key).
function M.next_token(s, now) return math.max(s.token + 1, now) end

-- Puts the hold of a decision that granted; a new hold takes `token`
-- (nil: the key's next one).
function M.take(s, r, d, now, token)
    local h = d.hold
    if d.outcome == 'granted' then
        h.token = token or M.next_token(s, now)
        s.grants = s.grants + 1
        h.grant = s.grants
    end
    if h.token > s.token then s.token = h.token end
    s.kind = r.kind
    if r.kind == 'semaphore' then s.cap = r.cap end
    M.put_holder(s, h)
    return h
end

-- ---------------------------------------------------------------- waiting

M.publish_command = (redis.REDIS_VERSION_NUM or 0) >= 0x070000 and 'SPUBLISH' or 'PUBLISH'

function M.tell(s, message) redis.call(M.publish_command, s.key, message) end

-- A waiter with all its fields: parsing the rest of each waiter would be
-- most of a call's time on a long queue, and a call needs it for the head
-- and its own entry only.
function M.full(w)
    if w.raw then
        local mode, count, lease, since, nkeys, reentrant, cap =
            string.match(w.raw, '^%d+ %d+ (%a) (%d+) (%d+) (%d+) (%d+) (%d) (%d+)$')
        w.mode, w.count, w.lease, w.since = mode, tonumber(count), tonumber(lease), tonumber(since)
        w.nkeys, w.reentrant, w.cap, w.raw = tonumber(nkeys), reentrant == '1', tonumber(cap), nil
    end
    return w
end

function M.request_of(s, w)
    M.full(w)
    return {kind = s.kind, mode = w.mode, owner = w.owner, count = w.count, cap = w.cap,
            lease = w.lease, reentrant = w.reentrant}
end

-- The first waiter: one pass, where sorting the queue would cost a call
-- most of its time when it is long (and most calls stop at the head).
function M.head(s)
    local first
    for _, w in pairs(s.waiters) do
        if first == nil or w.seq < first.seq then first = w end
    end
    return first
end

-- Grants the single-key waiters at the head of the queue that now fit, in
-- order, up to the first that does not (strict FIFO: nobody overtakes),
-- and tells each; a multi-key waiter at the head that fits here is told to
-- try (t_lock.c's serve).
function M.serve(s, now)
    while s.nwaiters > 0 do
        local w = M.head(s)
        local r = M.request_of(s, w)
        local d = M.decide(s, r, now, false)
        if d.outcome == 'busy' then return end
        if w.nkeys > 1 then
            if d.outcome ~= 'never' then M.tell(s, 'w ' .. w.owner) end
            return
        end
        M.drop_waiter(s, w.owner)
        if d.outcome == 'never' then
            M.tell(s, 'e ' .. w.owner .. '\n' .. d.why)
        else
            local held = s.holders[w.owner] -- a semaphore's owner asking for more
            d.hold.handed = true
            d.hold.expires = math.max(held and held.expires or 0, math.min(d.hold.expires, w.alive))
            local h = M.take(s, r, d, now)
            M.tell(s, string.format('g %d %d %d %s', h.token, M.ttl_ms(h.expires, now), h.count, w.owner))
        end
    end
end

-- Whether a waiter is ahead of `owner` (any waiter, when it waits not).
function M.queued_ahead(s, owner)
    local mine = s.waiters[owner]
    for _, w in pairs(s.waiters) do
        if mine == nil or w.seq < mine.seq then return true end
    end
    return false
end

-- Joins the queue, or keeps the place held, for `stay` us from now.
function M.enqueue(s, r, stay, now, nkeys)
    local w = s.waiters[r.owner]
    if w then M.full(w) end
    if w == nil then
        if s.nholders + s.nwaiters >= M.MAX_ENTRIES then return end
        s.seq = s.seq + 1
        w = {owner = r.owner, seq = s.seq, since = now}
        s.waiters[r.owner] = w
        s.nwaiters = s.nwaiters + 1
        s.kind = s.kind or r.kind
        if r.kind == 'semaphore' and s.nholders == 0 then s.cap = r.cap end
    end
    w.mode, w.count, w.lease, w.alive = r.mode, r.count, r.lease, now + stay
    w.nkeys, w.reentrant, w.cap = nkeys, r.reentrant or false, r.cap
    M.mark(s, 'w' .. r.owner, M.waiter_text(w))
end

-- ---------------------------------------------------------------- commands

function M.grant_reply(h, now) return {1, h.token, M.ttl_ms(h.expires, now), h.count} end

function M.busy_reply(d, now) return {0, 0, M.ttl_ms(d.busy_until, now), 0} end

-- A waiter's hold that was handed to it while it waited, claimed now by
-- request r: its lease is r's from now.
function M.claim(s, r, now)
    local h = s.holders[r.owner]
    if h == nil or not h.handed then return nil end
    h.handed = false
    h.expires = math.max(h.expires, M.lease_end(now, r.lease))
    M.mark(s, 'h' .. r.owner, M.holder_text(h))
    return h
end

-- FG.LOCK and FG.ACQUIRE on the state of one key.
function M.acquire(key, r, stay)
    local now = M.server_us()
    local s = M.load(key, r.kind)
    M.prune(s, now)
    M.serve(s, now)
    local reply
    local handed = M.claim(s, r, now)
    if handed then
        reply = M.grant_reply(handed, now)
    elseif r.claim then
        -- Still queued: nothing was handed to it (a message that was not
        -- lock.lua's); else too late: the hand-off's stay ended, it went on.
        reply = {0, 0, 0, s.waiters[r.owner] and -1 or 0}
    else
        local d = M.decide(s, r, now, M.queued_ahead(s, r.owner))
        if d.outcome == 'never' then
            M.save(s)
            fail(d.why)
        elseif d.outcome == 'busy' then
            if stay then M.enqueue(s, r, stay, now, 1) end
            reply = M.busy_reply(d, now)
        else
            if s.waiters[r.owner] then M.drop_waiter(s, r.owner) end
            reply = M.grant_reply(M.take(s, r, d, now), now)
        end
    end
    M.save(s)
    return reply
end

local commands = {}

-- FG.LOCK key owner lease_ms [SHARED] [REENTRANT] [WAIT timeout_ms]
commands['FG.LOCK'] = function(keys, argv, i)
    if M.nargs(argv, i) < 2 then M.wrong_arity('FG.LOCK') end
    local r = {kind = 'lock', mode = 'x', owner = M.owner_arg(argv[i]), count = 1, cap = 0,
               lease = M.lease_arg(argv[i + 1])}
    local stay = M.lock_options(argv, i + 2, r, true)
    return M.acquire(keys[1], r, stay)
end

-- FG.ACQUIRE key capacity owner permits lease_ms [WAIT timeout_ms]
commands['FG.ACQUIRE'] = function(keys, argv, i)
    if M.nargs(argv, i) < 4 then M.wrong_arity('FG.ACQUIRE') end
    local r = {kind = 'semaphore', mode = 'x', cap = M.integer(argv[i], 'capacity', 1, M.MAX_CAPACITY),
               owner = M.owner_arg(argv[i + 1]), count = M.integer(argv[i + 2], 'permits', 1, M.MAX_CAPACITY),
               lease = M.lease_arg(argv[i + 3])}
    local stay = M.lock_options(argv, i + 4, r, false)
    if r.count > r.cap then fail('ERR permits exceed the capacity') end
    return M.acquire(keys[1], r, stay)
end

-- Gives back `count` of the owner's hold (0: all of it): what it still
-- holds, or -1 (lock.c's fg_lock_release); serves the queue.
function M.release(s, owner, count, now)
    local h = s.holders[owner]
    local left = -1
    if h then
        if count == 0 or count >= h.count then
            M.drop_holder(s, owner)
            left = 0
        else
            h.count = h.count - count
            h.handed = false
            M.put_holder(s, h)
            left = h.count
        end
    end
    M.serve(s, now)
    return left
end

function M.release_one(key, kind, owner, count)
    local now = M.server_us()
    local s = M.load(key, kind)
    M.prune(s, now)
    local left = M.release(s, owner, count, now)
    M.save(s)
    return left
end

-- FG.UNLOCK key owner
commands['FG.UNLOCK'] = function(keys, argv, i)
    if M.nargs(argv, i) ~= 1 then M.wrong_arity('FG.UNLOCK') end
    return M.release_one(keys[1], 'lock', M.owner_arg(argv[i]), 1)
end

-- FG.RELEASE key owner [permits]
commands['FG.RELEASE'] = function(keys, argv, i)
    if M.nargs(argv, i) ~= 1 and M.nargs(argv, i) ~= 2 then M.wrong_arity('FG.RELEASE') end
    local permits = argv[i + 1] and M.integer(argv[i + 1], 'permits', 1, M.MAX_CAPACITY) or 0
    return M.release_one(keys[1], 'semaphore', M.owner_arg(argv[i]), permits)
end

-- FG.EXTEND key owner lease_ms
commands['FG.EXTEND'] = function(keys, argv, i)
    if M.nargs(argv, i) ~= 2 then M.wrong_arity('FG.EXTEND') end
    local owner, lease = M.owner_arg(argv[i]), M.lease_arg(argv[i + 1])
    local now = M.server_us()
    local s = M.load(keys[1], nil)
    M.prune(s, now)
    local h = s.holders[owner]
    if h then
        h.expires = M.lease_end(now, lease)
        h.handed = false
        M.put_holder(s, h)
    end
    M.serve(s, now)
    M.save(s)
    return h and 1 or 0
end

-- FG.FORCEUNLOCK key
commands['FG.FORCEUNLOCK'] = function(keys, argv, i)
    if M.nargs(argv, i) ~= 0 then M.wrong_arity('FG.FORCEUNLOCK') end
    local now = M.server_us()
    local s = M.load(keys[1], nil)
    M.prune(s, now)
    local removed = s.nholders
    for owner in pairs(s.holders) do M.drop_holder(s, owner) end
    M.serve(s, now)
    M.save(s)
    return removed
end

-- FG.LOCKINFO key: field/value pairs, a flat array (docs/scripts.md).
commands['FG.LOCKINFO'] = function(keys, argv, i)
    if M.nargs(argv, i) ~= 0 then M.wrong_arity('FG.LOCKINFO') end
    local now = M.server_us()
    local s = M.load(keys[1], nil)
    local holders, waiters, n = {}, {}, 0
    for _, h in ipairs(M.in_order(s.holders, 'grant')) do
        if h.expires > now then
            holders[#holders + 1] = {h.owner, h.mode == 's' and 'shared' or 'exclusive', h.count,
                                     M.ttl_ms(h.expires, now), h.token}
            n = n + h.count
        end
    end
    for _, w in ipairs(M.in_order(s.waiters, 'seq')) do
        M.full(w)
        if w.alive > now then
            waiters[#waiters + 1] = {w.owner, w.mode == 's' and 'shared' or 'exclusive', w.count,
                                     math.floor((now - w.since) / 1000)}
        end
    end
    if #holders == 0 and #waiters == 0 then return false end
    return {'kind', s.kind, 'capacity', s.cap, 'used', n, 'holders', holders,
            'waiters', waiters, 'next_token', M.next_token(s, now)}
end

-- ---------------------------------------------------------- multi-key locks

-- The states of the keys, each pruned and served.
function M.load_all(keys, now)
    local states = {}
    for k = 1, #keys do states[k] = M.load(keys[k], 'lock') end
    for k = 1, #keys do
        M.prune(states[k], now)
        M.serve(states[k], now)
    end
    return states
end

function M.save_all(states)
    for k = 1, #states do M.save(states[k]) end
end

-- FG.MLOCK numkeys key [key ...] owner lease_ms [WAIT timeout_ms]
commands['FG.MLOCK'] = function(keys, argv, i)
    local n = M.key_count('FG.MLOCK', keys, argv, i, 2, false)
    local r = {kind = 'lock', mode = 'x', owner = M.owner_arg(argv[i + 1]), count = 1, cap = 0,
               lease = M.lease_arg(argv[i + 2])}
    local stay = M.lock_options(argv, i + 3, r, false)
    local now = M.server_us()
    local states = M.load_all(keys, now)
    -- lock.c's fg_lock_decide_all: refused at the first key that never
    -- can be; granted when every key is; else busy until the latest.
    local all, busy_until, token = true, 0, now
    for k = 1, n do
        local d = M.decide(states[k], r, now, M.queued_ahead(states[k], r.owner))
        if d.outcome == 'never' then
            M.save_all(states)
            fail(d.why)
        end
        all = all and d.outcome == 'granted'
        if d.outcome == 'busy' and d.busy_until > busy_until then busy_until = d.busy_until end
        token = math.max(token, states[k].token + 1)
    end
    local reply
    if all then
        for k = 1, n do
            local s = states[k]
            if s.waiters[r.owner] then M.drop_waiter(s, r.owner) end
            M.take(s, r, M.grant(r, now), now, token)
        end
        reply = {1, token, M.ttl_ms(M.lease_end(now, r.lease), now), n}
    else
        if stay then
            for k = 1, n do M.enqueue(states[k], r, stay, now, n) end
        end
        reply = {0, 0, M.ttl_ms(busy_until, now), 0}
    end
    M.save_all(states)
    return reply
end

-- The keys of "numkeys key [key ...] owner" (FG.MUNLOCK, FG.UNWAIT), each
-- loaded (of `kind`, nil: any) and pruned, before any is changed: how many
-- of them step(s, owner, now) says it changed.
function M.each_key(command, kind, keys, argv, i, step)
    local n = M.key_count(command, keys, argv, i, 1, true)
    local owner = M.owner_arg(argv[i + 1])
    local now = M.server_us()
    local states, changed = {}, 0
    for k = 1, n do states[k] = M.load(keys[k], kind) end
    for k = 1, n do
        M.prune(states[k], now)
        if step(states[k], owner, now) then changed = changed + 1 end
    end
    M.save_all(states)
    return changed
end

-- FG.MUNLOCK numkeys key [key ...] owner
commands['FG.MUNLOCK'] = function(keys, argv, i)
    return M.each_key('FG.MUNLOCK', 'lock', keys, argv, i,
                      function(s, owner, now) return M.release(s, owner, 1, now) >= 0 end)
end

-- FG.UNWAIT numkeys key [key ...] owner: a waiter that gives up leaves the
-- queues of its keys, giving back what was handed to it meanwhile; answers
-- how many keys it left or gave back. Scripts only: the module's waiters
-- leave by their connection.
commands['FG.UNWAIT'] = function(keys, argv, i)
    return M.each_key('FG.UNWAIT', nil, keys, argv, i, function(s, owner, now)
        local gone = false
        if s.waiters[owner] then M.drop_waiter(s, owner) gone = true end
        local h = s.holders[owner]
        if h and h.handed then M.drop_holder(s, owner) gone = true end
        M.serve(s, now)
        return gone
    end)
end

-- ----------------------------------------------------------- fenced values

-- A fenced value is a hash: t, the highest token seen (decimal text, up to
-- 2^63 - 1, compared as text: a longer one is larger), and v, the value.
-- It has no expiry: it is the resource itself, not a lease.
function M.token_arg(s)
    if not int64_text(s) or string.sub(s, 1, 1) == '-' or s == '0' then
        if int64_text(s) then fail('ERR token must be between 1 and ' .. M.INT64_MAX) end
        fail('ERR token must be an integer')
    end
    return s
end

function M.token_lt(a, b) return #a < #b or (#a == #b and a < b) end

function M.load_fenced(key)
    local flat = redis.call('HGETALL', key)
    local f = {}
    for k = 1, #flat, 2 do f[flat[k]] = flat[k + 1] end
    if #flat > 0 and f.t == nil then fail(WRONGTYPE) end
    return f
end

-- A write fenced by `token`: current when no larger token was seen; a
-- current token is stored, with value (nil: none), when larger, or when
-- equal for a value (t_lock.c's fenced_write).
function M.fenced_write(key, token, value)
    local f = M.load_fenced(key)
    local current = f.t == nil or not M.token_lt(token, f.t)
    if current and (f.t == nil or M.token_lt(f.t, token) or value) then
        if value then
            redis.call('HSET', key, 't', token, 'v', value)
        else
            redis.call('HSET', key, 't', token)
        end
    end
    return current and 1 or 0
end

-- FG.FENCE key token
commands['FG.FENCE'] = function(keys, argv, i)
    if M.nargs(argv, i) ~= 1 then M.wrong_arity('FG.FENCE') end
    return M.fenced_write(keys[1], M.token_arg(argv[i]), nil)
end

-- FG.FSET key token value
commands['FG.FSET'] = function(keys, argv, i)
    if M.nargs(argv, i) ~= 2 then M.wrong_arity('FG.FSET') end
    return M.fenced_write(keys[1], M.token_arg(argv[i]), argv[i + 1])
end

-- FG.FGET key [token]: [ok, highest_token, value]; the token, as text
-- beyond 2^53 (docs/scripts.md).
commands['FG.FGET'] = function(keys, argv, i)
    if M.nargs(argv, i) > 1 then M.wrong_arity('FG.FGET') end
    local token = argv[i] and M.token_arg(argv[i])
    local f = M.load_fenced(keys[1])
    local current = f.t == nil or token == nil or not M.token_lt(token, f.t)
    if token and current and (f.t == nil or M.token_lt(f.t, token)) then
        redis.call('HSET', keys[1], 't', token)
        f.t = token
    end
    local highest = f.t or '0'
    if #highest < 16 or (#highest == 16 and highest <= '9007199254740992') then
        highest = tonumber(highest) -- exact: at most 2^53
    end
    return {current and 1 or 0, highest, (current and f.v) or false}
end
