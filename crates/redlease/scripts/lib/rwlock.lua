-- lib/rwlock: a library, not a script: src/lua.rs prepends it (after lib/clock.lua,
-- lib/common.lua, lib/fence.lua, whose grant_fence every grant uses, lib/grants.lua, the
-- hand-off, and lib/shared.lua) to rw_acquire.lua, rw_release.lua and rw_downgrade.lua, and
-- holds what they share. Its functions read no KEYS nor ARGV: each script names its keys
-- once, with rwlock_keys(KEYS), and passes that table (`rw`), the clock it read (now_ms:
-- `now` in ms, `clock` in µs for the grants' fencing clock) and the arguments' values.
--
-- The keys of every read-write lock script, in KEYS' order, all of one lock and in one
-- cluster slot (B is K when K has a {hash tag}, else "{K}", as for the mutex's side keys):
--   key     K: a HASH {mode = "read" | "write"}, present while anyone holds the lock. A
--           HASH, so that a mutex (a string at K) or a semaphore (a ZSET) of the same name
--           and this lock refuse each other with WRONGTYPE.
--   fence   B:fence, the fencing counter (shared with a mutex or semaphore of that name)
--   holders B:rw:holders, holder details: HASH token -> cjson [fence, details]
--   queue   B:rw:queue, the FIFO queue of waiting tokens (LIST)
--   waiters B:rw:waiters, the waiter table: HASH token -> the waiter record (lib/grants.lua),
--           with its `mode`, and `till` (ms since 1970) bounding a silent place (no grant
--           channel); a place keeps its `since` when it gets a channel
--   owners  B:rw:owners, the holders' leases: ZSET token -> expiry (ms since 1970 by the
--           server's TIME); many readers, or one writer
--
-- Every script drops the holds whose lease ran out before it looks (a crashed reader or
-- writer costs at most its ttl). K, the holders hash and the owners expire at the latest
-- lease's expiry, the queue keys a linger after the last join: an idle lock leaves no key
-- behind but its fencing counter (kept an hour by default, see lib/fence.lua).

-- rwlock_keys(keys, fence_keep): a read-write lock script's KEYS by name (see the top),
-- and fence_keep (the script's `fence_keep` argument, see lib/fence.lua); each script
-- builds it once, first.
local function rwlock_keys(keys, fence_keep)
  return {key = keys[1], fence = keys[2], holders = keys[3], queue = keys[4], waiters = keys[5], owners = keys[6], fence_keep = fence_keep}
end

-- The lock's state after dropping expired holds: {mode = "read" | "write" | nil, count =
-- holders}. Its first call reads K before any write, so a key of another type at K fails
-- there (WRONGTYPE) and the script changes nothing.
local function load(rw, now)
  local mode = redis.call('HGET', rw.key, 'mode')
  local expired = redis.call('ZRANGEBYSCORE', rw.owners, '-inf', ms(now))
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', rw.owners, '-inf', ms(now))
    each_chunk('HDEL', rw.holders, expired)
  end
  local count = redis.call('ZCARD', rw.owners)
  if count == 0 then
    if mode then
      redis.call('DEL', rw.key)
    end
    mode = nil
  end
  return {mode = mode, count = count}
end

-- Records a hold of `token` in `mode` for `ttl` ms from `now` with fencing token `fence`.
local function hold(rw, state, token, mode, ttl, details, fence, now)
  redis.call('ZADD', rw.owners, ms(now + ttl), token)
  redis.call('HSET', rw.holders, token, cjson.encode({string.format('%d', fence), details}))
  if state.mode ~= mode then
    redis.call('HSET', rw.key, 'mode', mode)
    state.mode = mode
  end
  state.count = state.count + 1
end

-- Whether a hold in `mode` fits beside the current holders.
local function fits(state, mode)
  if mode == 'write' then
    return state.count == 0
  end
  return state.mode ~= 'write'
end

-- pop(rw, granted): drops the queue's head, counted in `granted.moved` (see after_grant).
local function pop(rw, granted)
  redis.call('LPOP', rw.queue)
  granted.moved = (granted.moved or 0) + 1
end

-- Grants the lock to the queue's head for as long as it fits: a writer when no one holds,
-- then every reader of a run of readers (stopping at the next writer, which waits for
-- them), one grant and one PUBLISH "<fence> <token> <K>" on the waiter's grant channel
-- each (the hand-off every primitive shares, lib/grants.lua: the hold is the waiter's for
-- its claim window until it confirms it with an attempt, and the queue's watchers are
-- nudged). A waiter whose client no longer listens (PUBLISH reached no one) is dropped and
-- only burns a fencing number. `now` and `clock` are the script's clock (see now_ms).
-- `caller` (or nil), when it reaches the head, is granted without a message, with `ttl`
-- and `details`.
-- A silent entry (no grant channel: a Cluster waiter, see rw_acquire.lua) is never granted
-- by someone else's call: it stays at the head, keeping later waiters and newcomers out,
-- until its own waiter comes back for it, or is dropped once its `till` passed
-- (the waiter is gone). `granted` collects the grants to others (see serve); `own` (or
-- nil) is the releasing client's grant channel, whose waiters are granted directly (their
-- whole ttl). Returns the caller's fencing token (or nil), whether the queue is now empty,
-- and whether a silent head now fits (so that its waiter should be woken).
local function serve_queue(rw, state, now, clock, caller, ttl, details, granted, own)
  local mine = nil
  while true do
    local head = redis.call('LINDEX', rw.queue, 0)
    if not head then
      return mine, true, false
    end
    local entry = redis.call('HGET', rw.waiters, head)
    if not entry then
      pop(rw, granted)
    else
      local w = cjson.decode(entry)
      if w.ch == '' and head ~= caller and tonumber(w.till) < now then
        -- A silent waiter that stopped coming back: drop it.
        pop(rw, granted)
        redis.call('HDEL', rw.waiters, head)
        w = nil
      elseif not fits(state, w.mode) then
        if w.mode ~= 'write' or w.ch == '' or head == caller or listens(w.ch) then
          return mine, false, false
        end
        -- A writer's place whose waiter is gone (its client no longer listens: its process
        -- ended) stops keeping the readers behind it out: it is dropped, and they come in.
        pop(rw, granted)
        redis.call('HDEL', rw.waiters, head)
        w = nil
      elseif w.ch == '' and head ~= caller then
        return mine, false, true
      end
      if w then
        pop(rw, granted)
        redis.call('HDEL', rw.waiters, head)
        local fence = grant_fence(rw.fence, nil, clock, rw.fence_keep)
        if head == caller then
          hold(rw, state, head, w.mode, ttl, details, fence, now)
          mine = fence
        else
          local lease, direct, message = offer(false, w, fence, head, rw.key, own)
          if lease then
            hold(rw, state, head, w.mode, lease, w.who, fence, now)
            granted[#granted + 1] = handed(message, lease, direct)
            if direct then
              granted.whole = lease
            else
              granted.window = math.min(granted.window or lease, lease)
            end
          end
        end
      end
    end
  end
end

local function serve(rw, state, now, clock, caller, ttl, details, own)
  -- The grants to others as a release reports them (see handed), the shortest claim
  -- window among them (`window`) and a whole ttl granted directly (`whole`), if any.
  local granted = {}
  local mine, empty, wake = serve_queue(rw, state, now, clock, caller, ttl, details, granted, own)
  if granted.window then
    after_grant(rw.queue, rw.waiters, granted.window, false, rw.key, false)
  elseif mine or granted.whole then
    after_grant(rw.queue, rw.waiters, mine and ttl or granted.whole, true, rw.key, false, own, granted.moved)
  end
  return mine, empty, wake, granted
end

-- Sets each held key's expiry to the latest lease's; returns that expiry (ms since 1970),
-- or nil when no one holds. `state` (optional) spares the read where it tells: no one
-- holds (count 0), or one hold, granted by this script with expiry `only` (ms since 1970).
local function settle(rw, state, only)
  local last = nil
  if state and state.count == 0 then
    return nil
  elseif state and state.count == 1 and only then
    last = only
  else
    local top = redis.call('ZRANGE', rw.owners, -1, -1, 'WITHSCORES')
    if not top[2] then
      return nil
    end
    last = tonumber(top[2])
  end
  local at = ms(last)
  redis.call('PEXPIREAT', rw.key, at)
  redis.call('PEXPIREAT', rw.holders, at)
  redis.call('PEXPIREAT', rw.owners, at)
  return last
end
