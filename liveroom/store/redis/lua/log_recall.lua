-- log_recall.lua: recall a message; atomic, one call. Its tombstone takes its
-- place and the recall's notice is appended, in one step: no reader ever
-- finds the one without the other.
--
-- The message leaves its streams (XDEL: its body is gone from the store);
-- what its tombstone keeps goes to the room's recalled hash, and the notice
-- (model.recall_notice's body, of uid '', important; a personal message's is
-- a personal message to its addressee) is appended by append
-- (log_append_fn.lua, sent in front with log_new.lua), as any message is:
-- its seq, its client_msg_id, the trimming, the notify. A pull that holds
-- the notice puts the tombstone back in the message's place. The notice's
-- seq goes to the recalled hash too, so a retry answers the same and
-- appends nothing while the hash lives (past the client_msg_id's
-- dedup_ttl). A record without it (a recall of an older version, whose
-- notice was a call of its own) gets its notice on its retry: the
-- client_msg_id answers the first one's, or it is appended now.
--
-- KEYS[1]  lr:{R}:meta   hash: epoch (no log: nothing to recall)
-- KEYS[2]  lr:{R}:log    stream: id <seq>-0, fields m (packed message), c (ic)
-- KEYS[3]  lr:{R}:imp    stream: important entries, fields m, c, t
-- KEYS[4]  lr:{R}:rc     hash: <seq> (or p<position>) -> msgpack
--                        {uid, important, ts, ic[, to, n]}; <field>:notice ->
--                        the seq (position) of its notice
-- KEYS[5]  lr:{R}:pm     stream: personal messages, id <position>-0, fields m, n, t
-- KEYS[6]  lr:{R}:pn     hash: addressee uid -> its ordinal in the room
-- KEYS[7]  the notice's client_msg_id key: lr:{R}:cmid:!recall:room:<seq>, or
--          lr:{R}:pcmid:!recall:personal:<position>
--
-- ARGV[1]  the seq (a personal message: its position)
-- ARGV[2]  ms the recalled hash lives (the room's ttl)
-- ARGV[3]  the sender the message must be of, a normal one ('' : anybody's)
-- ARGV[4]  the oldest ts (ms) such a sender may recall
-- ARGV[5]  '1' for a personal message, else '0'
-- ARGV[6..25] the notice's append, as log_append.lua's ARGV[1..20] (uid '',
--          important, its ts, its client_msg_id, no rate window, may not
--          create the log); its ARGV[2] (the packed notice) and ARGV[19]
--          (the addressee) are this script's to fill in
-- ARGV[26] the message.recalled event's JSON ('' : none), kept in KEYS[8]
--          (room_event_fn.lua, sent in front) with its "uid" and "to" when
--          the message is recalled now, not when it was before
-- KEYS[8]  lr:{R}:ev     list: the room's events not yet moved to the outbox
--
-- Returns {1, packed, notice} when recalled (now or before): packed is what
-- the tombstone keeps, notice the seq (position) of the notice; {2, packed}
-- when it is not ARGV[3]'s or older than ARGV[4] (nothing changed); {0} when
-- the room keeps no such message (no log, trimmed, never sent) or it is a
-- recall's notice itself (uid ''). Nothing is written before the answer is
-- known: a refused recall changes nothing.

local meta, log, imp, rc, pm, pn, cmid = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6], KEYS[7]
-- No log where append sees none (no epoch): the notice may not create one,
-- so from here on append never refuses it.
if not redis.call('HGET', meta, 'epoch') then
  return {0}
end
local seq, sender, since = ARGV[1], ARGV[3], tonumber(ARGV[4])
local personal = ARGV[5] == '1'
local field = personal and ('p' .. seq) or seq
local notice_field = field .. ':notice'
-- A sender recalls its own normal messages only: an important one carrying
-- its uid is the backend's (a gift's announcement).
local function refused(uid, ts, important)
  return sender ~= '' and (uid ~= sender or ts < since or important)
end

-- The notice as codec.pack_stored packs a message: {uid, important, ts, body
-- [, to]}, its body model.recall_notice's map with its keys in that
-- function's order (cmsgpack.pack of a Lua table would put them in any).
local function packed_notice(kept, ts)
  local pack = cmsgpack.pack
  local body = {'recall', tonumber(seq), 'uid', kept[1], 'important', kept[2],
                'ts', kept[3], 'ic', kept[4]}
  local n = kept[6] or 0
  if n ~= 0 then
    body[#body + 1], body[#body + 2] = 'n', n
  end
  local parts = {string.char(0x80 + #body / 2)}  -- a fixmap: at most 6 pairs
  for _, value in ipairs(body) do
    parts[#parts + 1] = pack(value)
  end
  local to = kept[5]
  return table.concat({string.char(to and 0x95 or 0x94), pack(''), pack(true), pack(ts),
                       table.concat(parts), to and pack(to) or ''})
end

-- Append the notice of a recall whose tombstone keeps kept; its seq (position).
local function append_notice(kept)
  local argv = {unpack(ARGV, 6, 25)}  -- the notice's: log_append.lua's ARGV[1..20]
  argv[2] = packed_notice(kept, tonumber(argv[4]))
  argv[19] = kept[5] or ''
  -- Its KEYS[5] and KEYS[6] (rate windows) are never read: there are none.
  local reply = append({meta, log, imp, cmid, meta, meta, pm, pn}, argv)
  local notice = reply[2]
  redis.call('HSET', rc, notice_field, notice)
  redis.call('PEXPIRE', rc, ARGV[2])
  return notice
end

local done = redis.call('HGET', rc, field)
if done then
  local kept = cmsgpack.unpack(done)
  if refused(kept[1], kept[3], kept[2]) then
    return {2, done}
  end
  local notice = redis.call('HGET', rc, notice_field)
  return {1, done, notice and tonumber(notice) or append_notice(kept)}
end
local id = seq .. '-0'
local streams = personal and {pm} or {log, imp}
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
if refused(message[1], message[3], message[2]) then
  return {2, kept}
end
for _, stream in ipairs(streams) do
  redis.call('XDEL', stream, id)
end
redis.call('HSET', rc, field, kept)
local notice = append_notice(record)
keep_event(KEYS[8], ARGV[26], '"uid":' .. cjson.encode(record[1]) .. ',"to":' ..
           (personal and cjson.encode(record[5]) or 'null'))
return {1, kept, notice}
