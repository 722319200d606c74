-- base.lua - what every family's script begins with: effects replication,
-- refusals, Redis's reading of integers and doubles, and the run of a
-- command by name.
--
-- The build (scripts/gen-scripts.sh) puts this file first in each EVALSHA
-- script and once in the Functions library, then prelude.lua (the exact
-- 64-bit arithmetic and the rate limits' grammar) for the families that
-- need it: a family that declares "--@ no prelude" (lock.lua) is this file
-- and its own, so that a call does not make a hundred functions it never
-- uses.

if redis.replicate_commands then redis.replicate_commands() end -- 6.2: effects, for TIME

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'

-- A refusal: its message is the reply, and nothing has been written.
local refused -- the last refusal's message, which run() knows again as a string
local function fail(msg)
    refused = msg
    return error({err = msg}, 0)
end

-- The command of argv[1] (the EVALSHA form: argv[2..] are its arguments),
-- or the given one (a function of the library: all of argv). A refusal
-- raised by fail() is the reply; any other error is named as ours.
local function run(command, keys, argv, first)
    local ok, r = pcall(command, keys, argv, first)
    if ok then return r end
    if type(r) == 'table' and r.err then return r end
    -- Redis 7.0's pcall hands an error table over as its message: one of
    -- ours, or the server's for a redis.call (OOM ...), starts with its
    -- code in capitals; Lua's own errors name the script ("user_script:").
    -- Refusals without a code (RedisBloom's "Bad capacity") are known by
    -- their text.
    if type(r) == 'string' and (r == refused or string.find(r, '^%u[%u_]* ')) then return {err = r} end
    return {err = 'ERR floodgate script failed: ' .. tostring(r)}
end

-- Whether s is an integer as Redis reads one (string2ll), within int64.
local function int64_text(s)
    if s == '0' then return true end
    local digits = string.match(s, '^%-?([1-9]%d*)$')
    if digits == nil or #digits > 19 then return false end
    return #digits < 19 or digits <= (string.sub(s, 1, 1) == '-' and '9223372036854775808' or '9223372036854775807')
end

-- A double as the server reads one (getDoubleFromObject): strtod over the
-- whole string, no leading space, not NaN, neither overflow nor underflow
-- to zero. Lua's tonumber is strtod, but it skips trailing spaces and stops
-- at a NUL. nil when the server refuses it.
local function server_double(s)
    if s == '' or string.find(s, '^%s') or string.find(s, '%s$') or string.find(s, '%z') then
        return nil
    end
    local v = tonumber(s)
    if v == nil or v ~= v then return nil end
    local text = string.lower(s)
    if v == math.huge or v == -math.huge then
        if not string.find(text, '^[+-]?inf') then return nil end
    elseif v == 0 then
        local hex = string.match(text, '^[+-]?0x([%x.]*)')
        if string.find(hex or string.match(text, '^[+-]?([%d.]*)'), hex and '[1-9a-f]' or '[1-9]') then
            return nil
        end
    end
    return v
end

local function run_named(commands, keys, argv)
    local command = commands[string.upper(argv[1] or '')]
    if command == nil then
        return {err = "ERR unknown command '" .. tostring(argv[1]) .. "' for this floodgate script"}
    end
    return run(command, keys, argv, 2)
end
