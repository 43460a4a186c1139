-- Shared prelude of acquire.lua and release.lua (concatenated in front of them).
--
-- Keys of one lock, all in one cluster slot:
--   KEYS[1] lock key: the owner token alone, with a PX expiry (a plain SET NX PX lock)
--   KEYS[2] fencing counter: an integer, INCR on every fresh grant, never expires
--   KEYS[3] holder details for operators (free text), same expiry as KEYS[1]
--   KEYS[4] FIFO queue of waiting tokens (list)
--   KEYS[5] waiter table: token -> cjson {ttl_ms, grant channel, holder details}
--
-- hand_off(skip) gives the free lock to the oldest queued waiter whose client still
-- listens on its grant channel (PUBLISH reaches at least one subscriber). Dead waiters are
-- dropped on the way. It stops without granting when the head of the queue is `skip` (the
-- caller itself, which then takes the lock directly).
-- Returns true when the lock was handed to another waiter.
local function hand_off(skip)
  while true do
    local head = redis.call('LINDEX', KEYS[4], 0)
    if not head or head == skip then
      return false
    end
    redis.call('LPOP', KEYS[4])
    local entry = redis.call('HGET', KEYS[5], head)
    redis.call('HDEL', KEYS[5], head)
    if entry then
      local w = cjson.decode(entry)
      local fence = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
      -- message: "<fence> <token> <lock key>"
      if redis.call('PUBLISH', w[2], fence .. ' ' .. head .. ' ' .. KEYS[1]) > 0 then
        redis.call('INCR', KEYS[2])
        redis.call('SET', KEYS[1], head, 'PX', w[1])
        redis.call('SET', KEYS[3], w[3], 'PX', w[1])
        return true
      end
    end
  end
end
