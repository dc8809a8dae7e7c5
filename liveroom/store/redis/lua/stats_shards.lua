-- stats_shards.lua: record one statsvr node's shards of one room in the room's shard
-- index, then prune the index; atomic, one call per room. The shard keys
-- themselves were written just before (a vip room's live in other slots).
--
-- KEYS[1]  lr:{R}:sidx    hash: field <node>/<index>/<count>,
--                         value "t<trusted> <version> <size> <expires_ms>"
--                         (the count of members the vip rule may count goes
--                         first: an older reader, which splits from the
--                         right, takes it for part of the version)
--
-- ARGV[1]  now_ms (the caller's clock): entries expiring before it are pruned
-- ARGV[2]  expires_ms of every entry written here (now_ms + ttl_ms)
-- ARGV[3]  the index's own expiry in ms (2 * ttl_ms: garbage collection only)
-- then five ARGV per shard i, from ARGV[4 + 5 * (i - 1)]:
--   mode     'w' the shard key is stored (written or its expiry pushed back):
--            set its entry; 'd' dropped: remove the entry; 'x' a refresh
--            found the key gone: remove the entry
--   field    <node>/<index>/<count>
--   version  size  trusted    (all three go into the entry)
--
-- Returns nothing: the caller knows which refreshes found their key gone.

local idx = KEYS[1]
local now = tonumber(ARGV[1])
local expires = ARGV[2]
local gc_ms = ARGV[3]

for a = 4, #ARGV, 5 do
  local mode, field = ARGV[a], ARGV[a + 1]
  if mode == 'w' then
    redis.call('HSET', idx, field,
               't' .. ARGV[a + 4] .. ' ' .. ARGV[a + 2] .. ' ' .. ARGV[a + 3] .. ' ' .. expires)
  else
    redis.call('HDEL', idx, field)
  end
end

-- Prune every node's expired entries (and any value that does not parse).
local all = redis.call('HGETALL', idx)
for j = 1, #all, 2 do
  local until_ms = tonumber(string.match(all[j + 1], ' (%-?%d+)$'))
  if until_ms == nil or until_ms < now then
    redis.call('HDEL', idx, all[j])
  end
end

-- Push the index's expiry back, never forward (nodes may use longer TTLs).
local pttl = redis.call('PTTL', idx)
if pttl ~= -2 and pttl < tonumber(gc_ms) then
  redis.call('PEXPIRE', idx, gc_ms)
end
return 0
