-- acquire: one attempt to take the lock. Sent as lib/clock.lua .. lib/fence.lua ..
-- lib/expiry.lua .. lib/grants.lua .. lib/handoff.lua .. acquire.lua.
-- KEYS, those of one lock, all in one cluster slot (lib/handoff.lua's lock_keys names them:
-- key, fence, holder, queue, waiters):
--   KEYS[1] lock key: the owner token alone, with a PX expiry (a plain SET NX PX lock)
--   KEYS[2] fencing counter: the last token granted (see lib/fence.lua)
--   KEYS[3] holder details: "<fence> <details for operators>" (free text after the
--           holder's fencing token), same expiry as KEYS[1]: the holder's token lives as
--           long as its lease, whatever becomes of the counter (which may expire or be
--           deleted during a hold of weeks)
--   KEYS[4] FIFO queue of waiting tokens (list)
--   KEYS[5] waiter table: token -> the waiter record (lib/grants.lua: ttl, ch, who,
--           since, and skip while a hand-off found the waiter's client not listening)
-- ARGV: token ttl holder mode channel linger announce sharded fence_step fence_keep
--   ARGV[1] owner token   ARGV[2] ttl in ms   ARGV[3] holder details
--   ARGV[4] the mode: what the attempt does when the lock is busy (named as `Join` in
--           src/scripts.rs):
--     "no"           only try
--     "grants"       join the FIFO queue, to be handed the lock on the grant channel
--                    ARGV[5]; the queue keys live ARGV[6] ms past the last join
--     "grants-first" as "grants", on an acquisition's first attempt: its fresh token
--                    cannot be queued yet, so a lock it takes has no place to withdraw
--     "leave"        only try, but withdraw the token's place if it takes the lock (a
--                    waiter's later attempt made while its grants cannot reach it: an
--                    earlier attempt whose reply was lost may have queued it)
--     "listen"       only try, but mark the queue with "~" (for ARGV[6] ms; ARGV[5] is
--                    sent empty): a waiter that listens for release notices (Cluster,
--                    quorum), so that a release announces only when one may listen; and
--                    withdraw the token's place if it takes the lock (a Cluster waiter
--                    listens only after its grants stopped reaching it, a slot migration
--                    or a failover, and may have queued before)
--           A place left behind would be handed the lock by a later release, and the lock
--           would sit with nobody for a ttl: hence the withdrawals.
--   ARGV[5] ("grants", "grants-first") the caller's grant channel
--   ARGV[6] ("grants", "grants-first", "listen") queue linger in ms (queue keys' expiry)
--   ARGV[7] (optional; an election's lock) a channel on which a fresh grant PUBLISHes the
--           key, so that observers of the election learn of the new leader ("": none)
--   ARGV[8] (optional) "S": SPUBLISH rather than PUBLISH there and for a hand-off (Redis
--           Cluster, where the channels live in the lock's slot and stay in its shard)
--   ARGV[9] (optional) the fencing clock's step in µs (see lib/fence.lua; a quorum's nodes)
--   ARGV[10] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply:
--   fence             freshly acquired (an integer >= 1: the new fencing token alone, the
--                     common reply, which Redis turns into RESP far cheaper than a table)
--   {2, fence, 0}     already held with this token (a retried attempt, or a hand-off);
--                     its expiry is set to ttl again, so that the caller may date the
--                     lease from this attempt (a waiter confirming a hand-off)
--   {0, seen, pttl}   held by someone else; pttl is the holder's remaining time in ms
--                     (-1: the holder set no expiry); seen is the fencing counter now (0:
--                     none), so that a waiter recognises a grant older than this reply
--                     (its fence is at most seen) as stale
--   {0, seen, pttl, 1} the same for a queued waiter ("grants", "grants-first") whose place is not
--                     among the queue's watchers (its first places, see lib/grants.lua):
--                     it need not re-check when the holder's lease can end (the watchers
--                     do, and whoever moves it up into the front nudges it)
local lock = lock_keys(KEYS, ARGV[10])
local token = ARGV[1]
local mode = ARGV[4]
local queues = mode == 'grants' or mode == 'grants-first'
local sharded = ARGV[8] == 'S'
-- Fast path: the lock is free (5 calls: SET, LINDEX of the queue, and TIME + SET of the
-- fence, SET of the holder details). Releases hand the lock straight to the oldest queued
-- waiter, so a lock is free with waiters queued only after its holder crashed or a
-- hand-off's waiter did not confirm it in its claim window (lib/handoff.lua). Then the oldest
-- waiter is served first (the caller only if that is its own place): an attempt never
-- takes the lock past a waiter that queued before it.
if redis.call('SET', lock.key, token, 'NX', 'PX', ARGV[2]) then
  local head = redis.call('LINDEX', lock.queue, 0)
  local handed = false
  if head and head ~= '~' then
    handed = hand_on(lock, token, sharded, ARGV[2]) ~= nil
  end
  if not handed then
    if mode == 'grants' or mode == 'leave' or mode == 'listen' then
      withdraw(lock.queue, lock.waiters, token, tonumber(ARGV[2]), lock.key, sharded)
    end
    local fence = grant_fence(lock.fence, ARGV[9] and tonumber(ARGV[9]), nil, lock.fence_keep)
    redis.call('SET', lock.holder, string.format('%d', fence) .. ' ' .. ARGV[3], 'PX', ARGV[2])
    if ARGV[7] and ARGV[7] ~= '' then
      redis.call(sharded and 'SPUBLISH' or 'PUBLISH', ARGV[7], lock.key)
    end
    return fence
  end
  -- Handed to an older waiter: the caller finds it busy (and queues, if it joins).
  if ARGV[7] and ARGV[7] ~= '' then
    redis.call(sharded and 'SPUBLISH' or 'PUBLISH', ARGV[7], lock.key)
  end
end
local current = redis.call('GET', lock.key)
if current == token then
  redis.call('PEXPIRE', lock.key, ARGV[2])
  redis.call('PEXPIRE', lock.holder, ARGV[2])
  return {2, holder_fence(lock.holder, lock.fence), 0}
end
-- A new place's position in the queue, counted from 1 (nil: no new place).
local placed = nil
if queues then
  -- A waiter that comes back keeps its place (and its `since`): only a new place reads
  -- the clock, so a retry costs one call here (HGET), as HSETNX did. A place a hand-off
  -- skipped while the waiter's client did not listen (w.skip, see release.lua) is reachable
  -- again: its skip is forgotten (one HSET), so that it is kept as long the next time.
  local entry = redis.call('HGET', lock.waiters, token)
  if not entry then
    local since = string.format('%d', math.floor(server_us() / 1000))
    redis.call('HSET', lock.waiters, token, cjson.encode({ttl = ARGV[2], ch = ARGV[5], who = ARGV[3], since = since}))
    -- A new place is the last: RPUSH's reply (the queue's length) tells whether it is
    -- among the watchers, without reading the queue's front again (below).
    placed = redis.call('RPUSH', lock.queue, token)
  else
    local w = cjson.decode(entry)
    if w.skip then
      w.skip = nil
      redis.call('HSET', lock.waiters, token, cjson.encode(w))
    end
  end
  redis.call('PEXPIRE', lock.queue, ARGV[6])
  redis.call('PEXPIRE', lock.waiters, ARGV[6])
end
if mode == 'listen' then
  if not redis.call('LINDEX', lock.queue, 0) then
    redis.call('RPUSH', lock.queue, '~')
    redis.call('PEXPIRE', lock.queue, ARGV[6])
  else
    -- Queued waiters keep the queue as long as they asked for (see lib/expiry.lua).
    raise_expiry(lock.queue, ARGV[6])
  end
end
-- The counter, or the holder's token when the counter is gone (expired or deleted during a
-- long hold): a grant is never older than the current holder's.
local seen = tonumber(redis.call('GET', lock.fence) or '')
if not seen then
  seen = holder_fence(lock.holder, nil)
end
local pttl = redis.call('PTTL', lock.key)
if queues then
  local front
  if placed then
    front = placed <= FRONT
  else
    front = in_front(lock.queue, token)
  end
  if not front then
    return {0, seen, pttl, 1}
  end
end
return {0, seen, pttl}
