-- operators_start_broadcast.lua: an operator opens a room's broadcast before any message; atomic.
-- A room with no log gets one (log_new.lua) and its listeners are notified; a
-- room with a log keeps it, epoch and messages. Either way the room is live
-- (field 'live'): it lives room_ttl_ms, and reads keep it like a room with
-- messages (log_touch.lua), so presence and viewers count from the first listener.
--
-- KEYS[1]  lr:{R}:meta    hash: epoch, seq (head), ic, live
-- KEYS[2]  lr:{R}:log     KEYS[3]  lr:{R}:imp
-- KEYS[4]  lr:{R}:bc      hash: n = the current broadcast (absent: 1)
-- KEYS[5]  lr:{R}:pm      KEYS[6]  lr:{R}:pn   (personal messages, ordinals)
-- KEYS[7]  lr:{R}:ev      list: the room's webhook events not yet moved
--
-- ARGV[1]  a new random epoch (used only for a room with no log)
-- ARGV[2]  room_ttl_ms
-- ARGV[3]  how to notify, as log_append.lua's ARGV[12]   ARGV[4]  the room name
-- ARGV[5]  the broadcast.started event's JSON ('' : none), kept in KEYS[7]
--          (room_event_fn.lua) with its "broadcast", "epoch" and "created"
--
-- Returns {epoch, broadcast, 1 if the log was created here else 0}.

local meta, log, imp, bc = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local epoch = redis.call('HGET', meta, 'epoch')
local created = 0
if not epoch then
  epoch = ARGV[1]
  new_log(meta, log, imp, KEYS[5], KEYS[6], epoch)
  created = 1
end
redis.call('HSET', meta, 'live', 1)
redis.call('HDEL', meta, 'by')  -- an operator's room, not its first sender's
for _, i in ipairs({1, 2, 3, 5, 6}) do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
if created == 1 then
  local how, channel = string.match(ARGV[3], '^(%u+) (.+)$')
  redis.call(how, channel, string.format('0 %s', ARGV[4]))
end
local broadcast = tonumber(redis.call('HGET', bc, 'n') or '1')
keep_event(KEYS[7], ARGV[5], string.format('"broadcast":%d,"epoch":%s,"created":%s',
                                           broadcast, cjson.encode(epoch),
                                           created == 1 and 'true' or 'false'))
return {epoch, broadcast, created}
