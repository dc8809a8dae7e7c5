"""The recvsvr role: the room caches of one node (its sects), and which room
each one serves.

Every room is read from the **normal** sect unless the vip whitelist names it;
then it is read from the **vip** sect. Each sect is a
:class:`~recvsvr.cache.RoomCache` with its own pull workers and batch size, so
a storm of pulls in a huge vip room waits for the vip workers only and never
delays the pulls of the many small rooms (docs/design.md, "Sects").

:class:`Recvsvr` is the node's :class:`~liveroom.roles.RoomReader`: it routes each
call by the room's current sect, and notifies to the cache of the room's sect
(a resync goes to both).

**Moving a room.** When the whitelist changes, :meth:`Recvsvr.moved` wakes every
:meth:`Recvsvr.wait_changed` in progress in a room that changed sect. The waiter
pulls the room into its new sect at once (the new sect may never have held it,
or hold a copy up to a fallback period old) and returns that snapshot if it
moved past the one it was given; otherwise it keeps waiting, now on the new
sect. Both caches read one store, so after a pull they agree on the room's
epoch and head: a listener carries on without a reset and misses nothing.

Limits: the old sect keeps the room until nobody read it for its
``read_window`` and pulls it meanwhile on its fallback period (notifies go to
the new sect only). A move costs one pull in the new sect per room with a
waiter, and while the store is down a moved waiter retries that pull every
``retry`` seconds of the node's clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.metrics import Metrics
from liveroom.personal import NodeCap
from liveroom.settings import Settings
from liveroom.snapshot import Snapshot, moved_past, sent_per_minute
from liveroom.store.base import MessageLog, Notifier

from .cache import OnRenewed, RoomCache, SectLimits
from .next_snapshot import Retention

logger = logging.getLogger("liveroom.recvsvr")


@dataclass(eq=False)
class _Waits:
    """The waits in progress in one room, on the sect it was in when they began."""

    sect: RoomCache
    moved: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    count: int = 0


class Recvsvr:
    """The recvsvr of one node: the normal and the vip sect, implementing
    :class:`liveroom.roles.RoomReader`. :meth:`configured` builds both from
    the settings."""

    def __init__(self, normal: RoomCache, vip: RoomCache, is_vip: Callable[[str], bool],
                 clock: Clock, *, metrics: Metrics | None = None,
                 retry: float = 1.0) -> None:
        self.normal = normal
        self.vip = vip
        self._is_vip = is_vip
        self._clock = clock
        self._retry = retry
        self._waits: dict[str, _Waits] = {}
        self._kept_in: dict[str, RoomCache] = {}
        """The sect each kept room is kept in (a move keeps it in the new one)."""
        if metrics is not None:
            # Each cache sets the gauge to its own size: report both.
            metrics.track(metrics.rooms, lambda: len(self.normal) + len(self.vip))

    @classmethod
    def configured(cls, settings: Settings, log: MessageLog, notifier: Notifier,
                   is_vip: Callable[[str], bool], clock: Clock,
                   metrics: Metrics) -> Recvsvr:
        """The recvsvr ``settings`` describe, reading ``log`` and told of
        changes by ``notifier``; ``is_vip`` says which rooms the vip sect serves."""
        retention = Retention(
            normal_keep=settings.normal_keep,
            important_keep=settings.important_keep,
            important_window_ms=int(settings.important_window * 1000),
            personal_hard_cap=settings.personal_hard_cap,
            index_keep=settings.index_keep,
            node_cap=NodeCap(settings.personal_node_cap),
        )
        normal = SectLimits(
            fallback_pull_interval=settings.fallback_pull_interval,
            read_window=settings.read_window,
            pull_batch=settings.pull_batch,
            pull_concurrency=settings.pull_concurrency,
            # Reads push a room's expiry back well before it can pass.
            touch_interval=min(settings.touch_interval, settings.room_ttl / 4),
            rooms_max=settings.rooms_max,
            first_pull_timeout=settings.first_pull_timeout,
        )
        vip = replace(normal, pull_batch=settings.vip_pull_batch,
                      pull_concurrency=settings.vip_pull_concurrency)
        return cls(RoomCache(log, clock, metrics, retention=retention, limits=normal,
                             notifier=notifier),
                   RoomCache(log, clock, metrics, retention=retention, limits=vip,
                             name="vip", notifier=notifier),
                   is_vip, clock, metrics=metrics)

    def sect_of(self, room: str) -> RoomCache:
        """The cache that serves ``room`` now."""
        return self.vip if self._is_vip(room) else self.normal

    def __len__(self) -> int:
        return len(self.normal) + len(self.vip)

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        await self.normal.start()
        await self.vip.start()

    async def stop(self) -> None:
        # Waits in progress end as the caches cancel them (like a cache alone).
        await self.vip.stop()
        await self.normal.stop()

    # -- the reader interface ---------------------------------------------------

    def current(self, room: str) -> Snapshot | None:
        return (self.vip if self._is_vip(room) else self.normal).current(room)

    async def snapshot(self, room: str) -> Snapshot:
        return await self.sect_of(room).snapshot(room)

    def read_by(self, room: str, uid: str) -> None:
        self.sect_of(room).read_by(room, uid)

    def peek(self, room: str) -> Snapshot | None:
        """The room's snapshot held now in its sect, without counting a read."""
        return self.sect_of(room).peek(room)

    def rate(self, room: str) -> float | None:
        """The room's messages a minute, from the snapshot held now (``None``
        when none is held). Memory only: for the node's announcements."""
        sect = self.sect_of(room)
        snap = sect.peek(room)
        if snap is None:
            return None
        now_ms = int(self._clock.time() * 1000)
        return round(sent_per_minute(snap, now_ms, sect.retention.normal_keep), 1)

    async def wait_pulled(self, room: str) -> Snapshot:
        return await self.sect_of(room).wait_pulled(room)

    def keep(self, room: str) -> None:
        sect = self._kept_in.get(room)
        if sect is None:
            sect = self.sect_of(room)
            sect.keep(room)  # may raise Overloaded: then nothing is kept
            self._kept_in[room] = sect
        else:
            sect.keep(room)

    def let_go(self, room: str) -> None:
        sect = self._kept_in.get(room)
        if sect is None:
            return
        sect.let_go(room)
        if sect.keeps_of(room) == 0:
            del self._kept_in[room]

    async def wait_changed(self, room: str, snapshot: Snapshot) -> Snapshot:
        """Wait until the room moved past ``snapshot`` in its sect, across moves
        between sects (see the module docstring)."""
        base = snapshot
        while True:
            sect = self.sect_of(room)
            waits = self._waits.get(room)
            if waits is None or waits.sect is not sect:
                waits = self._waits[room] = _Waits(sect)
            waits.count += 1
            changed = asyncio.ensure_future(sect.wait_changed(room, base))
            try:
                done, _ = await asyncio.wait((changed, waits.moved),
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                waits.count -= 1
                if not waits.count and self._waits.get(room) is waits:
                    del self._waits[room]
                if not changed.done():
                    changed.cancel()
            if changed in done:
                got = changed.result()  # what the sect returned, or raised
            else:
                got = await self._pull_moved(room)
            if moved_past(got, snapshot):
                return got
            # Not further than what the caller has (a sect that had not pulled
            # the room yet): wait for this sect to move past its own snapshot.
            base = got

    async def _pull_moved(self, room: str) -> Snapshot:
        failing = False
        while True:
            try:
                return await self.sect_of(room).wait_pulled(room)
            except StoreUnavailable as exc:
                if not failing:
                    logger.warning("room %s moved sect but cannot be pulled, retrying: %s",
                                room, exc.message)
                failing = True
            await self._clock.sleep(self._retry)

    def moved(self, rooms: Iterable[str]) -> None:
        """The whitelist changed for ``rooms``: wake the waits on their old sect."""
        for room in rooms:
            was_in = self._kept_in.get(room)
            if was_in is not None and was_in is not self.sect_of(room):
                # The keeps follow the room to its new sect.
                new = self._kept_in[room] = self.sect_of(room)
                keeps = was_in.keeps_of(room)
                # Never refused: the polls are held already.
                new.adopt(room, keeps)
                for _ in range(keeps):
                    was_in.let_go(room)
            waits = self._waits.get(room)
            if waits is not None and waits.sect is not self.sect_of(room):
                del self._waits[room]
                if not waits.moved.done():
                    waits.moved.set_result(None)

    # -- notifies -----------------------------------------------------------------

    def on_notify(self, room: str, seq: int) -> None:
        self.sect_of(room).on_notify(room, seq)

    def on_resync(self, rooms: Collection[str] | None = None) -> None:
        self.normal.on_resync(rooms)
        self.vip.on_resync(rooms)

    def on_renewed(self, listener: OnRenewed) -> None:
        """Tell ``listener(room, old, new)`` of each room whose epoch a cache
        saw renewed (its log kept: the same broadcast; see
        :attr:`RoomCache.on_renewed`). One listener."""
        self.normal.on_renewed = listener
        self.vip.on_renewed = listener
