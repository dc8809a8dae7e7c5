-- recall.lua: put a message's tombstone in its place; atomic, one call.
-- The message leaves the log and the important stream (XDEL: its body is
-- gone from the store); what its tombstone keeps goes to the room's recalled
-- hash, so a retry answers the same. The caller then appends the recall's
-- notice (append.lua), from which a pull puts the tombstone back in the
-- message's place.
--
-- KEYS[1]  lr:{R}:meta   hash: epoch (no log: nothing to recall)
-- KEYS[2]  lr:{R}:log    stream: id <seq>-0, fields m (packed message), c (ic)
-- KEYS[3]  lr:{R}:imp    stream: important entries, fields m, c, t
-- KEYS[4]  lr:{R}:rc     hash: seq -> msgpack {uid, important, ts, ic}
--
-- ARGV[1]  the seq      ARGV[2]  ms the recalled hash lives (the room's ttl)
-- ARGV[3]  the sender the message must be of ('' : anybody's)
-- ARGV[4]  the oldest ts (ms) such a sender may recall
--
-- Returns {1, packed {uid, important, ts, ic}} when recalled (now or
-- before); {2, the same} when it is not ARGV[3]'s or older than ARGV[4]
-- (nothing changed); {0} when the room keeps no such message (no log,
-- trimmed, never sent) or it is a recall's notice itself (uid '').

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
local seq, sender, since = ARGV[1], ARGV[3], tonumber(ARGV[4])
local function refused(uid, ts)
  return sender ~= '' and (uid ~= sender or ts < since)
end
local done = redis.call('HGET', KEYS[4], seq)
if done then
  local kept = cmsgpack.unpack(done)
  return {refused(kept[1], kept[3]) and 2 or 1, done}
end
local id = seq .. '-0'
local found = redis.call('XRANGE', KEYS[2], id, id)
if #found == 0 then
  found = redis.call('XRANGE', KEYS[3], id, id)
end
if #found == 0 then
  return {0}
end
local packed, ic
local fields = found[1][2]
for i = 1, #fields, 2 do
  if fields[i] == 'm' then packed = fields[i + 1] end
  if fields[i] == 'c' then ic = tonumber(fields[i + 1]) end
end
if not packed then
  return {0}
end
local message = cmsgpack.unpack(packed)  -- {uid, important, ts, body[, to]}
if message[1] == '' then
  return {0}
end
if refused(message[1], message[3]) then
  return {2, cmsgpack.pack({message[1], message[2], message[3], ic or 0})}
end
local kept = cmsgpack.pack({message[1], message[2], message[3], ic or 0})
redis.call('XDEL', KEYS[2], id)
redis.call('XDEL', KEYS[3], id)
redis.call('HSET', KEYS[4], seq, kept)
redis.call('PEXPIRE', KEYS[4], ARGV[2])
return {1, kept}
