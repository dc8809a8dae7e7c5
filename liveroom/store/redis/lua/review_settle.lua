-- review_settle.lua: an approved message was stored; its decision keeps
-- where, and its body goes. Anything but an approval is left as it is.
--
-- KEYS[1]  lr:{R}:rv    KEYS[2]  lr:{R}:rvq    KEYS[3]  lr:{R}:rvd
-- (see review_hold.lua)   KEYS[4]  lr:{R}:ev  the room's webhook events
--
-- ARGV[1]  the id
-- ARGV[2]  the decision to keep: 'approve <epoch> <seq>'
-- ARGV[3]  ms the room's queue lives after this call (the room's ttl)
-- ARGV[4]  the message.approved event's JSON ('' : none), kept in KEYS[4]
--          (room_event_fn.lua) when this call settles it first
--
-- Returns 1 when settled (now or before), 0 when the id is no approval.

local rv = KEYS[1]
local id = ARGV[1]
local decided = redis.call('HGET', rv, 's:' .. id)
if not decided or string.sub(decided, 1, 7) ~= 'approve' then
  return 0
end
if decided == 'approve' then
  keep_event(KEYS[4], ARGV[4], '')
end
redis.call('HSET', rv, 's:' .. id, ARGV[2])
redis.call('HDEL', rv, 'b:' .. id)
push_back(ARGV[3])
return 1
