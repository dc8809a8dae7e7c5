-- outbox_done.lua: events delivered leave the outbox (acknowledged in the
-- consumer group and deleted from the stream, so it holds only what waits).
--
-- KEYS[1]  lr:{lr}:wh   stream: fields e (event id), d (its JSON)
--
-- ARGV[1]  the consumer group      ARGV[2..]  the entries' stream ids
--
-- Returns the entries deleted.

local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
return redis.call('XDEL', KEYS[1], unpack(ids))
