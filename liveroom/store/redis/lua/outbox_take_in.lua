-- outbox_take_in.lua: add events moved from a room to the outbox, each once;
-- atomic, one call.
--
-- KEYS[1]  lr:{lr}:wh    stream: fields e (event id), d (its JSON)
-- KEYS[2]  lr:{lr}:whm   zset: event ids taken in -> when (ms)
--
-- ARGV[1]  the stream's length kept at most (approximately: OUTBOX_MAX)
-- ARGV[2]  ms an id is remembered (the server's clock: TIME)
-- ARGV[3], ARGV[4]  the first event's id and JSON; then the next's...
--
-- An id remembered (a move repeated: its mover died, or failed, between
-- this script and taking the events out of their room) is not added again.
-- Returns how many were added.

local stream, moved = KEYS[1], KEYS[2]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', moved, '-inf', string.format('%d', now - tonumber(ARGV[2])))
local added = 0
for i = 3, #ARGV, 2 do
  if not redis.call('ZSCORE', moved, ARGV[i]) then
    redis.call('XADD', stream, 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[i], 'd', ARGV[i + 1])
    redis.call('ZADD', moved, string.format('%d', now), ARGV[i])
    added = added + 1
  end
end
return added
