"""What operators change, in memory: the vip whitelist, the start and the end
of broadcasts."""

from __future__ import annotations

from ..base import Ended, PastBroadcast, Started
from .log import MemoryLog
from .notifier import MemoryNotifier
from .stats import MemoryStats


class MemoryOperators:
    """The vip whitelist and the start and end of broadcasts, in this process.

    ``start_broadcast`` and ``end_broadcast`` never suspend, so they are atomic
    like the redis engine's scripts.
    """

    def __init__(self, log: MemoryLog, stats: MemoryStats, notifier: MemoryNotifier) -> None:
        self._log = log
        self._stats = stats
        self._notifier = notifier
        self._vip: set[str] = set()

    async def vip_add(self, room: str) -> bool:
        # An operator action makes the room exist (an empty log, short-lived
        # until its first message), as on Redis.
        await self._log.open_room(room)
        if room in self._vip:
            return False
        self._vip.add(room)
        return True

    async def vip_remove(self, room: str) -> bool:
        if room not in self._vip:
            return False
        self._vip.discard(room)
        return True

    async def vip_rooms(self) -> frozenset[str]:
        return frozenset(self._vip)

    async def start_broadcast(self, room: str) -> Started:
        epoch, created = self._log.start_room(room)
        if created:
            self._notifier.publish(room, 0)
        return Started(epoch, self._stats.current_broadcast(room), created)

    async def end_broadcast(self, room: str, now_ms: int, ttl_ms: int) -> Ended:
        epoch, head = self._log.start_epoch(room)
        broadcast = self._stats.end_broadcast(room, now_ms, ttl_ms)
        self._notifier.publish(room, head)
        return Ended(epoch, broadcast)

    async def broadcasts(self, room: str) -> list[PastBroadcast]:
        return self._stats.ended_broadcasts(room)
