-- stats_series.lua: add one online sample of a room to its bucket in every resolution;
-- atomic, one call per sample.
--
-- KEYS[1]    lr:{R}:tsl           string: time of the last sample taken (Unix ms)
-- KEYS[2]    lr:{R}:meta          hash: the room's log (field 'by': a room of one
--                                 sender, see log_append.lua), read only
-- KEYS[2+j]  lr:{R}:ts:<step j>   zset: member "<start>:<min>:<max>:<sum>:<count>",
--                                 score start (Unix s, a multiple of step j)
--
-- ARGV[1]  t_ms: the sample's time (Unix ms)     ARGV[2]  online: the count
-- ARGV[3]  min_gap_ms: skip the sample when less than this after the last one
-- ARGV[4]  ms the series lives after this sample (the longest retention; a
--          room of one sender's no longer than its log has left)
-- then per resolution j: ARGV[3 + 2j] its step and ARGV[4 + 2j] its retention (s)
--
-- Returns 1 when the sample was taken, 0 when it was skipped.

local t = tonumber(ARGV[1])
local online = tonumber(ARGV[2])
local last = redis.call('GET', KEYS[1])
if last and t - tonumber(last) < tonumber(ARGV[3]) then
  return 0
end
local keep = tonumber(ARGV[4])
if redis.call('HEXISTS', KEYS[2], 'by') == 1 then
  local log_left = redis.call('PTTL', KEYS[2])
  if log_left > 0 and log_left < keep then
    keep = log_left
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', keep)

for j = 1, #KEYS - 2 do
  local key = KEYS[2 + j]
  local step = tonumber(ARGV[3 + 2 * j])
  local retention = tonumber(ARGV[4 + 2 * j])
  -- One division: t / 1000 / step could round up onto the next boundary.
  local start = math.floor(t / (1000 * step)) * step
  -- %d, not tostring: Lua 5.1 prints large numbers in exponent form.
  local score = string.format('%d', start)
  local low, high, sum, count = online, online, online, 1
  local have = redis.call('ZRANGEBYSCORE', key, score, score)
  if #have > 0 then
    local l, h, s, c = string.match(have[1], '^%-?%d+:(%-?%d+):(%-?%d+):(%-?%d+):(%d+)$')
    if l then
      low = math.min(low, tonumber(l))
      high = math.max(high, tonumber(h))
      sum = sum + tonumber(s)
      count = count + tonumber(c)
    end
    redis.call('ZREMRANGEBYSCORE', key, score, score)
  end
  redis.call('ZADD', key, score,
             string.format('%d:%d:%d:%d:%d', start, low, high, sum, count))
  -- Keep the bucket holding t and the retention // step - 1 before it
  -- (statsvr.series.Resolution.horizon).
  local horizon = start - (math.floor(retention / step) - 1) * step
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. string.format('%d', horizon))
  redis.call('PEXPIRE', key, keep)
end
return 1
