-- log_append_fn.lua: append(KEYS, ARGV), the whole of log_append.lua as a
-- function, sent in front of the scripts that append (see calls.Lua): that
-- script (return append(KEYS, ARGV)) and log_recall.lua, whose recall's
-- notice it appends in the same call. KEYS, ARGV and the reply are
-- log_append.lua's, documented in its header; each caller passes its own
-- (the parameters shadow the script's globals, so the body reads as the
-- script's did). It calls new_log (log_new.lua, sent in front of it).

local function append(KEYS, ARGV)
  local meta, log, imp, cmid, pm, pn = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7], KEYS[8]
  local to = ARGV[19]
  local important = ARGV[3] == '1'
  local has_cmid = ARGV[11] == '1'
  local ts = tonumber(ARGV[4])
  local uid = ARGV[18]

  local epoch = redis.call('HGET', meta, 'epoch')
  if epoch and has_cmid then
    local seen = redis.call('GET', cmid)
    if seen then
      -- A write, unchanged: it follows the first send in the replication
      -- stream, so a WAIT after this call also covers the first send (a
      -- retried send is acknowledged only once that one is replicated).
      redis.call('SET', cmid, seen, 'KEEPTTL')
      return {epoch, tonumber(seen), 1}
    end
  end

  if not epoch and ARGV[16] == '0' then
    return {'', 0, 3}
  end

  -- -- rate windows ------------------------------------------------------------

  local counters = {}  -- {key, windows}: the sender's, then the room's
  do
    local u, v = tonumber(ARGV[14]), tonumber(ARGV[15])
    local at = 21
    for c, count in ipairs({u, v}) do
      local windows = {}
      for _ = 1, count do
        windows[#windows + 1] = {
          seconds = ARGV[at], limit = tonumber(ARGV[at + 1]),
          bucket_ms = tonumber(ARGV[at + 2]), buckets = tonumber(ARGV[at + 3]),
          position = (at - 21) / 4 + 1}
        at = at + 4
      end
      if count > 0 then
        counters[#counters + 1] = {key = KEYS[4 + c], windows = windows}
      end
    end
  end

  -- ts < 2^52: the division is then exact enough for floor (ms timestamps are).
  local function bucket_of(w)
    return math.floor(ts / w.bucket_ms)
  end

  -- The buckets each window length reads at ts, as {index, count} lists by
  -- seconds; fields no window of their length reads at ts or later are
  -- deleted on the way, whether this send counts in such a window or not
  -- (a window it does not know, slow mode another node applies already,
  -- keeps its counts: ratelimit.prune's rule).
  local function read_counts(counter)
    local oldest = {}
    for _, w in ipairs(counter.windows) do
      oldest[w.seconds] = bucket_of(w) - w.buckets + 1
    end
    local by_seconds, stale = {}, {}
    local flat = redis.call('HGETALL', counter.key)
    for i = 1, #flat, 2 do
      local seconds, j = string.match(flat[i], '^(%d+):(%d+)$')
      j = tonumber(j)
      if seconds and not oldest[seconds] then
        local s = tonumber(seconds)
        local buckets = s < 60 and 10 or 60
        oldest[seconds] = math.floor(ts / math.floor(s * 1000 / buckets)) - buckets + 1
      end
      if not seconds or j < oldest[seconds] then
        stale[#stale + 1] = flat[i]
      else
        local list = by_seconds[seconds] or {}
        by_seconds[seconds] = list
        list[#list + 1] = {j, tonumber(flat[i + 1])}
      end
    end
    if #stale > 0 then
      redis.call('HDEL', counter.key, unpack(stale))
    end
    return by_seconds
  end

  -- When a full window first allows a send again, or nil when it allows one now.
  local function freed_at(list, w)
    local cur = bucket_of(w)
    local read, total = {}, 0
    for _, e in ipairs(list or {}) do
      if e[1] <= cur then
        read[#read + 1] = e
        total = total + e[2]
      end
    end
    if total < w.limit then return nil end
    table.sort(read, function(a, b) return a[1] < b[1] end)
    for _, e in ipairs(read) do
      total = total - e[2]
      if total < w.limit then
        return (e[1] + w.buckets) * w.bucket_ms
      end
    end
  end

  local worst, worst_free = nil, nil
  for _, counter in ipairs(counters) do
    local by_seconds = read_counts(counter)
    for _, w in ipairs(counter.windows) do
      local free = freed_at(by_seconds[w.seconds], w)
      if free and (not worst_free or free > worst_free) then
        worst, worst_free = w.position, free
      end
    end
  end
  if worst then
    return {epoch or '', 0, 2, worst, string.format('%d', worst_free)}
  end

  -- -- the append ---------------------------------------------------------------

  local ttl = ARGV[9]
  if not epoch then
    -- No log: a new epoch from seq 0 (log_new.lua). A leftover client_msg_id
    -- belongs to the lost epoch and is overwritten below.
    epoch = ARGV[1]
    new_log(meta, log, imp, pm, pn, epoch)
    if ARGV[16] == '2' then
      redis.call('HSET', meta, 'by', uid)
      ttl = ARGV[17]
    end
  else
    local by = redis.call('HGET', meta, 'by')
    if by == uid then
      ttl = ARGV[17]
    elseif by then
      redis.call('HDEL', meta, 'by')  -- a second sender: a room like any other
    end
  end

  -- Drop a stream's oldest entries while more than keep remain and the oldest
  -- is older than oldest_ok or more than hard remain: the memory engine's rule
  -- (log.py, append_at_once and _append_personal). Both streams hold fields
  -- m, c or n, t: an entry's ts is e[2][6].
  -- Most sends drop nothing, and every entry read costs Redis about a
  -- microsecond (its reply, then a Lua table), so nothing is read that cannot
  -- go: XLEN alone while keep or fewer remain; those past both keep and hard go
  -- by count (an exact MAXLEN, no read); then the oldest are read in batches
  -- growing from one, never more than could still go, up to the first young
  -- enough to stay. The cut goes with one exact XTRIM: MINID drops every id
  -- below the one after it.
  local function trim(stream, keep, hard, oldest_ok)
    local left = redis.call('XLEN', stream)
    local floor = math.max(keep, hard)
    if left > floor then
      redis.call('XTRIM', stream, 'MAXLEN', floor)
      left = floor
    end
    local cut, from, count = nil, '-', 1
    while left > keep do
      local batch = redis.call('XRANGE', stream, from, '+', 'COUNT', math.min(count, left - keep))
      if #batch == 0 then break end
      for _, e in ipairs(batch) do
        if tonumber(e[2][6]) >= oldest_ok then
          left = keep  -- it stays, and so do the newer ones
          break
        end
        cut = e[1]
        left = left - 1
      end
      from = '(' .. batch[#batch][1]
      count = math.min(count * 2, 128)
    end
    if cut then
      local cut_seq = tonumber(string.match(cut, '^(%d+)'))
      redis.call('XTRIM', stream, 'MINID', string.format('%d-0', cut_seq + 1))
    end
  end

  local oldest_ok = ts - tonumber(ARGV[7])
  local seq, notified
  if to ~= '' then
    seq = redis.call('HINCRBY', meta, 'ps', 1)
    local n = redis.call('HINCRBY', pn, to, 1)
    redis.call('XADD', pm, string.format('%d-0', seq), 'm', ARGV[2], 'n', n, 't', ARGV[4])
    trim(pm, tonumber(ARGV[6]), tonumber(ARGV[20]), oldest_ok)  -- e[2]: m, n, t
    notified = 0
  else
    seq = redis.call('HINCRBY', meta, 'seq', 1)
    local ic = redis.call('HINCRBY', meta, 'ic', important and 1 or 0)
    -- %d, not tostring: Lua 5.1 prints large numbers in exponent form.
    local id = string.format('%d-0', seq)
    redis.call('XADD', log, 'MAXLEN', ARGV[5], id, 'm', ARGV[2], 'c', ic)
    if important then
      redis.call('XADD', imp, id, 'm', ARGV[2], 'c', ic, 't', ARGV[4])
      trim(imp, tonumber(ARGV[6]), tonumber(ARGV[8]), oldest_ok)  -- e[2]: m, c, t
    end
    notified = seq
  end

  for _, key in ipairs({meta, log, imp, pm, pn}) do
    redis.call('PEXPIRE', key, ttl)
  end
  if has_cmid then
    redis.call('SET', cmid, seq, 'PX', ARGV[10])
  end

  -- Count the send once per window length; a counter lives the longest window
  -- plus a bucket after its last send.
  for _, counter in ipairs(counters) do
    local done, horizon = {}, 0
    for _, w in ipairs(counter.windows) do
      if not done[w.seconds] then
        done[w.seconds] = true
        redis.call('HINCRBY', counter.key, string.format('%s:%d', w.seconds, bucket_of(w)), 1)
      end
      horizon = math.max(horizon, tonumber(w.seconds) * 1000 + w.bucket_ms)
    end
    redis.call('PEXPIRE', counter.key, string.format('%d', horizon))
  end

  local how, channel = string.match(ARGV[12], '^(%u+) (.+)$')
  redis.call(how, channel, string.format('%d %s', notified, ARGV[13]))
  return {epoch, seq, 0}
end
