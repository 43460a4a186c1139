-- lib/expiry: a library, not a script: src/lua.rs prepends it to acquire.lua,
-- lock_extend.lua, lease_extend.lua and lease_renew.lua. raise_expiry, for the scripts that
-- only ever raise a key's expiry.
--
-- raise_expiry(key, ttl): the key's expiry becomes ttl ms from now where that raises it,
-- and is left alone where it is already later, where the key has none, or where there is
-- no key. It does what PEXPIRE key ttl GT does on Redis 7.0 and later, with commands Redis
-- 6.2 has (PTTL, then PEXPIRE only when it raises). PTTL and PEXPIRE count from the same command
-- clock, so an expiry is never lowered. A lease's score taken from the script's TIME may
-- outlast its keys' new expiry by the time the script has run so far (Redis 7.0 and later
-- freeze the command clock at the script's start; 6.2 does not): microseconds, which every
-- lease's drift allowance (at least 2 ms, see ttl.rs) covers.
local function raise_expiry(key, ttl)
  local left = redis.call('PTTL', key)
  if left >= 0 and left < tonumber(ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
end
