-- moderation_journal.lua: note a room's moderation change in the journal (Redis
-- Cluster: the second step of an act, after moderation_act.lua in the room's slot;
-- the rule is moderation_note.lua's). Atomic, one call, in the global slot.
--
-- KEYS[1]  lr:{lr}:modv  KEYS[2]  lr:{lr}:modj  KEYS[3]  lr:{lr}:modx
--
-- ARGV[1]  the room   ARGV[2]  when its moderation ends ('%d' ms or 'inf',
--          as moderation_act.lua returned it)
-- ARGV[3]  now_ms (the caller's clock)   ARGV[4]  rooms pruned at most
--
-- Returns the new version.

return note(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
