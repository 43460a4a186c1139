-- fenced_write: the protected resource's half of fencing. A write is applied only if its
-- fencing token is at least the highest token this resource has accepted, so a holder
-- that outlived its lease (paused, partitioned) cannot overwrite a newer holder's work.
--   KEYS[1] the value written (the coupon stock)
--   KEYS[2] the highest fencing token accepted so far (an integer; absent = 0)
--   ARGV[1] the new value   ARGV[2] the writer's fencing token
-- Reply: 1 applied; 0 refused (a newer holder already wrote; the stale write is dropped).
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[2])
if token < seen then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
