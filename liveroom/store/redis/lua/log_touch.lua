-- log_touch.lua: count a read of a room: push its expiry back, never create it.
--
-- KEYS[1]  lr:{R}:meta   hash: epoch, seq (head), ic
-- KEYS[2]  lr:{R}:log    KEYS[3]  lr:{R}:imp
-- KEYS[4]  lr:{R}:pm     KEYS[5]  lr:{R}:pn
--
-- ARGV[1]  room_ttl_ms
-- ARGV[2]  1 when ARGV[3..] name the uids that read the room, 0 when the
--          readers are not known (counted as somebody else: an operator)
-- ARGV[3..] uids that read the room (two distinct ones are enough)
--
-- A room with no message yet (seq 0) keeps the expiry it was created with
-- (empty_room_ttl_ms, see log_epoch.lua): reads never keep a made-up name alive,
-- unless an operator started it (field 'live', see operators_start_broadcast.lua).
-- A room of one sender (field 'by', see log_append.lua) becomes a room like any
-- other once read by another uid; read by its sender alone it is left as it
-- is (its creator's polls never make it last).
-- Returns 1 when the expiry was pushed back, else 0.

local meta = KEYS[1]
local seq = redis.call('HGET', meta, 'seq')
if not seq then
  return 0
end
if seq == '0' and not redis.call('HGET', meta, 'live') then
  return 0
end
local by = redis.call('HGET', meta, 'by')
if by then
  local other = ARGV[2] == '0'
  for i = 3, #ARGV do
    if ARGV[i] ~= by then
      other = true
    end
  end
  if not other then
    return 0
  end
  redis.call('HDEL', meta, 'by')  -- read by another uid: no longer its sender's alone
end
local ttl = ARGV[1]
for i = 1, 5 do
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return 1
