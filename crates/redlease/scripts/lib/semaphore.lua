-- lib/semaphore: a library, not a script: src/lua.rs prepends it (after lib/clock.lua,
-- lib/common.lua, lib/fence.lua, whose grant_fence every grant uses, lib/grants.lua, the
-- hand-off, and lib/shared.lua) to sem_acquire.lua and sem_release.lua, and holds what they
-- share. Its functions read no KEYS nor ARGV: each script names its keys once, with
-- semaphore_keys(KEYS), and passes that table (`sem`), the clock it read (now_ms: `now` in
-- ms, `clock` in µs for the grants' fencing clock) and the arguments' values.
--
-- The keys of every semaphore script, in KEYS' order, all of one semaphore and in one
-- cluster slot (B is the semaphore key K when K has a {hash tag}, else "{K}", as for the
-- mutex's side keys):
--   key     K, the permits held: a ZSET owner token -> lease expiry (ms since 1970 by the
--           server's TIME). A ZSET, so that a mutex (a string at K) and a semaphore of the
--           same name refuse each other with WRONGTYPE; a read-write lock keeps a HASH at K.
--   fence   B:fence, the fencing counter (shared with a mutex or rwlock of the same name,
--           so that tokens keep growing whichever primitive used the name last)
--   holders B:sem:holders, holder details for operators: HASH token -> cjson [fence, details]
--           (the fence as a decimal string), or [fence, details, n] for a holder of n > 1
--           permits; and the field EXTRA (see below) when such holders exist
--   queue   B:sem:queue, the FIFO queue of waiting tokens (LIST)
--   waiters B:sem:waiters, the waiter table: HASH token -> the waiter record (lib/grants.lua),
--           with `n` for a waiter asking for n > 1 permits
--   permits B:sem:permits, the permit count in use: "<n>" (a decimal string), stored by the
--           acquisition that found the semaphore idle, or "<n>!<keep>" stored by a resize
--           (sem_resize.lua): authoritative (an acquisition asking another count takes
--           the stored one), and kept at least until <keep> (ms since 1970). Read only by
--           stored_count.
--
-- Weights: a holder may hold n permits at once (acquire_many): still one member of K (one
-- lease, one owner token, one fencing token, renewed and released as one), its n recorded
-- in its holders entry. The permits in use are ZCARD K plus EXTRA, the holders hash's field
-- '+extra' (owner tokens are hex, so no token is named so): the sum of n - 1 over the
-- holders of more than one permit, absent when there are none. It is kept by every grant,
-- release and reclaim, and expires with the hash, at the latest permit's expiry (when
-- nothing is held any more). The single-permit paths never read an entry to count.
--
-- Expiry: a permit is held while its score is in the future; every script drops the
-- permits whose score has passed (a crashed holder's permit comes back after its ttl)
-- before it counts, so no permit leaks. K and the holders hash expire at the latest permit's
-- expiry, the queue keys a linger after the last join, and the permit count at the later of
-- the two, or is deleted as soon as nothing is held or queued: an idle semaphore leaves no
-- key behind but its fencing counter (kept an hour by default, see lib/fence.lua) and a resized count
-- until its keep.

-- semaphore_keys(keys, fence_keep): a semaphore script's KEYS by name (see the top), and
-- fence_keep (the script's `fence_keep` argument, see lib/fence.lua); each script builds
-- it once, first.
local function semaphore_keys(keys, fence_keep)
  return {key = keys[1], fence = keys[2], holders = keys[3], queue = keys[4], waiters = keys[5], permits = keys[6], fence_keep = fence_keep}
end

-- The tokens whose permit has run out. The first call of every semaphore script that
-- touches K, made before any write: a key of another type at K fails here (WRONGTYPE)
-- and the script changes nothing.
local function expired_permits(sem, now)
  return redis.call('ZRANGEBYSCORE', sem.key, '-inf', ms(now))
end

-- The permit count stored (nil: none) and, when a resize stored it, until when it is kept
-- (ms since 1970; nil for a count stored by an acquisition). See `permits` at the top.
local function stored_count(sem)
  local stored = redis.call('GET', sem.permits)
  if not stored then
    return nil, nil
  end
  local n = tonumber(stored)
  if n then
    return n, nil
  end
  local count, keep = string.match(stored, '^(%d+)!(%d+)$')
  return tonumber(count), tonumber(keep)
end

-- The holders hash's field summing the permits held beyond one by each holder (see the top).
local EXTRA = '+extra'

-- How many permits a holders entry counts for: its third element, else 1.
local function weight_of(entry)
  if not entry then
    return 1
  end
  return tonumber(cjson.decode(entry)[3] or '1')
end

-- Adds `delta` to EXTRA (deleting the field at 0).
local function add_extra(sem, delta)
  if delta == 0 then
    return
  end
  local n = tonumber(redis.call('HGET', sem.holders, EXTRA) or '0') + delta
  if n > 0 then
    redis.call('HSET', sem.holders, EXTRA, n)
  else
    redis.call('HDEL', sem.holders, EXTRA)
  end
end

-- The permits in use, `held` being ZCARD of K (EXTRA is read only when someone holds).
local function in_use(sem, held)
  if held == 0 then
    return 0
  end
  return held + tonumber(redis.call('HGET', sem.holders, EXTRA) or '0')
end

-- Gives back the permits `expired_permits` found: all n of a holder of n.
local function reclaim(sem, expired, now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', sem.key, '-inf', ms(now))
    if redis.call('HGET', sem.holders, EXTRA) then
      local extra = 0
      for _, token in ipairs(expired) do
        extra = extra + weight_of(redis.call('HGET', sem.holders, token)) - 1
      end
      add_extra(sem, -extra)
    end
    each_chunk('HDEL', sem.holders, expired)
  end
end

-- The holders entry of a permit: [fence, details], with n appended when n > 1.
local function holder_entry(fence, details, n)
  local entry = {string.format('%d', fence), details}
  if n > 1 then
    entry[3] = n
  end
  return cjson.encode(entry)
end

-- Grants `n` permits (one lease) to `token` for `ttl` ms from `now` and returns its fencing
-- token (`clock`: the fencing clock, see now_ms).
local function grant(sem, token, ttl, details, n, now, clock)
  local fence = grant_fence(sem.fence, nil, clock, sem.fence_keep)
  redis.call('ZADD', sem.key, ms(now + ttl), token)
  redis.call('HSET', sem.holders, token, holder_entry(fence, details, n))
  add_extra(sem, n - 1)
  return fence
end

-- Hands free permits to the oldest queued waiters, in order, while the head's weight fits:
-- one grant and one PUBLISH "<fence> <token> <K>" on the waiter's grant channel each (the
-- hand-off every primitive shares, lib/grants.lua: the permits are the waiter's for its
-- claim window until it confirms them with an attempt, and the queue's watchers are
-- nudged); a waiter whose client no longer listens (PUBLISH reached no one) is dropped and
-- only burns a fencing number. A head asking for more permits than are
-- free stays at the head, and everyone behind it waits too (FIFO: a request for n is not
-- starved by later, smaller ones). `caller` (or nil), when it reaches the head, is granted
-- without a message, with `ttl`, `details` and its weight `n`. `permits` is the permit
-- count N; `now` and `clock` the script's clock (see now_ms). `used` is the number of
-- permits in use (see in_use), when the caller has it already. `own` (or nil): the
-- releasing client's grant channel, whose waiters are granted directly (their whole ttl).
-- Returns the caller's fencing token (or nil), the permits still free (while any are
-- free, the queue is empty or its head is blocked), whether the queue was found absent at
-- once, so that nothing was served and no queue key exists, whether the head is blocked,
-- and the grants made to others as a release reports them (see handed).
local function serve(sem, permits, now, clock, caller, ttl, details, used, n, own)
  local free = permits - (used or in_use(sem, redis.call('ZCARD', sem.key)))
  local mine = nil
  local absent = false
  local blocked = false
  local first = true
  -- The shortest claim window granted to another waiter (nil: none), and every grant.
  local window = nil
  local granted = {}
  -- A whole ttl granted directly to a waiter of the releasing client (nil: none).
  local whole = nil
  -- Places that left the head in this serve (see after_grant).
  local moved = 0
  while free > 0 do
    local head = redis.call('LPOP', sem.queue)
    if not head then
      absent = first
      break
    end
    first = false
    moved = moved + 1
    local entry = redis.call('HGET', sem.waiters, head)
    if entry then
      local w = cjson.decode(entry)
      local need = tonumber(w.n or '1')
      if head == caller then
        need = n
      end
      if need > free and head ~= caller and (need > permits or not listens(w.ch)) then
        -- A head whose waiter is gone (its client no longer listens: its process ended),
        -- or asking for more than the whole count (lowered by a resize since it queued:
        -- its next attempt is refused), stops counting: it is dropped, and those behind
        -- it are served.
        redis.call('HDEL', sem.waiters, head)
      elseif need > free then
        -- Back at the head. Popping the last entry deleted the list: it takes the waiter
        -- table's expiry again (both linger as long as the last join asked).
        moved = moved - 1
        if redis.call('LPUSH', sem.queue, head) == 1 then
          local linger = redis.call('PTTL', sem.waiters)
          if linger > 0 then
            redis.call('PEXPIRE', sem.queue, linger)
          end
        end
        blocked = true
        break
      else
        redis.call('HDEL', sem.waiters, head)
        if head == caller then
          mine = grant(sem, head, ttl, details, need, now, clock)
          free = free - need
        else
          local fence = grant_fence(sem.fence, nil, clock, sem.fence_keep)
          local lease, direct, message = offer(false, w, fence, head, sem.key, own)
          if lease then
            redis.call('ZADD', sem.key, ms(now + lease), head)
            redis.call('HSET', sem.holders, head, holder_entry(fence, w.who, need))
            add_extra(sem, need - 1)
            free = free - need
            granted[#granted + 1] = handed(message, lease, direct)
            if direct then
              whole = lease
            else
              window = math.min(window or lease, lease)
            end
          end
        end
      end
    end
  end
  if window then
    after_grant(sem.queue, sem.waiters, window, false, sem.key, false)
  elseif mine or whole then
    after_grant(sem.queue, sem.waiters, mine and ttl or whole, true, sem.key, false, own, moved)
  end
  return mine, free, absent, blocked, granted
end

-- Serves the queue from the permits free now, as a release does (no caller of its own;
-- `own` as serve's), and when `channel` (or nil) is given and permits are left free,
-- PUBLISHes K there (SPUBLISH when `sharded` is "S") for the waiters that do not queue.
-- Returns the grants as handed reports them, and whether the semaphore is idle (nothing
-- held, no queue key).
local function serve_queue(sem, permits, now, clock, own, channel, sharded)
  local holding = redis.call('ZCARD', sem.key)
  local _, free, absent, _, granted = serve(sem, permits, now, clock, nil, 0, '', in_use(sem, holding), 1, own)
  if channel and free > 0 then
    redis.call(sharded == 'S' and 'SPUBLISH' or 'PUBLISH', channel, sem.key)
  end
  return granted, holding == 0 and absent
end

-- How long until the earliest held permit runs out, in ms from `now` (-1: none held): when
-- a watcher of the queue re-checks.
local function earliest_end(sem, now)
  local first = redis.call('ZRANGE', sem.key, 0, 0, 'WITHSCORES')
  if first[2] then
    return tonumber(first[2]) - now
  end
  return -1
end

-- Sets each key's expiry to when the semaphore goes idle (see the top). The permit count
-- outlives the latest permit and the queue: with PTTL (Redis 6.2 has no PEXPIRETIME), the
-- queue's expiry is read as ms from now and the count's set with PEXPIRE from the same
-- command clock, so the count never expires before the queue.
-- `known` (optional) is what the caller already knows, to spare the reads: `last`, the
-- latest permit's expiry (ms since 1970; false: no permit held), `no_queue` (true: no
-- queue key exists), `count` (a permit count to store: the caller found none stored),
-- `keep` (the stored count was set by a resize, kept until then: see stored_count).
-- A resized count expires at the latest of its keep, the latest permit and the queue's
-- linger: never earlier, and it is not deleted when the semaphore goes idle before then.
local function settle(sem, known)
  known = known or {}
  local last = known.last
  if last == nil then
    local top = redis.call('ZRANGE', sem.key, -1, -1, 'WITHSCORES')
    last = top[2] or false
  end
  local held = last ~= false
  if held then
    last = ms(tonumber(last))
    redis.call('PEXPIREAT', sem.key, last)
    redis.call('PEXPIREAT', sem.holders, last)
  end
  -- -2: no queue; -1 cannot happen (the queue always gets a linger).
  local queued = -2
  if not known.no_queue then
    queued = redis.call('PTTL', sem.queue)
  end
  if known.keep then
    local till = known.keep
    if held and tonumber(last) > till then
      till = last
    end
    redis.call('PEXPIREAT', sem.permits, ms(till))
    if queued > 0 and queued > redis.call('PTTL', sem.permits) then
      redis.call('PEXPIRE', sem.permits, queued)
    end
    return
  end
  if known.count then
    if not held and queued <= 0 then
      return
    end
    if held then
      redis.call('SET', sem.permits, known.count, 'PXAT', last)
    else
      redis.call('SET', sem.permits, known.count)
    end
  elseif held then
    redis.call('PEXPIREAT', sem.permits, last)
  end
  if queued > 0 and (not held or queued > redis.call('PTTL', sem.permits)) then
    redis.call('PEXPIRE', sem.permits, queued)
  end
  if not held and queued <= 0 then
    redis.call('DEL', sem.permits)
  end
end
