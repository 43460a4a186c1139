-- rw_release: give back our hold (read or write) of a read-write lock and grant the lock
-- to the queue's head as far as it fits; also withdraws our token from the queue, so a
-- waiter that gives up calls this too. Sent as lib/clock.lua .. lib/common.lua ..
-- lib/fence.lua .. lib/grants.lua .. lib/shared.lua .. lib/rwlock.lua .. rw_release.lua.
-- KEYS as in lib/rwlock.lua (rw_acquire.lua's six; rwlock_keys names them).
-- ARGV: token channel sharded unused own fence_keep
--   ARGV[1] owner token
--   ARGV[2] (optional) a release channel: when the release leaves the lock held by no one
--           (nothing handed on), PUBLISH K there (Cluster and quorum waiters, which do not
--           queue)
--   ARGV[3] (optional) "S": SPUBLISH rather than PUBLISH (Redis Cluster: the channel is in
--           the lock's slot, and the notice reaches the lock's shard only)
--   ARGV[4] unused (sent empty: the release scripts take the releasing client's grant
--           channel in the same place, after sem_release.lua's weight)
--   ARGV[5] (optional) the releasing client's grant channel: a waiter listening there is
--           granted the lock directly, for its whole ttl (see lib/grants.lua); ARGV[2] and
--           ARGV[3] are then sent, empty when unused
--   ARGV[6] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply: 1 released; 0 the token held nothing (its lease ran out, or it never had one);
-- {1 or 0, grant, ...} the same when the run handed the lock on: each grant as handed in
-- lib/grants.lua reports it, as sem_release.lua does.
-- Error reply "WRONGTYPE ..." when K is another primitive.
--
-- Any run also drops expired holds and serves the queue: when the last reader leaves, a
-- writer at the head gets the lock; a run of readers at the head is granted together (one
-- PUBLISH each) as soon as no writer holds. So a withdrawal, or a release of a lost hold,
-- serves the queue as well (a writer at the head giving up lets the readers behind it in).
local rw = rwlock_keys(KEYS, ARGV[6])
local token = ARGV[1]
local now, clock = now_ms()
local state = load(rw, now)
local held = redis.call('ZREM', rw.owners, token) == 1
if held then
  redis.call('HDEL', rw.holders, token)
  state.count = state.count - 1
  if state.count == 0 then
    redis.call('DEL', rw.key)
    state.mode = nil
  end
else
  -- A waiter giving up: the watcher moving up into its place re-checks when the holds
  -- can end.
  local top = redis.call('ZRANGE', rw.owners, -1, -1, 'WITHSCORES')
  withdraw(rw.queue, rw.waiters, token, top[2] and tonumber(top[2]) - now, rw.key, false)
end
local _, _, wake, granted = serve(rw, state, now, clock, nil, 0, '', ARGV[5])
if ARGV[2] and ARGV[2] ~= '' and ((held and state.count == 0) or wake) then
  redis.call(ARGV[3] == 'S' and 'SPUBLISH' or 'PUBLISH', ARGV[2], rw.key)
end
settle(rw, state)
if #granted > 0 then
  return {held and 1 or 0, unpack(granted)}
end
if held then
  return 1
end
return 0
