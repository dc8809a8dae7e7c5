"""Interim presence: distinct listeners per room on this node, in memory.

Heartbeats are a dict assignment. A background sweep drops uids quiet for
``window`` seconds, so ``online()`` is a ``len()`` that may count a quiet uid
for up to one sweep interval longer.
"""

from __future__ import annotations

import asyncio
import contextlib

from liveroom.clock import Clock


class LocalPresence:
    """Implements :class:`liveroom.roles.Presence` for one node."""

    def __init__(self, clock: Clock, window: float = 90.0, sweep_every: float = 5.0) -> None:
        self._clock = clock
        self._window = window
        self._sweep_every = sweep_every
        self._rooms: dict[str, dict[str, float]] = {}
        self._task: asyncio.Task[None] | None = None

    def heartbeat(self, room: str, uid: str) -> None:
        members = self._rooms.get(room)
        if members is None:
            members = self._rooms[room] = {}
        members[uid] = self._clock.monotonic()

    def online(self, room: str) -> int:
        members = self._rooms.get(room)
        return len(members) if members else 0

    def sweep(self) -> None:
        cutoff = self._clock.monotonic() - self._window
        for room, members in list(self._rooms.items()):
            quiet = [uid for uid, seen in members.items() if seen < cutoff]
            for uid in quiet:
                del members[uid]
            if not members:
                del self._rooms[room]

    async def start(self) -> None:
        self._task = asyncio.create_task(self._sweep_forever(), name="statsvr-presence-sweep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _sweep_forever(self) -> None:
        while True:
            await self._clock.sleep(self._sweep_every)
            self.sweep()
