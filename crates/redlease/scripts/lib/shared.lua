-- lib/shared: a library, not a script: src/lua.rs prepends it (after lib/grants.lua) to
-- the scripts of the shared leases, the semaphore's (with lib/semaphore.lua) and the
-- read-write lock's (with lib/rwlock.lua). What they share and the lock does not: kept out
-- of the lock's acquire.lua and release.lua, the contended hot path, where every function
-- prepended is a closure made and collected on every call.

-- entry_fence(holders, counter, token): the fencing token a shared lease's holders entry
-- records (HASH `holders`: token -> cjson [fence, ...], the semaphore's and read-write
-- lock's), else the counter's value, else 0.
local function entry_fence(holders, counter, token)
  local entry = redis.call('HGET', holders, token)
  if entry then
    return tonumber(cjson.decode(entry)[1])
  end
  return tonumber(redis.call('GET', counter) or '0')
end

-- listens(channel): whether a client listens on the grant channel `channel` now (PUBSUB
-- NUMSUB, on this server: where grant links are kept). A queued place whose client does not
-- is gone (its process ended, closing its connections) or moving (a reconnect): a head that
-- keeps others out (a writer waiting for the readers, a request for more permits than are
-- free) stops counting then, rather than for as long as the holders hold. A client cut off
-- silently still counts until Redis notices; its place is served, and costs a claim window.
local function listens(channel)
  return redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0
end
