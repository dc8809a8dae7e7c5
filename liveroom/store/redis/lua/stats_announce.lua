-- stats_announce.lua: say a statsvr node is alive with what it announces, and list
-- the live nodes; atomic.
--
-- KEYS[1]  lr:{lr}:stats:nodes   hash: node -> "<expires_ms> <announcement>" (the
--                           caller's clock; the announcement is msgpack)
--
-- ARGV[1]  now_ms: nodes expiring before it are dropped, with their announcements
-- ARGV[2]  expires_ms of this node (now_ms + ttl_ms)
-- ARGV[3]  the node
-- ARGV[4]  its announcement, replacing the one before
--
-- Returns the live nodes, this one included, in no particular order. A value
-- that does not start with a number is dropped like an expired one.

local nodes = KEYS[1]
local now = tonumber(ARGV[1])
redis.call('HSET', nodes, ARGV[3], ARGV[2] .. ' ' .. ARGV[4])
local all = redis.call('HGETALL', nodes)
local live = {}
for j = 1, #all, 2 do
  local until_ms = tonumber(string.match(all[j + 1], '^%d+'))
  if until_ms == nil or until_ms < now then
    redis.call('HDEL', nodes, all[j])
  else
    live[#live + 1] = all[j]
  end
end
return live
