-- raise_fence: make a quorum node's fencing counter at least the token just handed out, so
-- that the next majority (which shares at least one node with this one) counts past it.
--   KEYS[1] fencing counter
--   ARGV[1] the fencing token chosen for the new holder
-- Reply: the counter's value afterwards.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local chosen = tonumber(ARGV[1])
if current < chosen then
  redis.call('SET', KEYS[1], ARGV[1])
  return chosen
end
return current
