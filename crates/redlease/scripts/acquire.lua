-- acquire: one attempt to take the lock (KEYS as in handoff.lua).
--   ARGV[1] owner token   ARGV[2] ttl in ms   ARGV[3] holder details
--   ARGV[4] "1" to join the FIFO queue when busy, "0" to only try; with "1" also:
--   ARGV[5] the caller's grant channel   ARGV[6] queue linger in ms (queue keys' expiry)
-- Reply {status, fence, pttl}:
--   {1, fence, 0}     freshly acquired
--   {2, fence, 0}     already held with this token (a retried attempt, or a hand-off)
--   {0, 0, pttl}      held by someone else; pttl is the holder's remaining time in ms
--                     (-1: the holder set no expiry)
local token = ARGV[1]
-- Fast path: nobody queued and the lock free (4 calls). With waiters queued, a free lock
-- (its holder crashed) goes to the oldest of them, below.
if redis.call('EXISTS', KEYS[4]) == 0
    and redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
  return {1, fence, 0}
end
local current = redis.call('GET', KEYS[1])
if current == token then
  return {2, tonumber(redis.call('GET', KEYS[2]) or '0'), 0}
end
if not current and not hand_off(token) then
  if redis.call('LINDEX', KEYS[4], 0) == token then
    redis.call('LPOP', KEYS[4])
    redis.call('HDEL', KEYS[5], token)
  end
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  local fence = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
  return {1, fence, 0}
end
if ARGV[4] == '1' then
  local entry = cjson.encode({ARGV[2], ARGV[5], ARGV[3]})
  if redis.call('HSETNX', KEYS[5], token, entry) == 1 then
    redis.call('RPUSH', KEYS[4], token)
  end
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
  redis.call('PEXPIRE', KEYS[5], ARGV[6])
end
return {0, 0, redis.call('PTTL', KEYS[1])}
