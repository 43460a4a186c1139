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
-- Reply: 1 released; the grant message (a string, as published) when released by handing
-- the lock on, so that a waiter of the releasing client is told without waiting for the
-- push; 0 the lock did not hold our token (expired, or taken by another).
--
-- Hand-off: pop queued waiters oldest first until one's client still listens on its grant
-- channel (PUBLISH reaches at least one subscriber); that waiter gets the lock without a
-- round trip of its own. A waiter whose client is gone only burns a fencing number, which
-- keeps tokens strictly increasing (they need not be consecutive). A hand-off costs 9 calls
-- (GET, LPOP, HGET, HDEL, TIME, SET, PUBLISH, SET, SET); a release with no one
-- queued or listening costs 3 (GET, LPOP, DEL).
local token = ARGV[1]
local publish = ARGV[4] == 'S' and 'SPUBLISH' or 'PUBLISH'
if redis.call('GET', KEYS[1]) == token then
  local popped = false
  while true do
    local head = redis.call('LPOP', KEYS[4])
    if not head then
      break
    end
    popped = true
    local entry = head ~= '~' and redis.call('HGET', KEYS[5], head)
    if entry then
      redis.call('HDEL', KEYS[5], head)
      local w = cjson.decode(entry)
      local fence = grant_fence(KEYS[2])
      -- message: "<fence> <token> <lock key>"
      local grant = string.format('%d', fence) .. ' ' .. head .. ' ' .. KEYS[1]
      if redis.call(publish, w[2], grant) > 0 then
        redis.call('SET', KEYS[1], head, 'PX', w[1])
        redis.call('SET', KEYS[3], w[3], 'PX', w[1])
        if ARGV[3] == '1' then
          redis.call(publish, ARGV[2], KEYS[1])
        end
        return grant
      end
    end
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
return 0
