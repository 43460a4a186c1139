-- release: delete the lock if it holds our token, then hand it to the oldest live waiter
-- (KEYS as in handoff.lua).
--   ARGV[1] owner token
-- Also withdraws the token from the waiter queue, so a waiter that gives up calls this too.
-- Reply: 1 released; 0 the lock did not hold our token (expired, or taken by another).
local token = ARGV[1]
if redis.call('GET', KEYS[1]) == token then
  redis.call('DEL', KEYS[1], KEYS[3])
  hand_off(false)
  return 1
end
if redis.call('HDEL', KEYS[5], token) == 1 then
  redis.call('LREM', KEYS[4], 1, token)
end
return 0
