"""The statsvr role of one node: the owner's table, the merge, the viewers
history and the online series, with the background tasks that join them.

Data flow (docs/design.md steps 6 to 8):

- proxies hand heartbeats to :meth:`Statsvr.ingest` (memory only);
- the **write loop** (every ``stats_write_every`` s) sweeps quiet members, hands the
  uids that joined to the viewers history (flushed to the store first, so a
  member in a shard key is always already counted as a viewer), then stores
  the shards that changed and refreshes the others now and then;
- the **merge** (its own task) reads the shard index of the rooms this node
  serves and swaps in each room's :class:`~statsvr.view.OnlineView` (members
  are read only for a small room's exact count and for ``/online`` pages);
- the **viewers loop** (every ``viewers_every`` s) refreshes the viewers
  figures of those rooms;
- the **series** task samples the online count of the rooms this node writes;
- the **registry** task announces the node (what it holds, the biggest of
  those rooms) every few seconds (:mod:`statsvr.registry`).

A shard's index entry outlives the member's ``online_ttl`` by the refresh
period and two write periods, so a node killed without warning loses its
members only after their TTL, and shortly after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.lifecycle import Outage, Periodic
from liveroom.metrics import Metrics
from liveroom.roles import BroadcastStats, RoomStats
from liveroom.settings import DEFAULTS, Settings
from liveroom.store.base import (
    Counters,
    NodeLoad,
    NodeState,
    Operators,
    RankedRoom,
    StatsStore,
    ViewersState,
)

from .history import ViewersHistory
from .merge import Merge
from .registry import ANNOUNCE_EVERY, NodeRegistry
from .sampler import OnlineSeries
from .series import DEFAULT_RESOLUTIONS, SAMPLE_EVERY, Resolution
from .table import Tables
from .view import EXACT_UP_TO
from .viewers import merge_registers, viewers_figure

logger = logging.getLogger("liveroom.statsvr")

JOIN_SLICE = 20_000
"""Joins handed to the viewers history between two turns of the event loop."""


@dataclass(frozen=True, slots=True)
class StatsLimits:
    """How a statsvr node paces itself. A field named after a setting is that
    setting (defaulting to its declaration); the others are not settings."""

    online_ttl: float = DEFAULTS.online_ttl
    vip_shards: int = DEFAULTS.vip_shards
    viewers_threshold: int = DEFAULTS.viewers_threshold
    history_ttl: float = DEFAULTS.history_ttl
    stats_write_every: float = DEFAULTS.stats_write_every
    merge_every: float = DEFAULTS.merge_every
    viewers_every: float = 2.0
    sweep_every: float = 5.0
    refresh_every: float = 15.0
    read_window: float = DEFAULTS.read_window
    """A room nobody read nor heartbeat for this long is no longer merged."""
    exact_up_to: int = EXACT_UP_TO
    """Members up to which a room's count is a union read from its shards
    (above, the sum of the shard sizes: :mod:`statsvr.view`)."""
    sample_every: float = SAMPLE_EVERY
    resolutions: tuple[Resolution, ...] = DEFAULT_RESOLUTIONS
    announce_every: float = ANNOUNCE_EVERY

    @property
    def shard_ttl(self) -> float:
        """How long a shard's index entry lives after its last write or refresh."""
        return self.online_ttl + self.refresh_every + 2 * self.stats_write_every


