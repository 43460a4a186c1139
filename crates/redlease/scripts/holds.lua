-- holds: whether a lease still holds an owner token now (reads only; what a guard's
-- `owned()` asks). Sent as lib/clock.lua .. lib/common.lua .. holds.lua.
--   KEYS[1] a lock's key K (a string: the owner token), or the ZSET of leases (owner token
--           -> expiry in ms since 1970, by the server's clock) of a semaphore (its K) or a
--           read-write lock (its holds)
-- ARGV: token layout
--   ARGV[1] owner token   ARGV[2] 'lock' for a lock's key, 'zset' for a ZSET of leases
-- Reply: 1 the token holds a lease now; 0 it does not (expired, released, taken).
if ARGV[2] == 'lock' then
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    return 1
  end
  return 0
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return 0
end
local now = now_ms()
if tonumber(score) > now then
  return 1
end
return 0
