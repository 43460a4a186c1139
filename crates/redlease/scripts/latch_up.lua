-- latch_up: one more outstanding count of a latch, as a lease of its own. Sent as
-- lib/common.lua .. lib/fence.lua .. lib/latch.lua .. latch_up.lua. KEYS as in
-- lib/latch.lua.
-- ARGV: token ttl holder channel sharded
--   ARGV[1] owner token   ARGV[2] ttl in ms   ARGV[3] holder details
--   ARGV[4] the release channel   ARGV[5] "S" to SPUBLISH there, else "" (see lib/latch.lua)
-- Reply, as acquire.lua's (a latch is never busy):
--   fence             a count freshly taken (an integer >= 1, its fencing token)
--   {2, fence, 0}     this token already has a count (a retried attempt); its lease is set
--                     to ttl again from now
-- Error reply "WRONGTYPE ..." (nothing changed) when K is another primitive.
local token, ttl, details = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
reclaim(now)
-- A round whose last count expired ends here, before this count opens the next one.
close_if_done(ARGV[4], ARGV[5])
local reply
if redis.call('ZSCORE', KEYS[5], token) then
  redis.call('ZADD', KEYS[5], 'XX', ms(now + ttl), token)
  local entry = redis.call('HGET', KEYS[3], token)
  reply = {2, entry and tonumber(cjson.decode(entry)[1]) or 0, 0}
else
  local fence = grant_fence(KEYS[2], nil, clock_us)
  redis.call('ZADD', KEYS[5], ms(now + ttl), token)
  redis.call('SADD', KEYS[1], token)
  redis.call('HSET', KEYS[3], token, cjson.encode({string.format('%d', fence), details}))
  reply = fence
end
redis.call('HSET', KEYS[4], 'open', '1')
redis.call('PEXPIRE', KEYS[4], ROUNDS_KEEP)
settle()
return reply
