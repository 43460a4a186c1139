-- lib/handoff: a library, not a script: src/lua.rs prepends it (after lib/fence.lua and
-- lib/grants.lua, the hand-off every primitive shares) to release.lua, which hands the
-- lock on when its holder lets go (or serves the queue of a lock found free), and to
-- acquire.lua, whose attempt that finds the lock free serves the queue first. hand_on, the
-- FIFO hand-off of a lock to its oldest queued waiter, and lock_keys, which names the
-- lock's keys. Its functions read no KEYS nor ARGV: each script names its keys once, with
-- lock_keys(KEYS), and passes that table (`lock`) and the arguments' values.
--
-- Pops queued waiters oldest first until one's client listens on its grant channel
-- (PUBLISH reaches at least one subscriber); that waiter gets the lock, for its claim
-- window or, a waiter of the releasing client, for its whole ttl (see lib/grants.lua). A
-- waiter whose client does not listen now is skipped but keeps its place at the head of
-- the queue: its subscription may be moving (a Sentinel failover, a reconnect), and it is
-- served by the next hand-off once it listens again, ahead of everyone who queued after
-- it. The first skip records when (w.skip, ms since 1970 by the server's TIME; the waiter
-- clears it when it queues again, reachable), and a place still unreachable MISSED_KEPT_MS
-- after that is dropped (its client is gone). Every grant, received or not, burns a
-- fencing number, which keeps tokens strictly increasing (they need not be consecutive).
local MISSED_KEPT_MS = 10000

-- lock_keys(keys): a lock script's KEYS by name, in acquire.lua's order: key (the lock
-- key), fence (the fencing counter), holder (the holder details), queue (the FIFO queue of
-- waiting tokens) and waiters (the waiter table); and fence_keep, how long the counter is
-- kept past the clock (the script's `fence_keep` argument, see lib/fence.lua). Each script
-- builds it once, first.
local function lock_keys(keys, fence_keep)
  return {key = keys[1], fence = keys[2], holder = keys[3], queue = keys[4], waiters = keys[5], fence_keep = fence_keep}
end

-- hand_on(lock, own, sharded, own_ttl, own_channel): hands the lock whose keys are `lock`
-- (lock_keys) to the oldest queued waiter whose client listens. `own` is the caller's
-- token: its own place, if the popping reaches it, is dropped, and when `own_ttl` is given
-- the popping stops there (the caller, which holds the lock for `own_ttl` ms, keeps it: it
-- was its turn; the waiter that moves up into the front is nudged). `own_channel` (or nil)
-- is the caller's grant channel: a waiter listening there is granted directly. Returns the
-- grant message "<fence> <token> <lock key>" (as published), the lease it set in ms and
-- whether it is direct, or nil when nobody took it; and whether anything was popped (a
-- place or a listener's "~" mark: see acquire.lua).
local function hand_on(lock, own, sharded, own_ttl, own_channel)
  local popped = false
  local pops = 0
  local grant, lease, direct = nil, nil, false
  local kept = {}
  local now = nil
  while true do
    local head = redis.call('LPOP', lock.queue)
    if not head then
      break
    end
    popped = true
    pops = pops + 1
    local entry = nil
    if head == own then
      redis.call('HDEL', lock.waiters, head)
      if own_ttl then
        after_grant(lock.queue, lock.waiters, own_ttl, true, lock.key, sharded, nil, pops)
        break
      end
    elseif head ~= '~' then
      entry = redis.call('HGET', lock.waiters, head)
    end
    if entry then
      local w = cjson.decode(entry)
      local fence = grant_fence(lock.fence, nil, nil, lock.fence_keep)
      local ms, whole, message = offer(sharded, w, fence, head, lock.key, own_channel)
      if ms then
        local px = string.format('%d', ms)
        redis.call('HDEL', lock.waiters, head)
        redis.call('SET', lock.key, head, 'PX', px)
        redis.call('SET', lock.holder, string.format('%d', fence) .. ' ' .. w.who, 'PX', px)
        grant, lease, direct = message, ms, whole
        -- Before the skipped places go back at the head: those clients do not listen.
        after_grant(lock.queue, lock.waiters, ms, whole, lock.key, sharded, own_channel, pops)
        break
      end
      if not now then
        now = math.floor(server_us() / 1000)
      end
      if not w.skip then
        w.skip = string.format('%d', now)
        redis.call('HSET', lock.waiters, head, cjson.encode(w))
        kept[#kept + 1] = head
      elseif now - tonumber(w.skip) < MISSED_KEPT_MS then
        kept[#kept + 1] = head
      else
        redis.call('HDEL', lock.waiters, head)
      end
    end
  end
  if #kept > 0 then
    -- Back at the head, in their order. Popping the last entry deleted the list: it takes
    -- the waiter table's expiry again (both linger as long as the last join asked).
    for i = #kept, 1, -1 do
      redis.call('LPUSH', lock.queue, kept[i])
    end
    local linger = redis.call('PTTL', lock.waiters)
    if linger > 0 then
      redis.call('PEXPIRE', lock.queue, linger)
    end
  end
  return grant, lease, direct, popped
end
