-- lib/clock: a library, not a script: src/lua.rs prepends it, first, to every script that
-- reads the server's clock. The one place that reads it: the grants' fencing clock
-- (lib/fence.lua), the leases' expiries (lib/common.lua's now_ms) and a queued place's
-- `since` all come from server_us. One function: each one prepended costs a closure made
-- and collected on every call of the script (the lock's scripts are the hot path).

-- The server's time (TIME) in µs since 1970. Arithmetic converts TIME's strings itself,
-- parsing each once (tonumber parses twice).
local function server_us()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end
