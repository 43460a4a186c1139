-- rw_downgrade: turn our write hold of a read-write lock into a read hold, atomically (no
-- moment where another writer could come in), then let in the readers queued at the head.
-- Sent as lib/clock.lua .. lib/common.lua .. lib/fence.lua .. lib/grants.lua ..
-- lib/shared.lua .. lib/rwlock.lua .. rw_downgrade.lua (granting the queued readers).
-- KEYS as in lib/rwlock.lua (rw_acquire.lua's six; rwlock_keys names them).
-- ARGV: token channel sharded fence_keep
--   ARGV[1] owner token
--   ARGV[2] (optional) a release channel: PUBLISH K there once the queue is empty, so that
--           readers waiting without a queue place (Cluster, quorum) may come in
--   ARGV[3] (optional) "S": SPUBLISH rather than PUBLISH (Redis Cluster: the channel is in
--           the lock's slot, and the notice reaches the lock's shard only)
--   ARGV[4] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply: 1 the token now holds the lock for reading (also when it already did: a retried
-- downgrade); 0 the token holds nothing (its lease ran out: lost).
-- Error reply "WRONGTYPE ..." when K is another primitive.
--
-- The hold keeps its fencing token, lease expiry and holder details: the holder has held
-- without a gap since its write was granted, and the next writer (which must wait for it
-- to leave) gets a larger token from grant_fence anyway.
local rw = rwlock_keys(KEYS, ARGV[4])
local token = ARGV[1]
local now, clock = now_ms()
local state = load(rw, now)
if not redis.call('ZSCORE', rw.owners, token) then
  return 0
end
if state.mode == 'write' then
  redis.call('HSET', rw.key, 'mode', 'read')
  state.mode = 'read'
end
local _, empty, wake = serve(rw, state, now, clock, nil, 0, '')
if (empty or wake) and ARGV[2] and ARGV[2] ~= '' then
  redis.call(ARGV[3] == 'S' and 'SPUBLISH' or 'PUBLISH', ARGV[2], rw.key)
end
settle(rw)
return 1
