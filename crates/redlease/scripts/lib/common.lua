-- lib/common: a library, not a script: src/lua.rs prepends it (after lib/clock.lua) to the
-- scripts that date leases by the server's clock in ms: sem_acquire.lua, sem_release.lua,
-- rw_acquire.lua, rw_release.lua, rw_downgrade.lua, latch_up.lua, latch_down.lua,
-- latch_check.lua, lease_extend.lua, lease_renew.lua, holds.lua and raise_fence.lua (not
-- to the lock's scripts: the hot path, where every function prepended costs a closure
-- made and collected per call).

-- now_ms(): the server's time (lib/clock.lua's server_us, one TIME call) in ms since 1970,
-- and the same reading in µs: the script dates leases by the first and passes the second
-- to its grants as their fencing clock (grant_fence's `clock`, see lib/fence.lua), so that
-- a grant reads TIME no second time. Nothing is kept: a script holds the reading it took.
local function now_ms()
  local us = server_us()
  return math.floor(us / 1000), us
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