class Statsvr:
    """Implements :class:`liveroom.roles.HeartbeatSink` and :class:`liveroom.roles.StatsReader`."""

    def __init__(self, stats: StatsStore, clock: Clock, node: str, *,
                 limits: StatsLimits = StatsLimits(),
                 is_vip: Callable[[str], bool] = lambda room: False,
                 metrics: Metrics | None = None,
                 operators: Operators | None = None,
                 counters: Counters | None = None,
                 rooms_cached: Callable[[], int] = lambda: 0,
                 rate: Callable[[str], float | None] = lambda room: None) -> None:
        """``rooms_cached`` says how many rooms the node's recvsvr holds and
        ``rate`` a room's messages a minute from its cached messages (``None``
        when not cached); both read memory only, for the node's announcements,
        as does the count of held polls given to :meth:`count_held_polls`."""
        self.node = node
        self.limits = limits
        self._stats = stats
        self._operators = operators
        self._counters = counters
        """Where ended broadcasts are kept (none: no past broadcasts)."""
        self._clock = clock
        self.tables = Tables(clock, online_ttl=limits.online_ttl,
                             vip_shards=limits.vip_shards, is_vip=is_vip,
                             refresh_every=limits.refresh_every)
        self.merge = Merge(stats, clock, merge_every=limits.merge_every,
                           read_window=limits.read_window, exact_up_to=limits.exact_up_to)
        self.history = ViewersHistory(stats, clock, node,
                                      viewers_threshold=limits.viewers_threshold,
                                      history_ttl=limits.history_ttl,
                                      members=self.tables.members)
        self.series = OnlineSeries(stats, clock, node, resolutions=limits.resolutions,
                                   every=limits.sample_every)
        self._rooms_cached = rooms_cached
        self._held_polls: Callable[[], int] = lambda: 0
        self.registry = NodeRegistry(stats, clock, node, rooms=self._sample_source,
                                     load=self._load, rate=rate,
                                     every=limits.announce_every)
        self._jobs = (
            Periodic("statsvr-write", limits.stats_write_every, self.write_once, clock, logger),
            Periodic("statsvr-viewers", limits.viewers_every, self.refresh_viewers, clock,
                     logger))
        self._last_sweep = clock.monotonic()
        self._writes = Outage(logger)
        self._metrics = metrics
        if metrics is not None:
            metrics.track(metrics.members, lambda: len(self.tables))
            metrics.track(metrics.merged_rooms, lambda: len(self.merge.rooms()))

    @classmethod
    def configured(cls, settings: Settings, stats: StatsStore, operators: Operators,
                   is_vip: Callable[[str], bool], clock: Clock, metrics: Metrics, *,
                   counters: Counters | None = None,
                   rooms_cached: Callable[[], int],
                   rate: Callable[[str], float | None]) -> Statsvr:
        """The statsvr ``settings`` describe, named after the node, keeping
        its figures in ``stats`` and the ended broadcasts in ``operators``."""
        return cls(stats, clock, settings.name, is_vip=is_vip, metrics=metrics,
                   operators=operators, counters=counters, rooms_cached=rooms_cached,
                   rate=rate,
                   limits=StatsLimits(
                       online_ttl=settings.online_ttl,
                       vip_shards=settings.vip_shards,
                       viewers_threshold=settings.viewers_threshold,
                       history_ttl=settings.history_ttl,
                       stats_write_every=settings.stats_write_every,
                       merge_every=settings.merge_every,
                       read_window=settings.read_window,
                   ))

    def count_held_polls(self, held_polls: Callable[[], int]) -> None:
        """Announce ``held_polls()`` as the node's held polls: the proxy's
        count, given once the proxy (which reads this statsvr) is built."""
        self._held_polls = held_polls

    # -- HeartbeatSink ---------------------------------------------------------

    def ingest(self, batch: bytes) -> int:
        taken = self.tables.ingest(batch)
        if self._metrics is not None:
            self._metrics.heartbeats.inc(taken)
        return taken

    def take(self, batch: Mapping[str, Sequence[str]],
             trusted: Mapping[str, Sequence[str]]) -> int:
        beat = self.tables.beat
        taken = sum(beat(room, uids) for room, uids in batch.items())
        taken += sum(beat(room, uids, trusted=True) for room, uids in trusted.items())
        if self._metrics is not None:
            self._metrics.heartbeats.inc(taken)
        return taken

    def forget(self, room: str, uid: str) -> None:
        """Take ``uid`` out of the room's members at once (a ban): this node's
        next shard write leaves it out, and the merged view drops it at the
        merge after that."""
        self.tables.forget(room, uid)

    # -- StatsReader -------------------------------------------------------------

    def online(self, room: str) -> int:
        return self.merge.want(room).online

    async def members(self, room: str, offset: int, limit: int) -> tuple[int, list[str]]:
        self.merge.want(room)
        view = await self.merge.ready(room)
        return view.online, await view.page(offset, limit)

    async def stats(self, room: str) -> RoomStats:
        self.merge.want(room)
        view = await self.merge.ready(room)
        if not self.history.known(room):
            await self.history.refresh([room])
        figure = self.history.figure(room)
        # Everyone in the merged view was counted in the history before their
        # shard was written; the figure may only lag one refresh behind.
        if view.online > figure.viewers:
            return RoomStats(view.online, view.online, figure.viewers_exact)
        return RoomStats(view.online, figure.viewers, figure.viewers_exact)

    async def online_series(self, room: str, since: float,
                            until: float) -> tuple[int, list[tuple[int, float, int]]]:
        return await self.series.query(room, since, until)

    async def likes_series(self, room: str, since: float,
                           until: float) -> tuple[int, list[tuple[int, int]]]:
        """The room's likes a bucket from ``since`` to ``until`` (Unix s):
        ``(step, [(t, taps)])``, the resolution and buckets chosen as for the
        online series (:func:`statsvr.series.query_window`), buckets without
        taps left out; one round trip."""
        step, low, high = self.series.window(since, until)
        if low > high or self._counters is None:
            return step, []
        return step, await self._counters.read_likes(room, step, low, high)

    async def biggest_rooms(self, limit: int) -> list[RankedRoom]:
        return await self.registry.biggest_rooms(limit)

    async def nodes(self) -> list[NodeState]:
        return await self.registry.nodes()

    async def broadcasts(self, room: str) -> list[BroadcastStats]:
        if self._operators is None:
            return []
        past = await self._operators.broadcasts(room)
        out = []
        for i, ended in enumerate(past):
            if i and ended.viewers.sketches:
                await asyncio.sleep(0)  # merging sketches is CPU work: let others run
            figure = viewers_figure(ended.viewers.exact, ended.viewers.complete,
                                    _estimate(room, ended.viewers), 0,
                                    self.limits.viewers_threshold)
            out.append(BroadcastStats(ended.broadcast, ended.ended_ms,
                                      figure.viewers, figure.viewers_exact, ended.likes,
                                      ended.gifts, ended.ranking))
        return out

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        await self.merge.start()
        await self.series.start(self._sample_source)
        await self.registry.start()
        for job in self._jobs:
            job.start()

    async def stop(self) -> None:
        for job in self._jobs:
            await job.stop()
        await self.registry.stop()
        await self.series.stop()
        await self.merge.stop()

    # -- the background steps (tests call them directly) ----------------------------

    async def write_once(self) -> None:
        """One pass of the write loop: sweep, history, shards."""
        now = self._clock.monotonic()
        if now - self._last_sweep >= self.limits.sweep_every:
            self._last_sweep = now
            await self.tables.sweep()
        writes, joined = await self.tables.take_writes()
        for room, uids in joined.items():
            # In slices: a million joins at once must not hold the loop.
            for i in range(0, len(uids), JOIN_SLICE):
                if i:
                    await asyncio.sleep(0)
                self.history.joined(room, uids[i:i + JOIN_SLICE])
        # A node merges the rooms it owns members of, read here or not: it may
        # be the one that samples their series.
        for room in self.tables.rooms():
            self.merge.want(room)
        await self.history.flush()
        if not writes:
            return
        try:
            missing = await self._stats.write_shards(
                self.node, writes, int(self._clock.time() * 1000),
                int(self.limits.shard_ttl * 1000))
        except StoreUnavailable as exc:
            if self._metrics is not None:
                self._metrics.store_errors.labels("write_shards").inc()
            self.tables.restore(writes)
            self._writes.failed("cannot store online shards, retrying: %s", exc.message)
            return
        self._writes.worked("online shards stored again")
        for room, index in missing:
            self.tables.rewrite(room, index)

    async def refresh_viewers(self) -> None:
        """Refresh the viewers figures of every room this node merges."""
        rooms = self.merge.rooms()
        for chunk in _chunks(rooms, 256):
            await self.history.refresh(chunk)

    def _load(self) -> NodeLoad:
        return NodeLoad(rooms_cached=self._rooms_cached(), held_polls=self._held_polls(),
                        members=len(self.tables), rooms_merged=len(self.merge.rooms()))

    def _sample_source(self) -> Iterator[tuple[str, int, frozenset[str]]]:
        for room in self.merge.rooms():
            view = self.merge.view(room)
            yield room, view.online, view.nodes


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _estimate(room: str, stored: ViewersState) -> int:
    """The estimate of an ended broadcast's merged sketches (0 if one is corrupt:
    the exact count is then the figure's floor)."""
    if not stored.sketches:
        return 0
    try:
        return merge_registers(stored.sketches).estimate()
    except ValueError as exc:
        logger.error("room %s: a stored viewers sketch of an ended broadcast is corrupt: %s",
                  room, exc)
        return 0
