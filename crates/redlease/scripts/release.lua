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
-- Hand-off: pop queued waiters oldest first until one's client listens on its grant
-- channel (PUBLISH reaches at least one subscriber); that waiter gets the lock without a
-- round trip of its own. A waiter whose client does not listen now is skipped but keeps
-- its place at the head of the queue: its subscription may be moving (a Sentinel failover,
-- a reconnect), and it is served by the next hand-off once it listens again, ahead of
-- everyone who queued after it. The first skip records when (w[5], ms since 1970 by the
-- server's TIME; the waiter clears it when it queues again, reachable), and a place still
-- unreachable MISSED_KEPT_MS after that is dropped (its client is gone). The lock itself
-- is never kept for a waiter that cannot be told: it goes to the next waiter who listens,
-- or is freed. Every grant, received or not, burns a fencing number, which keeps tokens
-- strictly increasing (they need not be consecutive). The releaser's own place (left by
-- an attempt that took the free lock without queueing) is dropped, never granted. A
-- hand-off costs 9 calls (GET, LPOP, HGET, TIME, SET, PUBLISH, HDEL, SET, SET), plus
-- TIME, HSET once and LPUSH, PTTL, PEXPIRE per release that skips waiters; a release with
-- no one queued or listening costs 3 (GET, LPOP, DEL).
local MISSED_KEPT_MS = 10000
local token = ARGV[1]
local publish = ARGV[4] == 'S' and 'SPUBLISH' or 'PUBLISH'
if redis.call('GET', KEYS[1]) == token then
  local popped = false
  local grant = nil
  local kept = {}
  local now = nil
  while true do
    local head = redis.call('LPOP', KEYS[4])
    if not head then
      break
    end
    popped = true
    local entry = nil
    if head == token then
      redis.call('HDEL', KEYS[5], head)
    elseif head ~= '~' then
      entry = redis.call('HGET', KEYS[5], head)
    end
    if entry then
      local w = cjson.decode(entry)
      local fence = grant_fence(KEYS[2])
      -- message: "<fence> <token> <lock key>"
      local message = string.format('%d', fence) .. ' ' .. head .. ' ' .. KEYS[1]
      if redis.call(publish, w[2], message) > 0 then
        redis.call('HDEL', KEYS[5], head)
        redis.call('SET', KEYS[1], head, 'PX', w[1])
        redis.call('SET', KEYS[3], string.format('%d', fence) .. ' ' .. w[3], 'PX', w[1])
        grant = message
        break
      end
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      if not w[5] then
        w[5] = string.format('%d', now)
        redis.call('HSET', KEYS[5], head, cjson.encode(w))
        kept[#kept + 1] = head
      elseif now - tonumber(w[5]) < MISSED_KEPT_MS then
        kept[#kept + 1] = head
      else
        redis.call('HDEL', KEYS[5], head)
      end
    end
  end
  if #kept > 0 then
    -- Back at the head, in their order. Popping the last entry deleted the list: it takes
    -- the waiter table's expiry again (both linger as long as the last join asked).
    for i = #kept, 1, -1 do
      redis.call('LPUSH', KEYS[4], kept[i])
    end
    local linger = redis.call('PTTL', KEYS[5])
    if linger > 0 then
      redis.call('PEXPIRE', KEYS[4], linger)
    end
  end
  if grant then
    if ARGV[3] == '1' then
      redis.call(publish, ARGV[2], KEYS[1])
    end
    return grant
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
