-- lib/latch: a library, not a script: src/lua.rs prepends it (after lib/clock.lua,
-- lib/common.lua and lib/fence.lua, whose grant_fence dates every count) to latch_up.lua,
-- latch_down.lua and latch_check.lua, and holds what they share. Its functions read no
-- KEYS nor ARGV: each script names its keys once, with latch_keys(KEYS), and passes that
-- table (`latch`), the clock it read (now_ms) and the arguments' values.
--
-- The keys of every latch script, in KEYS' order, all of one latch and in one cluster slot
-- (B is the latch key K when K has a {hash tag}, else "{K}", as for the other primitives'
-- side keys):
--   key     K, the outstanding counts: a SET of owner tokens. A SET, so that a lock (a
--           string), a semaphore (a ZSET) or a read-write lock (a HASH) of the same name
--           and a latch refuse each other with WRONGTYPE.
--   fence   B:fence, the fencing counter (shared with the other primitives of the name)
--   holders B:latch:holders, holder details for operators: HASH token -> cjson [fence,
--           details]
--   rounds  B:latch:rounds, the rounds: HASH round (how many rounds ended), open ("1"
--           while the current round has had a count), down and expired (how the current
--           round's counts ended so far), last_down and last_expired (how the latest
--           ended round's did). Kept ROUNDS_KEEP after its last change.
--   counts  B:latch:counts, the counts' leases: a ZSET owner token -> lease expiry (ms
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

-- latch_keys(keys, fence_keep): a latch script's KEYS by name (see the top), and
-- fence_keep (latch_up.lua's `fence_keep` argument, see lib/fence.lua; nil in the scripts
-- that grant nothing); each script builds it once, first.
local function latch_keys(keys, fence_keep)
  return {key = keys[1], fence = keys[2], holders = keys[3], rounds = keys[4], counts = keys[5], fence_keep = fence_keep}
end

-- 7 days in ms: the rounds record's own keep (a waiter away for days still learns that its
-- round ended), not the fencing counter's (FENCE_KEEP_MS in lib/fence.lua, which follows
-- the clock and the client's fence_keep).
local ROUNDS_KEEP = '604800000'

-- Drops the counts whose lease ran out, recording them as expired in the current round.
-- The first call of every latch script, made before any write: a key of another type at
-- K fails here (WRONGTYPE) and the script changes nothing.
local function reclaim(latch, now)
  redis.call('SCARD', latch.key)
  local expired = redis.call('ZRANGEBYSCORE', latch.counts, '-inf', ms(now))
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', latch.counts, '-inf', ms(now))
    each_chunk('SREM', latch.key, expired)
    each_chunk('HDEL', latch.holders, expired)
    redis.call('HINCRBY', latch.rounds, 'expired', #expired)
  end
end

-- The arrivals the open round still expects (see latch_expect.lua): counts preset by a
-- coordinator, each taken back by one count up.
local function expected(latch)
  return tonumber(redis.call('HGET', latch.rounds, 'expect') or '0')
end

-- Ends the open round when no count is outstanding and no arrival is expected, and
-- announces it on `channel` (with SPUBLISH when `flag` is "S"); whether it did.
local function close_if_done(latch, channel, flag)
  if redis.call('ZCARD', latch.counts) > 0 then
    return false
  end
  local state = redis.call('HMGET', latch.rounds, 'open', 'expect')
  if state[1] ~= '1' or tonumber(state[2] or '0') > 0 then
    return false
  end
  local round = redis.call('HMGET', latch.rounds, 'down', 'expired')
  redis.call('HSET', latch.rounds, 'open', '0', 'down', '0', 'expired', '0',
    'last_down', round[1] or '0', 'last_expired', round[2] or '0')
  redis.call('HINCRBY', latch.rounds, 'round', 1)
  redis.call('PEXPIRE', latch.rounds, ROUNDS_KEEP)
  redis.call('DEL', latch.key, latch.holders, latch.counts)
  redis.call(flag == 'S' and 'SPUBLISH' or 'PUBLISH', channel, latch.key)
  return true
end

-- K, the holders and the leases are kept ROUNDS_KEEP after the last change, not only as
-- long as the latest lease: a dead party's count must still be there, to be recorded as
-- expired, when the next script comes (renewal only ever raises these expiries).
local function settle(latch)
  redis.call('PEXPIRE', latch.key, ROUNDS_KEEP)
  redis.call('PEXPIRE', latch.holders, ROUNDS_KEEP)
  redis.call('PEXPIRE', latch.counts, ROUNDS_KEEP)
end
