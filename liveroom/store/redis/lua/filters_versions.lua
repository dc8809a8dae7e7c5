-- filters_versions.lua: the filters' version and, unless it is the one the
-- caller saw, each list's; atomic, one call, read-only.
--
-- KEYS[1]  lr:{lr}:flv  KEYS[2]  lr:{lr}:fls  (as in filters_put.lua)
--
-- ARGV[1]  since: the version the caller saw (an integer >= 0)
--
-- Returns {version} when it is `since`, else {version, {name, version, ...}}.

local version = tonumber(redis.call('GET', KEYS[1]) or '0')
if version == tonumber(ARGV[1]) then
  return {version}
end
return {version, redis.call('HGETALL', KEYS[2])}
