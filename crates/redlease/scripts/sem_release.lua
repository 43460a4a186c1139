-- sem_release: give back our permit (all n permits of a lease taken as n), handing what it
-- frees to the oldest queued waiters whose clients still listen, in order while they fit;
-- also withdraws our token from the queue, so a waiter that gives up calls this too. Sent
-- as lib/clock.lua .. lib/common.lua .. lib/fence.lua .. lib/grants.lua .. lib/shared.lua
-- .. lib/semaphore.lua .. sem_release.lua (hand-offs grant).
-- KEYS as in lib/semaphore.lua (sem_acquire.lua's six; semaphore_keys names them).
-- ARGV: token channel sharded weight own fence_keep
--   ARGV[1] owner token
--   ARGV[2] (optional) a release channel: when the release leaves a permit free rather than
--           handing it on, PUBLISH K there (Cluster and quorum waiters, which do not queue)
--   ARGV[3] (optional) "S": SPUBLISH rather than PUBLISH (Redis Cluster: the channel is in
--           the lock's slot, and the notice reaches the lock's shard only)
--   ARGV[4] (optional) the permits the token's lease counts for, when more than 1 (its
--           acquire_many); ARGV[2] and ARGV[3] are then sent empty when unused. Absent, the
--           lease counts for 1 and its holders entry is dropped without being read (the
--           free path's one command)
--   ARGV[5] (optional) the releasing client's grant channel: a waiter listening there is
--           granted its permits directly, for its whole ttl (see lib/grants.lua); ARGV[2]
--           to ARGV[4] are then sent, empty (or 1) when unused
--   ARGV[6] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply: 1 released; 0 the token held no permit (its lease ran out, or it never had one);
-- {1 or 0, grant, ...} the same when the run handed permits on: each grant as handed in
-- lib/grants.lua reports it ("<claim|lease> <ms> <fence> <token> <K>"), so that the
-- releasing client tells its own waiters at once and follows claim windows up.
-- Error reply "WRONGTYPE ..." when K is another primitive.
--
-- Any run also reclaims expired permits and hands every free permit to the queue head
-- (one grant + PUBLISH each), so a withdrawal or a release of a lost permit serves the
-- queue as well.
local sem = semaphore_keys(KEYS, ARGV[6])
local token = ARGV[1]
local now, clock = now_ms()
local expired = expired_permits(sem, now)
reclaim(sem, expired, now)
local channel = ARGV[2] ~= '' and ARGV[2] or nil
local weight = tonumber(ARGV[4] or '1') or 1
local held = redis.call('ZREM', sem.key, token) == 1
if held then
  -- All the permits of the lease: one entry, of weight n.
  redis.call('HDEL', sem.holders, token)
  if weight > 1 then
    add_extra(sem, 1 - weight)
  end
else
  -- A waiter giving up: the watcher moving up into its place re-checks when the earliest
  -- permit can end.
  withdraw(sem.queue, sem.waiters, token, earliest_end(sem, now), sem.key, false)
end
local stored, keep = stored_count(sem)
local known = {keep = keep}
local granted = {}
if stored then
  -- A release (not a withdrawal) that leaves permits free announces them.
  local idle
  granted, idle = serve_queue(sem, stored, now, clock, ARGV[5], held and channel, ARGV[3])
  if idle then
    -- Nothing held, nothing queued: the semaphore goes idle.
    known = {last = false, no_queue = true, keep = keep}
  end
end
settle(sem, known)
if #granted > 0 then
  return {held and 1 or 0, unpack(granted)}
end
if held then
  return 1
end
return 0
