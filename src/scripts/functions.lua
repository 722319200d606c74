-- functions.lua - the Redis Functions form of the scripts: the head of the
-- library build/floodgate-functions.lua (scripts/gen-scripts.sh), which
-- reads
--
--   #!lua name=floodgate
--   <functions.lua>
--   fg_load = function()
--       do <fast/ratelimit.lua> fg_fasts[...] = fast end ... (the --@ lines replaced)
--       <base.lua> <prelude.lua>
--       do <ratelimit.lua> fg_register(commands) end
--       do <the next family> fg_register(commands) end ...
--       return run
--   end
--   fg_function('FG.TOKEN') fg_function('FG.PEEK') ...  (every command)
--
-- A command becomes a function of its name in lower case, '.' written '_'
-- (FG.TOKEN: fg_token, CL.THROTTLE: cl_throttle), called with the module
-- command's arguments after its key:
--
--   FCALL fg_token 1 key 10 2 COST 3      (FG.TOKEN key 10 2 COST 3)
--   FCALL fg_peek 1 key TOKEN 10 2        (FG.PEEK TOKEN key 10 2)
--
-- Why the scripts run at the first call, not at FUNCTION LOAD: Redis 7.0
-- runs a library's code with no global but `redis` (no math, string,
-- pairs...), which the prelude and the families use at their top level. So
-- the load only registers the functions, by the names the build read from
-- the families (their commands['...'] and command = '...'), and the first
-- call of any of them runs the prelude and the families once, which fills
-- fg_commands from each family's `commands`. A name the build missed would
-- have no function; test_script_backend.py checks that none is missed.
--
-- Not a family: the build leaves this file out of the EVALSHA scripts.

local fg_commands = {} -- the families' commands by name, once loaded
local fg_fasts = {}    -- the families' fast paths (fast/*.lua), once loaded
local fg_load          -- the loader, defined after this file
local fg_run           -- the prelude's run, once loaded

-- A family's commands, from inside fg_load.
local function fg_register(commands)
    for name, command in pairs(commands) do fg_commands[name] = command end
end

-- The commands that never write: no-writes lets FCALL_RO and a replica
-- run them.
local READ_ONLY = {['FG.PEEK'] = true, ['FG.INSPECT'] = true, ['FG.LOCKINFO'] = true,
                   ['BF.EXISTS'] = true, ['BF.MEXISTS'] = true, ['BF.INFO'] = true,
                   ['BF.CARD'] = true}

-- Registers the function of a command (at FUNCTION LOAD: string methods
-- only, no globals).
local function fg_function(name)
    redis.register_function {
        function_name = (name:lower():gsub('%.', '_')),
        flags = READ_ONLY[name] and {'no-writes'} or {},
        callback = function(keys, args)
            if fg_run == nil then fg_run = fg_load() end
            for k = 1, #fg_fasts do
                local r = fg_fasts[k](keys, args, name, 1)
                if r then return r end
            end
            local command = fg_commands[name]
            if command == nil then return {err = 'ERR floodgate has no script for ' .. name} end
            return fg_run(command, keys, args, 1)
        end,
    }
end
