-- outbox_release.lua: give the webhooks' delivery lease up, if the caller
-- holds it (another node's lease is left alone).
--
-- KEYS[1]  lr:{lr}:whl  string: the holder's name
--
-- ARGV[1]  the holder giving it up
--
-- Returns 1 when it was released, else 0.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
