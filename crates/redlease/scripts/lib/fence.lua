-- lib/fence: a library, not a script: src/lua.rs prepends it (after lib/clock.lua and lib/common.lua, where
-- that is prepended too) to every script that grants: acquire.lua, release.lua (its
-- hand-off), multi_acquire.lua, sem_acquire.lua, sem_release.lua, rw_acquire.lua,
-- rw_release.lua, rw_downgrade.lua, latch_up.lua, latch_down.lua and latch_check.lua; and
-- to raise_fence.lua, which keeps a counter as long as a grant does (FENCE_KEEP). The
-- hybrid-clock fencing rule (grant_fence) and a lock holder's recorded token
-- (holder_fence; a shared lease's holder's is lib/shared.lua's entry_fence).
--
-- A grant takes fence = max(stored + 1, the server's time in microseconds), stores it in
-- the lock's fencing counter and keeps the counter for FENCE_KEEP seconds after the last
-- grant. So tokens grow across grants as a counter would, and also across a restart that
-- lost the counter (no persistence, an asynchronous failover) or the counter's expiry, as
-- long as the server's clock did not step back by more than the time since the last
-- grant. Microseconds since 1970 stay below 2^53 (exact in JSON and doubles) until the
-- year 2255; a counter set that high by hand is refused rather than rounded.
--
-- `step` (optional, µs) makes the clock coarser: a quorum client asks for it so that the
-- nodes of one attempt, which answer within the same step, agree on the token (all of
-- them then hold it, and no write-back round trip is needed; see backend/quorum). The
-- argument above holds with the coarser clock as long as fewer than `step` grants of one
-- name happen within `step` µs, and a node that lost its counter stays down for longer
-- than the skew between the nodes' clocks plus one step.
--
-- `clock` (optional, µs since 1970) is the server's TIME as the calling script already
-- read it (lib/common.lua's now_ms returns it beside the ms by which the semaphore's,
-- read-write lock's and latch's scripts date leases; a multi-lock reads it once for all
-- its grants), passed down by the script: one TIME call fewer per grant. A reading taken
-- earlier in the same script serves the rule above as well as a fresh one (a later grant
-- of the same counter in the script still gets stored + 1).

-- How long a fencing counter is kept after the last grant (or raise_fence.lua) set it: 7
-- days, in seconds (for EX) and in ms (for PEXPIRE). Strings, as Redis takes them: a Lua
-- number passed to redis.call is formatted with "%.17g" on every call (about 2,400 server
-- instructions per grant). The client's renewal keeps a long hold's counter by this too
-- (FENCE_KEEP in src/lease.rs).
local FENCE_KEEP = '604800'
local FENCE_KEEP_MS = '604800000'
local FENCE_LIMIT = 9007199254740992

-- holder_fence(details, counter): the fencing token a lock's holder details key records
-- ("<fence> <details>", set with every grant), else the counter's value (`counter` may be
-- nil), else 0.
local function holder_fence(details, counter)
  local recorded = redis.call('GET', details)
  local fence = recorded and tonumber(string.match(recorded, '^(%d+) '))
  if fence then
    return fence
  end
  return counter and tonumber(redis.call('GET', counter) or '0') or 0
end

local function grant_fence(counter, step, clock)
  local micros = clock or server_us()
  if step and step > 1 then
    -- A coarser clock (a quorum's nodes: see below).
    micros = micros - micros % step
  end
  -- The clock is almost always ahead of the stored counter: store it and read the old
  -- value in one call (SET ... GET), and correct it in the rare case it was not.
  -- '%d', not Lua's own number formatting, which would round to 14 digits.
  local stored = redis.call('SET', counter, string.format('%d', micros), 'EX', FENCE_KEEP, 'GET')
  local fence = micros
  if stored then
    local last = tonumber(stored)
    if not last then
      redis.call('SET', counter, stored, 'EX', FENCE_KEEP)
      -- The counter's name as an operator reads and types it: NUL bytes (keys.rs) as \0.
      error('redlease: the fencing counter ' .. string.gsub(counter, '%z', '\\0') .. ' does not hold a number; delete it')
    end
    local next = last + 1
    if next > micros then
      fence = next
      redis.call('SET', counter, string.format('%d', fence), 'EX', FENCE_KEEP)
    end
  end
  if fence >= FENCE_LIMIT then
    if stored then
      -- Leave the counter as it was: a refused grant changes nothing.
      redis.call('SET', counter, stored, 'EX', FENCE_KEEP)
    end
    -- The counter's name as an operator reads and types it: NUL bytes (keys.rs) as \0.
    error('redlease: the fencing counter ' .. string.gsub(counter, '%z', '\\0') .. ' is at or above 2^53; delete it')
  end
  return fence
end
