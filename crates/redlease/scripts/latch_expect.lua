-- latch_expect: arrivals a latch's round waits for before anyone counted up (a preset
-- count, as Redisson's trySetCount): the round stays open until that many counts have
-- come up and gone. Sent as lib/clock.lua .. lib/common.lua .. lib/fence.lua ..
-- lib/latch.lua .. latch_expect.lua. KEYS as in lib/latch.lua (latch_keys names them).
-- ARGV: n only_idle channel sharded
--   ARGV[1] how many arrivals to expect (a whole number >= 1)
--   ARGV[2] "1": only when no round is open (a barrier's first party sets it, the others
--           find it set); "": add them to the open round (opening one if none is)
--   ARGV[3] the release channel   ARGV[4] "S" to SPUBLISH there, else "" (see lib/latch.lua)
-- Reply {set, expected, round}: set 1 when the arrivals were added (0: a round was open and
-- ARGV[2] asked for an idle latch), the arrivals now expected, the rounds ended so far.
-- Like every latch script it first reclaims expired counts and ends a round left with
-- none. Error reply "WRONGTYPE ..." (nothing changed) when K is another primitive.
local latch = latch_keys(KEYS)
local n = tonumber(ARGV[1])
if not n or n < 1 or n ~= math.floor(n) then
  return redis.error_reply('ERR redlease: the arrivals to expect must be a whole number >= 1')
end
local now = now_ms()
reclaim(latch, now)
close_if_done(latch, ARGV[3], ARGV[4])
local open = redis.call('HGET', latch.rounds, 'open') == '1'
local round = tonumber(redis.call('HGET', latch.rounds, 'round') or '0')
if open and ARGV[2] == '1' then
  return {0, expected(latch), round}
end
local now_expected = redis.call('HINCRBY', latch.rounds, 'expect', n)
redis.call('HSET', latch.rounds, 'open', '1')
redis.call('PEXPIRE', latch.rounds, ROUNDS_KEEP)
return {1, now_expected, round}
