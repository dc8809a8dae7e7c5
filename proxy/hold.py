"""Held long polls.

Per room one watcher task waits on the room reader for the next change and
releases every poll held in that room at once, so the reader sees one waiter
per room (one upstream long poll per room when the reader is remote) and the
wake-up work grows with rooms, not listeners. A held poll costs one future and
one timer.

On shutdown :meth:`Holds.release_all` answers every held poll (empty, same
cursors) before the server cancels handlers; polls arriving after that are not
held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from liveroom.roles import RoomReader
from liveroom.snapshot import Snapshot

log = logging.getLogger("liveroom.proxy")


@dataclass(eq=False)
class _Room:
    snapshot: Snapshot
    waiters: set[asyncio.Future[Snapshot | None]] = field(default_factory=set)
    watcher: asyncio.Task[None] | None = None


class Holds:
    def __init__(self, reader: RoomReader) -> None:
        self._reader = reader
        self._rooms: dict[str, _Room] = {}
        self.count = 0
        self.closing = False

    async def wait(self, room: str, snapshot: Snapshot, within: float) -> Snapshot | None:
        """Wait until ``room`` moves past ``snapshot``; ``None`` after ``within``
        seconds or on shutdown."""
        if self.closing or within <= 0:
            return None
        held = self._rooms.get(room)
        if held is None:
            held = self._rooms[room] = _Room(snapshot)
        elif held.snapshot is not snapshot and (held.snapshot.epoch != snapshot.epoch
                                                or held.snapshot.head > snapshot.head):
            return held.snapshot
        fut: asyncio.Future[Snapshot | None] = asyncio.get_running_loop().create_future()
        held.waiters.add(fut)
        if held.watcher is None:
            held.watcher = asyncio.create_task(self._watch(room, held),
                                               name=f"proxy-hold-{room}")
        self.count += 1
        try:
            async with asyncio.timeout(within):
                return await fut
        except TimeoutError:
            return None
        finally:
            self.count -= 1
            held.waiters.discard(fut)
            if not held.waiters and self._rooms.get(room) is held:
                del self._rooms[room]
                if held.watcher is not None:
                    held.watcher.cancel()

    async def _watch(self, room: str, held: _Room) -> None:
        try:
            while held.waiters:
                try:
                    snap = await self._reader.wait_changed(room, held.snapshot)
                except asyncio.CancelledError:
                    raise
                except Exception:  # a reader failing must not strand held polls
                    log.exception("watching room %s failed", room)
                    snap = held.snapshot
                    await asyncio.sleep(0.1)
                    continue
                held.snapshot = snap
                for fut in list(held.waiters):
                    if not fut.done():
                        fut.set_result(snap)
        finally:
            held.watcher = None

    def release_all(self) -> None:
        """Answer every held poll now (empty, same cursors); hold no new ones."""
        self.closing = True
        for held in self._rooms.values():
            for fut in held.waiters:
                if not fut.done():
                    fut.set_result(None)

    async def close(self) -> None:
        self.release_all()
        watchers = [h.watcher for h in self._rooms.values() if h.watcher is not None]
        for task in watchers:
            task.cancel()
        for task in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
