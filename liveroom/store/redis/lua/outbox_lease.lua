-- outbox_lease.lua: take the webhooks' delivery lease when it is free, or
-- renew it for its holder; atomic, one call.
--
-- KEYS[1]  lr:{lr}:whl  string: the holder's name (expires with the lease)
--
-- ARGV[1]  the holder asking       ARGV[2]  ms the lease lasts from now
--
-- Returns 1 when ARGV[1] holds the lease now, else 0.

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
