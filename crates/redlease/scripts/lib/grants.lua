-- lib/grants: a library, not a script: src/lua.rs prepends it (after lib/fence.lua) to the
-- scripts that hand a lease to a queued waiter: the lock's acquire.lua and release.lua (with
-- lib/handoff.lua after it), the semaphore's (with lib/semaphore.lua) and the read-write
-- lock's (with lib/rwlock.lua). The one hand-off every primitive shares; what a grant
-- grants (the lock, n permits, a read or the write side) is the primitive's own library.
--
-- Every primitive's queue is a LIST of owner tokens and its waiter table a HASH token ->
-- the waiter record, one cjson object for every primitive (absent fields are nil):
--   ttl    the lease asked for, ms (a decimal string)
--   ch     the waiter's grant channel; "" marks a silent place, which no hand-off reaches
--   who    holder details, recorded beside the lease when granted
--   since  when the place was taken, ms since 1970 by the server's TIME (for operators)
--   skip   a lock's place a hand-off skipped while its client did not listen: when first
--   n      a semaphore's request for n > 1 permits
--   mode   a read-write lock's "read" or "write"
--   till   a read-write lock's silent place: dropped once this (ms since 1970) passed
--
-- The protocol, the same for every primitive:
-- * A grant pushed on a waiter's grant channel is never proof by itself: a demoted primary
--   relays its new primary's PUBLISHes, also grants the new primary counted for nobody, and
--   a link that looked like a primary's when the grant came may be a replica's a moment
--   later and a primary's again after that. So a pushed grant sets the lease for a short
--   claim window only (claim_window), and its waiter confirms it with an attempt on the
--   server that decides (the lease's own script, which finds the token and sets the whole
--   ttl). A grant the waiter never confirms (its link was cut silently: Redis counts it as
--   a subscriber for minutes) frees itself when the window ends.
-- * A grant to a waiter of the releasing client itself (its grant channel is the one the
--   release names) is told in the release's reply, which comes from the server that ran
--   it, as an attempt's reply does: that grant sets the whole ttl at once (a direct grant).
-- * The first FRONT places of a queue are its watchers: their waiters re-check when the
--   holder's lease can end (the attempt's reply tells each waiter whether it is among
--   them), so that a crashed holder, or a claim window its grantee never used, stalls the
--   queue for at most that lease or window even when FRONT - 1 of the watchers are gone.
--   The waiters behind re-check rarely: the grant is pushed to them.
-- * Whoever changes who watches tells them, with "next <ms> <token> <key>" on their grant
--   channels (nudge_front): a claim window granted nudges every watcher to re-check when
--   it ends; any other grant nudges the waiter that has just moved up into the front; a
--   waiter withdrawing from the front nudges the one that moves up into its place. So no
--   progress depends on the releasing process, nor on the head of the queue, being alive.
local FRONT = 3

-- claim_window(ttl): how long (ms) a lease handed to a waiter that asked for `ttl` ms lasts
-- until the waiter confirms it: a tenth of the ttl, at least 50 ms (or the whole ttl if
-- shorter) so that a waiter on a loaded machine can answer in time, and at most one second.
local function claim_window(ttl)
  local asked = tonumber(ttl)
  return math.min(1000, math.max(math.floor(asked / 10), math.min(asked, 50)))
end

