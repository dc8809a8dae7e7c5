-- review_decide.lua: decide a held message (approve or deny); atomic, one
-- call, so of two decisions racing one wins. A message decided before keeps
-- its decision. The room remembers its newest decisions, review_max of
-- them: the oldest beyond are forgotten.
--
-- KEYS[1]  lr:{R}:rv    hash (see review_hold.lua)
-- KEYS[2]  lr:{R}:rvq   zset: ids waiting, by n
-- KEYS[3]  lr:{R}:rvd   zset: ids decided, by dn
-- KEYS[4]  lr:{R}:ev    list: the room's webhook events not yet moved
--
-- ARGV[1]  the id          ARGV[2]  the verdict: 'approve' or 'deny'
-- ARGV[3]  decisions remembered at most (review_max)
-- ARGV[4]  ms the room's queue lives after this call (the room's ttl)
-- ARGV[5]  the decision's webhook event JSON ('' : none), kept in KEYS[4]
--          (room_event_fn.lua) with the message's "uid" and "kind" when
--          this call decides it
--
-- Returns {} for an id the room does not know; else {first, decision,
-- record, body}: first 1 when this call decided it (0: decided before),
-- decision the s:<id> field ('deny', 'approve' or 'approve <epoch> <seq>'),
-- body nil once denied or settled.

local rv, rvq, rvd = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]
local record = redis.call('HGET', rv, id)
if not record then
  return {}
end
local decided = redis.call('HGET', rv, 's:' .. id)
if decided then
  return {0, decided, record, redis.call('HGET', rv, 'b:' .. id)}
end

local verdict = ARGV[2]
redis.call('HSET', rv, 's:' .. id, verdict)
redis.call('ZREM', rvq, id)
redis.call('ZADD', rvd, redis.call('HINCRBY', rv, 'dn', 1), id)
if verdict == 'deny' then
  redis.call('HDEL', rv, 'b:' .. id)
end
local body = redis.call('HGET', rv, 'b:' .. id)
if ARGV[5] ~= '' then
  local r = cmsgpack.unpack(record)  -- {uid, kind, to, at_ms, why, cmid}
  keep_event(KEYS[4], ARGV[5], '"uid":' .. cjson.encode(r[1]) .. ',"kind":' ..
             cjson.encode(r[2]))
end

local over = redis.call('ZCARD', rvd) - tonumber(ARGV[3])
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', rvd, 0, over - 1)) do
    forget(rv, old)
  end
  redis.call('ZREMRANGEBYRANK', rvd, 0, over - 1)
end
push_back(ARGV[4])
return {1, verdict, record, body}
