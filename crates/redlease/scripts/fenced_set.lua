-- fenced_set: the protected resource's half of fencing, for a value kept in Redis. The
-- value is written only if the writer's fencing token is at least the highest token this
-- resource has accepted, so a holder that outlived its lease (paused, partitioned) cannot
-- overwrite a newer holder's work. Equal tokens pass: one holder may write many times.
--   KEYS[1] the value   KEYS[2] the highest fencing token accepted for it (absent: none)
-- ARGV: token value
--   ARGV[1] the writer's fencing token (below 2^53)   ARGV[2] the new value
-- Reply {written, highest}: {1, token} written; {0, highest} refused, `highest` being the
-- newer token that was accepted before.
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[1])
if token < highest then
  return {0, highest}
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return {1, token}
