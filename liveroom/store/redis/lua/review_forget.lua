-- review_forget.lua: forget(rv, id), sent in front of review_hold.lua and
-- review_decide.lua (see calls.Lua): a held message's record leaves the
-- room's review hash (lr:{R}:rv), its client_msg_id's index too. The caller
-- takes it out of its sorted set (rvq or rvd).

local function forget(rv, id)
  local cmid = redis.call('HGET', rv, 'k:' .. id)
  if cmid then
    redis.call('HDEL', rv, 'c:' .. cmid, 'k:' .. id)
  end
  redis.call('HDEL', rv, id, 'b:' .. id, 's:' .. id)
end

-- The room's three keys live ttl ms from now (a key that does not exist
-- yet gets it when a later call writes it).
local function push_back(ttl)
  for i = 1, 3 do
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
