-- operators_vip.lua: compare-and-swap of rooms' sect records; each swap atomic, all
-- of them in one call. Every node may apply the automatic rule: a swap names
-- the record it replaces, so of two nodes deciding at once one wins and the
-- other reads the new record before deciding again.
--
-- KEYS[1]  lr:{lr}:vip    set: the rooms in the vip sect
-- KEYS[2]  lr:{lr}:vips   hash: room -> record
-- KEYS[3]  lr:{lr}:wh     stream: the webhooks' outbox (fields e, d)
--
-- ARGV[1]  the outbox's length kept at most (approximately: OUTBOX_MAX)
-- ARGV[2..] groups of six: room, the record expected now ('' for none),
--          the record after ('' to drop it), '1' if the room is vip after,
--          the room.sect_changed event's id and JSON ('' : none), added to
--          the outbox when the swap applies
--
-- Returns one 1 (applied) or 0 (the record had changed) per group.

local whitelist, records = KEYS[1], KEYS[2]
local applied = {}
for i = 2, #ARGV, 6 do
  local room, before, after, vip = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local now = redis.call('HGET', records, room) or ''
  if now == before then
    if after == '' then
      redis.call('HDEL', records, room)
    else
      redis.call('HSET', records, room, after)
    end
    if vip == '1' then
      redis.call('SADD', whitelist, room)
    else
      redis.call('SREM', whitelist, room)
    end
    if ARGV[i + 5] ~= '' then
      redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[i + 4],
                 'd', ARGV[i + 5])
    end
    applied[#applied + 1] = 1
  else
    applied[#applied + 1] = 0
  end
end
return applied
