-- proclaim: replace the note of an election's leader, only while it still leads, and
-- announce the change to the election's observers.
--   KEYS[1] lock key   KEYS[2] holder details: "<fence> <note>" (see acquire.lua)
-- ARGV: token note fence channel sharded
--   ARGV[1] owner token   ARGV[2] the new note
--   ARGV[3] the leader's fencing token, written in front of the note only where the
--           details key is gone or has none (otherwise the key's own is kept: a quorum
--           node's may differ from the term)
--   ARGV[4] the election's channel   ARGV[5] (optional) "S": SPUBLISH rather than PUBLISH
--           (Redis Cluster, where the channel lives in the lock's slot)
-- The details key keeps its expiry (KEEPTTL: renewals keep it several leases at a time);
-- a details key that is gone is written with the lock's remaining time.
-- Reply: 1 the note replaced and announced; 0 the lock does not hold our token (lost):
-- nothing written, nothing announced.
local sharded = ARGV[5] == 'S'
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local details = redis.call('GET', KEYS[2])
if details then
  local fence = string.match(details, '^(%d+) ') or ARGV[3]
  redis.call('SET', KEYS[2], fence .. ' ' .. ARGV[2], 'KEEPTTL')
else
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 0 then
    redis.call('SET', KEYS[2], ARGV[3] .. ' ' .. ARGV[2], 'PX', pttl)
  else
    redis.call('SET', KEYS[2], ARGV[3] .. ' ' .. ARGV[2])
  end
end
redis.call(sharded and 'SPUBLISH' or 'PUBLISH', ARGV[4], KEYS[1])
return 1
