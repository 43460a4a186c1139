-- lib/handoff: a library, not a script: src/lua.rs prepends it (after lib/fence.lua) to
-- release.lua, which hands the lock on when its holder lets go (or serves the queue of a
-- lock found free), and to acquire.lua, whose attempt that finds the lock free serves the
-- queue first. hand_on, the FIFO hand-off of a lock to its oldest queued waiter.
-- KEYS as in acquire.lua (KEYS[1] lock, KEYS[2] fencing counter, KEYS[3] holder details,
-- KEYS[4] queue, KEYS[5] waiter table).
--
-- Pops queued waiters oldest first until one's client listens on its grant channel
-- (PUBLISH reaches at least one subscriber); that waiter gets the lock. A waiter whose
-- client does not listen now is skipped but keeps its place at the head of the queue: its
-- subscription may be moving (a Sentinel failover, a reconnect), and it is served by the
-- next hand-off once it listens again, ahead of everyone who queued after it. The first
-- skip records when (w[5], ms since 1970 by the server's TIME; the waiter clears it when
-- it queues again, reachable), and a place still unreachable MISSED_KEPT_MS after that is
-- dropped (its client is gone). Every grant, received or not, burns a fencing number,
-- which keeps tokens strictly increasing (they need not be consecutive).
--
-- The claim window. A subscriber Redis counts may not be there any more: a client whose
-- link was cut silently (packets dropped, no RST) is counted until Redis notices, which
-- takes minutes. So a hand-off sets the lock (and the holder details) for a short window
-- only, claim_window(ttl), and the waiter confirms the grant with an attempt that finds
-- its token and sets the whole ttl (acquire.lua). A grant its waiter does not take costs
-- the others that window: the lock is then free with waiters queued, and the next attempt
-- or release serves the oldest of them (the releasing client checks once the window is
-- over; see engine.rs).
local MISSED_KEPT_MS = 10000

-- claim_window(ttl): how long (ms, a string for PX) a lock handed to a waiter that asked
-- for `ttl` ms lasts until the waiter confirms it: a tenth of the ttl, at least 50 ms (or
-- the whole ttl if shorter) so that a waiter on a loaded machine can answer in time, and
-- at most one second.
local function claim_window(ttl)
  local asked = tonumber(ttl)
  return string.format('%d', math.min(1000, math.max(math.floor(asked / 10), math.min(asked, 50))))
end

-- nudge_next(sharded, ttl): tells the waiter now at the head of the queue that it is next,
-- with "next <ttl> <token> <lock key>" on its grant channel: the lock was just given to a
-- holder whose lease is `ttl` ms. Waiters further back re-check rarely (the grant is
-- pushed to them); the one next in line re-checks when that holder's lease can end, so
-- that a holder that crashes does not stall the queue. Costs LINDEX, HGET and PUBLISH.
local function nudge_next(sharded, ttl)
  local next = redis.call('LINDEX', KEYS[4], 0)
  if not next or next == '~' then
    return
  end
  local entry = redis.call('HGET', KEYS[5], next)
  if entry then
    local channel = cjson.decode(entry)[2]
    redis.call(sharded and 'SPUBLISH' or 'PUBLISH', channel,
      'next ' .. ttl .. ' ' .. next .. ' ' .. KEYS[1])
  end
end

-- hand_on(own, sharded, own_ttl): hands the lock at KEYS[1] to the oldest queued waiter
-- whose client listens, told with PUBLISH (SPUBLISH when `sharded`: a Cluster). `own` is
-- the caller's token: its own place, if the popping reaches it, is dropped, and when
-- `own_ttl` is given the popping stops there (the caller, which holds the lock for
-- `own_ttl` ms, keeps it: it was its turn). Whoever gets the lock, the waiter next in line
-- is nudged (nudge_next). Returns the grant message "<fence> <token> <lock key>" (as
-- published) and the claim window in ms, or nil when nobody took it; and whether anything
-- was popped (a place or a listener's "~" mark: see acquire.lua).
local function hand_on(own, sharded, own_ttl)
  local popped = false
  local grant, window = nil, nil
  local kept = {}
  local now = nil
  while true do
    local head = redis.call('LPOP', KEYS[4])
    if not head then
      break
    end
    popped = true
    local entry = nil
    if head == own then
      redis.call('HDEL', KEYS[5], head)
      if own_ttl then
        nudge_next(sharded, own_ttl)
        break
      end
    elseif head ~= '~' then
      entry = redis.call('HGET', KEYS[5], head)
    end
    if entry then
      local w = cjson.decode(entry)
      local fence = grant_fence(KEYS[2])
      local message = string.format('%d', fence) .. ' ' .. head .. ' ' .. KEYS[1]
      if redis.call(sharded and 'SPUBLISH' or 'PUBLISH', w[2], message) > 0 then
        window = claim_window(w[1])
        redis.call('HDEL', KEYS[5], head)
        redis.call('SET', KEYS[1], head, 'PX', window)
        redis.call('SET', KEYS[3], string.format('%d', fence) .. ' ' .. w[3], 'PX', window)
        grant = message
        -- Before the skipped places go back at the head: those clients do not listen.
        nudge_next(sharded, w[1])
        break
      end
      if not now then
        -- now_ms of lib/common.lua, inlined (see acquire.lua).
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
  return grant, window, popped
end
