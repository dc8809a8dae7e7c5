-- moderation_changed.lua: the moderation version and the rooms changed after a
-- version, read together (atomic, one call; read-only).
--
-- KEYS[1]  lr:{lr}:modv   string: the version
-- KEYS[2]  lr:{lr}:modj   zset: room -> the version of its last change
--
-- ARGV[1]  since: a version (an integer >= 0); one above the current
--          version (the journal was lost) reads as 0
--
-- Returns {version, {rooms changed after since, oldest change first}}.

local version = tonumber(redis.call('GET', KEYS[1]) or '0')
local since = ARGV[1]
if tonumber(since) > version then
  since = '0'
end
return {version, redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. since, '+inf')}
