-- lib/fence: a library, not a script: src/lua.rs prepends it (after lib/clock.lua and lib/common.lua, where
-- that is prepended too) to every script that grants: acquire.lua, release.lua (its
-- hand-off), multi_acquire.lua, sem_acquire.lua, sem_release.lua, rw_acquire.lua,
-- rw_release.lua, rw_downgrade.lua, latch_up.lua, latch_down.lua and latch_check.lua; and
-- to raise_fence.lua, which keeps a counter by the same rule as a grant does. The
-- hybrid-clock fencing rule (grant_fence) and a lock holder's recorded token
-- (holder_fence; a shared lease's holder's is lib/shared.lua's entry_fence).
--
-- A grant takes fence = max(stored + 1, the server's time in microseconds) and stores it in
-- the lock's fencing counter. So tokens grow across grants as a counter would, and also
-- across a restart that lost the counter (no persistence, an asynchronous failover) or
-- the counter's expiry, as long as the server's clock did not step back by more than the
-- time since the last grant. Microseconds since 1970 stay below 2^53 (exact in JSON and
-- doubles) until the year 2255; a counter set that high by hand is refused rather than
-- rounded.
--
-- The counter is needed only while it is ahead of the clock (a burst of grants within a
-- µs, a quorum's write-back of a larger token, a counter raised by hand) and across a
-- clock that steps back. So it is kept `keep` ms past the later of its value and the
-- clock: its expiry is keep + max(0, fence - now), in ms. Redis expires a key
-- by the same wall clock (an absolute time), so the counter goes only once the clock
-- reads at least fence + keep, after which a grant's clock reading exceeds every token
-- handed out before, as long as the clock does not step back by more than `keep` (an NTP
-- step, a failover to a node whose clock is behind): that is what `keep` tolerates. A
-- holder's token is at most the counter, so a lease held longer than the counter lives
-- needs nothing more (its own recorded token, holder_fence, serves inspection).
--
-- `keep` (optional, ms as a string: the client's ClientBuilder::fence_keep, an argument
-- of every granting script; nil or "" for the default FENCE_KEEP_MS). The scripts put it
-- in their primitive's key table (lock_keys, semaphore_keys, rwlock_keys, latch_keys:
-- `fence_keep`), beside the counter's name.
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

-- How long a fencing counter is kept past the clock by default (the client's default
-- fence_keep, DEFAULT_FENCE_KEEP in src/client/builder.rs): 1 hour, in ms. A string, as
-- Redis takes it: a Lua number passed to redis.call is formatted with "%.17g" on every
-- call (about 2,400 server instructions per grant). The latch's rounds record keeps its
-- own constant (ROUNDS_KEEP in lib/latch.lua).
local FENCE_KEEP_MS = '3600000'
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

-- grant_fence(counter, step, clock, keep): the next token of `counter` (see the top), the
-- counter set to it and kept keep + max(0, fence - now) ms (rounded up; the common path,
-- where the token is the clock's own reading, keeps it `keep` as is: no arithmetic, no
-- formatting). Computed inline, as raise_fence.lua does: a helper function would cost a
-- closure per call of every granting script.
local function grant_fence(counter, step, clock, keep)
  if not keep or keep == '' then
    keep = FENCE_KEEP_MS
  end
  local now = clock or server_us()
  local micros = now
  if step and step > 1 then
    -- A coarser clock (a quorum's nodes: see below).
    micros = micros - micros % step
  end
  -- The clock is almost always ahead of the stored counter: store it and read the old
  -- value in one call (SET ... GET), and correct it in the rare case it was not. The
  -- clock's own reading is not ahead of the clock: kept `keep`.
  -- '%d', not Lua's own number formatting, which would round to 14 digits.
  local stored = redis.call('SET', counter, string.format('%d', micros), 'PX', keep, 'GET')
  local fence = micros
  if stored then
    local last = tonumber(stored)
    if not last then
      redis.call('SET', counter, stored, 'PX', keep)
      -- The counter's name as an operator reads and types it: NUL bytes (keys.rs) as \0.
      error('redlease: the fencing counter ' .. string.gsub(counter, '%z', '\\0') .. ' does not hold a number; delete it')
    end
    local next = last + 1
    if next > micros then
      fence = next
      -- Ahead of the clock: kept until the clock passes it, plus keep.
      local px = tonumber(keep) + math.ceil(math.max(0, fence - now) / 1000)
      if fence >= FENCE_LIMIT then
        -- Leave the counter as it was (kept by the same rule): a refused grant changes
        -- nothing.
        redis.call('SET', counter, stored, 'PX', string.format('%d', px))
        -- The counter's name as an operator reads and types it: NUL bytes (keys.rs) as \0.
        error('redlease: the fencing counter ' .. string.gsub(counter, '%z', '\\0') .. ' is at or above 2^53; delete it')
      end
      redis.call('SET', counter, string.format('%d', fence), 'PX', string.format('%d', px))
    end
  end
  if fence >= FENCE_LIMIT then
    -- The clock itself (never before the year 2255).
    error('redlease: the fencing counter ' .. string.gsub(counter, '%z', '\\0') .. ' is at or above 2^53; delete it')
  end
  return fence
end
