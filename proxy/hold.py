"""Held long polls: plain ones woken by every change, paced ones released in ticks.

Per room one watcher task waits on the room reader for the next change, so the
reader sees one waiter per room (one upstream long poll per room when the
reader is remote) whatever the number of held polls.

*Plain* polls (a room under the first tier) are all woken at every change and
re-read; a held plain poll costs one future and one timer.

*Paced* polls (a room in a tier) are not woken one change at a time: a ticker
task per room releases them every ``tick`` seconds, so listeners released
together share encoded answers. At a tick a paced poll is released when

- it has messages pending and its due time (the tier's interval after its last
  non-empty answer) has passed;
- an important message newer than its important cursor is pending and the
  room's *cut-through* fires: at the first tick at least ``cut_every`` seconds
  after the previous one, whenever an important message arrived since (so a
  backend posting many signals releases a room at most 1/``cut_every`` times a
  second, and one signal reaches everybody within a tick);
- its ``deadline`` (the poll's timeout) passed with nothing pending (answered
  empty; with messages pending it stays held until due: the hold may run past
  the timeout by up to the interval).

The ticker's work is per released poll, not per held poll: waiting polls sit
in heaps by due time and deadline, polls that are due but have nothing pending
wait in a list released whole at the next change, and only a cut-through scans
the room's held polls (at most once per ``cut_every``).

On shutdown :meth:`Holds.release_all` answers every held poll (empty, same
cursors) before the server cancels handlers; polls arriving after that are not
held.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from dataclasses import dataclass, field

from liveroom.clock import Clock
from liveroom.roles import RoomReader
from liveroom.snapshot import Snapshot

log = logging.getLogger("liveroom.proxy")

_order = itertools.count()

LINGER = 5.0
"""Seconds a paced room keeps its pacing after its last held poll left."""


@dataclass(eq=False, slots=True)
class _Paced:
    fut: asyncio.Future[Snapshot | None]
    epoch: str
    top: int
    """The higher of the poll's cursors: a head beyond it means news."""
    iseq: int
    pending: bool
    """Something was pending in the snapshot the poll was held with."""

    def has_news(self, snap: Snapshot) -> bool:
        return self.pending or snap.epoch != self.epoch or snap.head > self.top


@dataclass(eq=False)
class _Room:
    snapshot: Snapshot
    waiters: set[asyncio.Future[Snapshot | None]] = field(default_factory=set)
    """Plain polls."""
    paced: set[_Paced] = field(default_factory=set)
    not_due: list[tuple[float, int, _Paced]] = field(default_factory=list)
    """Heap by due time of paced polls not yet due."""
    ready: list[_Paced] = field(default_factory=list)
    """Paced polls that were due with nothing pending: released at the next change."""
    deadlines: list[tuple[float, int, _Paced]] = field(default_factory=list)
    changed: bool = False
    """The snapshot changed since the last tick."""
    emptied_at: float | None = None
    """When a paced room's last held poll left."""
    last_cut: float = float("-inf")
    cut_upto: int = 0
    """Newest important message a cut-through has released."""
    cut_late: bool = False
    """A poll that missed the last cut-through (it was on its way) is held."""
    watcher: asyncio.Task[None] | None = None
    ticker: asyncio.Task[None] | None = None

    @property
    def empty(self) -> bool:
        return not self.waiters and not self.paced


def _release(fut: asyncio.Future[Snapshot | None], value: Snapshot | None) -> None:
    if not fut.done():
        fut.set_result(value)


