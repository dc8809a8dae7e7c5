-- filters_put.lua: store one list of the word filter under its name,
-- replacing a list of that name, and bump the filters' version; atomic, one
-- call (every key under the global tag: one slot on a Redis Cluster too).
--
-- KEYS[1]  lr:{lr}:flv        string: the filters' version
-- KEYS[2]  lr:{lr}:fls        hash: name -> the version of its last put
-- KEYS[3]  lr:{lr}:fl:<name>  string: the packed list
--
-- ARGV[1]  the list's name   ARGV[2]  the packed list
-- ARGV[3]  lists the store holds at most
--
-- Returns the new version; 0 when a new name would pass the cap (nothing
-- changed).

if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0
    and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[3]) then
  return 0
end
local version = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], version)
redis.call('SET', KEYS[3], ARGV[2])
return version
