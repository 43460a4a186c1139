-- release: delete the lock if it holds our token, then hand it to the oldest live waiter
-- (KEYS as in acquire.lua).
--   ARGV[1] owner token
-- Also withdraws the token from the waiter queue, so a waiter that gives up calls this too.
-- Reply: 1 released; 0 the lock did not hold our token (expired, or taken by another).
-- hand_off() gives the free lock to the oldest queued waiter whose client still listens
-- on its grant channel (PUBLISH reaches at least one subscriber), dropping dead waiters on
-- the way. Returns true when it handed the lock on.
local function hand_off()
  while true do
    local head = redis.call('LINDEX', KEYS[4], 0)
    if not head then
      return false
    end
    redis.call('LPOP', KEYS[4])
    local entry = redis.call('HGET', KEYS[5], head)
    redis.call('HDEL', KEYS[5], head)
    if entry then
      local w = cjson.decode(entry)
      local fence = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
      -- message: "<fence> <token> <lock key>"
      if redis.call('PUBLISH', w[2], fence .. ' ' .. head .. ' ' .. KEYS[1]) > 0 then
        redis.call('INCR', KEYS[2])
        redis.call('SET', KEYS[1], head, 'PX', w[1])
        redis.call('SET', KEYS[3], w[3], 'PX', w[1])
        return true
      end
    end
  end
end

local token = ARGV[1]
if redis.call('GET', KEYS[1]) == token then
  redis.call('DEL', KEYS[1], KEYS[3])
  hand_off()
  return 1
end
if redis.call('HDEL', KEYS[5], token) == 1 then
  redis.call('LREM', KEYS[4], 1, token)
end
return 0
