-- counters_gift.lua: add one gift to a room's current broadcast; atomic, one call.
-- The giver's score in the ranking, the room's gift total and count.
--
-- KEYS[1]  lr:{R}:gr   zset: giver -> score (the sum of its gifts' values)
-- KEYS[2]  lr:{R}:gf   hash: t = the gift total, c = the gift count
-- KEYS[3]  lr:{R}:ev   list: the room's webhook events not yet moved
--
-- ARGV[1]  the giver   ARGV[2]  the value (1..10^12)
-- ARGV[3]  ms the ranking and the totals live after this gift (the history's ttl)
-- ARGV[4]  the gift.given event's JSON ('' : none), kept in KEYS[3]
--          (room_event_fn.lua) with its "rank", "score" and "total"
--
-- Returns {rank from 0 (ZREVRANK: score descending, ties by giver
-- descending), the giver's score (as Redis prints a score), the gift total}.

local score = redis.call('ZINCRBY', KEYS[1], ARGV[2], ARGV[1])
local rank = redis.call('ZREVRANK', KEYS[1], ARGV[1])
local total = redis.call('HINCRBY', KEYS[2], 't', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'c', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
-- %.0f: the score as an integer, however large (what the caller's int() makes).
keep_event(KEYS[3], ARGV[4], string.format('"rank":%d,"score":%.0f,"total":%d', rank + 1,
                                           tonumber(score), total))
return {rank, score, total}
