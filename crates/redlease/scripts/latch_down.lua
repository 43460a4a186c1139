-- latch_down: a count given back (counted down); the round ends, and is announced, when no
-- count is outstanding after it. Sent as lib/clock.lua .. lib/common.lua .. lib/fence.lua
-- .. lib/latch.lua .. latch_down.lua. KEYS as in lib/latch.lua (latch_keys names them).
-- ARGV: token channel sharded
--   ARGV[1] owner token
--   ARGV[2] the release channel   ARGV[3] "S" to SPUBLISH there, else "" (see lib/latch.lua)
-- Reply: 1 counted down; 0 the token had no count (its lease ran out: it is then
-- recorded as expired, not counted down).
-- Error reply "WRONGTYPE ..." (nothing changed) when K is another primitive.
local latch = latch_keys(KEYS)
local token = ARGV[1]
local now = now_ms()
reclaim(latch, now)
local held = redis.call('ZREM', latch.counts, token) == 1
if held then
  redis.call('SREM', latch.key, token)
  redis.call('HDEL', latch.holders, token)
  redis.call('HINCRBY', latch.rounds, 'down', 1)
  redis.call('PEXPIRE', latch.rounds, ROUNDS_KEEP)
end
if not close_if_done(latch, ARGV[2], ARGV[3]) then
  settle(latch)
end
if held then
  return 1
end
return 0
