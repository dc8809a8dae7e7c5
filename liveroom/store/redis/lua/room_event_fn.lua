-- room_event_fn.lua: the rule scripts of room actions that have a webhook
-- event share (sent in front of them): keep the event in the room's list of
-- events not yet moved to the outbox (lr:{R}:ev), in the same call as the
-- action, so that the one is never without the other.
--
-- keep_event(key, event, fields): event is the event's JSON object as the
-- caller wrote it ('' : no event, webhooks off), fields the JSON text of the
-- members only the script knows ('"uid":"u1","to":null'; '' : none), added
-- at its end.

-- keep_event_as(key, id, event, fields): the same for an event whose id the
-- script gives (several events of one call): event is its JSON without it.

local function keep_event(key, event, fields)
  if event == nil or event == '' then
    return
  end
  if fields ~= '' then
    event = string.sub(event, 1, -2) .. ',' .. fields .. '}'
  end
  redis.call('RPUSH', key, event)
end

local function keep_event_as(key, id, event, fields)
  if event == nil or event == '' then
    return
  end
  local rest = string.sub(event, 2, -2)
  if fields ~= '' then
    rest = rest .. ',' .. fields
  end
  redis.call('RPUSH', key, '{"id":' .. cjson.encode(id) .. ',' .. rest .. '}')
end
