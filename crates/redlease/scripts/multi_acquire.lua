-- multi_acquire: take several locks at once, all or nothing, when they live on one node
-- (one Redis, or one Cluster slot). Sent as lib/clock.lua .. lib/fence.lua ..
-- multi_acquire.lua (each grant takes its fence).
--   KEYS, three per lock i (1-based): KEYS[3i-2] lock key, KEYS[3i-1] its fencing counter,
--         KEYS[3i] its holder details (as acquire.lua's KEYS[1..3])
-- ARGV: token ttl holder fence_keep
--   ARGV[1] owner token (one for all the locks)   ARGV[2] ttl in ms   ARGV[3] holder details
--   ARGV[4] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply:
--   {1, fence_1, ..., fence_n}   every lock is ours now: freshly taken (a new fence), or
--                                already held with this token (a retried attempt: the
--                                counter, which no grant moved since)
--   {0, i, pttl}                 lock i is held by another owner (pttl: its remaining ms,
--                                -1 without expiry); nothing was taken
-- Like acquire.lua's fast path, a free lock is taken even with waiters queued (a lock is
-- free with waiters queued only after its holder crashed); callers that find a lock busy
-- queue for it one name at a time instead.
local token = ARGV[1]
local n = #KEYS / 3
for i = 1, n do
  local current = redis.call('GET', KEYS[3 * i - 2])
  if current and current ~= token then
    return {0, i, redis.call('PTTL', KEYS[3 * i - 2])}
  end
end
local out = {1}
-- One clock reading for every grant (see lib/fence.lua): each lock has its own counter.
local clock = nil
for i = 1, n do
  if redis.call('SET', KEYS[3 * i - 2], token, 'NX', 'PX', ARGV[2]) then
    if not clock then
      clock = server_us()
    end
    out[i + 1] = grant_fence(KEYS[3 * i - 1], nil, clock, ARGV[4])
    redis.call('SET', KEYS[3 * i], string.format('%d', out[i + 1]) .. ' ' .. ARGV[3], 'PX', ARGV[2])
  else
    out[i + 1] = holder_fence(KEYS[3 * i], KEYS[3 * i - 1])
  end
end
return out
