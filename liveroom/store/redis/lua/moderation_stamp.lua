-- moderation_stamp.lua: stamp the version the journal gave an act into the room's
-- moderation (Redis Cluster: the third step of an act); a larger version
-- stamped meanwhile stays, and a hash gone meanwhile is not made again.
--
-- KEYS[1]  lr:{R}:mod   hash: v = the version of the room's last change
--
-- ARGV[1]  the version moderation_journal.lua returned
--
-- Returns 1 when stamped, else 0.

local v = redis.call('HGET', KEYS[1], 'v')
if v and tonumber(v) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'v', ARGV[1])
  return 1
end
return 0
