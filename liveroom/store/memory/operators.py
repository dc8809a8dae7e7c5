"""What operators change, in memory: the rooms' sect records, the start and
the end of broadcasts (which archives the broadcast's counters and its
moderation audit)."""

from __future__ import annotations

from collections.abc import Sequence

from ..base import Ended, PastBroadcast, Started, VipSwap
from .counters import MemoryCounters
from .log import MemoryLog
from .moderation import MemoryModeration
from .notifier import MemoryNotifier
from .outbox import MemoryOutbox
from .stats import MemoryStats


class MemoryOperators:
    """The sect records and the start and end of broadcasts, in this process.

    ``start_broadcast`` and ``end_broadcast`` never suspend, so they are atomic
    like the redis engine's scripts.
    """

    def __init__(self, log: MemoryLog, stats: MemoryStats, notifier: MemoryNotifier,
                 counters: MemoryCounters, moderation: MemoryModeration) -> None:
        self._log = log
        self._stats = stats
        self._counters = counters
        self._moderation = moderation
        self._notifier = notifier
        self._records: dict[str, bytes] = {}
        self.outbox: MemoryOutbox | None = None
        """Where the room actions' webhook events are kept (the store's)."""

    async def vip_records(self) -> dict[str, bytes]:
        return dict(self._records)

    async def vip_swap(self, swaps: Sequence[VipSwap]) -> list[bool]:
        applied = []
        for swap in swaps:
            ok = self._records.get(swap.room, b"") == swap.before
            if ok:
                if swap.after:
                    self._records[swap.room] = swap.after
                else:
                    self._records.pop(swap.room, None)
                if swap.event and self.outbox is not None:
                    self.outbox.add_at_once(swap.event_id, swap.event)
            applied.append(ok)
        return applied

    async def start_broadcast(self, room: str, *, event: bytes | None = None) -> Started:
        epoch, created = self._log.start_room(room)
        if created:
            self._notifier.publish(room, 0)
        started = Started(epoch, self._stats.current_broadcast(room), created)
        if self.outbox is not None:
            self.outbox.keep(room, event, broadcast=started.broadcast, epoch=started.epoch,
                             created=started.created)
        return started

    async def end_broadcast(self, room: str, now_ms: int, ttl_ms: int, *,
                            event: bytes | None = None) -> Ended:
        ended_with = self._log.epochs_of(room)
        epoch, head = self._log.start_epoch(room)
        broadcast = self._stats.end_broadcast(room, now_ms, ttl_ms, self._counters.take(room),
                                              self._moderation.take_audit(room))
        for each in ended_with:
            self._counters.ended(room, each, broadcast - 1, ttl_ms)
        self._notifier.publish(room, head)
        if self.outbox is not None:
            self.outbox.keep(room, event, broadcast=broadcast - 1)
        return Ended(epoch, broadcast)

    async def broadcasts(self, room: str) -> list[PastBroadcast]:
        return self._stats.ended_broadcasts(room)
