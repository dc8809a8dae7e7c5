-- counters_likes.lua: add a node's merged taps to a room's likes; atomic, one call per room.
-- The current broadcast's total, and the taps' bucket in every resolution of
-- the likes series (summed), buckets past the retention dropped.
--
-- KEYS[1]    lr:{R}:lk            string: the current broadcast's likes total
-- KEYS[1+j]  lr:{R}:lks:<step j>  zset: member "<start>:<taps>", score start
--                                 (Unix s, a multiple of step j)
-- KEYS[#KEYS-1] lr:{R}:lkw:<id>   string: this write, taken (ARGV[#ARGV-1] names it)
-- KEYS[#KEYS] lr:{R}:bc           hash: p:<epoch> = '<k> <kept until ms>' for the
--                                 epoch broadcast k ended with and those it renewed
--                                 (operators_end_broadcast.lua)
--
-- ARGV[1]  n: the taps (an integer >= 1)     ARGV[2]  now_ms (the caller's clock)
-- ARGV[3]  ms the total lives after this add (the history's ttl)
-- ARGV[4]  ms the series lives after this add (its longest retention)
-- then per resolution j: ARGV[3 + 2j] its step and ARGV[4 + 2j] its retention (s)
-- ARGV[#ARGV-2]  ms a write's name is remembered (the dedup ttl)
-- ARGV[#ARGV-1]  the write's name ('': none); a write of that name the room
--                took already adds nothing (a retry after a lost reply)
-- ARGV[#ARGV]  the epoch the taps were acknowledged in ('': the current one)
--
-- A tap belongs to the broadcast in which it was acknowledged: taps of an
-- epoch a broadcast ended with go to that broadcast's archive
-- (lr:{R}:vm:<k>, field likes) while it is kept, not to the current total.
-- Returns the new total (the archive's, for those).

local write = ARGV[#ARGV - 1]
if write ~= '' and not redis.call('SET', KEYS[#KEYS - 1], '1', 'NX', 'PX', ARGV[#ARGV - 2]) then
  return tonumber(redis.call('GET', KEYS[1]) or '0')
end

local n = tonumber(ARGV[1])
local t = tonumber(ARGV[2])
local bc = KEYS[#KEYS]
local epoch = ARGV[#ARGV]
local total
if epoch ~= '' then
  local ended = redis.call('HGET', bc, 'p:' .. epoch)
  if ended then
    -- The archive's name is the total's with vm:<k> for lk (same hash slot).
    local archive = (string.gsub(KEYS[1], ':lk$', ':vm:' .. string.match(ended, '^(%d+)')))
    if redis.call('EXISTS', archive) == 1 then
      total = redis.call('HINCRBY', archive, 'likes', n)
    end
  end
end
if not total then
  total = redis.call('INCRBY', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end

for j = 1, #KEYS - 3 do
  local key = KEYS[1 + j]
  local step = tonumber(ARGV[3 + 2 * j])
  local retention = tonumber(ARGV[4 + 2 * j])
  -- One division: t / 1000 / step could round up onto the next boundary.
  local start = math.floor(t / (1000 * step)) * step
  -- The horizon follows the newest bucket: taps of a bucket already past it
  -- (a node's clock far behind) count in the total only.
  local newest = start
  local last = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
  if #last > 0 and tonumber(last[2]) > newest then
    newest = tonumber(last[2])
  end
  local horizon = newest - (math.floor(retention / step) - 1) * step
  if start >= horizon then
    -- %d, not tostring: Lua 5.1 prints large numbers in exponent form.
    local score = string.format('%d', start)
    local taps = n
    local have = redis.call('ZRANGEBYSCORE', key, score, score)
    if #have > 0 then
      local s = string.match(have[1], '^%-?%d+:(%d+)$')
      if s then
        taps = taps + tonumber(s)
      end
      redis.call('ZREMRANGEBYSCORE', key, score, score)
    end
    redis.call('ZADD', key, score, string.format('%d:%d', start, taps))
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. string.format('%d', horizon))
  redis.call('PEXPIRE', key, ARGV[4])
end
return total
