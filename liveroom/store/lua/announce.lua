-- announce.lua: say a statsvr node is alive and list the live ones; atomic.
--
-- KEYS[1]  lr:stats:nodes   hash: node -> expires_ms (the caller's clock)
--
-- ARGV[1]  now_ms: nodes expiring before it are dropped
-- ARGV[2]  expires_ms of this node (now_ms + ttl_ms)
-- ARGV[3]  the node
--
-- Returns the live nodes, this one included, in no particular order.

local nodes = KEYS[1]
local now = tonumber(ARGV[1])
redis.call('HSET', nodes, ARGV[3], ARGV[2])
local all = redis.call('HGETALL', nodes)
local live = {}
for j = 1, #all, 2 do
  local until_ms = tonumber(all[j + 1])
  if until_ms == nil or until_ms < now then
    redis.call('HDEL', nodes, all[j])
  else
    live[#live + 1] = all[j]
  end
end
return live
