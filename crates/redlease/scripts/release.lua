-- release: if the lock holds our token, hand it to the oldest live waiter, or else delete it
-- (KEYS as in acquire.lua).
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
-- Also withdraws the token from the waiter queue, so a waiter that gives up calls this too.
-- Reply: 1 released; "<window> <grant message>" (the claim window in ms, then the grant as
-- published) when released by handing the lock on, so that a waiter of the releasing
-- client is told without waiting for the push, and the client can check once the window
-- is over that the waiter took it; 0 the lock did not hold our token (expired, or taken by
-- another); {0, "<window> <grant message>"} it did not, but the lock was free with waiters
-- queued (a hand-off its waiter never confirmed, a holder that crashed), and this call
-- served the oldest (see lib/handoff.lua).
--
-- Hand-off: see lib/handoff.lua (prepended to this script, after lib/fence.lua). The releaser's
-- own place (left by an attempt that took the free lock without queueing) is dropped,
-- never granted. A hand-off costs 9 calls (GET, LPOP, HGET, TIME, SET, PUBLISH, HDEL, SET,
-- SET), plus TIME, HSET once and LPUSH, PTTL, PEXPIRE per release that skips waiters; a
-- release with no one queued or listening costs 3 (GET, LPOP, DEL).
local token = ARGV[1]
local sharded = ARGV[4] == 'S'
local publish = sharded and 'SPUBLISH' or 'PUBLISH'
local current = redis.call('GET', KEYS[1])
if current == token then
  local grant, window, popped = hand_on(token, sharded, false)
  if grant then
    if ARGV[3] == '1' then
      redis.call(publish, ARGV[2], KEYS[1])
    end
    return window .. ' ' .. grant
  end
  redis.call('DEL', KEYS[1], KEYS[3])
  if ARGV[2] and (popped or ARGV[3] == '1') then
    redis.call(publish, ARGV[2], KEYS[1])
  end
  return 1
end
if redis.call('HDEL', KEYS[5], token) == 1 then
  redis.call('LREM', KEYS[4], 1, token)
end
if not current then
  -- Free with waiters queued: serve the oldest (one LPOP when nobody is queued).
  local grant, window, popped = hand_on(token, sharded, false)
  if grant then
    if ARGV[3] == '1' then
      redis.call(publish, ARGV[2], KEYS[1])
    end
    return {0, window .. ' ' .. grant}
  end
  if ARGV[2] and popped then
    redis.call(publish, ARGV[2], KEYS[1])
  end
end
return 0
