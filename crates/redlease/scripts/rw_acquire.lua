-- rw_acquire: one attempt to take a read-write lock for reading or writing (or join its
-- FIFO queue). Sent as lib/clock.lua .. lib/common.lua .. lib/fence.lua .. lib/grants.lua
-- .. lib/shared.lua .. lib/rwlock.lua .. rw_acquire.lua.
-- KEYS as in lib/rwlock.lua (rwlock_keys names them):
--   KEYS[1] K (HASH {mode})   KEYS[2] fencing counter   KEYS[3] holders (HASH)
--   KEYS[4] queue (LIST)   KEYS[5] waiter table (HASH)   KEYS[6] owners (ZSET)
-- ARGV: token ttl holder side mode channel linger stale sharded fence_keep
--   ARGV[1] owner token   ARGV[2] ttl in ms   ARGV[3] holder details
--   ARGV[4] "read" or "write"
--   ARGV[5] the mode: what the attempt does when the lock is not granted (as acquire.lua's):
--     "no" (or absent) only try
--     "grants"         join the FIFO queue, to be handed the lock on the grant channel
--                      ARGV[6]; the queue keys live ARGV[7] ms past the last join
--     "grants-first"   as "grants", on an acquisition's first attempt (its token cannot
--                      be queued yet)
--     "silent"         join silently: no hand-off can reach the waiter (a Cluster,
--                      polling), which comes back for the lock itself; ARGV[6] the lock's
--                      release channel, on which K is PUBLISHed when a silent place at the
--                      head can now be served (so that its waiter comes back), ARGV[7]
--                      queue linger in ms, ARGV[8] how long the place is kept without the
--                      waiter coming back, in ms (each attempt renews it), ARGV[9]
--                      (optional) "S" to SPUBLISH there rather than PUBLISH (Redis Cluster)
--     "silent-first"   as "silent", on an acquisition's first attempt
--   ARGV[10] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply, as acquire.lua:
--   fence             granted now, with this fresh fencing token (an integer >= 1)
--   {2, fence, 0}     this token already holds the lock (a retried attempt, or a hand-off);
--                     fence is that hold's token. A token holding write that asks for read
--                     gets this too: its write hold covers reading (rw_downgrade.lua lets
--                     other readers in). The hold's lease is set to ttl again from now,
--                     so that the caller may date it from this attempt
--   {0, seen, pttl}   not granted; pttl is the time in ms until every current hold has run
--                     out (-1: none held, while a silent place at the head waits for its
--                     waiter to come back); seen is the fencing counter now (0: none): a
--                     grant whose fence is at most seen is older than this reply (see acquire.lua)
--   {0, seen, pttl, 1} the same for a waiter queued for grants that is not among the
--                     queue's watchers (lib/grants.lua): it need not re-check when pttl is
--                     over (pttl is at most a claim window for a caller the holders would
--                     let in but a queued writer ahead keeps out)
-- Error replies (nothing changed when they are sent):
--   "REDLEASE_UPGRADE ..."  ARGV[1] holds the lock for reading and asked for writing: an
--                     upgrade is refused, never waited for (two upgrading readers would wait
--                     for each other forever)
--   "ERR redlease: ..."     ARGV[4] is neither "read" nor "write"
--   "WRONGTYPE ..."         K is another primitive (a mutex's string, a semaphore's ZSET)
--
-- Grants: a reader when no writer holds and the queue is empty; a writer when no one
-- holds and the queue is empty. A caller already queued is granted when it reaches the
-- head and fits (see serve in lib/rwlock.lua), never earlier: so a queued writer stops every
-- reader that comes after it, and readers queued together are granted together.
local rw = rwlock_keys(KEYS, ARGV[10])
local token, ttl, details, want = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local join = ARGV[5]
local first_attempt = join == 'grants-first' or join == 'silent-first'
if join == 'grants-first' then
  join = 'grants'
elseif join == 'silent-first' then
  join = 'silent'
end
if want ~= 'read' and want ~= 'write' then
  return redis.error_reply('ERR redlease: the mode must be "read" or "write"')
end
local now, clock = now_ms()
local state = load(rw, now)
if state.count > 0 and redis.call('ZSCORE', rw.owners, token) then
  if want == 'write' and state.mode == 'read' then
    return redis.error_reply('REDLEASE_UPGRADE ' .. rw.key .. ' is held for reading by this owner; '
      .. 'a read lock cannot be upgraded to write (it would deadlock with another upgrading reader): '
      .. 'release the read lock, then acquire the write lock')
  end
  redis.call('ZADD', rw.owners, 'XX', ms(now + ttl), token)
  settle(rw)
  return {2, entry_fence(rw.holders, rw.fence, token), 0}
end
local mine, empty, wake = serve(rw, state, now, clock, token, ttl, details)
if wake and join == 'silent' then
  redis.call(ARGV[9] == 'S' and 'SPUBLISH' or 'PUBLISH', ARGV[6], rw.key)
end
if not mine and empty and fits(state, want) then
  -- The queue is empty, so the caller is not in it; clear a stale table entry (an
  -- acquisition's first attempt has had no place).
  if (join == 'grants' or join == 'silent') and not first_attempt then
    redis.call('HDEL', rw.waiters, token)
  end
  mine = grant_fence(rw.fence, nil, clock, rw.fence_keep)
  hold(rw, state, token, want, ttl, details, mine, now)
  settle(rw, state, now + ttl)
  return mine
end
if mine then
  settle(rw)
  return mine
end
if join == 'grants' then
  local old = redis.call('HGET', rw.waiters, token)
  if not old then
    redis.call('HSET', rw.waiters, token, cjson.encode({ttl = ARGV[2], ch = ARGV[6], who = details, mode = want, since = ms(now)}))
    redis.call('RPUSH', rw.queue, token)
  else
    local w = cjson.decode(old)
    if w.ch == '' then
      -- A silent place whose waiter can now be handed the lock: same place, with a channel.
      redis.call('HSET', rw.waiters, token, cjson.encode({ttl = ARGV[2], ch = ARGV[6], who = details, mode = want, since = w.since or ms(now)}))
    end
  end
elseif join == 'silent' then
  -- A silent place is written again at every attempt (its `until` moves on); it keeps
  -- the `since` of when it was taken.
  local old = redis.call('HGET', rw.waiters, token)
  local since = old and cjson.decode(old).since or ms(now)
  local entry = cjson.encode({ttl = ARGV[2], ch = '', who = details, mode = want, till = ms(now + tonumber(ARGV[8])), since = since})
  redis.call('HSET', rw.waiters, token, entry)
  if not old then
    redis.call('RPUSH', rw.queue, token)
  end
end
if join == 'grants' or join == 'silent' then
  redis.call('PEXPIRE', rw.queue, ARGV[7])
  redis.call('PEXPIRE', rw.waiters, ARGV[7])
end
local last = settle(rw)
local seen = tonumber(redis.call('GET', rw.fence) or '0')
if last then
  if join == 'grants' and not in_front(rw.queue, token) then
    return {0, seen, last - now, 1}
  end
  if fits(state, want) then
    -- The holders would let the caller in, a queued place ahead (a writer) keeps it
    -- out: re-check within a claim window, so that a place whose waiter is gone (serve
    -- drops it then) costs the readers behind it that window, not the readers' leases.
    return {0, seen, math.min(last - now, claim_window(ttl))}
  end
  return {0, seen, last - now}
end
return {0, seen, -1}
