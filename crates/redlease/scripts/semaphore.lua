-- semaphore: what sem_acquire.lua and sem_release.lua share. Not a script of its own: it is
-- prepended to them, after fence.lua (whose grant_fence every grant uses).
--
-- KEYS of every semaphore script, all of one semaphore and in one cluster slot (B is the
-- semaphore key K when K has a {hash tag}, else "{K}", as for the mutex's side keys):
--   KEYS[1] K, the permits held: a ZSET owner token -> lease expiry (ms since 1970 by the
--           server's TIME). A ZSET, so that a mutex (a string at K) and a semaphore of the
--           same name refuse each other with WRONGTYPE; a read-write lock keeps a HASH at K.
--   KEYS[2] B:fence, the fencing counter (shared with a mutex or rwlock of the same name,
--           so that tokens keep growing whichever primitive used the name last)
--   KEYS[3] B:sem:holders, holder details for operators: HASH token -> cjson [fence, details]
--           (the fence as a decimal string)
--   KEYS[4] B:sem:queue, the FIFO queue of waiting tokens (LIST)
--   KEYS[5] B:sem:waiters, the waiter table: HASH token -> cjson [ttl_ms, grant channel, details,
--           since] (since: when the place was taken, ms since 1970, for operators)
--   KEYS[6] B:sem:permits, the permit count in use (a decimal string)
--
-- Expiry: a permit is held while its score is in the future; every script drops the
-- permits whose score has passed (a crashed holder's permit comes back after its ttl)
-- before it counts, so no permit leaks. K and the holders hash expire at the latest permit's
-- expiry, the queue keys a linger after the last join, and the permit count at the later of
-- the two, or is deleted as soon as nothing is held or queued: an idle semaphore leaves no
-- key behind but its fencing counter (kept 7 days, see fence.lua).

-- The server's time as now_ms last read it, in µs since 1970: the fencing clock of this
-- script's grants (see fence.lua), so that a grant reads TIME no second time.
local clock_us = nil

-- The server's time in ms since 1970.
local function now_ms()
  local t = redis.call('TIME')
  clock_us = t[1] * 1000000 + t[2]
  return math.floor(clock_us / 1000)
end

-- A whole number of ms as Redis expects it (Lua would write 1.7e+12).
local function ms(n)
  return string.format('%d', n)
end

-- HDEL many fields, in chunks that stay under Lua's stack limit for unpack.
local function hdel_all(key, fields)
  for i = 1, #fields, 1000 do
    redis.call('HDEL', key, unpack(fields, i, math.min(i + 999, #fields)))
  end
end

-- The tokens whose permit has run out. The first call of every semaphore script that
-- touches K, made before any write: a key of another type at K fails here (WRONGTYPE)
-- and the script changes nothing.
local function expired_permits(now)
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms(now))
end

-- Gives back the permits `expired_permits` found.
local function reclaim(expired, now)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms(now))
    hdel_all(KEYS[3], expired)
  end
end

-- Grants a permit to `token` for `ttl` ms and returns its fencing token.
local function grant(token, ttl, details, now)
  local fence = grant_fence(KEYS[2], nil, clock_us)
  redis.call('ZADD', KEYS[1], ms(now + ttl), token)
  redis.call('HSET', KEYS[3], token, cjson.encode({string.format('%d', fence), details}))
  return fence
end

-- The fencing token of the permit `token` holds.
local function fence_of(token)
  local entry = redis.call('HGET', KEYS[3], token)
  if entry then
    return tonumber(cjson.decode(entry)[1])
  end
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end

-- Hands free permits to the oldest queued waiters, one grant and one PUBLISH
-- "<fence> <token> <K>" on the waiter's grant channel each (the mutex's hand-off message);
-- a waiter whose client no longer listens (PUBLISH reached no one) is dropped and only
-- burns a fencing number. `caller` (or nil), when it reaches the head, is granted without
-- a message, with `ttl` and `details`. `held` is the number of permits held (ZCARD of K),
-- when the caller has it already. Returns the caller's fencing token (or nil), the permits
-- still free (while any are free the queue is empty), and whether the queue was found
-- absent at once, so that nothing was served and no queue key exists.
local function serve(permits, now, caller, ttl, details, held)
  local free = permits - (held or redis.call('ZCARD', KEYS[1]))
  local mine = nil
  local absent = false
  local first = true
  while free > 0 do
    local head = redis.call('LPOP', KEYS[4])
    if not head then
      absent = first
      break
    end
    first = false
    local entry = redis.call('HGET', KEYS[5], head)
    if entry then
      redis.call('HDEL', KEYS[5], head)
      if head == caller then
        mine = grant(head, ttl, details, now)
        free = free - 1
      else
        local w = cjson.decode(entry)
        local fence = grant_fence(KEYS[2], nil, clock_us)
        local message = string.format('%d', fence) .. ' ' .. head .. ' ' .. KEYS[1]
        if redis.call('PUBLISH', w[2], message) > 0 then
          redis.call('ZADD', KEYS[1], ms(now + tonumber(w[1])), head)
          redis.call('HSET', KEYS[3], head, cjson.encode({string.format('%d', fence), w[3]}))
          free = free - 1
        end
      end
    end
  end
  return mine, free, absent
end

-- Sets each key's expiry to when the semaphore goes idle (see the top). The permit count
-- outlives the latest permit and the queue: with PTTL (Redis 6.2 has no PEXPIRETIME), the
-- queue's expiry is read as ms from now and the count's set with PEXPIRE from the same
-- command clock, so the count never expires before the queue.
-- `known` (optional) is what the caller already knows, to spare the reads: `last`, the
-- latest permit's expiry (ms since 1970; false: no permit held), `no_queue` (true: no
-- queue key exists), `count` (a permit count to store: the caller found none stored).
local function settle(known)
  known = known or {}
  local last = known.last
  if last == nil then
    local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
    last = top[2] or false
  end
  local held = last ~= false
  if held then
    last = ms(tonumber(last))
    redis.call('PEXPIREAT', KEYS[1], last)
    redis.call('PEXPIREAT', KEYS[3], last)
  end
  -- -2: no queue; -1 cannot happen (the queue always gets a linger).
  local queued = -2
  if not known.no_queue then
    queued = redis.call('PTTL', KEYS[4])
  end
  if known.count then
    if not held and queued <= 0 then
      return
    end
    if held then
      redis.call('SET', KEYS[6], known.count, 'PXAT', last)
    else
      redis.call('SET', KEYS[6], known.count)
    end
  elseif held then
    redis.call('PEXPIREAT', KEYS[6], last)
  end
  if queued > 0 and (not held or queued > redis.call('PTTL', KEYS[6])) then
    redis.call('PEXPIRE', KEYS[6], queued)
  end
  if not held and queued <= 0 then
    redis.call('DEL', KEYS[6])
  end
end
