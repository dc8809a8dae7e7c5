-- outbox_unmark.lua: lift one action's mark of a room (outbox_mark.lua)
-- once its events are moved; atomic.
--
-- KEYS[1]  lr:{lr}:whr   (as outbox_mark.lua's)
--
-- ARGV[1]  the room   ARGV[2]  the mark's number (0: a mark an older
--          version put, the room's name alone)
--
-- Returns 1 when lifted, 0 when it was lifted before.

local member = ARGV[2] == '0' and ARGV[1] or (ARGV[1] .. ':' .. ARGV[2])
return redis.call('ZREM', KEYS[1], member)
