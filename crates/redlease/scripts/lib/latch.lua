-- lib/latch: a library, not a script: src/lua.rs prepends it (after lib/common.lua and
-- lib/fence.lua, whose grant_fence dates every count) to latch_up.lua, latch_down.lua and
-- latch_check.lua, and holds what they share.
--
-- KEYS of every latch script, all of one latch and in one cluster slot (B is the latch
-- key K when K has a {hash tag}, else "{K}", as for the other primitives' side keys):
--   KEYS[1] K, the outstanding counts: a SET of owner tokens. A SET, so that a lock (a
--           string), a semaphore (a ZSET) or a read-write lock (a HASH) of the same name
--           and a latch refuse each other with WRONGTYPE.
--   KEYS[2] B:fence, the fencing counter (shared with the other primitives of the name)
--   KEYS[3] B:latch:holders, holder details for operators: HASH token -> cjson [fence,
--           details]
--   KEYS[4] B:latch:rounds, the rounds: HASH round (how many rounds ended), open ("1"
--           while the current round has had a count), down and expired (how the current
--           round's counts ended so far), last_down and last_expired (how the latest
--           ended round's did). Kept ROUNDS_KEEP after its last change.
--   KEYS[5] B:latch:counts, the counts' leases: a ZSET owner token -> lease expiry (ms
--           since 1970 by the server's TIME); renewed and extended as a semaphore's
--           permits are (lease_renew.lua, lease_extend.lua).
-- K, the holders and the counts are deleted when a round ends; while one is open they are
-- kept ROUNDS_KEEP after the latest change (see settle).
-- ARGV of every latch script ends with the release channel and "S" or "" (SPUBLISH on a
-- Cluster with sharded pub/sub, else PUBLISH): see each script for where they start.
--
-- A round opens with the first count up while none is outstanding and ends when the last
-- outstanding count is gone, counted down or expired: every script first reclaims the
-- counts whose lease ran out (a party that died) and records them as expired, then ends
-- the round if nothing is outstanding, announcing it on the release channel (the
-- latch's K as the message) for the latch's waiters.

-- 7 days in ms, as the fencing counter is kept (lib/fence.lua).
local ROUNDS_KEEP = FENCE_KEEP_MS

-- Drops the counts whose lease ran out, recording them as expired in the current round.
-- The first call of every latch script, made before any write: a key of another type at
-- K fails here (WRONGTYPE) and the script changes nothing.
local function reclaim(now)
  redis.call('SCARD', KEYS[1])
  local expired = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', ms(now))
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', ms(now))
    each_chunk('SREM', KEYS[1], expired)
    each_chunk('HDEL', KEYS[3], expired)
    redis.call('HINCRBY', KEYS[4], 'expired', #expired)
  end
end

-- Ends the open round when no count is outstanding, and announces it; whether it did.
local function close_if_done(channel, flag)
  if redis.call('ZCARD', KEYS[5]) > 0 or redis.call('HGET', KEYS[4], 'open') ~= '1' then
    return false
  end
  local round = redis.call('HMGET', KEYS[4], 'down', 'expired')
  redis.call('HSET', KEYS[4], 'open', '0', 'down', '0', 'expired', '0',
    'last_down', round[1] or '0', 'last_expired', round[2] or '0')
  redis.call('HINCRBY', KEYS[4], 'round', 1)
  redis.call('PEXPIRE', KEYS[4], ROUNDS_KEEP)
  redis.call('DEL', KEYS[1], KEYS[3], KEYS[5])
  redis.call(flag == 'S' and 'SPUBLISH' or 'PUBLISH', channel, KEYS[1])
  return true
end

-- K, the holders and the leases are kept ROUNDS_KEEP after the last change, not only as
-- long as the latest lease: a dead party's count must still be there, to be recorded as
-- expired, when the next script comes (renewal only ever raises these expiries).
local function settle()
  redis.call('PEXPIRE', KEYS[1], ROUNDS_KEEP)
  redis.call('PEXPIRE', KEYS[3], ROUNDS_KEEP)
  redis.call('PEXPIRE', KEYS[5], ROUNDS_KEEP)
end
