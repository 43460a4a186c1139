-- sem_acquire: one attempt to take a permit of a semaphore (or join its FIFO queue).
-- Sent as lib/clock.lua .. lib/common.lua .. lib/fence.lua .. lib/grants.lua ..
-- lib/shared.lua .. lib/semaphore.lua .. sem_acquire.lua. KEYS as in lib/semaphore.lua
-- (semaphore_keys names them):
--   KEYS[1] K (ZSET of permits)   KEYS[2] fencing counter   KEYS[3] holders (HASH)
--   KEYS[4] queue (LIST)   KEYS[5] waiter table (HASH)   KEYS[6] permit count
-- ARGV: token ttl holder permits mode channel linger take fence_keep
--   ARGV[1] owner token   ARGV[2] ttl in ms   ARGV[3] holder details
--   ARGV[4] the permit count N (a whole number >= 1); a count stored by a resize
--           (sem_resize.lua) is taken instead when it differs
--   ARGV[5] the mode: what the attempt does when no permit is free (as acquire.lua's):
--     "no" (or absent) only try
--     "grants"         join the FIFO queue, to be handed a permit on the grant channel
--                      ARGV[6]; the queue keys live ARGV[7] ms past the last join
--     "grants-first"   as "grants", on an acquisition's first attempt (its token cannot
--                      be queued yet)
--   ARGV[6] ("grants", "grants-first") the caller's grant channel
--   ARGV[7] ("grants", "grants-first") queue linger in ms
--   ARGV[8] (optional) how many of the permits to take as one lease, n from 1 to the count
--           in force (absent: 1); with ARGV[5] "no", ARGV[6] and ARGV[7] are then sent empty
--   ARGV[9] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply, as acquire.lua:
--   fence             a permit freshly granted (an integer >= 1, its fencing token)
--   {2, fence, 0}     this token already holds a permit (a retried attempt, or a hand-off);
--                     fence is that permit's fencing token; the permit's lease is set to
--                     ttl again from now, so that the caller may date it from this attempt
--   {0, seen, pttl}   no permit for us now; pttl is the time in ms until the earliest
--                     held permit runs out (-1: none held, which a correct caller never
--                     sees); seen is the fencing counter now (0: none): a grant whose fence
--                     is at most seen is older than this reply (see acquire.lua)
--   {0, seen, pttl, 1} the same for a queued waiter that is not among the queue's
--                     watchers (lib/grants.lua): it need not re-check when pttl is over
--                     (pttl is at most a claim window when the caller would fit in the free
--                     permits but a head asking for more keeps it out)
-- Error replies (nothing changed when they are sent):
--   "REDLEASE_PERMITS <n> ..."  the semaphore is in use with n permits, not ARGV[4]; the
--                     count may change only once nothing is held or queued, or by a resize
--   "REDLEASE_ASKED <n> <N> ..." ARGV[8] asks n permits, more than the count in force N
--                     (the stored one, else ARGV[4])
--   "ERR redlease: ..."         ARGV[4] is not a whole number >= 1, or ARGV[8] not one >= 1
--   "WRONGTYPE ..."             K is another primitive (a mutex's string, an rwlock's hash)
--
-- FIFO: permits freed by a release are handed to the queue head by sem_release.lua; those
-- freed by expiry are given, by the next semaphore script that runs (this one included), to
-- the queue head before anyone else: a caller not queued gets a permit only when none is
-- queued, and a queued caller only when it reaches the head. A caller asking for n permits
-- gets them when n are free; a head whose n do not fit yet blocks everyone behind it and
-- every newcomer (see serve).
local sem = semaphore_keys(KEYS, ARGV[9])
local token, ttl, details = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local permits = tonumber(ARGV[4])
local join = ARGV[5]
local first_attempt = join == 'grants-first'
if first_attempt then
  join = 'grants'
end
if not permits or permits < 1 or permits ~= math.floor(permits) then
  return redis.error_reply('ERR redlease: the permit count must be a whole number >= 1')
end
local weight = tonumber(ARGV[8] ~= '' and ARGV[8] or '1')
if not weight or weight < 1 or weight ~= math.floor(weight) then
  return redis.error_reply('ERR redlease: the permits asked must be a whole number >= 1')
end
local now, clock = now_ms()
local expired = expired_permits(sem, now)
local stored, keep = stored_count(sem)
if stored and stored ~= permits then
  if not keep then
    return redis.error_reply('REDLEASE_PERMITS ' .. ms(stored) .. ' permits are in use for ' .. sem.key
      .. ', not ' .. ARGV[4] .. '; ask with the same count, resize it, or change it once nothing holds or waits for it')
  end
  -- A resized count is the count in force, whatever this caller was configured with.
  permits = stored
end
if weight > permits then
  return redis.error_reply('REDLEASE_ASKED ' .. ms(weight) .. ' ' .. ms(permits) .. ' permits asked at once of '
    .. sem.key .. ', which has ' .. ms(permits))
end
-- No count stored: the semaphore was idle. settle stores it, with its expiry. A resized
-- count (keep) is kept until its keep.
local count = nil
if not stored then
  count = ARGV[4]
end
reclaim(sem, expired, now)
local held = redis.call('ZCARD', sem.key)
if held > 0 and redis.call('ZSCORE', sem.key, token) then
  redis.call('ZADD', sem.key, 'XX', ms(now + ttl), token)
  settle(sem, {count = count, keep = keep})
  return {2, entry_fence(sem.holders, sem.fence, token), 0}
end
local mine, free, absent, blocked = serve(sem, permits, now, clock, token, ttl, details, in_use(sem, held), weight)
if not mine and free > 0 and not blocked then
  -- The queue is empty (serve ran it dry), so the caller is not in it: a stale table
  -- entry can be left by an entry whose list place expired, so clear it (an
  -- acquisition's first attempt has had no place).
  if join == 'grants' and not first_attempt then
    redis.call('HDEL', sem.waiters, token)
  end
  if free >= weight then
    mine = grant(sem, token, ttl, details, weight, now, clock)
    if held == 0 and absent then
      -- The free path: this permit is the only one, and there is no queue.
      settle(sem, {last = now + ttl, no_queue = true, count = count, keep = keep})
      return mine
    end
  end
end
if mine then
  settle(sem, {count = count, keep = keep})
  return mine
end
if join == 'grants' then
  local place = {ttl = ARGV[2], ch = ARGV[6], who = details, since = ms(now)}
  if weight > 1 then
    place.n = weight
  end
  local entry = cjson.encode(place)
  if redis.call('HSETNX', sem.waiters, token, entry) == 1 then
    redis.call('RPUSH', sem.queue, token)
  end
  redis.call('PEXPIRE', sem.queue, ARGV[7])
  redis.call('PEXPIRE', sem.waiters, ARGV[7])
end
settle(sem, {count = count, keep = keep})
local seen = tonumber(redis.call('GET', sem.fence) or '0')
local left = earliest_end(sem, now)
if join == 'grants' and left >= 0 and not in_front(sem.queue, token) then
  return {0, seen, left, 1}
end
if blocked and free >= weight and left > 0 then
  -- Permits are free for the caller, but a head asking for more keeps it out: re-check
  -- within a claim window, so that a head whose waiter is gone (serve drops it then)
  -- costs the queue that window rather than the holders' whole leases.
  left = math.min(left, claim_window(ttl))
end
return {0, seen, left}
