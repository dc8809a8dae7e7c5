-- review_hold.lua: hold a message in a room's review queue; atomic, one call.
-- It takes the next id, waits at the end of the queue, and pushes the
-- oldest out of a full one (their records are returned, then forgotten).
--
-- KEYS[1]  lr:{R}:rv    hash: n (last id), dn; <id> -> packed record,
--                       b:<id> packed body, s:<id> decision, c:<cmid> -> id,
--                       k:<id> -> cmid (see keys.py)
-- KEYS[2]  lr:{R}:rvq   zset: ids waiting, by n
-- KEYS[3]  lr:{R}:rvd   zset: ids decided, by dn
-- KEYS[4]  lr:{R}:ev    list: the room's webhook events not yet moved
--
-- ARGV[1]  the packed record: msgpack [uid, kind, to, at_ms, why, cmid]
-- ARGV[2]  the packed body
-- ARGV[3]  the send's client_msg_id ('': none)
-- ARGV[4]  messages a room holds waiting at most (review_max)
-- ARGV[5]  ms the room's queue lives after this call (the room's ttl)
-- ARGV[6]  the message.held event's JSON ('' : none), kept in KEYS[4]
--          (room_event_fn.lua) with its "held_id", unless held before
-- ARGV[7]  the id stem of the message.dropped events (ev_ and 16 hex digits:
--          the i-th dropped's id is it and i in 8 hex digits)
-- ARGV[8]  their JSON without id ('' : none): type, at_ms, room; each kept
--          with the message's "held_id", "uid", "kind", "to" and "why"
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
keep_event(KEYS[4], ARGV[6], '"held_id":' .. cjson.encode(id))

local reply = {id, 0}
local over = redis.call('ZCARD', rvq) - tonumber(ARGV[4])
if over > 0 then
  for i, old in ipairs(redis.call('ZRANGE', rvq, 0, over - 1)) do
    local record = redis.call('HGET', rv, old)
    reply[#reply + 1] = old
    reply[#reply + 1] = record
    reply[#reply + 1] = redis.call('HGET', rv, 'b:' .. old)
    if ARGV[8] ~= '' and record then
      -- {uid, kind, to, at_ms, why, cmid}; to is nil for a message to the room
      local r = cmsgpack.unpack(record)
      keep_event_as(KEYS[4], ARGV[7] .. string.format('%08x', i), ARGV[8], table.concat({
        '"held_id":' .. cjson.encode(old), '"uid":' .. cjson.encode(r[1]),
        '"kind":' .. cjson.encode(r[2]),
        '"to":' .. (type(r[3]) == 'string' and cjson.encode(r[3]) or 'null'),
        '"why":' .. cjson.encode(r[5])}, ','))
    end
    forget(rv, old)
  end
  redis.call('ZREMRANGEBYRANK', rvq, 0, over - 1)
end
push_back(ARGV[5])
return reply
