-- outbox_mark.lua: mark a room as one that may hold webhook events not yet
-- moved to the outbox, before an action of it that has an event; atomic.
--
-- KEYS[1]  lr:{lr}:whr   zset: "<room>:<mark>" -> when it was marked (ms):
--                        one entry per action, lifted by that action's
--                        move (outbox_unmark.lua) or by the sweep
-- KEYS[2]  lr:{lr}:whrc  string: the marks given
--
-- ARGV[1]  the room   ARGV[2]  now (ms, the caller's clock)
--
-- Returns the mark's number: unique, so that a move lifts only its own
-- action's mark, never one another action put (whose event may not be
-- written yet: lifted, that event would wait in the room unmarked, and
-- no sweep would move it).

local mark = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1] .. ':' .. mark)
return mark
