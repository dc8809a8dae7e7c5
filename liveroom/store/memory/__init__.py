"""The memory engine: the embedded default, one process, nothing to install.

Everything lives in this process's memory: a restart starts every room in a new
epoch, and several processes cannot share it (use the redis engine for that).
Notifies are direct calls. Expiry of idle rooms runs in a background sweep and
is also checked when a room is touched, so a room past its TTL is never seen.
statsvr's tables (:class:`MemoryStats`) mirror the redis engine's keys, with
the same rules and the same expiry, measured on the store's clock; so do the
rate counters, the ended broadcasts (:class:`MemoryOperators`), the likes
and gifts (:class:`MemoryCounters`), the rooms' moderation
(:class:`MemoryModeration`), their review queues (:class:`MemoryReview`)
the word filter's lists (:class:`MemoryFilters`, which never expire) and
the webhooks' outbox (:class:`MemoryOutbox`, bounded: a restart loses the
events it holds).
"""


from __future__ import annotations

import logging

from ...clock import Clock
from ...lifecycle import Periodic
from ..base import LogPolicy
from .counters import MemoryCounters
from .filters import MemoryFilters
from .log import MemoryLog
from .moderation import MemoryModeration
from .notifier import MemoryNotifier
from .operators import MemoryOperators
from .outbox import MemoryOutbox
from .review import MemoryReview
from .stats import MemoryStats

logger = logging.getLogger("liveroom.store.memory")

__all__ = ["MemoryCounters", "MemoryFilters", "MemoryLog", "MemoryModeration",
           "MemoryNotifier", "MemoryOperators", "MemoryOutbox", "MemoryReview", "MemoryStats",
           "MemoryStore"]


class MemoryStore:
    """The embedded engine (``--store memory``)."""

    name = "memory"

    def __init__(self, policy: LogPolicy, clock: Clock) -> None:
        self._clock = clock
        self.notifier = MemoryNotifier()
        self.log = MemoryLog(policy, clock, self.notifier)
        self.stats = MemoryStats(clock, self.log.provisional)
        self.counters = MemoryCounters(policy, clock)
        self.counters.add_to_ended = self.stats.add_ended_likes
        self.counters.root_of = self.log.root_of
        self.moderation = MemoryModeration(policy, clock)
        self.review = MemoryReview(policy, clock)
        self.filters = MemoryFilters()
        self.outbox = MemoryOutbox()
        self.operators = MemoryOperators(self.log, self.stats, self.notifier, self.counters,
                                         self.moderation)
        # The room actions keep their webhook events in the outbox's room
        # lists, in their own step.
        self.log.outbox = self.counters.outbox = self.outbox
        self.moderation.outbox = self.operators.outbox = self.review.outbox = self.outbox
        self._sweeper = Periodic("memory-store-sweep", 60.0, self._sweep, clock, logger)

    async def start(self) -> None:
        self._sweeper.start()

    async def close(self) -> None:
        await self._sweeper.stop()

    async def _sweep(self) -> None:
        self.log.sweep()
        self.stats.sweep()
        self.counters.sweep()
        self.moderation.sweep()
        self.review.sweep()

    async def ping(self) -> None:
        return None
