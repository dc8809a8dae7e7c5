"""statsvr's tables in the store (:class:`StatsStore`): the shards of each
room's members, its viewers history, its online series and the node
registry with the biggest rooms each node announces.

One of the store's interfaces (:mod:`.base`): every engine implements it, and
every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

SERIES_RESOLUTIONS: tuple[tuple[int, int], ...] = (
    (60, 86_400),
    (300, 7 * 86_400),
    (3_600, 90 * 86_400),
)
"""``(step s, retention s)`` of every series a room keeps, finest first: the
online series' table (``statsvr.series.DEFAULT_RESOLUTIONS`` is built from
it) and the likes series' (``Counters.add_likes``). 1-minute buckets for
a day, 5-minute buckets for a week, 1-hour buckets for 90 days."""


@dataclass(frozen=True, slots=True)
class ShardWrite:
    """One shard of one room as a statsvr node holds it, to store or refresh.

    A node's shard ``index`` of ``count`` holds the room's members whose
    shard hash (``statsvr.table.shard_of``) is ``index``. The stored value is
    replaced whole.
    """

    room: str
    index: int
    count: int
    """How many shards the node splits this room into (1, or ``vip_shards``)."""
    version: str
    """Changes whenever the members change; unique across node restarts."""
    size: int
    """Members in the shard. 0 drops the shard (key and index entry)."""
    members: bytes | None
    """msgpack array of the members' uids, sorted; ``None`` when the members did
    not change since the last write: only the expiry (and ``trusted``) is
    pushed."""
    trusted: int = 0
    """Members the automatic vip rule may count (at most ``size``): those the
    proxy vouched for (a ticket, or a second poll with the signed ``ctx`` it
    was given: ``proxy.polls.poll``). Stored in the index entry, beside ``size``."""


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """A live shard of a room, as the room's shard index lists it."""

    node: str
    index: int
    count: int
    version: str
    size: int
    expires_ms: int
    trusted: int = 0
    """Its members the vip rule may count (``ShardWrite.trusted``); ``size``
    for an entry an older node wrote (no such count: all were counted)."""


@dataclass(frozen=True, slots=True)
class ViewersState:
    """A room's viewers history as stored."""

    exact: int
    """Uids in the room's exact set."""
    complete: bool
    """False once the exact set hit its threshold and stopped growing."""
    sketches: tuple[bytes, ...]
    """Every node's HyperLogLog registers (empty when not asked for)."""
    broadcast: int = 1
    """The room's current broadcast (see ``Operators.end_broadcast``)."""


@dataclass(frozen=True, slots=True)
class OnlineSample:
    """One sample of a room's online count, for every resolution of its series."""

    room: str
    t_ms: int
    online: int


RANKED_ROOMS_MAX = 100
"""Rooms one node lists in an announcement, at most (its biggest)."""


