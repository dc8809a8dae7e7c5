"""The viewers history of the rooms a node sees: "N people have watched".

One :class:`ViewersHistory` per statsvr node has two sides:

* **Owner side.** The table writer hands over the uids that joined this node's
  table (:meth:`ViewersHistory.joined`, memory only); :meth:`ViewersHistory.flush`
  stores them: into the room's one exact set in the store (capped at
  ``viewers_threshold`` uids, then marked incomplete for good) and into this node's own
  HyperLogLog of the room, a :class:`~statsvr.viewers.ViewerSketch` kept in
  memory and stored whole under the node's stable id. Nodes never write each
  other's sketch, so there is no read-modify-write race between them. A node
  that restarts with the same id loads its stored sketch once and merges it
  into the new one (register maximum), so it continues its key instead of
  overwriting it with a smaller one.
* **Reader side.** :meth:`ViewersHistory.refresh` reads the rooms' histories in
  one round trip and computes each room's figure with
  :func:`~statsvr.viewers.viewers_figure`; :meth:`ViewersHistory.figure`
  answers from memory. The figure never goes down within a broadcast: the
  last one shown is kept per room.
* **Broadcasts.** An operator may end a room's broadcast
  (:meth:`~liveroom.store.base.Operators.end_broadcast`): the store then keeps
  a new, empty history under the next broadcast number, which ``add_viewers``
  and ``viewers`` report. A node that sees the number of a room go up, on a
  flush or a refresh, forgets what it had counted for the room (its sketch,
  the exact set's flag, the figure shown) and counts every member its table
  holds now (``members``) again, so the new broadcast's history starts with who
  is watching now. A flush that finds it wrote into a new broadcast (with the
  old broadcast's sketch) writes the fresh state at once, replacing it.

Limits and trade-offs:

* **No loss on a store outage.** Joins not yet stored stay pending and go with
  the next flush; a node killed before a flush loses only those joins, never
  viewers already flushed (they are in the store).
* **A bounded exact write.** A flush sends at most ``viewers_threshold + 1`` uids of a
  room: if more are pending, those already overflow the exact set, which then
  turns incomplete. Once a room is known incomplete no uids are sent at all,
  only the sketch (16 KiB a room a flush).
* **A bounded loop stall.** Uids go into the sketch in slices of
  :data:`SKETCH_SLICE` (about 20 ms of hashing each) with a yield between, so
  a burst of a million joins does not block the event loop for long.
* **Sketches only where needed.** A reader asks for the per-node sketches of a
  room only once it knows the room's exact set incomplete; on the refresh that
  first sees a room incomplete, the capped exact count is the figure's floor,
  and the estimate follows on the next refresh.
* **A race left open.** The first flush of a room since it came into memory
  loads the node's stored sketch, then writes; a broadcast ended between the
  two carries that sketch into the new broadcast unnoticed (the node has no
  number to compare with yet). A reply from before an end arriving after one
  from after it is ignored (see ``_saw_broadcast``).
* **Memory.** An owner keeps one 16 KiB sketch per room it holds members of;
  rooms with no joins for ``idle`` seconds are dropped (their sketches are in
  the store and are loaded again if members come back). Readers drop rooms
  neither refreshed nor read for ``idle`` seconds, losing only their last
  figure (the store's history gives it back, give or take the estimate's noise).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.lifecycle import Outage
from liveroom.settings import DEFAULTS
from liveroom.store.base import StatsStore, ViewersState

from .viewers import ViewersFigure, ViewerSketch, merge_registers, viewers_figure

__all__ = ["IDLE", "SKETCH_SLICE", "MembersOf", "ViewersHistory"]

logger = logging.getLogger("liveroom.statsvr.history")

IDLE = 600.0
"""Seconds without a join (owner) or a read (reader) before a room leaves memory."""

SKETCH_SLICE = 20_000
"""Uids hashed into a sketch between two yields to the event loop."""

_UNKNOWN = ViewersFigure(0, True)

MembersOf = Callable[[str], Iterable[str]]
"""The members a node's table holds of a room now (counted again in a new broadcast)."""


def _no_members(room: str) -> Iterable[str]:
    return ()


@dataclass(eq=False, slots=True)
class _Owned:
    """A room this node holds members of: its sketch and the joins not yet stored."""

    active_at: float
    pending: dict[str, None] = field(default_factory=dict)
    """Uids that joined since the last stored flush, first-seen order."""
    sketch: ViewerSketch = field(default_factory=ViewerSketch)
    loaded: bool = False
    """Whether the node's stored sketch was merged in (once per room in memory)."""
    complete: bool = True
    """False once the store said the exact set is capped: uids are no longer sent."""


