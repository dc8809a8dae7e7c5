-- outbox_unmark.lua: lift a room's mark (outbox_mark.lua) once its events
-- are moved, if it is still the mark the mover read; atomic.
--
-- KEYS[1]  lr:{lr}:whr   KEYS[2]  lr:{lr}:whrn   (as outbox_mark.lua's)
--
-- ARGV[1]  the room   ARGV[2]  the mark's number
--
-- Returns 1 when lifted, 0 when the room was marked again since (or not
-- marked).

if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
