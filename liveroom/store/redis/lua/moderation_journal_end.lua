-- moderation_journal_end.lua: correct when a room's moderation ends in the
-- journal (Redis Cluster: after moderation_stamp.lua found that the room's last
-- step saw another end than the one the act noted: another act's step came
-- between this act's step and its note). Atomic, one call, in the global slot.
--
-- KEYS[1]  lr:{lr}:modj  KEYS[2]  lr:{lr}:modx   (as moderation_note.lua's)
--
-- ARGV[1]  the room   ARGV[2]  when its moderation ends ('%d' ms or 'inf')
-- ARGV[3]  the version the act's note gave
--
-- Only while the act's note is the room's last (a later note brings its own
-- end, corrected by its own act the same way). Returns 1 when corrected.

if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '-1') ~= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