@dataclass(eq=False, slots=True)
class _Read:
    """A room whose figure this node shows."""

    read_at: float
    figure: ViewersFigure = _UNKNOWN
    complete: bool = True
    """The exact set's flag at the last refresh: sketches are read once it is False."""


class ViewersHistory:
    """The viewers history of one statsvr node (owner and reader sides).

    ``node`` is the node's stable id (it names the node's sketch keys);
    ``viewers_threshold`` the largest exact count; ``history_ttl`` how long
    (seconds) a room's history lives in the store after its last update; ``idle`` how long a room
    stays in memory unused; ``members`` the members the node's table holds of
    a room, counted again when a new broadcast starts. Not thread-safe: one
    event loop; :meth:`flush` and :meth:`refresh` may run concurrently with
    each other but each should have one caller at a time.
    """

    def __init__(self, stats: StatsStore, clock: Clock, node: str, *,
                 viewers_threshold: int = DEFAULTS.viewers_threshold,
                 history_ttl: float = DEFAULTS.history_ttl,
                 idle: float = IDLE, members: MembersOf = _no_members) -> None:
        if viewers_threshold < 0:
            raise ValueError("viewers_threshold must be >= 0")
        self.node = node
        self.viewers_threshold = viewers_threshold
        self._stats = stats
        self._clock = clock
        self._ttl_ms = int(history_ttl * 1000)
        self._idle = idle
        self._members = members
        self._owned: dict[str, _Owned] = {}
        self._read: dict[str, _Read] = {}
        self._broadcast: dict[str, int] = {}
        """The broadcast the store reported last per room in memory."""
        self._doubted: dict[str, int] = {}
        """A lower broadcast reported once, not believed yet."""
        self._flush_outage = Outage(logger)
        self._refresh_outage = Outage(logger)

    # -- owner side ----------------------------------------------------------------

    def joined(self, room: str, uids: Iterable[str]) -> None:
        """Note uids that joined this node's table of ``room`` (memory only).

        They are stored by the next :meth:`flush`; a uid noted twice is stored once.
        """
        now = self._clock.monotonic()
        state = self._owned.get(room)
        if state is None:
            state = self._owned[room] = _Owned(active_at=now)
        state.active_at = now
        state.pending.update(dict.fromkeys(uids))

    def pending(self, room: str) -> int:
        """Uids of ``room`` noted but not stored yet."""
        state = self._owned.get(room)
        return 0 if state is None else len(state.pending)

    async def flush(self) -> None:
        """Store every room's pending joins: exact set and this node's sketch.

        One ``add_viewers`` round trip per room with joins (plus one
        ``load_sketch`` the first time a room is flushed since it came into
        memory). Stops at the first :class:`StoreUnavailable`, keeping every
        unstored join pending for the next flush (logged once per outage);
        never raises it. Rooms with no join for ``idle`` seconds leave memory.
        """
        now = self._clock.monotonic()
        for room, state in list(self._owned.items()):
            if not state.pending:
                if now - state.active_at > self._idle:
                    del self._owned[room]
                    self._forget(room)
                continue
            try:
                await self._flush_room(room, state)
                fresh = self._owned.get(room)
                if fresh is not None and fresh is not state and fresh.pending:
                    # A new broadcast started: replace at once the old sketch
                    # just written into it.
                    await self._flush_room(room, fresh)
            except StoreUnavailable as exc:
                self._flush_outage.failed("cannot store viewers history, will retry: %s",
                                          exc.message)
                return
            self._flush_outage.worked("can store viewers history again")

    async def _flush_room(self, room: str, state: _Owned) -> None:
        uids, state.pending = list(state.pending), {}
        try:
            if not state.loaded:
                stored = await self._stats.load_sketch(room, self.node)
                if stored is not None:
                    try:
                        state.sketch.merge(ViewerSketch.from_bytes(stored))
                    except ValueError as exc:
                        logger.error("room %s: stored viewers sketch of node %s is corrupt, "
                                  "starting it again: %s", room, self.node, exc)
                state.loaded = True
            for i in range(0, len(uids), SKETCH_SLICE):
                if i:
                    await asyncio.sleep(0)
                state.sketch.add_many(uids[i:i + SKETCH_SLICE])
            exact = uids[:self.viewers_threshold + 1] if state.complete else []
            _, complete, broadcast = await self._stats.add_viewers(
                room, self.node, exact, state.sketch.to_bytes(), self.viewers_threshold,
                self._ttl_ms)
            if self._saw_broadcast(room, broadcast):
                state.complete = complete
        except BaseException:
            # Not stored (store down, or cancelled): keep them for the next flush.
            # Adding them to the sketch again is harmless.
            uids_left = dict.fromkeys(uids)
            uids_left.update(state.pending)
            state.pending = uids_left
            raise

    # -- reader side -----------------------------------------------------------------

    def known(self, room: str) -> bool:
        """Whether a :meth:`refresh` has given ``room`` a figure (memory only)."""
        return room in self._read

    def figure(self, room: str) -> ViewersFigure:
        """The room's viewers figure as of the last :meth:`refresh` (memory only).

        ``ViewersFigure(0, True)`` for a room never refreshed. Counts as a read
        that keeps the room in memory.
        """
        state = self._read.get(room)
        if state is None:
            return _UNKNOWN
        state.read_at = self._clock.monotonic()
        return state.figure

    async def refresh(self, rooms: Sequence[str]) -> None:
        """Read the histories of ``rooms`` in one round trip and update their figures.

        Sketches are asked for only for rooms already known incomplete; they are
        merged per room, yielding to the event loop between rooms. On
        :class:`StoreUnavailable` the figures stay as they were (logged once per
        outage); never raises it. Rooms neither refreshed nor read for ``idle``
        seconds leave memory.
        """
        now = self._clock.monotonic()
        rooms = list(dict.fromkeys(rooms))
        if rooms:
            want = [room in self._read and not self._read[room].complete for room in rooms]
            try:
                states = await self._stats.viewers(rooms, sketches=want)
            except StoreUnavailable as exc:
                self._refresh_outage.failed("cannot read viewers history, will retry: %s",
                                            exc.message)
                return
            self._refresh_outage.worked("can read viewers history again")
            for i, (room, stored) in enumerate(zip(rooms, states, strict=True)):
                if stored.sketches and i:
                    await asyncio.sleep(0)
                if not self._saw_broadcast(room, stored.broadcast):
                    continue  # read before an end this node already saw
                state = self._read.get(room)
                if state is None:
                    state = self._read[room] = _Read(read_at=now)
                state.read_at = now
                state.figure = viewers_figure(stored.exact, stored.complete,
                                              _estimate(room, stored),
                                              state.figure.viewers, self.viewers_threshold)
                state.complete = stored.complete
        for room in [r for r, s in self._read.items() if now - s.read_at > self._idle]:
            del self._read[room]
            self._forget(room)

    # -- broadcasts ------------------------------------------------------------------

    def _saw_broadcast(self, room: str, broadcast: int) -> bool:
        """Note the broadcast the store reported for ``room``; start counting
        afresh when it differs from the one known. False to ignore the reply.

        A lower number is first taken for a reply from before an end this node
        already saw (the flush and the refresh each have one call in flight,
        so at most one such reply comes) and ignored; reported again, it is a
        room whose every history expired and whose numbers started over.
        """
        known = self._broadcast.get(room)
        if known is not None and broadcast < known and self._doubted.get(room) != broadcast:
            self._doubted[room] = broadcast
            return False
        self._doubted.pop(room, None)
        self._broadcast[room] = broadcast
        if known is not None and broadcast != known:
            self._restart(room)
        return True

    def _restart(self, room: str) -> None:
        """Forget what was counted of ``room``; count its members again."""
        logger.info("room %s: a new broadcast; node %s counts its viewers again", room, self.node)
        read = self._read.get(room)
        if read is not None:
            read.figure = _UNKNOWN
            read.complete = True
        old = self._owned.get(room)
        pending = dict.fromkeys(self._members(room))
        if old is None and not pending:
            return
        if old is not None:
            pending.update(old.pending)  # joins not stored yet: in the new one too
        # loaded: nothing of the old broadcast may come back from the store.
        self._owned[room] = _Owned(active_at=self._clock.monotonic(), pending=pending,
                                   loaded=True)

    def _forget(self, room: str) -> None:
        if room not in self._owned and room not in self._read:
            self._broadcast.pop(room, None)
            self._doubted.pop(room, None)


def _estimate(room: str, stored: ViewersState) -> int:
    """The estimate of the merged per-node sketches; a corrupt one is left out."""
    if not stored.sketches:
        return 0
    try:
        return merge_registers(stored.sketches).estimate()
    except ValueError:
        good = []
        for blob in stored.sketches:
            try:
                merge_registers([blob])
            except ValueError as exc:
                logger.error("room %s: a stored viewers sketch is corrupt, left out: %s", room, exc)
            else:
                good.append(blob)
        return merge_registers(good).estimate()
