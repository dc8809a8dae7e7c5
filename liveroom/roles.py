"""The interfaces through which the roles meet.

The proxy reads rooms through :class:`RoomReader` whether the recvsvr behind it
runs in this process or (later) on another host, and reports listeners to
:class:`Presence` whatever statsvr stands behind it. Both are value-returning:
a reader hands out immutable :class:`~liveroom.snapshot.Snapshot` values.
"""

from __future__ import annotations

from typing import Protocol

from .snapshot import Snapshot


class RoomReader(Protocol):
    async def snapshot(self, room: str) -> Snapshot:
        """The room's current snapshot.

        A room this reader holds no snapshot of waits for its first pull,
        shared by every poll that asks meanwhile; with the store unreachable
        that raises :class:`~liveroom.errors.StoreUnavailable`.
        """

    async def wait_changed(self, room: str, snapshot: Snapshot) -> Snapshot:
        """Wait until the room's snapshot is no longer ``snapshot``, return the new one.

        No timeout: the caller bounds the wait. One caller per room is enough
        (the proxy's hold fans the change out to its held polls).
        """

    async def wait_pulled(self, room: str) -> Snapshot:
        """Pull the room now and return the snapshot after that pull.

        Confirms what the store holds, for a cursor this reader has not seen
        yet (a listener that hopped from a node further ahead). Raises
        StoreUnavailable when the pull fails.
        """


class Presence(Protocol):
    def heartbeat(self, room: str, uid: str) -> None:
        """Record that ``uid`` polled ``room`` now. Memory only, never waits."""

    def online(self, room: str) -> int:
        """How many distinct listeners the room has now."""
