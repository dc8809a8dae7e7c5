-- append.lua: store one message in a room's log; atomic, one round trip.
--
-- KEYS[1]  lr:{R}:meta        hash: epoch, seq (head), ic (important count)
-- KEYS[2]  lr:{R}:log         stream: id <seq>-0, fields m (packed message), c (ic)
-- KEYS[3]  lr:{R}:imp         stream: important entries, fields m, c, t (ts in ms)
-- KEYS[4]  lr:{R}:cmid:<id>   string: seq of the first send of a client_msg_id
--                             (an unused key of the room when ARGV[11] is 0)
--
-- ARGV[1]  epoch to start with when the room has no log (random, from the caller)
-- ARGV[2]  the packed message (liveroom.codec.pack_stored)
-- ARGV[3]  1 when the message is important, else 0
-- ARGV[4]  the message's ts in ms (the important window counts back from it)
-- ARGV[5]  log_cap              ARGV[6]  important_keep
-- ARGV[7]  important_window_ms  ARGV[8]  important_hard_cap
-- ARGV[9]  room_ttl_ms          ARGV[10] dedup_ttl_ms
-- ARGV[11] 1 when KEYS[4] names a client_msg_id, else 0
-- ARGV[12] the notify channel   ARGV[13] the room name
--
-- Returns {epoch, seq, duplicate}: duplicate is 1 when the client_msg_id was
-- seen (seq is then the first send's and nothing was stored), else 0.

local meta, log, imp, cmid = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local important = ARGV[3] == '1'
local has_cmid = ARGV[11] == '1'

local epoch = redis.call('HGET', meta, 'epoch')
if epoch then
  if has_cmid then
    local seen = redis.call('GET', cmid)
    if seen then
      return {epoch, tonumber(seen), 1}
    end
  end
else
  -- No log (new, expired or lost): a new epoch from seq 0. Leftover streams
  -- (meta evicted alone) would refuse ids from 1 again, so they go too; a
  -- leftover client_msg_id belongs to the lost epoch and is overwritten below.
  epoch = ARGV[1]
  redis.call('DEL', log, imp)
  redis.call('HSET', meta, 'epoch', epoch, 'seq', 0, 'ic', 0)
end

local seq = redis.call('HINCRBY', meta, 'seq', 1)
local ic = redis.call('HINCRBY', meta, 'ic', important and 1 or 0)
-- %d, not tostring: Lua 5.1 prints large numbers in exponent form.
local id = string.format('%d-0', seq)
redis.call('XADD', log, 'MAXLEN', ARGV[5], id, 'm', ARGV[2], 'c', ic)

if important then
  redis.call('XADD', imp, id, 'm', ARGV[2], 'c', ic, 't', ARGV[4])
  -- Drop the oldest while more than important_keep remain and the oldest is
  -- older than the window or more than important_hard_cap remain (the same
  -- rule as the memory engine), then cut them off with one exact XTRIM.
  local keep = tonumber(ARGV[6])
  local hard = tonumber(ARGV[8])
  local oldest_ok = tonumber(ARGV[4]) - tonumber(ARGV[7])
  local n = redis.call('XLEN', imp)
  local cut = nil
  local from = '-'
  while n > keep do
    local batch = redis.call('XRANGE', imp, from, '+', 'COUNT', 100)
    if #batch == 0 then break end
    local stop = false
    for _, e in ipairs(batch) do
      -- e = {id, {'m', packed, 'c', ic, 't', ts}}
      if n > keep and (n > hard or tonumber(e[2][6]) < oldest_ok) then
        cut = e[1]
        n = n - 1
      else
        stop = true
        break
      end
    end
    if stop then break end
    from = '(' .. batch[#batch][1]
  end
  if cut then
    -- MINID drops every id below the threshold: the id just after the cut.
    local cut_seq = tonumber(string.match(cut, '^(%d+)'))
    redis.call('XTRIM', imp, 'MINID', string.format('%d-0', cut_seq + 1))
  end
end

redis.call('PEXPIRE', meta, ARGV[9])
redis.call('PEXPIRE', log, ARGV[9])
redis.call('PEXPIRE', imp, ARGV[9])
if has_cmid then
  redis.call('SET', cmid, seq, 'PX', ARGV[10])
end
redis.call('PUBLISH', ARGV[12], string.format('%d %s', seq, ARGV[13]))
return {epoch, seq, 0}
