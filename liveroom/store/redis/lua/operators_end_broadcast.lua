-- operators_end_broadcast.lua: end a room's broadcast; atomic, one script call.
-- A new epoch with an empty log (seq and ic go on), the next broadcast number,
-- the viewers history set aside under the ended number (with its likes and
-- gift totals in vm:<n>, the top of its ranking and its moderation audit; the
-- next broadcast's counters and audit start empty, the room's sanctions and
-- slow mode stay), a record of when it ended, and the notify. The room is live (see operators_start_broadcast.lua): it lives
-- room_ttl_ms and reads keep it, message or not.
--
-- KEYS[1]  lr:{R}:meta    hash: epoch, seq (head), ic
-- KEYS[2]  lr:{R}:log     stream: the log
-- KEYS[3]  lr:{R}:imp     stream: important entries kept beyond the log cap
-- KEYS[4]  lr:{R}:bc      hash: n = the current broadcast (absent: 1);
--                         e:<k> = '<ended_ms> <kept until ms>' of ended ones;
--                         p:<epoch> = '<k> <kept until ms>': the epoch k ended
--                         with, and those renewed before it (meta's 'was')
-- KEYS[5]  lr:{R}:vx      KEYS[6]  lr:{R}:vm      KEYS[7]  lr:{R}:vh
--                         the current broadcast's viewers history
-- KEYS[8]  lr:{R}:vx:<n>  KEYS[9]  lr:{R}:vm:<n>  KEYS[10] lr:{R}:vh:<n>
--                         where it goes, n = ARGV[1]
-- KEYS[11] lr:{R}:pm      KEYS[12] lr:{R}:pn   (personal messages, ordinals)
-- KEYS[13] lr:{R}:lk      KEYS[14] lr:{R}:gr      KEYS[15] lr:{R}:gf
--                         the current broadcast's likes total, ranking, gifts
-- KEYS[16] lr:{R}:gr:<n>  where its ranking goes (the top ARGV[8])
-- KEYS[17] lr:{R}:aud     the current broadcast's moderation audit
-- KEYS[18] lr:{R}:aud:<n> where it goes
-- KEYS[19] lr:{R}:ev      list: the room's webhook events not yet moved
--
-- ARGV[1]  n: the current broadcast as the caller read it (names KEYS[8..10],
--          KEYS[16], KEYS[18])
-- ARGV[2]  the new epoch (random, from the caller)
-- ARGV[3]  now_ms: when the broadcast ended (the caller's clock)
-- ARGV[4]  ttl_ms: how long the ended history is kept
-- ARGV[5]  room_ttl_ms
-- ARGV[6]  how to notify, as log_append.lua's ARGV[12]   ARGV[7]  the room name
-- ARGV[8]  givers an ended ranking keeps (RANKING_KEPT)
-- ARGV[9]  the broadcast.ended event's JSON ('' : none), kept in KEYS[19]
--          (room_event_fn.lua) with its "broadcast" (the ended one's
--          number); the mover reads its figures from the archive written here
--
-- Returns {new epoch, new broadcast}; {'', 0} when the current broadcast is
-- no longer ARGV[1] (ended meanwhile: the caller reads it again and retries).

local meta, log, imp, bc = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ended = tonumber(redis.call('HGET', bc, 'n') or '1')
if ended ~= tonumber(ARGV[1]) then
  return {'', 0}
end
local now, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])

-- A new epoch whatever the current one: every listener resets into an empty
-- log (the ended broadcast's messages go, personal ones too); seq, ic, the
-- personal sequence and the ordinals go on.
local epoch = ARGV[2]
local old_epoch = redis.call('HGET', meta, 'epoch')
local renewed = redis.call('HGET', meta, 'was')  -- log_epoch.lua
if old_epoch then
  redis.call('HSET', meta, 'epoch', epoch, 'root', epoch)
  redis.call('DEL', log, imp, KEYS[11])
  redis.call('HDEL', meta, 'by', 'was')
else
  -- No log: start one at seq 0 (log_new.lua).
  new_log(meta, log, imp, KEYS[11], KEYS[12], epoch)
end
redis.call('HSET', meta, 'live', 1)
redis.call('PEXPIRE', meta, ARGV[5])

-- The viewers history aside; vm:<n> always exists while it is kept.
for i = 0, 2 do
  if redis.call('EXISTS', KEYS[5 + i]) == 1 then
    redis.call('RENAME', KEYS[5 + i], KEYS[8 + i])
  else
    redis.call('DEL', KEYS[8 + i])
  end
end
redis.call('HSET', KEYS[9], 'ended', ARGV[3],
           'likes', redis.call('GET', KEYS[13]) or '0',
           'gifts', redis.call('HGET', KEYS[15], 't') or '0')
if redis.call('EXISTS', KEYS[14]) == 1 then
  redis.call('RENAME', KEYS[14], KEYS[16])
  redis.call('ZREMRANGEBYRANK', KEYS[16], 0, -1 - tonumber(ARGV[8]))
else
  redis.call('DEL', KEYS[16])
end
redis.call('DEL', KEYS[13], KEYS[15])
if redis.call('EXISTS', KEYS[17]) == 1 then
  redis.call('RENAME', KEYS[17], KEYS[18])
else
  redis.call('DEL', KEYS[18])
end
for _, i in ipairs({8, 9, 10, 16, 18}) do
  redis.call('PEXPIRE', KEYS[i], ARGV[4])
end

-- The record: drop ended broadcasts past their keeping, add this one.
local fields = redis.call('HGETALL', bc)
for i = 1, #fields, 2 do
  if string.match(fields[i], '^[ep]:') then
    local kept_until = tonumber(string.match(fields[i + 1], ' (%d+)$'))
    if not kept_until or kept_until <= now then
      redis.call('HDEL', bc, fields[i])
    end
  end
end
redis.call('HSET', bc, string.format('e:%d', ended), string.format('%d %d', now, now + ttl),
           'n', ended + 1)
if old_epoch then
  -- The epoch it ended with and those renewed before it: taps acknowledged
  -- in them and written after (counters_likes.lua) go to its archive.
  local record = string.format('%d %d', ended, now + ttl)
  redis.call('HSET', bc, 'p:' .. old_epoch, record)
  for e in string.gmatch(renewed or '', '%S+') do
    redis.call('HSET', bc, 'p:' .. e, record)
  end
end
-- bc outlives every viewers history of the room (add_viewers extends it too).
if redis.call('PTTL', bc) < ttl then
  redis.call('PEXPIRE', bc, ARGV[4])
end

local head = tonumber(redis.call('HGET', meta, 'seq'))
local how, channel = string.match(ARGV[6], '^(%u+) (.+)$')
redis.call(how, channel, string.format('%d %s', head, ARGV[7]))
keep_event(KEYS[19], ARGV[9], string.format('"broadcast":%d', ended))
return {epoch, ended + 1}
