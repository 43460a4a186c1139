-- sem_resize: a semaphore's permit count changed while it may be held or waited for. Sent
-- as lib/clock.lua .. lib/common.lua .. lib/fence.lua .. lib/grants.lua .. lib/shared.lua
-- .. lib/semaphore.lua .. sem_resize.lua.
-- KEYS as in lib/semaphore.lua (sem_acquire.lua's six; semaphore_keys names them).
-- ARGV: permits keep channel sharded fence_keep
--   ARGV[1] the new permit count N (a whole number >= 1)
--   ARGV[2] how long the count is kept at least, in ms from now, held or idle (see
--           stored_count and settle in lib/semaphore.lua)
--   ARGV[3] (optional) a release channel: when permits are left free after the queue is
--           served, PUBLISH K there (Cluster waiters, which do not queue)
--   ARGV[4] (optional) "S": SPUBLISH rather than PUBLISH (Redis Cluster)
--   ARGV[5] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply: the count in force before (0: none was stored).
-- Error replies (nothing changed when they are sent):
--   "ERR redlease: ..."  ARGV[1] is not a whole number >= 1
--   "WRONGTYPE ..."      K is another primitive
--
-- The count is stored as set by a resize ("<N>!<keep>"): authoritative, so that an
-- acquisition asking with another count (an instance still configured with the old one)
-- acquires against it. Like every semaphore script, the run first reclaims expired
-- permits; then it serves the queue as a release does (lib/semaphore.lua serve_queue: the
-- same grants and notifications), so a raised count hands its new permits to the queue's
-- oldest waiters at once. A lowered count revokes nobody: serve grants only while the
-- permits in use are below N (their difference, when negative, grants nothing).
local sem = semaphore_keys(KEYS, ARGV[5])
local permits = tonumber(ARGV[1])
if not permits or permits < 1 or permits ~= math.floor(permits) then
  return redis.error_reply('ERR redlease: the permit count must be a whole number >= 1')
end
local now, clock = now_ms()
local expired = expired_permits(sem, now)
local before = stored_count(sem)
reclaim(sem, expired, now)
local keep = now + tonumber(ARGV[2])
redis.call('SET', sem.permits, ms(permits) .. '!' .. ms(keep))
local channel = ARGV[3] ~= '' and ARGV[3] or nil
local _, idle = serve_queue(sem, permits, now, clock, nil, channel, ARGV[4])
if idle then
  settle(sem, {last = false, no_queue = true, keep = keep})
else
  settle(sem, {keep = keep})
end
return before or 0
