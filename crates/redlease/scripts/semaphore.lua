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

-- The server's time in ms since 1970.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
  local fence = grant_fence(KEYS[2])
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
-- a message, with `ttl` and `details`. Returns the caller's fencing token (or nil) and the
-- permits still free; while any are free the queue is empty.
local function serve(permits, now, caller, ttl, details)
  local free = permits - redis.call('ZCARD', KEYS[1])
  local mine = nil
  while free > 0 do
    local head = redis.call('LPOP', KEYS[4])
    if not head then
      break
    end
    local entry = redis.call('HGET', KEYS[5], head)
    if entry then
      redis.call('HDEL', KEYS[5], head)
      if head == caller then
        mine = grant(head, ttl, details, now)
        free = free - 1
      else
        local w = cjson.decode(entry)
        local fence = grant_fence(KEYS[2])
        local message = string.format('%d', fence) .. ' ' .. head .. ' ' .. KEYS[1]
        if redis.call('PUBLISH', w[2], message) > 0 then
          redis.call('ZADD', KEYS[1], ms(now + tonumber(w[1])), head)
          redis.call('HSET', KEYS[3], head, cjson.encode({string.format('%d', fence), w[3]}))
          free = free - 1
        end
      end
    end
  end
  return mine, free
end

-- Sets each key's expiry to when the semaphore goes idle (see the top). The permit count
-- outlives the latest permit and the queue: with PTTL (Redis 6.2 has no PEXPIRETIME), the
-- queue's expiry is read as ms from now and the count's set with PEXPIRE from the same
-- command clock, so the count never expires before the queue.
local function settle()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local held = false
  if last[2] then
    redis.call('PEXPIREAT', KEYS[1], last[2])
    redis.call('PEXPIREAT', KEYS[3], last[2])
    held = true
  end
  -- -2: no queue; -1 cannot happen (the queue always gets a linger).
  local queued = redis.call('PTTL', KEYS[4])
  if held then
    redis.call('PEXPIREAT', KEYS[6], last[2])
  end
  if queued > 0 and (not held or queued > redis.call('PTTL', KEYS[6])) then
    redis.call('PEXPIRE', KEYS[6], queued)
  end
  if not held and queued <= 0 then
    redis.call('DEL', KEYS[6])
  end
end
