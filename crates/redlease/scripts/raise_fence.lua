-- raise_fence: on a quorum node that granted the lock to this attempt, make the fencing
-- counter at least the token just handed out, so that the next majority (which shares at
-- least one node with this one) counts past it. A counter raised is kept by grant_fence's
-- rule: ARGV[4] + max(0, token - now) ms, until the node's clock passes the token, plus
-- the keep (the token is the largest of the majority's: ahead of a node whose clock is
-- behind the others'). A counter already at or above the token is left as its own grant
-- set it; a counter that was deleted comes back at the token. Sent as lib/clock.lua ..
-- lib/common.lua .. lib/fence.lua .. raise_fence.lua (for its FENCE_KEEP_MS: it grants
-- nothing).
--   KEYS[1] fencing counter   KEYS[2] lock key (a read-write lock: its ZSET of holds)
--   KEYS[3] (optional; a lock or an election's lock) its holder details ("<fence>
--           <details>", acquire.lua): a recorded token below ARGV[1] becomes ARGV[1], so
--           that every node holding the lock records the token its holder uses (a fan-out
--           that straddled a fencing step granted the lower one on some nodes; inspection
--           reports what a majority records)
--   KEYS[4] (optional; an election's lock) its term record
-- ARGV: fence token zset_or_channel fence_keep
--   ARGV[1] the fencing token chosen for the new holder   ARGV[2] owner token
--   ARGV[3] (optional) "zset" when KEYS[2] is a ZSET of holds rather than a lock key;
--           with KEYS[3]: the election's channel
--   ARGV[4] (optional) how long the fencing counter is kept past the clock, in ms (the
--           client's fence_keep; absent or "": lib/fence.lua's default); ARGV[3] is then
--           sent, empty when unused
-- With KEYS[4], the term record becomes "<ARGV[1]> <ARGV[2]>" and KEYS[2] is published on
-- ARGV[3]: readers of the election report a leader only once a majority of the nodes
-- holding it recorded its term (see backend/quorum, `leader`), so its observers must look
-- again then. The record has no expiry: a leader may lead for longer than any expiry
-- chosen here (renewals do not touch it), and a record whose token no longer holds the
-- lock is ignored; one short string per election name.
-- Reply: 1 when the lock key still holds our owner token and the counter is now at least
-- the chosen token; 0 when the key is no longer ours (expired, or another owner's): that
-- node must not count towards the majority, or two holders could share a token (found by
-- the model in crates/redlease-model).
local held
if ARGV[3] == 'zset' and not KEYS[3] then
  -- A hold counts while its expiry (ms, by the server's clock) is ahead.
  local score = redis.call('ZSCORE', KEYS[2], ARGV[2])
  local now = now_ms()
  held = score and tonumber(score) > now
else
  held = redis.call('GET', KEYS[2]) == ARGV[2]
end
if not held then
  return 0
end
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local fence = tonumber(ARGV[1])
if current < fence then
  -- Kept as a grant keeps it (see lib/fence.lua): past the clock, plus the keep.
  local keep = ARGV[4]
  if not keep or keep == '' then
    keep = FENCE_KEEP_MS
  end
  local _, now = now_ms()
  local px = tonumber(keep) + math.ceil(math.max(0, fence - now) / 1000)
  redis.call('SET', KEYS[1], ARGV[1], 'PX', string.format('%d', px))
end
if KEYS[3] then
  local recorded = redis.call('GET', KEYS[3])
  local was, details = nil, nil
  if recorded then
    was, details = string.match(recorded, '^(%d+) (.*)$')
  end
  if was and tonumber(was) < fence then
    redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. details, 'KEEPTTL')
  end
end
if KEYS[4] then
  redis.call('SET', KEYS[4], ARGV[1] .. ' ' .. ARGV[2])
  redis.call('PUBLISH', ARGV[3], KEYS[2])
end
return 1
