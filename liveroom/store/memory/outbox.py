"""The webhooks' outbox in this process (``Outbox``): a bounded queue of
events and a bounded failed list, lost with the process.

There is one process, so the lease is always its own: :meth:`MemoryOutbox.lease`
grants it to whoever asks (the node asks with its own name). The memory
engine's room actions keep their events here (:meth:`MemoryOutbox.keep`) in
the same step as themselves, with no await between (each action is one
synchronous step), in the room's list the move takes them from, as on Redis.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

import orjson

from ..outbox import (
    FAILED_MAX,
    MOVE_MAX,
    OUTBOX_MAX,
    Failed,
    Moving,
    Outgoing,
    check_event_id,
    check_failed_limit,
)

MOVED_KEPT = 100_000
"""Ids of events moved from rooms remembered (a move repeated adds none)."""


class MemoryOutbox:
    """``Outbox`` in memory: every call is O(1) per event it touches; no
    method suspends, so each is atomic. A restart loses every event in it."""

    def __init__(self, *, outbox_max: int = OUTBOX_MAX, failed_max: int = FAILED_MAX) -> None:
        self._max = outbox_max
        self._failed_max = failed_max
        self._given = 0
        self._new: deque[Outgoing] = deque()
        self._read: dict[str, Outgoing] = {}
        """Read and not finished, in the order read (entry -> event)."""
        self._failed: OrderedDict[str, Failed] = OrderedDict()
        self._rooms: dict[str, list[bytes]] = {}
        """Each room's events not yet moved, oldest first."""
        self._marks: dict[tuple[str, int], int] = {}
        """Each action's mark not lifted: (room, its mark) -> when, in the
        order marked."""
        self._marked = 0
        self._moved: OrderedDict[str, None] = OrderedDict()
        """Ids taken in from rooms, the newest :data:`MOVED_KEPT` of them."""

    def keep(self, room: str, event: bytes | None, **fields: object) -> None:
        """Keep ``event`` (its JSON; ``None``: no event, nothing kept) of
        ``room``, with ``fields`` (only the action knows them: added at its
        end, as ``room_event_fn.lua`` does) in the room's list; never
        suspends, so an action calls it in its own step."""
        if event is None:
            return
        if fields:
            event = orjson.dumps({**orjson.loads(event), **fields})
        self._rooms.setdefault(room, []).append(bytes(event))

    async def mark(self, room: str, at_ms: int) -> int:
        self._marked += 1
        self._marks[room, self._marked] = at_ms
        return self._marked

    async def pending(self, room: str) -> list[bytes]:
        return list(self._rooms.get(room, ())[:MOVE_MAX])

    async def move(self, room: str, events: Sequence[Moving], mark: int | None) -> None:
        for event in events:
            if event.event_id not in self._moved:
                await self.add(event.event_id, event.data)
                self._moved[event.event_id] = None
                while len(self._moved) > MOVED_KEPT:
                    self._moved.popitem(last=False)
        kept = self._rooms.get(room, [])
        for event in events:
            if event.kept in kept:
                kept.remove(event.kept)
        if not kept:
            self._rooms.pop(room, None)
        if mark is not None:
            self._marks.pop((room, mark), None)

    async def marked(self, before_ms: int, count: int) -> list[tuple[str, int]]:
        found = sorted((at, room, mark) for (room, mark), at in self._marks.items()
                       if at <= before_ms)
        return [(room, mark) for _, room, mark in found[:count]]

    async def add(self, event_id: str, data: bytes) -> None:
        self.add_at_once(event_id, data)

    def add_at_once(self, event_id: str, data: bytes) -> None:
        """:meth:`add` without an await: an action's step writes its event."""
        check_event_id(event_id)
        self._given += 1
        self._new.append(Outgoing(f"{self._given}-0", event_id, bytes(data)))
        while len(self._new) + len(self._read) > self._max and self._new:
            self._new.popleft()

    async def lease(self, holder: str, ttl_ms: int) -> bool:
        return True

    async def release(self, holder: str) -> None:
        return None

    async def delivered(self) -> bool:
        # One process: its node is the one that delivers, if webhooks are on
        # (an Events without an outbox writes nothing otherwise).
        return True

    async def take_over(self, holder: str, count: int) -> list[Outgoing]:
        return list(self._read.values())[:count]

    async def next(self, holder: str, count: int) -> list[Outgoing]:
        taken: list[Outgoing] = []
        while self._new and len(taken) < count:
            event = self._new.popleft()
            self._read[event.entry] = event
            taken.append(event)
        return taken

    async def done(self, entries: Sequence[str]) -> None:
        for entry in entries:
            self._read.pop(entry, None)

    async def give_up(self, event: Outgoing, why: str, at_ms: int) -> None:
        self._read.pop(event.entry, None)
        self._failed.pop(event.event_id, None)
        self._failed[event.event_id] = Failed(event.event_id, event.data, why, at_ms)
        while len(self._failed) > self._failed_max:
            self._failed.popitem(last=False)

    async def failed(self, limit: int) -> tuple[list[Failed], int]:
        check_failed_limit(limit)
        return list(self._failed.values())[:limit], len(self._failed)

    async def replay(self, event_ids: Sequence[str] | None) -> list[str]:
        ids = list(self._failed) if event_ids is None else \
            [check_event_id(event_id) for event_id in event_ids]
        replayed = []
        for event_id in ids:
            gone = self._failed.pop(event_id, None)
            if gone is not None:
                await self.add(gone.event_id, gone.data)
                replayed.append(event_id)
        return replayed

    async def waiting(self) -> int:
        return len(self._new) + len(self._read)
