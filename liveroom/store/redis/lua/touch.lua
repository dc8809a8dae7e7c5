-- touch.lua: count a read of a room: push its expiry back, never create it.
--
-- KEYS[1]  lr:{R}:meta   hash: epoch, seq (head), ic
-- KEYS[2]  lr:{R}:log    KEYS[3]  lr:{R}:imp
-- KEYS[4]  lr:{R}:pm     KEYS[5]  lr:{R}:pn
--
-- ARGV[1]  room_ttl_ms
--
-- A room with no message yet (seq 0) keeps the expiry it was created with
-- (empty_room_ttl_ms, see epoch.lua): reads never keep a made-up name alive,
-- unless an operator started it (field 'live', see start.lua).
-- A room of one sender (field 'by', see append.lua) becomes a room like any
-- other once read.
-- Returns 1 when the expiry was pushed back, else 0.

local meta = KEYS[1]
local seq = redis.call('HGET', meta, 'seq')
if not seq then
  return 0
end
if seq == '0' and not redis.call('HGET', meta, 'live') then
  return 0
end
local ttl = ARGV[1]
redis.call('HDEL', meta, 'by')  -- read: no longer a room of its sender alone
for i = 1, 5 do
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return 1
