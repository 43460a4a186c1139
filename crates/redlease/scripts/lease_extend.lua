-- lease_extend: reset the expiry of one shared lease, a member of a ZSET scored by its
-- expiry: a semaphore's permit, a read-write lock's hold (read or write) or a latch's
-- count. A lock's lease (its key) has lock_extend.lua. Sent as lib/clock.lua ..
-- lib/common.lua .. lib/expiry.lua .. lease_extend.lua.
--   KEYS[1] the ZSET of leases: a semaphore's K; a read-write lock's owners (KEYS[6])
--   KEYS[2] the holders HASH (semaphore KEYS[3], rwlock KEYS[3])
--   KEYS[3] the key that must live as long as any lease: a semaphore's permit count
--           (KEYS[6]); a read-write lock's K (KEYS[1])
-- ARGV: token ttl
--   ARGV[1] owner token   ARGV[2] new ttl in ms
-- Reply: 1 extended; 0 the token holds no lease (it ran out, or was never granted).
-- The lease's score becomes now + ttl (server TIME); the three keys' expiries are only ever
-- raised to ttl from now (raise_expiry, see lib/expiry.lua), never lowered, since other
-- leases may run longer. A lease found run out is left for the next acquire or release to reclaim, which also serves the queue.
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now then
  local at = ms(now + tonumber(ARGV[2]))
  redis.call('ZADD', KEYS[1], 'XX', at, ARGV[1])
  raise_expiry(KEYS[1], ARGV[2])
  raise_expiry(KEYS[2], ARGV[2])
  raise_expiry(KEYS[3], ARGV[2])
  return 1
end
return 0
