-- log_recall.lua: put a message's tombstone in its place; atomic, one call.
-- The message leaves its streams (XDEL: its body is gone from the store);
-- what its tombstone keeps goes to the room's recalled hash, so a retry
-- answers the same. The caller then appends the recall's notice
-- (log_append.lua), from which a pull puts the tombstone back in the message's
-- place.
--
-- KEYS[1]  lr:{R}:meta   hash: epoch (no log: nothing to recall)
-- KEYS[2]  lr:{R}:log    stream: id <seq>-0, fields m (packed message), c (ic)
-- KEYS[3]  lr:{R}:imp    stream: important entries, fields m, c, t
-- KEYS[4]  lr:{R}:rc     hash: <seq> (or p<position>) -> msgpack
--                        {uid, important, ts, ic[, to, n]}
-- KEYS[5]  lr:{R}:pm     stream: personal messages, id <position>-0, fields m, n, t
--
-- ARGV[1]  the seq (a personal message: its position)
-- ARGV[2]  ms the recalled hash lives (the room's ttl)
-- ARGV[3]  the sender the message must be of ('' : anybody's)
-- ARGV[4]  the oldest ts (ms) such a sender may recall
-- ARGV[5]  '1' for a personal message, else '0'
--
-- Returns {1, packed} when recalled (now or before); {2, packed} when it is
-- not ARGV[3]'s or older than ARGV[4] (nothing changed); {0} when the room
-- keeps no such message (no log, trimmed, never sent) or it is a recall's
-- notice itself (uid '').

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
local seq, sender, since = ARGV[1], ARGV[3], tonumber(ARGV[4])
local personal = ARGV[5] == '1'
local field = personal and ('p' .. seq) or seq
local function refused(uid, ts)
  return sender ~= '' and (uid ~= sender or ts < since)
end
local done = redis.call('HGET', KEYS[4], field)
if done then
  local kept = cmsgpack.unpack(done)
  return {refused(kept[1], kept[3]) and 2 or 1, done}
end
local id = seq .. '-0'
local streams = personal and {KEYS[5]} or {KEYS[2], KEYS[3]}
local found = {}
for _, stream in ipairs(streams) do
  found = redis.call('XRANGE', stream, id, id)
  if #found > 0 then break end
end
if #found == 0 then
  return {0}
end
local packed, ic, n
local fields = found[1][2]
for i = 1, #fields, 2 do
  if fields[i] == 'm' then packed = fields[i + 1] end
  if fields[i] == 'c' then ic = tonumber(fields[i + 1]) end
  if fields[i] == 'n' then n = tonumber(fields[i + 1]) end
end
if not packed then
  return {0}
end
local message = cmsgpack.unpack(packed)  -- {uid, important, ts, body[, to]}
if message[1] == '' then
  return {0}
end
local record = {message[1], message[2], message[3], ic or 0}
if personal then
  record = {message[1], true, message[3], 0, message[5], n or 0}
end
local kept = cmsgpack.pack(record)
if refused(message[1], message[3]) then
  return {2, kept}
end
for _, stream in ipairs(streams) do
  redis.call('XDEL', stream, id)
end
redis.call('HSET', KEYS[4], field, kept)
redis.call('PEXPIRE', KEYS[4], ARGV[2])
return {1, kept}
