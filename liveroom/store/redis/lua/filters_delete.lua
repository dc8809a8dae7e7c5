-- filters_delete.lua: delete one list of the word filter and bump the
-- filters' version; atomic, one call.
--
-- KEYS[1]  lr:{lr}:flv  KEYS[2]  lr:{lr}:fls  KEYS[3]  lr:{lr}:fl:<name>
-- (as in filters_put.lua)
--
-- ARGV[1]  the list's name
--
-- Returns the new version; 0 when there was no such list (nothing changed).

if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[3])
return redis.call('INCR', KEYS[1])
