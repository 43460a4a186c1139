-- lock_renew: extend many locks' leases at once, a lock's (mutex, election) lease being
-- its key (a string: the owner token, with a PX expiry); one call per batch, one round
-- trip per sweep. The shared leases (ZSET members) have lease_renew.lua.
--   KEYS[2i-1] lock key of lease i   KEYS[2i] its holder details key
-- ARGV: token ttl holder_ttl
--   ARGV[3i-2] owner token of lease i   ARGV[3i-1] its ttl in ms   ARGV[3i] the holder
--   details' new expiry in ms, or "" to leave it: the details are kept several leases at
--   a time (the client sends it about one renewal in eight, see lease.rs), so that most
--   renewals cost two calls (GET, PEXPIRE), not three; a details key that outlives its
--   lock is harmless (every grant sets it anew, and readers read the lock first)
-- Reply: an array with, for each lease in order, 1 renewed or 0 lost (not our token, or
-- the key now holds another primitive).
local out = {}
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  -- pcall: a key another primitive took meanwhile (WRONGTYPE) is this lease lost, not
  -- an error that would fail every other lease of the batch.
  if redis.pcall('GET', key) == ARGV[3 * i - 2] then
    redis.call('PEXPIRE', key, ARGV[3 * i - 1])
    local details = ARGV[3 * i]
    if details ~= '' then
      redis.call('PEXPIRE', KEYS[2 * i], details)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
