-- outbox_mark.lua: mark a room as one that may hold webhook events not yet
-- moved to the outbox, before an action of it that has an event; atomic.
--
-- KEYS[1]  lr:{lr}:whr   zset: room -> when it was marked (ms)
-- KEYS[2]  lr:{lr}:whrn  hash: room -> the number of its mark
-- KEYS[3]  lr:{lr}:whrc  string: the marks given
--
-- ARGV[1]  the room   ARGV[2]  now (ms, the caller's clock)
--
-- Returns the mark's number: unique, so that a move lifts only the mark it
-- knows (outbox_unmark.lua), never one a later action put.

local mark = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], mark)
return mark