class Holds:
    def __init__(self, reader: RoomReader, clock: Clock, *, tick: float = 0.2,
                 cut_every: float = 0.5) -> None:
        self._reader = reader
        self._clock = clock
        self._tick = tick
        self._cut_every = cut_every
        self._rooms: dict[str, _Room] = {}
        self.count = 0
        self.closing = False
        self.releases = 0
        """Cut-throughs fired (all rooms), for metrics and tests."""

    def _room(self, name: str, snapshot: Snapshot) -> _Room:
        held = self._rooms.get(name)
        if held is None:
            held = self._rooms[name] = _Room(snapshot)
        if held.watcher is None:
            held.watcher = asyncio.create_task(self._watch(name, held),
                                               name=f"proxy-hold-{name}")
        return held

    def _leave(self, name: str, held: _Room) -> None:
        if not held.empty or self._rooms.get(name) is not held:
            return
        if held.ticker is not None and not self.closing:
            # A paced room outlives its held polls for a while: the polls it
            # just released come back within a round trip, and its pacing
            # (the last cut-through) must still hold for them. Its ticker
            # drops it after LINGER.
            held.emptied_at = self._clock.monotonic()
            return
        del self._rooms[name]
        for task in (held.watcher, held.ticker):
            if task is not None:
                task.cancel()

    async def wait(self, room: str, snapshot: Snapshot, within: float) -> Snapshot | None:
        """A plain poll: wait until ``room`` moves past ``snapshot``; ``None``
        after ``within`` seconds or on shutdown."""
        if self.closing or within <= 0:
            return None
        held = self._rooms.get(room)
        if held is not None and held.snapshot is not snapshot and (
                held.snapshot.epoch != snapshot.epoch or held.snapshot.head > snapshot.head):
            return held.snapshot
        held = self._room(room, snapshot)
        fut: asyncio.Future[Snapshot | None] = asyncio.get_running_loop().create_future()
        held.waiters.add(fut)
        self.count += 1
        try:
            async with asyncio.timeout(within):
                return await fut
        except TimeoutError:
            return None
        finally:
            self.count -= 1
            held.waiters.discard(fut)
            self._leave(room, held)

    async def wait_paced(self, room: str, snapshot: Snapshot, *, epoch: str, seq: int,
                         iseq: int, pending: bool, due: float,
                         deadline: float) -> Snapshot | None:
        """A paced poll at cursors ``(seq, iseq)`` of ``epoch``, read against
        ``snapshot`` (``pending``: it had something to deliver there).

        Returns the snapshot to answer from when the room's ticker releases the
        poll (see the module), ``None`` at ``deadline`` with nothing pending or
        on shutdown. ``due`` and ``deadline`` are on the clock's monotonic time.
        """
        if self.closing:
            return None
        held = self._room(room, snapshot)
        current = held.snapshot
        if current is not snapshot and (current.epoch != snapshot.epoch
                                        or snapshot.head > current.head):
            # The reader's snapshot is the newest; the watcher has yet to see it.
            held.snapshot, held.changed = snapshot, True
        poll = _Paced(asyncio.get_running_loop().create_future(), epoch, max(seq, iseq),
                      iseq, pending)
        if iseq < held.cut_upto:
            held.cut_late = True
        held.paced.add(poll)
        order = next(_order)
        heapq.heappush(held.not_due, (due, order, poll))
        heapq.heappush(held.deadlines, (deadline, order, poll))
        if held.ticker is None:
            held.ticker = asyncio.create_task(self._tick_forever(room, held),
                                              name=f"proxy-tick-{room}")
        self.count += 1
        try:
            return await poll.fut
        finally:
            self.count -= 1
            held.paced.discard(poll)
            self._leave(room, held)

    async def _watch(self, room: str, held: _Room) -> None:
        try:
            while not held.empty or held.ticker is not None:
                try:
                    snap = await self._reader.wait_changed(room, held.snapshot)
                except asyncio.CancelledError:
                    raise
                except Exception:  # a reader failing must not strand held polls
                    log.exception("watching room %s failed", room)
                    await asyncio.sleep(0.1)
                    continue
                held.snapshot, held.changed = snap, True
                for fut in list(held.waiters):
                    _release(fut, snap)
        finally:
            held.watcher = None

    async def _tick_forever(self, room: str, held: _Room) -> None:
        try:
            while True:
                await self._clock.sleep(self._tick)
                now = self._clock.monotonic()
                if held.paced:
                    held.emptied_at = None
                    try:
                        self._tick_once(held, now)
                    except Exception:  # one bad tick must not strand the room's polls
                        log.exception("releasing held polls of room %s failed", room)
                elif held.emptied_at is None or now - held.emptied_at >= LINGER:
                    break
        finally:
            held.ticker = None
            if held.empty and self._rooms.get(room) is held:
                del self._rooms[room]
                if held.watcher is not None:
                    held.watcher.cancel()

    def _tick_once(self, held: _Room, now: float) -> None:
        snap = held.snapshot
        if held.changed:
            held.changed = False
            waiting = []
            for poll in held.ready:
                if poll.fut.done():
                    continue
                if poll.has_news(snap):
                    _release(poll.fut, snap)
                else:
                    waiting.append(poll)
            held.ready = waiting
        not_due = held.not_due
        while not_due and not_due[0][0] <= now:
            poll = heapq.heappop(not_due)[2]
            if poll.fut.done():
                continue
            if poll.has_news(snap):
                _release(poll.fut, snap)
            else:
                held.ready.append(poll)
        newest = snap.last_important
        if (newest > held.cut_upto or held.cut_late) and now - held.last_cut >= self._cut_every:
            held.cut_upto, held.cut_late = newest, False
            released = 0
            for poll in held.paced:
                if poll.epoch == snap.epoch and poll.iseq < newest and not poll.fut.done():
                    _release(poll.fut, snap)
                    released += 1
            if released:
                # Only a cut that answered somebody spaces the next one: a
                # room whose polls all had the message already owes nobody.
                held.last_cut = now
                self.releases += 1
        deadlines = held.deadlines
        while deadlines and deadlines[0][0] <= now:
            poll = heapq.heappop(deadlines)[2]
            # With news the poll stays held until due (the heap above releases it).
            if not poll.has_news(snap):
                _release(poll.fut, None)

    def release_all(self) -> None:
        """Answer every held poll now (empty, same cursors); hold no new ones."""
        self.closing = True
        for held in self._rooms.values():
            for fut in held.waiters:
                _release(fut, None)
            for poll in held.paced:
                _release(poll.fut, None)

    async def close(self) -> None:
        self.release_all()
        tasks = [t for h in self._rooms.values() for t in (h.watcher, h.ticker)
                 if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
