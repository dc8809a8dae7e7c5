-- stats_viewers.lua: count uids as viewers of a room and store a node's sketch;
-- atomic, one round trip. The rule's reference is tests/models.py
-- (plan_exact_update); the memory engine keeps the same rule.
--
-- KEYS[1]  lr:{R}:vx   set: the exact set of viewers
-- KEYS[2]  lr:{R}:vm   hash: complete = '0' once the set is capped (absent: complete)
-- KEYS[3]  lr:{R}:vh   hash: node -> its HyperLogLog registers
-- KEYS[4]  lr:{R}:bc   hash: n = the current broadcast (absent: 1)
-- KEYS[5]  lr:{R}:meta hash: the room's log (field 'by': a room of one sender,
--                      see log_append.lua), read only
--
-- ARGV[1]  threshold: the most uids the exact set holds
-- ARGV[2]  ttl_ms: the room's viewers history lives this long after this call
--          (no longer than its log has left when the room is one sender's and
--          the uids are that sender alone: a room nobody else read leaves no
--          history behind, and another uid's join keeps the full ttl_ms, as
--          its read makes the room last; see log_touch.lua)
-- ARGV[3]  the node            ARGV[4]  1 when ARGV[5] is a sketch to store (once
--          the set is capped, see below), else 0
-- ARGV[5]  the node's registers (or '')
-- ARGV[6..]  the uids, in order
--
-- Returns {size of the exact set, 1 when complete else 0, the broadcast}.

local vx, vm, vh, bc = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local threshold = tonumber(ARGV[1])
local complete = redis.call('HGET', vm, 'complete') ~= '0'

if complete then
  local size = redis.call('SCARD', vx)
  for i = 6, #ARGV do
    local uid = ARGV[i]
    if redis.call('SISMEMBER', vx, uid) == 0 then
      if size < threshold then
        redis.call('SADD', vx, uid)
        size = size + 1
      else
        -- This uid would exceed the threshold: the set stops growing for good.
        redis.call('HSET', vm, 'complete', '0')
        complete = false
        break
      end
    end
  end
end

-- The sketch is kept only once the exact set is capped: below the threshold
-- the exact set is the whole truth, and 16 KiB a node a room would be waste.
if ARGV[4] == '1' and not complete then
  redis.call('HSET', vh, ARGV[3], ARGV[5])
end
local ttl = tonumber(ARGV[2])
local by = redis.call('HGET', KEYS[5], 'by')
if by and #ARGV >= 6 then
  local alone = true
  for i = 6, #ARGV do
    if ARGV[i] ~= by then
      alone = false
      break
    end
  end
  local log_left = redis.call('PTTL', KEYS[5])
  if alone and log_left > 0 and log_left < ttl then
    ttl = log_left
  end
end
redis.call('PEXPIRE', vx, ttl)
redis.call('PEXPIRE', vm, ttl)
redis.call('PEXPIRE', vh, ttl)
-- The broadcast number outlives every viewers history of the room, so it
-- never goes back while one is kept (a room never ended has no bc at all).
local left = redis.call('PTTL', bc)
if left >= 0 and left < ttl then
  redis.call('PEXPIRE', bc, ttl)
end
local broadcast = tonumber(redis.call('HGET', bc, 'n') or '1')
return {redis.call('SCARD', vx), complete and 1 or 0, broadcast}
