-- viewers.lua: count uids as viewers of a room and store a node's sketch;
-- atomic, one round trip. The rule is statsvr.viewers.plan_exact_update.
--
-- KEYS[1]  lr:{R}:vx   set: the exact set of viewers
-- KEYS[2]  lr:{R}:vm   hash: complete = '0' once the set is capped (absent: complete)
-- KEYS[3]  lr:{R}:vh   hash: node -> its HyperLogLog registers
--
-- ARGV[1]  threshold: the most uids the exact set holds
-- ARGV[2]  ttl_ms: the room's viewers history lives this long after this call
-- ARGV[3]  the node            ARGV[4]  1 when ARGV[5] is a sketch to store, else 0
-- ARGV[5]  the node's registers (or '')
-- ARGV[6..]  the uids, in order
--
-- Returns {size of the exact set, 1 when complete else 0}.

local vx, vm, vh = KEYS[1], KEYS[2], KEYS[3]
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

if ARGV[4] == '1' then
  redis.call('HSET', vh, ARGV[3], ARGV[5])
end
redis.call('PEXPIRE', vx, ARGV[2])
redis.call('PEXPIRE', vm, ARGV[2])
redis.call('PEXPIRE', vh, ARGV[2])
return {redis.call('SCARD', vx), complete and 1 or 0}
