-- filters_read.lua: lists of the word filter with their versions; atomic,
-- one call, read-only.
--
-- KEYS[1]    lr:{lr}:fls        hash: name -> the version of its last put
-- KEYS[2..]  lr:{lr}:fl:<name>  the lists asked for, in the order of ARGV
--
-- ARGV[1..]  their names
--
-- Returns, for each name, {version, packed list}, or {} when there is none.

local found = {}
for i, name in ipairs(ARGV) do
  local version = redis.call('HGET', KEYS[1], name)
  local packed = redis.call('GET', KEYS[i + 1])
  if version and packed then
    found[i] = {version, packed}
  else
    found[i] = {}
  end
end
return found
