-- leader: who holds a lock now (an election's leader), without changing anything.
-- ARGV:
--   KEYS[1] lock key   KEYS[2] fencing counter   KEYS[3] holder details
--   KEYS[4] (optional) the election's term record over a quorum: "<term> <owner token>"
-- Reply {token, details, counter, pttl, term}: the owner token ("" when nobody holds), the
-- holder details ("" when none), the holder's fencing token as its details key records it
-- (the counter when nobody holds, or the details key has none: the counter is the holder's
-- token while it holds, as long as it was neither deleted nor let expire during a hold
-- of weeks), the lock's remaining ms (-2 when nobody holds) and
-- the term recorded for this holder ("" when none is, or KEYS[4] was not given).
local token = redis.call('GET', KEYS[1])
local counter = redis.call('GET', KEYS[2]) or '0'
if not token then
  return {'', '', counter, -2, ''}
end
local term = ''
if KEYS[4] then
  local record = redis.call('GET', KEYS[4])
  if record then
    local space = string.find(record, ' ', 1, true)
    if space and string.sub(record, space + 1) == token then
      term = string.sub(record, 1, space - 1)
    end
  end
end
local details = redis.call('GET', KEYS[3]) or ''
local fence, rest = string.match(details, '^(%d+) (.*)$')
if fence then
  counter, details = fence, rest
end
return {token, details, counter, redis.call('PTTL', KEYS[1]), term}