@dataclass(frozen=True, slots=True)
class RankedRoom:
    """A room in a node's announcement of its biggest rooms."""

    room: str
    online: int
    per_minute: float | None
    """Messages sent a minute lately (see ``liveroom.snapshot.sent_per_minute``);
    ``None`` when the announcing node did not hold the room's messages."""


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What a node holds, as it announces it."""

    rooms_cached: int = 0
    """Rooms in its recvsvr caches (both sects)."""
    held_polls: int = 0
    """Polls its proxy holds now."""
    members: int = 0
    """Online listeners whose heartbeats its statsvr keeps."""
    rooms_merged: int = 0
    """Rooms whose online view its statsvr merges."""


@dataclass(frozen=True, slots=True)
class Announcement:
    """What a statsvr node tells the node registry each time it announces itself."""

    load: NodeLoad = NodeLoad()
    rooms: tuple[RankedRoom, ...] = ()
    """Its biggest rooms (at most :data:`RANKED_ROOMS_MAX`), each listed by the
    one node that samples its online series (``statsvr.sampler.writer_of``)."""


@dataclass(frozen=True, slots=True)
class NodeState:
    """A live node as the registry holds it."""

    node: str
    announced_ms: int
    expires_ms: int
    announcement: Announcement


SeriesRow = tuple[int, int, int, int, int]
"""``(start, min, max, sum, count)`` of one stored bucket."""


def series_horizon_ms(resolutions: Sequence[tuple[int, int]], min_gap_ms: int) -> int:
    """Check ``record_online``'s arguments; return how long a series lives after
    its last sample (the longest retention, in ms; 0 without resolutions).

    Raises ``ValueError`` for a step that is not positive, a retention shorter
    than its step, or a negative gap.
    """
    if min_gap_ms < 0 or any(step <= 0 or retention < step for step, retention in resolutions):
        raise ValueError(
            f"bad series arguments: resolutions {resolutions!r}, min_gap_ms {min_gap_ms}")
    return max((retention for _, retention in resolutions), default=0) * 1000


def biggest(announcements: Iterable[Announcement], limit: int) -> list[RankedRoom]:
    """The ``limit`` biggest rooms listed in ``announcements``: online
    descending, then room name; a room listed twice counts once, with its
    larger figure (the rule of ``StatsStore.biggest_rooms`` on every engine)."""
    best: dict[str, RankedRoom] = {}
    for announcement in announcements:
        for ranked in announcement.rooms:
            held = best.get(ranked.room)
            if held is None or ranked.online > held.online:
                best[ranked.room] = ranked
    return heapq.nsmallest(limit, best.values(), key=lambda r: (-r.online, r.room))


class StatsStore(Protocol):
    """What statsvr keeps in the KV store: shard tables, viewers history, series.

    Time given in ``*_ms`` arguments is the caller's clock (Unix ms), so every
    node and every engine agrees on expiry even under a test's fake clock.
    """

    async def write_shards(self, node: str, writes: Sequence[ShardWrite],
                           now_ms: int, ttl_ms: int) -> list[tuple[str, int]]:
        """Store or refresh ``node``'s shards: one round trip for the batch.

        Each written or refreshed shard's index entry says it lives until
        ``now_ms + ttl_ms``; readers ignore it after that (and the key itself
        is dropped some time later). A refresh sets the entry's ``trusted``
        too (the count can change while the members do not). Entries of any
        node that expired are
        pruned from the rooms written. Returns the ``(room, index)`` of shards
        that were only to be refreshed but are gone from the store (flushed, or
        expired while this node stalled): the caller writes them whole again.
        """

    async def shard_index(self, rooms: Sequence[str], now_ms: int) -> list[list[ShardEntry]]:
        """The live shards of each room (expired ones left out), one round trip."""

    async def read_shards(self, room: str, entries: Sequence[ShardEntry],
                          max_bytes: int | None = None) -> list[bytes | None]:
        """The members blobs of these shards of one room, one round trip;
        ``None`` for a shard gone meanwhile. With ``max_bytes``, only the
        first ``max_bytes`` bytes of each (a blob is a msgpack array of
        sorted uids, so a prefix holds the first members): a shorter answer
        is the whole blob."""

    async def add_viewers(self, room: str, node: str, uids: Sequence[str],
                          sketch: bytes | None, threshold: int,
                          ttl_ms: int) -> tuple[int, bool, int]:
        """Count ``uids`` as viewers of ``room``'s current broadcast and store
        ``node``'s sketch.

        Atomically adds the uids to the room's exact set, in order, until it
        would exceed ``threshold`` uids; then the set is marked incomplete and
        never grows again. ``sketch`` (when given) replaces ``node``'s own
        HyperLogLog registers of the room, but only once the set is incomplete
        (this call or an earlier one made it so): below the threshold the exact
        set is the whole truth, and no 16 KiB sketch is stored. Callers keep
        their sketch fed from the start and pass it every time, so the first
        one stored covers every uid the node saw. The room's history lives ``ttl_ms``
        after its last update; no longer than its log then has left when the
        room is one sender's (see ``MessageLog.append``'s ``provisional``)
        and ``uids`` are that sender alone, so a room nobody else read leaves
        no history behind (another uid's join keeps ``ttl_ms``: its read makes
        the room last).
        Returns the set's size, whether it is complete,
        and the broadcast written to: a caller that finds it changed wrote its
        old broadcast's sketch into the new one, and writes a fresh one.
        """

    async def load_sketch(self, room: str, node: str) -> bytes | None:
        """``node``'s stored HyperLogLog registers of ``room``'s current
        broadcast, if any."""

    async def viewers(self, rooms: Sequence[str], *,
                      sketches: Sequence[bool]) -> list[ViewersState]:
        """The viewers history of each room's current broadcast (and its
        number), one round trip; every node's sketch of a room is read only
        where ``sketches`` says so."""

    async def record_online(self, samples: Sequence[OnlineSample],
                            resolutions: Sequence[tuple[int, int]], min_gap_ms: int) -> int:
        """Add each sample to its bucket in every resolution ``(step s, retention s)``.

        A bucket keeps ``(min, max, sum, count)``; buckets older than a resolution's
        retention (relative to the sample) are dropped, and the series lives as
        long as the longest retention after its last sample (a room of one
        sender's, no longer than its log then has left: the samples after
        the room came to last keep it). A sample less than
        ``min_gap_ms`` after the room's last stored sample is skipped, so two
        nodes briefly both sampling a room do not double it. One round trip;
        returns how many samples were taken.
        """

    async def read_online(self, room: str, step: int, low: int, high: int) -> list[SeriesRow]:
        """The ``step``-second buckets of ``room`` whose start is in ``[low, high]``,
        oldest first."""

    async def announce(self, node: str, now_ms: int, ttl_ms: int,
                       announcement: Announcement | None = None) -> list[str]:
        """Say that statsvr ``node`` is alive until ``now_ms + ttl_ms``; return
        every live node (sorted), this one included.

        ``announcement`` (what the node holds, its biggest rooms) replaces the
        one the node made before, whole: a room it no longer lists is gone
        from :meth:`biggest_rooms` at once. ``None`` stores an empty one. Nodes
        whose time passed are dropped, with their announcements. One round trip.
        """

    async def withdraw(self, node: str) -> None:
        """Take ``node`` and its announcement out of the registry at once (a
        node that stops; one that dies just stops announcing)."""

    async def nodes(self, now_ms: int) -> list[NodeState]:
        """The live nodes (expiring at or after ``now_ms``) with their last
        announcement, sorted by node. One round trip; read-only."""

    async def biggest_rooms(self, now_ms: int, limit: int) -> list[RankedRoom]:
        """The ``limit`` biggest rooms by online count over every live node's
        announcement: online descending, then room name. A room two nodes list
        (its writer changing hands) appears once, with the larger count. One
        round trip; read-only; costs the live nodes times what each lists
        (at most :data:`RANKED_ROOMS_MAX`), never a walk over rooms.
        """
