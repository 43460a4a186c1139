-- lib/common: a library, not a script: src/lua.rs prepends it (after lib/clock.lua) to the
-- scripts that date leases by the server's clock in ms: sem_acquire.lua, sem_release.lua,
-- rw_acquire.lua, rw_release.lua, rw_downgrade.lua, latch_up.lua, latch_down.lua,
-- latch_check.lua, lease_extend.lua, lease_renew.lua, holds.lua and raise_fence.lua (not
-- to the lock's scripts: the hot path, where every function prepended costs a closure
-- made and collected per call).

-- The server's time as now_ms last read it, in µs since 1970: the fencing clock of the
-- script's grants (grant_fence's `clock`, see lib/fence.lua), so that a grant reads TIME
-- no second time.
local clock_us = nil

-- The server's time in ms since 1970. Arithmetic converts TIME's strings itself, parsing
-- each once (tonumber parses twice).
local function now_ms()
  clock_us = server_us()
  return math.floor(clock_us / 1000)
end

-- A whole number of ms as Redis expects it (Lua would write 1.7e+12).
local function ms(n)
  return string.format('%d', n)
end

-- Runs `command` on `key` with `fields` (HDEL, SREM of many members), in chunks that stay
-- under Lua's stack limit for unpack.
local function each_chunk(command, key, fields)
  for i = 1, #fields, 1000 do
    redis.call(command, key, unpack(fields, i, math.min(i + 999, #fields)))
  end
end
