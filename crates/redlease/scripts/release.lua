-- release: delete the lock if it holds our token, then hand it to the oldest live waiter
-- or announce the release (KEYS as in handoff.lua).
--   ARGV[1] owner token   ARGV[2] release channel (for waiters outside the queue)
-- Also withdraws the token from the waiter queue, so a waiter that gives up calls this too.
-- Reply: 1 released; 0 the lock did not hold our token (expired, or taken by another).
local token = ARGV[1]
if redis.call('GET', KEYS[1]) == token then
  redis.call('DEL', KEYS[1], KEYS[3])
  if not hand_off(false) then
    redis.call('PUBLISH', ARGV[2], 'released')
  end
  return 1
end
if redis.call('HDEL', KEYS[5], token) == 1 then
  redis.call('LREM', KEYS[4], 1, token)
end
return 0
