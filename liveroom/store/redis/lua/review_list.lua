-- review_list.lua: a room's waiting messages, oldest first; read-only.
--
-- KEYS[1]  lr:{R}:rv    hash (see review_hold.lua)
-- KEYS[2]  lr:{R}:rvq   zset: ids waiting, by n
--
-- ARGV[1]  how many at most
--
-- Returns {count waiting, then for each listed: its id, record, body}.

local rv = KEYS[1]
local reply = {redis.call('ZCARD', KEYS[2])}
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1)) do
  reply[#reply + 1] = id
  reply[#reply + 1] = redis.call('HGET', rv, id)
  reply[#reply + 1] = redis.call('HGET', rv, 'b:' .. id)
end
return reply
