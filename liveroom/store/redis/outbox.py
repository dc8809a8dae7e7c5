"""The webhooks' outbox on Redis (``Outbox``; keys in :mod:`.keys`).

Every key is under the global tag (:data:`.keys.GLOBAL`), so on a Redis
Cluster they share one slot and each call below is one command or one
script there:

- the stream ``wh`` holds the events waiting (fields ``e``, the event id,
  and ``d``, its JSON), read through the consumer group
  :data:`GROUP`; an entry read and not finished is pending for its reader,
  and ``XAUTOCLAIM`` hands it to the node that takes the outbox over;
  ``lua/outbox_done.lua`` acknowledges and deletes what was delivered;
- the string ``whl`` is the lease: the holder's name, with an expiry
  (``lua/outbox_lease.lua`` takes or renews it, ``outbox_release.lua``
  gives it up);
- a room's events not yet moved wait in its list ``ev`` (under the room's
  tag: the room's action scripts write it, ``room_event_fn.lua``); the
  sorted set ``whr`` (numbered by the counter ``whrc``) marks the rooms
  that may hold some, one mark per action (``lua/outbox_mark.lua``, lifted
  by its own move, ``outbox_unmark.lua``, or by the sweep), and
  ``outbox_take_in.lua`` adds moved events to ``wh``, each id once while
  ``whm`` remembers it;
- the hash ``whf`` and the sorted set ``whfo`` keep the events given up
  (``lua/outbox_give_up.lua``), and ``outbox_replay.lua`` puts them back.

A node that takes the outbox over claims every pending entry, then forgets
the group's other consumers (each process is a consumer of its own).
The group is made when a node first takes the lease (``XGROUP CREATE ...
0 MKSTREAM``: from the stream's start, so no event written before is
skipped), and again when Redis answers that it is gone (a flushed server).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import exceptions as rexc

from ..outbox import (
    FAILED_LIST_MAX,
    FAILED_MAX,
    MOVE_MAX,
    MOVED_KEPT_MS,
    OUTBOX_MAX,
    Failed,
    Moving,
    Outgoing,
    check_event_id,
    check_failed_limit,
)
from . import keys
from .calls import Client, Lua, blob, run_scripts, text, unavailable

GROUP = "deliver"
"""The consumer group the delivering node reads the stream through."""


def _entries(raw: Any) -> list[Outgoing]:
    """``[[id, [field, value, ...]], ...]`` as events (a deleted one, whose
    fields are gone, is left out)."""
    events = []
    for entry, fields in raw or ():
        if not fields:
            continue
        values = dict(zip(fields[::2], fields[1::2], strict=True)) \
            if isinstance(fields, list) else fields
        event_id, data = values.get(b"e"), values.get(b"d")
        if event_id is None or data is None:
            continue
        events.append(Outgoing(text(entry), text(event_id), blob(data) or b""))
    return events


class RedisOutbox:
    """:class:`~liveroom.store.outbox.Outbox` on Redis (one Redis, or a Redis
    Cluster: every key in the global slot)."""

    def __init__(self, client: Client, *, outbox_max: int = OUTBOX_MAX,
                 failed_max: int = FAILED_MAX) -> None:
        self._client = client
        self._max = outbox_max
        self._failed_max = failed_max
        self._lease = Lua("outbox_lease.lua")
        self._release = Lua("outbox_release.lua")
        self._done = Lua("outbox_done.lua")
        self._give_up = Lua("outbox_give_up.lua")
        self._replay = Lua("outbox_replay.lua")
        self._mark = Lua("outbox_mark.lua")
        self._unmark = Lua("outbox_unmark.lua")
        self._take_in = Lua("outbox_take_in.lua")

    async def add(self, event_id: str, data: bytes) -> None:
        check_event_id(event_id)
        with unavailable("writing an event to the outbox"):
            await self._client.xadd(keys.WEBHOOKS, {"e": event_id, "d": data},
                                    maxlen=self._max, approximate=True)

    async def mark(self, room: str, at_ms: int) -> int:
        with unavailable("marking a room's events"):
            (mark,) = await run_scripts(self._client, [(
                self._mark, [keys.WEBHOOKS_ROOMS, keys.WEBHOOKS_MARKS], [room, at_ms])])
        return int(mark)

    async def pending(self, room: str) -> list[bytes]:
        with unavailable("reading a room's events"):
            kept = await self._client.lrange(keys.events(room), 0, MOVE_MAX - 1)
        return [blob(event) or b"" for event in kept]

    async def move(self, room: str, events: Sequence[Moving], mark: int | None) -> None:
        """Three round trips: the outbox takes the events in (one script in
        the global slot), the room lets them go (``LREM`` each, in the
        room's slot), the mark is lifted (a script in the global slot)."""
        if events:
            with unavailable("moving a room's events to the outbox"):
                await run_scripts(self._client, [(
                    self._take_in, [keys.WEBHOOKS, keys.WEBHOOKS_MOVED],
                    [self._max, MOVED_KEPT_MS,
                     *(part for event in events for part in (event.event_id, event.data))])])
                async with self._client.pipeline(transaction=False) as pipe:
                    for event in events:
                        pipe.execute_command("LREM", keys.events(room), 1, event.kept)
                    await pipe.execute()
        if mark is not None:
            with unavailable("lifting a room's mark"):
                await run_scripts(self._client, [(
                    self._unmark, [keys.WEBHOOKS_ROOMS], [room, mark])])

    async def marked(self, before_ms: int, count: int) -> list[tuple[str, int]]:
        with unavailable("reading the marked rooms"):
            members = await self._client.zrangebyscore(
                keys.WEBHOOKS_ROOMS, "-inf", before_ms, start=0, num=count)
        found = []
        for member in members:
            # "<room>:<mark>"; a room's name alone is an older version's mark.
            name = text(member)
            room, _, mark = name.rpartition(":")
            found.append((room, int(mark)) if room else (name, 0))
        return found

    async def lease(self, holder: str, ttl_ms: int) -> bool:
        with unavailable("taking the webhooks' lease"):
            (held,) = await run_scripts(self._client, [(
                self._lease, [keys.WEBHOOKS_LEASE], [holder, ttl_ms])])
        return bool(int(held))

    async def delivered(self) -> bool:
        with unavailable("reading the webhooks' lease"):
            return bool(await self._client.exists(keys.WEBHOOKS_LEASE))

    async def release(self, holder: str) -> None:
        with unavailable("giving the webhooks' lease up"):
            await run_scripts(self._client, [(
                self._release, [keys.WEBHOOKS_LEASE], [holder])])

    async def _group(self) -> None:
        try:
            await self._client.xgroup_create(keys.WEBHOOKS, GROUP, id="0", mkstream=True)
        except rexc.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _grouped(self, command: str, *args: Any) -> Any:
        """``command`` on the stream through the group, the group made when
        Redis says it has none."""
        for attempt in range(2):
            try:
                return await self._client.execute_command(command, *args)
            except rexc.ResponseError as exc:
                if "NOGROUP" not in str(exc) or attempt:
                    raise
                await self._group()
        raise AssertionError("unreachable")

    async def take_over(self, holder: str, count: int) -> list[Outgoing]:
        taken: list[Outgoing] = []
        start = "0-0"
        with unavailable("taking the outbox over"):
            await self._group()
            while len(taken) < count:
                reply = await self._grouped(
                    "XAUTOCLAIM", keys.WEBHOOKS, GROUP, holder, 0, start,
                    "COUNT", min(100, count - len(taken)))
                start = text(reply[0])
                taken += _entries(reply[1])
                if len(reply) > 2 and reply[2]:
                    # Trimmed away while pending (the outbox was full): gone.
                    await self._client.xack(keys.WEBHOOKS, GROUP, *reply[2])
                if start == "0-0":
                    break
            if len(taken) < count:
                await self._forget_consumers(holder)
        return taken

    async def _forget_consumers(self, holder: str) -> None:
        """Every other consumer of the group, now that this one claimed all
        they had: each process is one of its own (a restart makes a new
        one), and the group would otherwise keep them all."""
        for consumer in await self._client.xinfo_consumers(keys.WEBHOOKS, GROUP):
            name = text(consumer.get("name", b""))
            if name != holder and not int(consumer.get("pending", 0)):
                await self._client.xgroup_delconsumer(keys.WEBHOOKS, GROUP, name)

    async def next(self, holder: str, count: int) -> list[Outgoing]:
        with unavailable("reading the outbox"):
            reply = await self._grouped("XREADGROUP", "GROUP", GROUP, holder,
                                        "COUNT", count, "STREAMS", keys.WEBHOOKS, ">")
        if not reply:
            return []
        streams = reply.items() if isinstance(reply, dict) else reply
        return [event for _, entries in streams for event in _entries(entries)]

    async def done(self, entries: Sequence[str]) -> None:
        if not entries:
            return
        with unavailable("finishing delivered events"):
            await run_scripts(self._client, [(
                self._done, [keys.WEBHOOKS], [GROUP, *entries])])

    async def give_up(self, event: Outgoing, why: str, at_ms: int) -> None:
        with unavailable("keeping a failed event"):
            await run_scripts(self._client, [(
                self._give_up, [keys.WEBHOOKS, keys.WEBHOOKS_FAILED,
                                keys.WEBHOOKS_FAILED_ORDER],
                [GROUP, event.entry, event.event_id, event.data, at_ms, why,
                 self._failed_max])])

    async def failed(self, limit: int) -> tuple[list[Failed], int]:
        check_failed_limit(limit)
        with unavailable("reading the failed events"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zrange(keys.WEBHOOKS_FAILED_ORDER, 0, limit - 1)
                pipe.zcard(keys.WEBHOOKS_FAILED_ORDER)
                ids, count = await pipe.execute()
            if not ids:
                return [], int(count)
            fields = [f"{kind}:{text(i)}" for i in ids for kind in ("d", "w")]
            values = await self._client.hmget(keys.WEBHOOKS_FAILED, fields)
        listed = []
        for i, event_id in enumerate(ids):
            data, why = values[2 * i], values[2 * i + 1]
            if data is None or why is None:
                continue
            at, _, said = text(why).partition(" ")
            listed.append(Failed(text(event_id), blob(data) or b"", said,
                                 int(at) if at.isdigit() else 0))
        return listed, int(count)

    async def replay(self, event_ids: Sequence[str] | None) -> list[str]:
        if event_ids is not None:
            ids = [check_event_id(event_id) for event_id in event_ids]
            return await self._replay_ids(ids)
        replayed: list[str] = []
        while True:  # every failed event, a script call per thousand
            with unavailable("reading the failed events"):
                chunk = [text(i) for i in await self._client.zrange(
                    keys.WEBHOOKS_FAILED_ORDER, 0, FAILED_LIST_MAX - 1)]
            if not chunk:
                return replayed
            done = await self._replay_ids(chunk)
            replayed += done
            if not done:
                return replayed

    async def _replay_ids(self, ids: list[str]) -> list[str]:
        replayed: list[str] = []
        for i in range(0, len(ids), FAILED_LIST_MAX):
            with unavailable("replaying failed events"):
                (reply,) = await run_scripts(self._client, [(
                    self._replay, [keys.WEBHOOKS, keys.WEBHOOKS_FAILED,
                                   keys.WEBHOOKS_FAILED_ORDER],
                    [self._max, *ids[i:i + FAILED_LIST_MAX]])])
            replayed += [text(event_id) for event_id in reply]
        return replayed

    async def waiting(self) -> int:
        with unavailable("counting the outbox"):
            return int(await self._client.xlen(keys.WEBHOOKS))
