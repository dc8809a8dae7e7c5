-- moderation_act.lua: one moderation action on a room; atomic, one call. The
-- room's sanctions that ended are pruned, the action applied, the entry
-- recorded in the audit, the keys' expiry set; on one Redis the journal
-- notes the change in the same call (moderation_note.lua), on a Redis Cluster the
-- caller runs moderation_journal.lua next, then moderation_stamp.lua.
--
-- KEYS[1]  lr:{R}:mod    hash: m:<uid>, b:<uid> -> packed sanction; slow;
--                        v (version); nm, nb (mutes and bans held); e (when
--                        the room's moderation ends, as the last act found it)
-- KEYS[2]  lr:{R}:modt   zset: m:<uid>, b:<uid> -> until_ms ('inf': until lifted)
-- KEYS[3]  lr:{R}:aud    list: packed audit entries, newest first
-- KEYS[4]  lr:{R}:ev     list: the room's webhook events not yet moved
-- On one Redis only, the journal (see moderation_note.lua):
-- KEYS[5]  lr:{lr}:modv  KEYS[6]  lr:{lr}:modj  KEYS[7]  lr:{lr}:modx
--
-- ARGV[1]  the action: mute, unmute, ban, unban, slow or recall
-- ARGV[2]  the sanction's field, m:<uid> or b:<uid> ('' for slow and recall)
-- ARGV[3]  a mute's or ban's packed sanction; slow's seconds ('0': lift it)
-- ARGV[4]  a mute's or ban's end in modt: '%d' ms, or 'inf'
-- ARGV[5]  the packed audit entry
-- ARGV[6]  now_ms (the caller's clock)
-- ARGV[7]  ms the room's keys live at least after this act (the history's ttl)
-- ARGV[8]  audit entries kept (AUDIT_KEPT)
-- ARGV[9]  mutes (and bans) a room may hold (SANCTIONS_MAX)
-- ARGV[10] the room name    ARGV[11] rooms the journal prunes at most
-- ARGV[12] the action's webhook event ('' : none), kept in KEYS[4]
--          (room_event_fn.lua) when the act took effect: a mute or ban not
--          a retry (the newest audit entry), an unmute or unban that lifted
--          a sanction
--
-- Returns {1, the new version (0 on a cluster: not noted yet), when the
-- room's moderation ends ('%d' ms or 'inf')}; {0, 0, ''} when a new uid's
-- sanction would pass the cap (nothing changed but the pruning).

local mod, modt, aud = KEYS[1], KEYS[2], KEYS[3]
local action, field, now = ARGV[1], ARGV[2], tonumber(ARGV[6])
local effect = false

-- Sanctions that ended go first: they neither count nor keep the room.
local ended = redis.call('ZRANGEBYSCORE', modt, '-inf', ARGV[6])
if #ended > 0 then
  local gone = {nm = 0, nb = 0}
  for _, f in ipairs(ended) do
    redis.call('HDEL', mod, f)
    local count = 'n' .. string.sub(f, 1, 1)
    gone[count] = gone[count] + 1
  end
  for count, n in pairs(gone) do
    if n > 0 then
      redis.call('HINCRBY', mod, count, -n)
    end
  end
  redis.call('ZREMRANGEBYSCORE', modt, '-inf', ARGV[6])
end

if action == 'mute' or action == 'ban' then
  if redis.call('HEXISTS', mod, field) == 0 then
    local count = 'n' .. string.sub(field, 1, 1)
    if tonumber(redis.call('HGET', mod, count) or '0') >= tonumber(ARGV[9]) then
      return {0, 0, ''}
    end
    redis.call('HINCRBY', mod, count, 1)
  end
  redis.call('HSET', mod, field, ARGV[3])
  redis.call('ZADD', modt, ARGV[4], field)
  effect = true
elseif action == 'unmute' or action == 'unban' then
  if redis.call('HDEL', mod, field) == 1 then
    effect = true
    redis.call('HINCRBY', mod, 'n' .. string.sub(field, 1, 1), -1)
    redis.call('ZREM', modt, field)
  end
elseif action == 'slow' then
  if ARGV[3] == '0' then
    redis.call('HDEL', mod, 'slow')
  else
    redis.call('HSET', mod, 'slow', ARGV[3])
  end
end

-- An entry equal to the newest is a retried act: recorded once.
if redis.call('LINDEX', aud, 0) ~= ARGV[5] then
  redis.call('LPUSH', aud, ARGV[5])
  redis.call('LTRIM', aud, 0, tonumber(ARGV[8]) - 1)
  if effect then
    keep_event(KEYS[4], ARGV[12], '')
  end
end
redis.call('HSETNX', mod, 'v', 0)

-- The keys live the history's ttl, or until the last sanction ends when
-- later, or for as long as a ban until lifted holds.
local ends = 'inf'
local last = redis.call('ZREVRANGE', modt, 0, 0, 'WITHSCORES')
if #last > 0 and last[2] == 'inf' then
  redis.call('PERSIST', mod)
  redis.call('PERSIST', modt)
  redis.call('PERSIST', aud)
else
  local lives = tonumber(ARGV[7])
  if #last > 0 and tonumber(last[2]) - now > lives then
    lives = tonumber(last[2]) - now
  end
  for i = 1, 3 do
    redis.call('PEXPIRE', KEYS[i], string.format('%d', lives))
  end
  -- %d, not tostring: Lua 5.1 prints large numbers in exponent form.
  ends = string.format('%d', now + lives)
end

-- The end as the room's last act found it: a Redis Cluster's journal is noted
-- after this step, and moderation_stamp.lua reads it back to correct a note
-- that another act's came before.
redis.call('HSET', mod, 'e', ends)
local version = 0
if #KEYS > 4 then
  version = note(KEYS[5], KEYS[6], KEYS[7], ARGV[10], ends, ARGV[6], ARGV[11])
  redis.call('HSET', mod, 'v', version)
end
return {1, version, ends}
