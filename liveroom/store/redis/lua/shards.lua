-- shards.lua: store, refresh or drop one statsvr node's shards of one room,
-- then prune the room's shard index; atomic, one call per room.
--
-- KEYS[1]    lr:{R}:sidx                 hash: field <node>/<index>/<count>,
--                                        value "<version> <size> <expires_ms>"
-- KEYS[1+i]  lr:{R}:s:<node>/<index>/<count>   string: shard i's members
--
-- ARGV[1]  now_ms (the caller's clock): entries expiring before it are pruned
-- ARGV[2]  expires_ms of every entry written here (now_ms + ttl_ms)
-- ARGV[3]  the keys' own expiry in ms (2 * ttl_ms: garbage collection only)
-- then five ARGV per shard i, from ARGV[4 + 5 * (i - 1)]:
--   mode     'w' store the members, 'r' refresh (members unchanged), 'd' drop
--   field    <node>/<index>/<count>
--   version  size    (both go into the index value)
--   members  the msgpack blob for 'w', else ''
--
-- Returns the positions i (1-based) of shards to refresh whose key is gone:
-- their index entry is removed and the caller writes them whole again.

local idx = KEYS[1]
local now = tonumber(ARGV[1])
local expires = ARGV[2]
local gc_ms = ARGV[3]
local missing = {}

for i = 1, #KEYS - 1 do
  local a = 4 + 5 * (i - 1)
  local mode, field = ARGV[a], ARGV[a + 1]
  local key = KEYS[i + 1]
  local value = ARGV[a + 2] .. ' ' .. ARGV[a + 3] .. ' ' .. expires
  if mode == 'd' then
    redis.call('DEL', key)
    redis.call('HDEL', idx, field)
  elseif mode == 'w' then
    redis.call('SET', key, ARGV[a + 4], 'PX', gc_ms)
    redis.call('HSET', idx, field, value)
  elseif redis.call('PEXPIRE', key, gc_ms) == 1 then
    redis.call('HSET', idx, field, value)
  else
    redis.call('HDEL', idx, field)
    missing[#missing + 1] = i
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
return missing
