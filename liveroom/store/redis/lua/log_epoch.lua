-- log_epoch.lua: a room's epoch, creating its (empty) log or renewing the epoch.
-- Serves open_room (ARGV[2] = '', ARGV[4] = 1) and renew_epoch (ARGV[4] = 0).
--
-- KEYS[1]  lr:{R}:meta   hash: epoch, seq (head), ic (important count),
--                        was: the broadcast's renewed epochs, oldest first
-- KEYS[2]  lr:{R}:log    stream: the log
-- KEYS[3]  lr:{R}:imp    stream: important entries kept beyond the log cap
-- KEYS[4]  lr:{R}:pm     stream: personal messages   KEYS[5]  lr:{R}:pn  hash: ordinals
--
-- ARGV[1]  a new random epoch (from the caller)
-- ARGV[2]  the stale epoch to replace with ARGV[1], or '' to replace none
-- ARGV[3]  room_ttl_ms
-- ARGV[4]  1 to push the room's expiry back (a read of the room), else 0
-- ARGV[5]  empty_room_ttl_ms: the expiry of a log with no message yet
-- ARGV[6]  renewed epochs 'was' keeps (RENEWALS_KEPT, the newest)
--
-- Returns the room's current epoch. Seq and ic continue across a renewal.
-- A log created here has no message: it lives ARGV[5] from its creation, and
-- a read of a room with no message (seq 0) does not push its expiry back
-- (log_append.lua extends it to ARGV[3] with the first message), unless an
-- operator started it (field 'live', see operators_start_broadcast.lua).

local meta, log, imp, pm, pn = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local epoch = redis.call('HGET', meta, 'epoch')
if not epoch then
  -- No log: start one at seq 0 (log_new.lua).
  epoch = ARGV[1]
  new_log(meta, log, imp, pm, pn, epoch)
  redis.call('PEXPIRE', meta, ARGV[5])
  return epoch
elseif ARGV[2] ~= '' and epoch == ARGV[2] then
  -- The renewed epoch stays its broadcast's: the end records it with the
  -- last (operators_end_broadcast.lua), so taps acknowledged in it and
  -- written after the end go to the ended broadcast.
  local was = {}
  for e in string.gmatch(redis.call('HGET', meta, 'was') or '', '%S+') do
    table.insert(was, e)
  end
  table.insert(was, epoch)
  while #was > tonumber(ARGV[6]) do
    table.remove(was, 1)
  end
  epoch = ARGV[1]
  redis.call('HSET', meta, 'epoch', epoch, 'was', table.concat(was, ' '))
end
if ARGV[4] == '1' and (redis.call('HGET', meta, 'seq') ~= '0'
                       or redis.call('HGET', meta, 'live')) then
  redis.call('PEXPIRE', meta, ARGV[3])
  redis.call('PEXPIRE', log, ARGV[3])
  redis.call('PEXPIRE', imp, ARGV[3])
  redis.call('PEXPIRE', pm, ARGV[3])
  redis.call('PEXPIRE', pn, ARGV[3])
end
return epoch
