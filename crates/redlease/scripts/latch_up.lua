-- latch_up: one more outstanding count of a latch, as a lease of its own. Sent as
-- lib/clock.lua .. lib/common.lua .. lib/fence.lua .. lib/latch.lua .. latch_up.lua. KEYS
-- as in lib/latch.lua (latch_keys names them).
-- ARGV: token ttl holder channel sharded fence_keep
--   ARGV[1] owner token   ARGV[2] ttl in ms   ARGV[3] holder details
--   ARGV[4] the release channel   ARGV[5] "S" to SPUBLISH there, else "" (see lib/latch.lua)
--   ARGV[6] (optional) how long the fencing counter is kept past the clock, in ms (the client's
--           fence_keep; absent or "": lib/fence.lua's default); the slots before it are
--           then sent, empty when unused
-- Reply, as acquire.lua's (a latch is never busy):
--   fence             a count freshly taken (an integer >= 1, its fencing token)
--   {2, fence, 0}     this token already has a count (a retried attempt); its lease is set
--                     to ttl again from now
-- Error reply "WRONGTYPE ..." (nothing changed) when K is another primitive.
local latch = latch_keys(KEYS, ARGV[6])
local token, ttl, details = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now, clock = now_ms()
reclaim(latch, now)
-- A round whose last count expired ends here, before this count opens the next one.
close_if_done(latch, ARGV[4], ARGV[5])
local reply
if redis.call('ZSCORE', latch.counts, token) then
  redis.call('ZADD', latch.counts, 'XX', ms(now + ttl), token)
  local entry = redis.call('HGET', latch.holders, token)
  reply = {2, entry and tonumber(cjson.decode(entry)[1]) or 0, 0}
else
  local fence = grant_fence(latch.fence, nil, clock, latch.fence_keep)
  redis.call('ZADD', latch.counts, ms(now + ttl), token)
  redis.call('SADD', latch.key, token)
  redis.call('HSET', latch.holders, token, cjson.encode({string.format('%d', fence), details}))
  -- An arrival the round expected: it is here now, counted as this count.
  if expected(latch) > 0 then
    redis.call('HINCRBY', latch.rounds, 'expect', -1)
  end
  reply = fence
end
redis.call('HSET', latch.rounds, 'open', '1')
redis.call('PEXPIRE', latch.rounds, ROUNDS_KEEP)
settle(latch)
return reply
