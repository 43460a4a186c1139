-- lease_renew: extend many shared leases (ZSET members: semaphore permits, read-write lock
-- holds, latch counts, mixed freely in one call) at once: one call per batch, one round
-- trip per sweep. Locks' leases have lock_renew.lua. Sent as lib/clock.lua ..
-- lib/common.lua .. lib/expiry.lua .. lease_renew.lua; each lease is handled as
-- lease_extend.lua handles one.
--   KEYS[3i-2] the ZSET of lease i   KEYS[3i-1] its holders HASH   KEYS[3i] its other key
--   (semaphore: K, B:sem:holders, B:sem:permits; rwlock: B:rw:owners, B:rw:holders, K)
-- ARGV: token ttl
--   ARGV[2i-1] owner token of lease i   ARGV[2i] its ttl in ms
-- Reply: an array with, for each lease in order, 1 renewed or 0 lost (no live lease).
local now = now_ms()
local out = {}
for i = 1, #KEYS / 3 do
  local leases, token = KEYS[3 * i - 2], ARGV[2 * i - 1]
  -- pcall: a key another primitive took meanwhile (WRONGTYPE) is this lease lost, not
  -- an error that would fail every other lease of the batch.
  local score = redis.pcall('ZSCORE', leases, token)
  if type(score) == 'string' and tonumber(score) > now then
    local at = ms(now + tonumber(ARGV[2 * i]))
    redis.call('ZADD', leases, 'XX', at, token)
    raise_expiry(leases, ARGV[2 * i])
    raise_expiry(KEYS[3 * i - 1], ARGV[2 * i])
    raise_expiry(KEYS[3 * i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