-- publish(sharded, channel, message): PUBLISH (SPUBLISH when `sharded`: a Redis Cluster,
-- whose channels carry the lease's hash tag); the receivers it reached.
local function publish(sharded, channel, message)
  return redis.call(sharded and 'SPUBLISH' or 'PUBLISH', channel, message)
end

-- offer(sharded, w, fence, token, key, own): pushes the grant of `key` with `fence` to the
-- waiter `token` (waiter table entry `w`, decoded). Returns the lease it may set in ms
-- (the whole ttl for a direct grant, to a waiter of the client whose grant channel is
-- `own`; else the claim window), whether it is direct, and the message ("<fence> <token>
-- <key>", as published and as a release answers it); nil when the waiter's client does
-- not listen (PUBLISH reached no one).
local function offer(sharded, w, fence, token, key, own)
  local message = string.format('%d', fence) .. ' ' .. token .. ' ' .. key
  if publish(sharded, w.ch, message) == 0 then
    return nil
  end
  if own and own ~= '' and w.ch == own then
    return tonumber(w.ttl), true, message
  end
  return claim_window(w.ttl), false, message
end

-- handed(message, lease, direct): a release's report of a hand-off (its reply tells the
-- releasing client, which tells its own waiters at once and follows claim windows up), "<claim|lease> <ms>
-- <grant message>": "lease" for a direct grant (the waiter holds the whole ttl), "claim"
-- for a claim window.
local function handed(message, lease, direct)
  return (direct and 'lease ' or 'claim ') .. string.format('%d', lease) .. ' ' .. message
end

-- nudge_front(queue, waiters, from, ms, key, sharded, quiet): tells the waiters at places
-- `from` to FRONT - 1 of `queue` (0-based) to re-check in `ms` ms ("next <ms> <token>
-- <key>"), except those listening on the channel `quiet` (or nil).
local function nudge_front(queue, waiters, from, ms, key, sharded, quiet)
  if from >= FRONT then
    return
  end
  local tokens
  if from == FRONT - 1 then
    -- One place (the nudge after a direct grant or a withdrawal): LINDEX, whose reply
    -- Redis hands to Lua as a string rather than a table.
    local last = redis.call('LINDEX', queue, from)
    tokens = last and {last} or {}
  else
    tokens = redis.call('LRANGE', queue, from, FRONT - 1)
  end
  for _, token in ipairs(tokens) do
    local entry = token ~= '~' and redis.call('HGET', waiters, token)
    if entry then
      local channel = cjson.decode(entry).ch
      if channel ~= '' and channel ~= quiet then
        publish(sharded, channel, 'next ' .. string.format('%d', ms) .. ' ' .. token .. ' ' .. key)
      end
    end
  end
end

-- after_grant(queue, waiters, ms, direct, key, sharded, own, moved): the nudges a grant of
-- `ms` ms owes the front (see the top): every watcher when the grant is a claim window, else
-- the waiters that moved up into the front: `moved` places (nil: one) left the queue's head
-- in this serve, granted or dropped, so the last `moved` watchers are new there and have no
-- re-check due. After a direct grant, a waiter of the releasing client (its grant channel
-- `own`) is not nudged: the new holder lives in its process, and a crash of that process
-- ends both (the nudge would only wake it for nothing).
local function after_grant(queue, waiters, ms, direct, key, sharded, own, moved)
  if direct then
    nudge_front(queue, waiters, math.max(FRONT - (moved or 1), 0), ms, key, sharded, own)
  else
    nudge_front(queue, waiters, 0, ms, key, sharded, nil)
  end
end

-- in_front(queue, token): whether `token` is among the queue's watchers (see the top).
local function in_front(queue, token)
  for _, t in ipairs(redis.call('LRANGE', queue, 0, FRONT - 1)) do
    if t == token then
      return true
    end
  end
  return false
end

-- withdraw(queue, waiters, token, left, key, sharded): drops the place of `token` (a
-- waiter that gave up, or took the lease another way). When it was a watcher, the waiter
-- that moves up into the front is nudged to re-check in `left` ms (when the holder's lease
-- can end; nil or <= 0: nobody holds, and the caller serves the queue itself). Returns
-- whether there was a place.
local function withdraw(queue, waiters, token, left, key, sharded)
  if redis.call('HDEL', waiters, token) == 0 then
    return false
  end
  local watched = left and left > 0 and in_front(queue, token)
  redis.call('LREM', queue, 1, token)
  if watched then
    nudge_front(queue, waiters, FRONT - 1, left, key, sharded)
  end
  return true
end
