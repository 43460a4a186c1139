-- leader: who holds a lock now (an election's leader), without changing anything.
--   KEYS[1] lock key   KEYS[2] fencing counter   KEYS[3] holder details
-- Reply {token, details, counter, pttl}: the owner token ("" when nobody holds), the
-- holder details ("" when none), the fencing counter (the holder's token while it holds:
-- nothing else is granted meanwhile) and the lock's remaining ms (-2 when nobody holds).
local token = redis.call('GET', KEYS[1])
local counter = redis.call('GET', KEYS[2]) or '0'
if not token then
  return {'', '', counter, -2}
end
return {token, redis.call('GET', KEYS[3]) or '', counter, redis.call('PTTL', KEYS[1])}
