-- outbox_give_up.lua: an event leaves the outbox for the failed list; the
-- oldest failed beyond the cap are forgotten.
--
-- KEYS[1]  lr:{lr}:wh    stream: fields e (event id), d (its JSON)
-- KEYS[2]  lr:{lr}:whf   hash: d:<event id> its JSON, w:<event id>
--                        "<failed ms> <why>"
-- KEYS[3]  lr:{lr}:whfo  zset: event ids failed, by when
--
-- ARGV[1]  the consumer group      ARGV[2]  the entry's stream id
-- ARGV[3]  the event id            ARGV[4]  its JSON
-- ARGV[5]  when it was given up (ms)   ARGV[6]  why
-- ARGV[7]  failed events kept at most
--
-- Returns how many failed events are kept.

redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
local id = ARGV[3]
redis.call('HSET', KEYS[2], 'd:' .. id, ARGV[4], 'w:' .. id, ARGV[5] .. ' ' .. ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[5], id)
local over = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[7])
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[3], 0, over - 1)) do
    redis.call('HDEL', KEYS[2], 'd:' .. old, 'w:' .. old)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over - 1)
end
return redis.call('ZCARD', KEYS[3])
