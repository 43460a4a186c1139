-- renew: extend many leases at once (one call per batch, one round trip per sweep).
--   KEYS[2i-1] lock key of lease i   KEYS[2i] its holder details key
--   ARGV[2i-1] owner token of lease i   ARGV[2i] its ttl in ms
-- Reply: an array with, for each lease in order, 1 renewed or 0 lost (not our token, or
-- the key now holds another primitive).
local out = {}
for i = 1, #KEYS / 2 do
  local key, holder = KEYS[2 * i - 1], KEYS[2 * i]
  -- pcall: a key another primitive took meanwhile (WRONGTYPE) is this lease lost, not
  -- an error that would fail every other lease of the batch.
  if redis.pcall('GET', key) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    redis.call('PEXPIRE', holder, ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
