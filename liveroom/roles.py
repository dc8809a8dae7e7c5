"""The interfaces through which the roles meet.

The proxy reads rooms through :class:`RoomReader` whether the recvsvr behind it
runs in this process or (later) on another host, hands heartbeats to a
:class:`HeartbeatSink` and reads online figures through :class:`StatsReader`,
whatever statsvr stands behind them. Readers return values: a room reader
hands out immutable :class:`~liveroom.snapshot.Snapshot` values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .snapshot import Snapshot
from .store.base import NodeState, RankedRoom


class RoomReader(Protocol):
    async def snapshot(self, room: str) -> Snapshot:
        """The room's current snapshot.

        A room this reader holds no snapshot of waits for its first pull,
        shared by every poll that asks meanwhile; with the store unreachable
        that raises :class:`~liveroom.errors.StoreUnavailable`.
        """

    def current(self, room: str) -> Snapshot | None:
        """The room's snapshot held now, counted as a read; ``None`` when this
        reader holds none yet (then :meth:`snapshot` waits for the first pull).
        Never waits: the poll's fast path."""

    def peek(self, room: str) -> Snapshot | None:
        """The room's snapshot held now, not counted as a read; ``None`` when
        this reader holds none. The newest this reader has: the proxy's hold
        asks it which of two snapshots to trust."""

    def read_by(self, room: str, uid: str) -> None:
        """``uid`` read ``room``, a room that exists. Memory only, never waits:
        the reader passes who read a room to the store with its reads, so a
        room of one sender read by that sender alone does not last (see
        :meth:`~liveroom.store.base.MessageLog.touch`)."""

    async def wait_changed(self, room: str, snapshot: Snapshot) -> Snapshot:
        """Wait until the room's snapshot is no longer ``snapshot``, return the new one.

        No timeout: the caller bounds the wait. One caller per room is enough
        (the proxy's hold fans the change out to its held polls).
        """

    def keep(self, room: str) -> None:
        """Keep ``room`` cached until as many :meth:`let_go`: the proxy's hold
        keeps a room while it holds polls in it (a count the hold owns). A
        kept room is never evicted.

        Past the cache's bound in kept rooms that exist, reading a new room
        raises :class:`~liveroom.errors.Overloaded`, and so does the first keep
        of a room (its hold must then hold nothing: keep before recording the
        room, so a refused keep leaves nothing to let go). Another keep of a
        kept room never refuses. Rooms that do not exist are kept outside
        that bound."""

    def let_go(self, room: str) -> None:
        """One :meth:`keep` of ``room`` less (nothing for a room not kept).
        O(1): a hold may let go of thousands of rooms in one turn."""

    async def wait_pulled(self, room: str) -> Snapshot:
        """Pull the room now and return the snapshot after that pull.

        Confirms what the store holds, for a cursor this reader has not seen
        yet (a listener that hopped from a node further ahead). Raises
        StoreUnavailable when the pull fails.
        """


class HeartbeatSink(Protocol):
    """A statsvr node taking heartbeats from proxies."""

    def ingest(self, batch: bytes) -> int:
        """Take a batch of heartbeats as one proxy gathered them, msgpack
        ``[{room: [uid, ...]}, {room: [uid, ...]}]``: the heartbeats, then
        the trusted ones (a ticket's uid, or a poll that came back with the
        signed ``ctx`` it was given: the listeners the automatic vip rule
        counts). Memory only, never waits; returns how many."""

    def take(self, batch: Mapping[str, Sequence[str]],
             trusted: Mapping[str, Sequence[str]]) -> int:
        """:meth:`ingest` for a proxy in the same process: the two maps as
        they are, no bytes in between."""


@dataclass(frozen=True, slots=True)
class RoomStats:
    """Who is in a room and how many have watched it."""

    online: int
    viewers: int
    viewers_exact: bool


@dataclass(frozen=True, slots=True)
class BroadcastStats:
    """An ended broadcast of a room and how many watched it."""

    broadcast: int
    ended_ms: int
    viewers: int
    viewers_exact: bool
    likes: int = 0
    """Its likes when it ended."""
    gifts: int = 0
    """Its gift total."""
    ranking: tuple[tuple[str, int], ...] = ()
    """Its top givers with their scores, best first (at most 100)."""


class StatsReader(Protocol):
    """The merged view of rooms a statsvr node serves to the proxy.

    Every answer comes from memory (the merged view swapped in by the merge
    task); none touches the store on the caller's path except the series,
    the past broadcasts and the registry's figures, read on demand.
    """

    def online(self, room: str) -> int:
        """The room's online count now (0 until its first merge); also marks
        the room as read, so the node keeps merging it."""

    async def members(self, room: str, offset: int, limit: int) -> tuple[int, list[str]]:
        """The online count and one page of the sorted online members.

        Waits for the room's first merge when it has none yet (raises
        StoreUnavailable if that fails)."""

    async def stats(self, room: str) -> RoomStats:
        """Online and viewers figures (waits for a first merge like ``members``)."""

    async def online_series(self, room: str, since: float,
                            until: float) -> tuple[int, list[tuple[int, float, int]]]:
        """The online count over ``[since, until]`` (Unix s): ``(step, [(t, avg, max)])``."""

    async def likes_series(self, room: str, since: float,
                           until: float) -> tuple[int, list[tuple[int, int]]]:
        """Likes over ``[since, until]`` (Unix s): ``(step, [(t, taps)])``, the
        step picked as for the online series."""

    async def biggest_rooms(self, limit: int) -> list[RankedRoom]:
        """The ``limit`` biggest rooms now by online count, over every node of
        the store, as the nodes last announced them (a few seconds old). One
        store read (an operator's page, not a poll's path); raises
        StoreUnavailable when it cannot."""

    async def nodes(self) -> list[NodeState]:
        """The live nodes over the store and what each announced it holds. One
        store read; raises StoreUnavailable when it cannot."""

    async def broadcasts(self, room: str) -> list[BroadcastStats]:
        """The room's ended broadcasts still kept, newest first, with their
        viewers figures. Reads the store on every call (an operator's page, not
        a poll's path); raises StoreUnavailable when it cannot."""
