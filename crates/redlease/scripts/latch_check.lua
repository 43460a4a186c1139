-- latch_check: what a latch's waiter (or an operator) sees now. Sent as lib/clock.lua ..
-- lib/common.lua .. lib/fence.lua .. lib/latch.lua .. latch_check.lua. KEYS as in
-- lib/latch.lua (latch_keys names them).
-- ARGV: seen channel sharded
--   ARGV[1] the round the waiter saw open on its previous check ("": none, a first check)
--   ARGV[2] the release channel   ARGV[3] "S" to SPUBLISH there, else "" (see lib/latch.lua)
-- Reply {status, round, outstanding, pttl, last_down, last_expired, ended}:
--   status       1: the waiter's round ended (or, on a first check, none was open: the
--                latch is at zero); 0: counts are outstanding
--   round        how many rounds ended
--   outstanding  the live counts now, and the arrivals the round still expects
--   pttl         ms until the earliest live count's lease runs out (-1: none)
--   last_down, last_expired  how the latest ended round's counts ended
--   ended        1 when this very check ended that round (its last count had expired)
-- Like every latch script, it first reclaims expired counts and ends a round left with
-- none (and announces it), so a waiter's check is what notices a dead party.
-- Error reply "WRONGTYPE ..." (nothing changed) when K is another primitive.
local latch = latch_keys(KEYS)
local now = now_ms()
reclaim(latch, now)
local ended = close_if_done(latch, ARGV[2], ARGV[3])
local rounds = redis.call('HMGET', latch.rounds, 'round', 'last_down', 'last_expired')
local round = tonumber(rounds[1] or '0')
local outstanding = redis.call('ZCARD', latch.counts) + expected(latch)
local pttl = -1
local first = redis.call('ZRANGE', latch.counts, 0, 0, 'WITHSCORES')
if first[2] then
  pttl = tonumber(first[2]) - now
end
local status = 0
if outstanding == 0 or (ARGV[1] ~= '' and tostring(round) ~= ARGV[1]) then
  status = 1
end
return {status, round, outstanding, pttl, tonumber(rounds[2] or '0'), tonumber(rounds[3] or '0'),
  ended and 1 or 0}
