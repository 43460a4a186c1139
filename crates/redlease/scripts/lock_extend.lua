-- lock_extend: reset the expiry of a lock we hold (mutex, election: its key, a string).
-- The shared leases (ZSET members) have lease_extend.lua. Sent as lib/expiry.lua ..
-- lock_extend.lua.
--   KEYS[1] lock key   KEYS[2] holder details key
-- ARGV: token ttl
--   ARGV[1] owner token   ARGV[2] new ttl in ms
-- The holder details live at least as long as the lock: their expiry is raised to the
-- new ttl, never lowered (renewals keep them several leases at a time, see lock_renew.lua).
-- Reply: 1 extended; 0 the lock does not hold our token (lost).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  raise_expiry(KEYS[2], ARGV[2])
  return 1
end
return 0
