-- outbox_replay.lua: failed events go back to the outbox as new entries,
-- each under its own event id; atomic, one call.
--
-- KEYS[1]  lr:{lr}:wh    KEYS[2]  lr:{lr}:whf    KEYS[3]  lr:{lr}:whfo
-- (see outbox_give_up.lua)
--
-- ARGV[1]  events the outbox keeps at most (MAXLEN ~)
-- ARGV[2..]  the event ids to replay
--
-- Returns the ids replayed (those the failed list held).

local replayed = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local data = redis.call('HGET', KEYS[2], 'd:' .. id)
  if data then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'e', id, 'd', data)
    redis.call('HDEL', KEYS[2], 'd:' .. id, 'w:' .. id)
    replayed[#replayed + 1] = id
  end
  redis.call('ZREM', KEYS[3], id)
end
return replayed
