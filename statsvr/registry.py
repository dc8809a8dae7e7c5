"""This node in the node registry: what it announces, and what the registry says.

Every ``every`` seconds (5) a statsvr node announces itself
(``StatsStore.announce``): alive for ``3 * every`` seconds, what it holds
(:class:`~liveroom.store.base.NodeLoad`: rooms cached, held polls, members,
rooms merged) and its biggest rooms, replacing its previous announcement whole.
The operators' overview reads it back: :meth:`NodeRegistry.nodes` and
:meth:`NodeRegistry.biggest_rooms`, one store read each, never a walk over rooms.

**Which rooms a node lists.** Of the rooms it merges, those whose online series
it samples (:func:`statsvr.sampler.writer_of` over the nodes holding shards of
the room): every room with listeners has exactly one such node, on which every
node agrees, so nodes over one store list disjoint rooms and together rank all
of them. A node lists its :data:`~liveroom.store.base.RANKED_ROOMS_MAX` biggest.
While a room's writer changes hands (a node joined or left) it may be listed
twice for a pass, or missing for one.

**Messages a minute** come from the ``rate`` the assembly gives (this node's
recvsvr snapshot of the room, read in memory: the writer of a room serves its
listeners, so it holds the room's messages); ``None`` when it holds none.

**Rooms that go empty.** A room whose last listener left has no shard and no
writer: it leaves the next announcement of the node that listed it (its
members leave the merged view ``online_ttl`` after their last poll, as
everywhere). A node that stops takes itself out of the registry; one that dies
stops announcing, and its entry and its rooms leave the registry ``3 * every``
seconds after its last announcement. The rooms it sampled are then listed by
no node until its shards expire (``shard_ttl``, about two minutes): their
series has the same gap (:mod:`statsvr.sampler`).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Collection, Iterable

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.lifecycle import Outage, stop_task
from liveroom.store.base import (
    RANKED_ROOMS_MAX,
    Announcement,
    NodeLoad,
    NodeState,
    RankedRoom,
    StatsStore,
)

from .sampler import writer_of

__all__ = ["ANNOUNCE_EVERY", "NodeRegistry", "ranked_rooms"]

logger = logging.getLogger("liveroom.statsvr.registry")

ANNOUNCE_EVERY = 5.0
"""Seconds between two announcements of a node; it counts as live three times that."""

WITHDRAW_WAIT = 1.0
"""Seconds a stopping node gives the store to take it out of the registry."""


def ranked_rooms(node: str, rooms: Iterable[tuple[str, int, Collection[str]]],
                 rate: Callable[[str], float | None],
                 keep: int = RANKED_ROOMS_MAX) -> tuple[RankedRoom, ...]:
    """The ``keep`` biggest of ``rooms`` (``(room, online, nodes)``) that
    ``node`` writes, online descending then by name, with their messages a
    minute (``rate`` is asked only for those kept)."""
    mine = ((room, online) for room, online, nodes in rooms
            if online > 0 and writer_of(room, nodes) == node)
    biggest = heapq.nsmallest(keep, mine, key=lambda pair: (-pair[1], pair[0]))
    return tuple(RankedRoom(room, online, rate(room)) for room, online in biggest)


class NodeRegistry:
    """Announces one statsvr node every ``every`` seconds and reads the registry.

    ``rooms`` gives ``(room, online, nodes)`` of the rooms the node merges
    (memory), ``load`` what the node holds, ``rate`` a room's messages a minute.
    """

    def __init__(self, stats: StatsStore, clock: Clock, node: str, *,
                 rooms: Callable[[], Iterable[tuple[str, int, Collection[str]]]],
                 load: Callable[[], NodeLoad],
                 rate: Callable[[str], float | None],
                 every: float = ANNOUNCE_EVERY) -> None:
        if not every > 0:
            raise ValueError(f"the announce interval must be positive, not {every!r}")
        self.node = node
        self.every = every
        self._stats = stats
        self._clock = clock
        self._rooms = rooms
        self._load = load
        self._rate = rate
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._outage = Outage(logger)

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    # -- announcing ------------------------------------------------------------------

    async def announce_once(self) -> list[str]:
        """Announce this node now; return the live nodes (this one included).

        Raises :class:`StoreUnavailable` (the loop logs it once per outage)."""
        announcement = Announcement(self._load(),
                                    ranked_rooms(self.node, self._rooms(), self._rate))
        return await self._stats.announce(self.node, self._now_ms(),
                                          int(3 * self.every * 1000), announcement)

    async def start(self) -> None:
        """Announce now (a store that is down only delays it), then every
        ``every`` s. The first announcement is made before this returns: a
        node that answers lists itself among the nodes."""
        if self._task is None:
            self._stopping = False
            await self._announce()
            self._task = asyncio.create_task(self._loop(), name="statsvr-announce")

    async def stop(self, *, withdraw: bool = True) -> None:
        """Stop announcing and, with ``withdraw``, leave the registry at once
        (given :data:`WITHDRAW_WAIT` s; else the entry expires by itself)."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        await stop_task(task)
        if withdraw:
            try:
                async with asyncio.timeout(WITHDRAW_WAIT):
                    await self._stats.withdraw(self.node)
            except (StoreUnavailable, TimeoutError) as exc:
                logger.info("could not leave the node registry (the entry expires by itself): %s",
                         exc)

    async def _loop(self) -> None:
        # The flag as well as the cancel: redis-py may finish a command in
        # flight and swallow the cancel.
        while not self._stopping:
            await self._clock.sleep(self.every)
            if not self._stopping:
                await self._announce()

    async def _announce(self) -> None:
        """One announcement; a failure is logged (once while it lasts), never raised."""
        try:
            await self.announce_once()
        except StoreUnavailable as exc:
            self._outage.failed("cannot announce this node, will retry: %s", exc.message)
        except Exception:  # one bad pass must not end the announcements
            logger.exception("announcing this node failed")
        else:
            self._outage.worked("announcing this node again")

    # -- reading -----------------------------------------------------------------------

    async def nodes(self) -> list[NodeState]:
        """The live nodes over the store and their last announcements, by name."""
        return await self._stats.nodes(self._now_ms())

    async def biggest_rooms(self, limit: int) -> list[RankedRoom]:
        """The ``limit`` biggest rooms now over every live node, as announced."""
        return await self._stats.biggest_rooms(self._now_ms(), limit)
