-- review_hold.lua: hold a message in a room's review queue; atomic, one call.
-- It takes the next id, waits at the end of the queue, and pushes the
-- oldest out of a full one (their records are returned, then forgotten).
--
-- KEYS[1]  lr:{R}:rv    hash: n (last id), dn; <id> -> packed record,
--                       b:<id> packed body, s:<id> decision, c:<cmid> -> id,
--                       k:<id> -> cmid (see keys.py)
-- KEYS[2]  lr:{R}:rvq   zset: ids waiting, by n
-- KEYS[3]  lr:{R}:rvd   zset: ids decided, by dn
--
-- ARGV[1]  the packed record: msgpack [uid, kind, to, at_ms, why, cmid]
-- ARGV[2]  the packed body
-- ARGV[3]  the send's client_msg_id ('': none)
-- ARGV[4]  messages a room holds waiting at most (review_max)
-- ARGV[5]  ms the room's queue lives after this call (the room's ttl)
--
-- Returns {id, 1} when the client_msg_id was held (or decided) before under
-- id (nothing held, no expiry pushed back); else {id, 0, then for each
-- message dropped, oldest first: its id, its record, its body}.

local rv, rvq = KEYS[1], KEYS[2]
local cmid = ARGV[3]
if cmid ~= '' then
  local seen = redis.call('HGET', rv, 'c:' .. cmid)
  if seen and redis.call('HEXISTS', rv, seen) == 1 then
    return {seen, 1}
  end
end

local n = redis.call('HINCRBY', rv, 'n', 1)
-- %d, not tostring: Lua 5.1 prints large numbers in exponent form.
local id = string.format('%d', n)
redis.call('HSET', rv, id, ARGV[1], 'b:' .. id, ARGV[2])
if cmid ~= '' then
  redis.call('HSET', rv, 'c:' .. cmid, id, 'k:' .. id, cmid)
end
redis.call('ZADD', rvq, n, id)

local reply = {id, 0}
local over = redis.call('ZCARD', rvq) - tonumber(ARGV[4])
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', rvq, 0, over - 1)) do
    reply[#reply + 1] = old
    reply[#reply + 1] = redis.call('HGET', rv, old)
    reply[#reply + 1] = redis.call('HGET', rv, 'b:' .. old)
    forget(rv, old)
  end
  redis.call('ZREMRANGEBYRANK', rvq, 0, over - 1)
end
push_back(ARGV[5])
return reply
