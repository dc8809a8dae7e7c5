-- moderation_note.lua: the moderation journal's one rule, sent in front of the
-- scripts that note a change (moderation_act.lua on one Redis, moderation_journal.lua on a
-- Redis Cluster; see calls.Lua).
--
-- Bumps the system's moderation version, notes the room as changed at it,
-- and records when the room's moderation ends; then takes the rooms whose
-- moderation ended by now (the caller's clock) out of the journal, the oldest
-- `pruned` at most, so an act's cost stays bounded.
--
-- modv  lr:{lr}:modv   string: the version
-- modj  lr:{lr}:modj   zset: room -> the version of its last change
-- modx  lr:{lr}:modx   zset: room -> when its moderation ends ('inf': a ban
--                      until lifted holds it)
--
-- Returns the new version.

local function note(modv, modj, modx, room, ends, now, pruned)
  local version = redis.call('INCR', modv)
  redis.call('ZADD', modj, version, room)
  redis.call('ZADD', modx, ends, room)
  local gone = redis.call('ZRANGEBYSCORE', modx, '-inf', now, 'LIMIT', 0, pruned)
  if #gone > 0 then
    redis.call('ZREM', modj, unpack(gone))
    redis.call('ZREM', modx, unpack(gone))
  end
  return version
end

