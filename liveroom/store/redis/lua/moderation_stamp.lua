-- moderation_stamp.lua: stamp the version the journal gave an act into the room's
-- moderation (Redis Cluster: the third step of an act); a larger version
-- stamped meanwhile stays, and a hash gone meanwhile is not made again.
--
-- KEYS[1]  lr:{R}:mod   hash: v = the version of the room's last change, e =
--                       when its moderation ends (moderation_act.lua)
--
-- ARGV[1]  the version moderation_journal.lua returned
--
-- Returns {1 when stamped else 0, the room's e (false: the hash is gone)}: an
-- act whose journal note gave another end corrects it
-- (moderation_journal_end.lua), as another act's step may have come between
-- its own step and its note.

local v = redis.call('HGET', KEYS[1], 'v')
local ends = redis.call('HGET', KEYS[1], 'e')
if v and tonumber(v) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'v', ARGV[1])
  return {1, ends}
end
return {0, ends}
