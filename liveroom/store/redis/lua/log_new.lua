-- log_new.lua: the one rule for a room with no log, sent in front of every
-- script that may create one (append, epoch, end_broadcast; see calls.Lua).
--
-- A room with no log (new, expired or lost) starts in a new epoch at seq 0,
-- its personal sequence (ps) at 0 and its addressees' ordinals (pn) anew.
-- Leftover streams (its meta evicted alone) would refuse ids from 1 again, so
-- they go too. The caller sets the expiry: it differs between scripts.

local function new_log(meta, log, imp, pm, pn, epoch)
  redis.call('DEL', log, imp, pm, pn)
  -- 'root': the epoch its broadcast began with (a renewal keeps it).
  redis.call('HSET', meta, 'epoch', epoch, 'seq', 0, 'ic', 0, 'ps', 0, 'root', epoch)
  -- whose room it is (log_append.lua), the renewed epochs (log_epoch.lua)
  redis.call('HDEL', meta, 'by', 'was')
end

