-- release: if the lock holds our token, hand it to the oldest live waiter, or else delete it
-- (KEYS as in acquire.lua; lib/handoff.lua's lock_keys names them). Sent as lib/clock.lua ..
-- lib/fence.lua .. lib/grants.lua .. lib/handoff.lua .. release.lua.
-- ARGV: token channel announce sharded own fence_keep
--   ARGV[1] owner token
--   ARGV[2] (optional) a release channel: when the lock is freed rather than handed on,
--           PUBLISH its key there (quorum waiters listen on it, and Cluster waiters that
--           cannot queue now), if the queue held anything: listening waiters mark it with
--           "~" (acquire.lua), so a release that nobody waits for publishes nothing
--   ARGV[3] (optional) "1": PUBLISH the key there after a hand-off too (an election's
--           lock, whose observers follow every change of leader)
--   ARGV[4] (optional) "S": every PUBLISH here is an SPUBLISH instead, grants included
--           (Redis Cluster: the channels carry the lock's hash tag, so they live in its slot,
--           and a notice reaches the lock's shard only; SPUBLISH counts the subscribers of
--           the primary it runs on, where the waiters' clients subscribe)
--   ARGV[5] (optional) the releasing client's grant channel: a waiter listening there is
--           granted the lock directly, for its whole ttl (see lib/grants.lua)
--   ARGV[6] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Also withdraws the token from the waiter queue, so a waiter that gives up calls this too
-- (and, when its place was among the watchers, nudges the waiter that moves up).
-- Reply: 1 released; "<claim|lease> <ms> <grant message>" (see handed in
-- lib/handoff.lua: a claim window or a direct grant, its length in ms, then the grant as
-- published) when released by handing the lock on, so that a waiter of the releasing
-- client is told without waiting for the push, and the client can check once a claim
-- window is over that the waiter took it; 0 the lock did not hold our token (expired, or
-- taken by another); {0, "<claim|lease> <ms> <grant message>"} it did not, but the lock
-- was free with waiters queued (a hand-off its waiter never confirmed, a holder that
-- crashed), and this call served the oldest (see lib/handoff.lua).
--
-- Hand-off: see lib/handoff.lua (prepended to this script, after lib/fence.lua and
-- lib/grants.lua). The releaser's own place (left by an attempt that took the free lock
-- without queueing) is dropped, never granted. A hand-off costs 9 calls (GET, LPOP, HGET,
-- TIME, SET, PUBLISH, HDEL, SET, SET) and its nudges (LINDEX for one place, else LRANGE,
-- then HGET and PUBLISH per waiter nudged), plus TIME, HSET once and LPUSH, PTTL, PEXPIRE per release that skips
-- waiters; a release with no one queued or listening costs 3 (GET, LPOP, DEL).
local lock = lock_keys(KEYS, ARGV[6])
local token = ARGV[1]
local sharded = ARGV[4] == 'S'
local publish = sharded and 'SPUBLISH' or 'PUBLISH'
local own = ARGV[5]
local current = redis.call('GET', lock.key)
if current == token then
  local grant, lease, direct, popped = hand_on(lock, token, sharded, false, own)
  if grant then
    if ARGV[3] == '1' then
      redis.call(publish, ARGV[2], lock.key)
    end
    return handed(grant, lease, direct)
  end
  redis.call('DEL', lock.key, lock.holder)
  if ARGV[2] and ARGV[2] ~= '' and (popped or ARGV[3] == '1') then
    redis.call(publish, ARGV[2], lock.key)
  end
  return 1
end
-- A waiter giving up: the watcher moving up into its place re-checks when the holder's
-- lease can end.
local left = current and redis.call('PTTL', lock.key)
withdraw(lock.queue, lock.waiters, token, left, lock.key, sharded)
if not current then
  -- Free with waiters queued: serve the oldest (one LPOP when nobody is queued).
  local grant, lease, direct, popped = hand_on(lock, token, sharded, false, own)
  if grant then
    if ARGV[3] == '1' then
      redis.call(publish, ARGV[2], lock.key)
    end
    return {0, handed(grant, lease, direct)}
  end
  if ARGV[2] and ARGV[2] ~= '' and popped then
    redis.call(publish, ARGV[2], lock.key)
  end
end
return 0
