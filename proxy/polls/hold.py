"""Held long polls: plain ones woken by every change, paced ones released in ticks.

Per room one watcher task waits on the room reader for the next change, so the
reader sees one waiter per room (one upstream long poll per room when the
reader is remote) whatever the number of held polls.

A held poll is a callback (:class:`Wakeable`), not a task: holding one costs a
:class:`HeldPoll` in its room's structures, and waking one is a call.

*Personal* messages wake only their addressees' polls, plain or paced (one
dictionary lookup per message): a pull that brought only personal messages
wakes nobody else, so a room's thousands of personal messages a second cost
per message, never per listener.

*Plain* polls (a room under the first tier) are all woken at every change of
the room's messages and re-read; their timeouts share one
:class:`~proxy.deadlines.Deadlines` per loop. The watcher wakes all of a
room's plain polls in one go, as a paced room's ticker releases its due polls:
a message reaches every listener before the loop reads their next polls.
(Letting the loop run between slices of a wake-up lets the polls that come
back be read in between, and the last listener then waits for both: measured
with 20 000 held polls, the last answer went out twice as late.) The loop is
held for about 10 µs per answer; rooms big enough for that to matter are
paced by the default tiers.

*Paced* polls (a room in a tier) are not woken one change at a time: a ticker
task per room releases them every ``tick`` seconds, so listeners released
together share encoded answers. At a tick a paced poll is released when

- it has messages pending and its due time (the tier's interval after its last
  non-empty answer) has passed;
- an important message newer than its important cursor is pending and the
  room's *cut-through* fires: at the first tick at least ``cut_through_every`` seconds
  after the previous one, whenever an important message arrived since (so a
  backend posting many signals releases a room at most 1/``cut_through_every`` times a
  second, and one signal reaches everybody within a tick);
- its ``deadline`` (the poll's timeout) passed with nothing pending (answered
  empty; with messages pending it stays held until due: the hold may run past
  the timeout by up to the interval).

*News* of a room (a new likes total, new top givers, slow mode: what an
answer shows beside its messages) is not a change of its snapshot:
:meth:`Holds.note_news` counts it in the room, and :meth:`Holds.tell_news`
(which :mod:`.news` calls at most once per room per period) answers the
room's held polls that were held before it and have nothing pending, empty,
so their answers carry it. A poll with messages pending carries it when it
is due.

The ticker's work is per released poll, not per held poll: waiting polls sit
in heaps by due time and deadline, polls that are due but have nothing pending
wait in a list released whole at the next change, and only a cut-through scans
the room's held polls (at most once per ``cut_through_every``).

**Bounds.** A listener (room, uid) has at most ``holds_per_listener`` polls held
of each kind: a newer one answers the oldest at once, empty, so a client that
reconnects never waits on its own ghost and one uid cannot pile up held
connections. The node holds at most ``held_max`` polls: beyond, a new hold
raises :class:`~liveroom.errors.Overloaded` (503 with ``Retry-After``) instead
of taking a file descriptor the node needs for everybody else.

On shutdown :meth:`Holds.release_all` wakes every held poll with ``None``
(answered empty, same cursors); polls arriving after that are not held.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import resource
from dataclasses import dataclass, field
from typing import Final, Protocol

from liveroom.clock import Clock
from liveroom.errors import Overloaded
from liveroom.metrics import Metrics
from liveroom.roles import RoomReader
from liveroom.settings import DEFAULTS
from liveroom.snapshot import Snapshot, moved_past

from ..deadlines import Deadlines

logger: Final = logging.getLogger("liveroom.proxy")

_order: Final = itertools.count()

SWEEP_SLACK: Final = 16
"""Entries a paced room's heap may keep beyond twice its held polls before
its released ones are swept (see :func:`_sweep`)."""
PACING_KEPT: Final = 5.0
"""Seconds a paced room keeps its pacing after its last held poll left."""

FD_RESERVE: Final = 256
"""Open files a node keeps for everything but held polls (at least; a
twentieth of a large limit): store connections, requests being read,
``/healthz``, the admin API."""


def held_capacity() -> int:
    """Polls this process may hold: its open-file limit less the reserve
    (each held poll keeps its connection open)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(64, soft - max(FD_RESERVE, soft // 20))



class Wakeable(Protocol):
    """A held poll, as the hold sees it."""

    def wake(self, snapshot: Snapshot | None) -> None:
        """Called once: the snapshot to answer from, or ``None`` to answer
        empty (timeout, shutdown). The poll may hold itself again."""


class HeldPoll:
    """A poll held in a room; :meth:`Holds.cancel` takes it back. (One is made
    per held poll: a slotted class, docs/development.md, "Compiled modules";
    compared and hashed by identity.)"""

    __slots__ = ("done", "epoch", "iseq", "key", "name", "paced", "pending", "poll", "room",
                 "told", "top", "uid")

    def __init__(self, poll: Wakeable, name: str, room: _HeldRoom, paced: bool, uid: str, *,
                 epoch: str = "", top: int = 0, iseq: int = 0, pending: bool = False) -> None:
        self.poll = poll
        """The poll to wake."""
        self.name = name
        self.room = room
        self.told = room.news
        """The room's news when it was held: its poll read everything up to there."""
        self.paced = paced
        self.uid = uid
        self.key = 0
        """A plain poll's deadline bucket."""
        self.epoch = epoch
        self.top = top
        """The higher of a paced poll's cursors: a head beyond it means news."""
        self.iseq = iseq
        self.pending = pending
        """Something was pending in the snapshot a paced poll was held with."""
        self.done = False

    def has_news(self, snap: Snapshot) -> bool:
        return self.pending or snap.epoch != self.epoch or snap.head > self.top


Kept = HeldPoll | Snapshot | None
"""What :meth:`Holds.hold` did with a plain poll: held it (the
:class:`HeldPoll`, to :meth:`Holds.cancel` it); or not, since the room moved
past the poll's snapshot (this newer :class:`Snapshot`: read it at once); or
not, shutting down (``None``: answer it empty). A named union rather than a
result object: every held poll goes this way, and holding one makes nothing
more than its :class:`HeldPoll`."""

_REFUSED: Final = 0
_SUPERSEDED: Final = 1
"""The places of :attr:`Holds.counts`."""

ByUid = HeldPoll | list[HeldPoll]
"""A listener's held polls in a by-uid index: the poll itself while it has
one (most listeners: no list to make and keep), else a list, oldest first."""


def _unlist(by_uid: dict[str, ByUid], held_poll: HeldPoll) -> None:
    """Take ``held_poll`` out of the by-uid index ``by_uid`` (if listed)."""
    uid = held_poll.uid
    mine = by_uid.get(uid)
    if mine is held_poll:
        del by_uid[uid]
    elif isinstance(mine, list) and held_poll in mine:
        mine.remove(held_poll)
        if not mine:
            del by_uid[uid]


@dataclass(eq=False)
class _HeldRoom:
    """A room with polls held on this node: its plain and paced polls, its pacing."""

    snapshot: Snapshot
    waiters: dict[HeldPoll, None] = field(default_factory=dict)
    """Plain polls, in the order they were held (a dict, not a set: woken in
    that order, the same in every run, which the simulator's replay of a
    seed relies on)."""
    plain_by_uid: dict[str, ByUid] = field(default_factory=dict)
    """Plain polls by listener (see :data:`ByUid`; all of them are woken at
    once, so this is replaced whole then)."""
    paced: dict[HeldPoll, None] = field(default_factory=dict)
    """Paced polls, in the order they were held (see ``waiters``)."""
    paced_by_uid: dict[str, ByUid] = field(default_factory=dict)
    not_due: list[tuple[float, int, HeldPoll]] = field(default_factory=list)
    """Heap by due time of paced polls not yet due."""
    ready: list[HeldPoll] = field(default_factory=list)
    """Paced polls that were due with nothing pending: released at the next change."""
    deadlines: list[tuple[float, int, HeldPoll]] = field(default_factory=list)
    changed: bool = False
    """The snapshot changed since the last tick."""
    emptied_at: float | None = None
    """When a paced room's last held poll left."""
    last_cut: float = float("-inf")
    cut_upto: int = 0
    """Newest important message a cut-through has released."""
    cut_late: bool = False
    """A poll that missed the last cut-through (it was on its way) is held."""
    waking: bool = False
    """The watcher is waking this room's plain polls (it must not be cancelled)."""
    news: int = 0
    """News of the room noted while it had held polls (:meth:`Holds.note_news`)."""
    watcher: asyncio.Task[None] | None = None
    ticker: asyncio.Task[None] | None = None

    @property
    def empty(self) -> bool:
        return not self.waiters and not self.paced


def cut_fires(newest: int, cut_upto: int, cut_late: bool, now: float, last_cut: float,
              cut_through_every: float) -> bool:
    """Whether a paced room's important messages cut through at this tick.

    They do when an important message newer than the last cut-through's
    (``newest`` > ``cut_upto``, in any monotonic count) arrived, or a poll
    that missed the last cut-through (it was on its way) is held
    (``cut_late``), and the last cut-through that released somebody was at
    least ``cut_through_every`` seconds ago. ``loadtest/sim_hold.py`` calls this too,
    so the simulator paces important messages by the server's own rule.
    """
    return (newest > cut_upto or cut_late) and now - last_cut >= cut_through_every


def _sweep(heap: list[tuple[float, int, HeldPoll]], held: int) -> list[tuple[float, int, HeldPoll]]:
    """``heap`` without its released polls once they outnumber the ``held``
    ones (and :data:`SWEEP_SLACK`), else ``heap`` as it is.

    A paced poll released early (when due, or by a cut-through) stays in the
    deadlines heap until its deadline, the poll's whole timeout later: with
    the default 25 s timeout and a 2 s tier, a dozen released polls a listener,
    each keeping its poll, query values and last read alive. Sweeping when the
    heap has doubled costs O(1) a hold, amortised."""
    if len(heap) <= 2 * held + SWEEP_SLACK:
        return heap
    kept = [entry for entry in heap if not entry[2].done]
    heapq.heapify(kept)
    return kept


class Holds:
    def __init__(self, reader: RoomReader, clock: Clock, *,
                 hold_tick: float = DEFAULTS.hold_tick,
                 cut_through_every: float = DEFAULTS.cut_through_every,
                 holds_per_listener: int = DEFAULTS.holds_per_listener,
                 holds_per_uid: int = DEFAULTS.holds_per_uid,
                 held_max: int = DEFAULTS.held_max, metrics: Metrics | None = None) -> None:
        self._reader = reader
        self._clock = clock
        self._hold_tick = hold_tick
        self._cut_through_every = cut_through_every
        self.holds_per_listener = holds_per_listener
        self.holds_per_uid = holds_per_uid
        """Polls held at once per uid over all rooms; a newer one supersedes the oldest."""
        self._by_uid: dict[str, ByUid] = {}
        """Every held poll by uid (see :data:`ByUid`)."""
        self.held_max = held_max or held_capacity()
        """Polls the node may hold at once (0 given: :func:`held_capacity`)."""
        self.counts = [0, 0] if metrics is None else metrics.tally(
            [metrics.refused_polls.labels("node_full"), metrics.superseded_polls])
        """Polls refused because the node held all it may, and held polls
        answered early because a newer poll of their listener came, since the
        metrics last took them (the hold's own :meth:`Metrics.tally`)."""
        self._rooms: dict[str, _HeldRoom] = {}
        self._deadlines: Deadlines[HeldPoll] = Deadlines(self._expire)
        self.count = 0
        """Polls held now."""
        self.closing = False
        self.releases = 0
        """Cut-throughs fired (all rooms), for metrics and tests."""

    @property
    def listeners_held(self) -> int:
        """Listeners (uids) with a poll held now, over all rooms."""
        return len(self._by_uid)

    def _room(self, name: str, snapshot: Snapshot) -> _HeldRoom:
        room = self._rooms.get(name)
        if room is None:
            # Kept before it is recorded: a refused keep (the cache holds as
            # many rooms as it may: Overloaded, a 503) leaves nothing behind.
            self._reader.keep(name)  # cached for as long as it is in _rooms
            room = self._rooms[name] = _HeldRoom(snapshot)
        if room.watcher is None:
            room.watcher = asyncio.create_task(self._watch(name, room),
                                               name=f"proxy-hold-{name}")
        return room

    def _leave(self, name: str, room: _HeldRoom) -> None:
        if not room.empty or room.waking or self._rooms.get(name) is not room:
            return
        if room.ticker is not None and not self.closing:
            # A paced room outlives its held polls for a while: the polls it
            # just released come back within a round trip, and its pacing
            # (the last cut-through) must still hold for them. Its ticker
            # drops it after PACING_KEPT.
            room.emptied_at = self._clock.monotonic()
            return
        # Its tasks are cancelled before the cache lets go of it: the cache
        # then finds the room idle once the cancellations run, not busy.
        for task in (room.watcher, room.ticker):
            if task is not None:
                task.cancel()
        self._drop(name)

    def _drop(self, name: str) -> None:
        """The room holds no poll any more (nor lingers): forget it, let go of it."""
        del self._rooms[name]
        self._reader.let_go(name)

    def _take(self, held_poll: HeldPoll) -> bool:
        """Take ``held_poll`` out of its room's structures (heaps are cleaned
        lazily); False if it was already released or cancelled."""
        if held_poll.done:
            return False
        held_poll.done = True
        self.count -= 1
        room = held_poll.room
        if held_poll.paced:
            room.paced.pop(held_poll, None)
            by_uid = room.paced_by_uid
        else:
            room.waiters.pop(held_poll, None)
            self._deadlines.discard(held_poll, held_poll.key)
            by_uid = room.plain_by_uid
        _unlist(by_uid, held_poll)
        _unlist(self._by_uid, held_poll)
        return True

    def _admit(self, by_uid: dict[str, ByUid], held_poll: HeldPoll,
               most: int) -> HeldPoll | None:
        """Count ``held_poll`` among its listener's in ``by_uid`` (a room's, or the
        node's over all rooms); return the oldest one it supersedes past
        ``most`` (to be answered empty by the caller, once ``held_poll`` is in)."""
        uid = held_poll.uid
        mine = by_uid.get(uid)
        if mine is None:
            by_uid[uid] = held_poll
            return None
        if isinstance(mine, HeldPoll):
            mine = by_uid[uid] = [mine, held_poll]
        else:
            mine.append(held_poll)
        if len(mine) <= most:
            return None
        oldest = mine[0]
        return oldest if self._take(oldest) else None

    def _supersede(self, oldest: HeldPoll | None) -> None:
        if oldest is not None:
            self.counts[_SUPERSEDED] += 1
            self._leave(oldest.name, oldest.room)
            self._wake(oldest, None)

    def _check_capacity(self) -> None:
        if self.count >= self.held_max:
            self.counts[_REFUSED] += 1
            raise Overloaded()

    def cancel(self, held_poll: HeldPoll) -> None:
        """The poll went away (its client left): forget it, wake nothing."""
        if self._take(held_poll):
            self._leave(held_poll.name, held_poll.room)

    def hold(self, room: str, uid: str, snapshot: Snapshot, poll: Wakeable,
             deadline: float) -> Kept:
        """Hold listener ``uid``'s plain poll read against ``snapshot`` until
        ``room`` moves past it, or until ``deadline`` on the loop's clock.

        Returns what it did (:data:`Kept`): the held poll; or a newer snapshot
        of the room to read at once instead of holding; or ``None`` when the
        poll is not held (shutting down): answer it empty. Raises
        :class:`Overloaded` when the node holds all it may.
        """
        if self.closing:
            return None
        state = self._rooms.get(room)
        if state is not None and state.snapshot is not snapshot:
            # The room's copy and the poll's snapshot differ: the reader says
            # which is newest (the copy may lag a swap by a few loop turns, or
            # the poll may have read before the last swap).
            newest = self._refresh(room, state)
            if newest is not snapshot and moved_past(newest, snapshot):
                return newest
        self._check_capacity()
        if state is None or state.watcher is None:
            state = self._room(room, snapshot)
        # A deadline already passed (a poll held again right at its end) fires
        # at the next turn of the deadlines' timer.
        held_poll = HeldPoll(poll, room, state, False, uid)
        held_poll.key = self._deadlines.add(held_poll, deadline)
        state.waiters[held_poll] = None
        self.count += 1
        self._supersede(self._admit(state.plain_by_uid, held_poll, self.holds_per_listener))
        # Made-up rooms must not let one listener take the node's capacity.
        self._supersede(self._admit(self._by_uid, held_poll, self.holds_per_uid))
        return held_poll

    def hold_paced(self, room: str, uid: str, snapshot: Snapshot, poll: Wakeable, *,
                   epoch: str, seq: int, iseq: int, pending: bool, due: float,
                   deadline: float) -> HeldPoll | None:
        """Hold listener ``uid``'s paced poll at cursors ``(seq, iseq)`` of
        ``epoch``, read against ``snapshot`` (``pending``: it had something to
        deliver there).

        The room's ticker wakes it with the snapshot to answer from (see the
        module), or with ``None`` at ``deadline`` with nothing pending. ``due``
        and ``deadline`` are on the clock's monotonic time. Returns ``None``
        (not held: answer empty) when shutting down; raises
        :class:`Overloaded` when the node holds all it may.
        """
        if self.closing:
            return None
        self._check_capacity()
        state = self._room(room, snapshot)
        if state.snapshot is not snapshot:
            # The ticker answers from the room's copy: bring it up to the
            # reader's newest (never back to an older snapshot the poll read).
            self._refresh(room, state)
        held_poll = HeldPoll(poll, room, state, True, uid, epoch=epoch, top=max(seq, iseq),
                        iseq=iseq, pending=pending)
        if iseq < state.cut_upto:
            state.cut_late = True
        state.paced[held_poll] = None
        state.emptied_at = None
        order = next(_order)
        heapq.heappush(state.not_due, (due, order, held_poll))
        heapq.heappush(state.deadlines, (deadline, order, held_poll))
        if state.ticker is None:
            state.ticker = asyncio.create_task(self._tick_forever(room, state),
                                               name=f"proxy-tick-{room}")
        self.count += 1
        self._supersede(self._admit(state.paced_by_uid, held_poll, self.holds_per_listener))
        self._supersede(self._admit(self._by_uid, held_poll, self.holds_per_uid))
        return held_poll

    def _expire(self, held_poll: HeldPoll) -> None:
        """A plain poll's deadline passed (the deadlines forgot it already)."""
        if self._take(held_poll):
            self._leave(held_poll.name, held_poll.room)
            self._wake(held_poll, None)

    def _wake(self, held_poll: HeldPoll, snap: Snapshot | None) -> None:
        try:
            held_poll.poll.wake(snap)
        except Exception:  # one poll failing must not strand the others
            logger.exception("answering a held poll of room %s failed", held_poll.name)

    async def _watch(self, name: str, room: _HeldRoom) -> None:
        try:
            while not room.empty or room.ticker is not None:
                try:
                    snap = await self._reader.wait_changed(name, room.snapshot)
                except Exception:  # a reader failing must not strand held polls
                    logger.exception("watching room %s failed", name)
                    await asyncio.sleep(0.1)
                    continue
                self._refresh(name, room, snap)
        finally:
            room.watcher = None
            if room.empty and room.ticker is None and self._rooms.get(name) is room:
                self._drop(name)

    def _refresh(self, name: str, room: _HeldRoom, told: Snapshot | None = None) -> Snapshot:
        """Bring the room's copy of its snapshot up to the reader's newest and
        wake whom the change concerns; return the newest.

        The copy is only a cache of the reader's snapshot: which one is newest
        is asked of the reader, never inferred from the copy (any two epochs
        differ, so "different" says nothing of "newer"). ``told`` is what the
        reader's change wait returned; the reader may have swapped again since
        (a hold may have brought the copy further already), so it stands only
        when the reader holds nothing of the room."""
        old = room.snapshot
        newest = self._reader.peek(name)
        if newest is None:
            newest = old if told is None else told
        if newest is old:
            return newest
        if newest.epoch == old.epoch and (newest.head < old.head or newest.phead < old.phead):
            # Within an epoch nothing goes back: a reader behind the copy (a
            # sect that has not pulled a room that just moved to it) catches
            # up through the watcher.
            return old
        room.snapshot, room.changed = newest, True
        if room.waiters and (newest.head != old.head or newest.epoch != old.epoch):
            self._wake_plain(room, newest)
        self._wake_addressees(room, old, newest)
        return newest

    def _wake_plain(self, room: _HeldRoom, snap: Snapshot) -> None:
        """Wake every plain poll of the room."""
        woken, room.waiters = room.waiters, {}
        room.plain_by_uid = {}
        room.waking = True
        discard = self._deadlines.discard
        by_uid = self._by_uid
        try:
            for held_poll in woken:
                if not held_poll.done:  # taken back meanwhile (a wake-up may close others)
                    held_poll.done = True
                    self.count -= 1
                    discard(held_poll, held_poll.key)
                    _unlist(by_uid, held_poll)
                    held_poll.poll.wake(snap)  # a poll's wake answers its own failures
        finally:
            room.waking = False

    def _wake_addressees(self, room: _HeldRoom, old: Snapshot, snap: Snapshot) -> None:
        """Wake the held polls of the listeners ``snap`` brought personal
        messages for since ``old`` (plain or paced, at once)."""
        personal = snap.personal
        if personal is None or snap.phead <= old.phead:
            return
        after = old.phead if old.personal is personal else 0
        plain, paced = room.plain_by_uid, room.paced_by_uid
        # Like _wake_plain: the room stays while it wakes (the watcher or the
        # poll being held goes on with it; an empty room is left by them).
        waking, room.waking = room.waking, True
        try:
            for uid in personal.addressees(after, snap.phead):
                for mine in (plain.get(uid), paced.get(uid)):
                    if mine is not None:
                        for held_poll in [mine] if isinstance(mine, HeldPoll) else list(mine):
                            if self._take(held_poll):
                                self._wake(held_poll, snap)
        finally:
            room.waking = waking

    async def _tick_forever(self, name: str, room: _HeldRoom) -> None:
        try:
            while True:
                await self._clock.sleep(self._hold_tick)
                now = self._clock.monotonic()
                if room.paced:
                    room.emptied_at = None
                    try:
                        released = self._tick_once(room, now)
                    except Exception:  # one bad tick must not strand the room's polls
                        logger.exception("releasing held polls of room %s failed", name)
                        continue
                    # Wake after the bookkeeping: a woken poll may hold itself again.
                    for held_poll, snap in released:
                        self._wake(held_poll, snap)
                    if room.empty:
                        room.emptied_at = now
                elif room.emptied_at is None or now - room.emptied_at >= PACING_KEPT:
                    break
        finally:
            room.ticker = None
            if room.empty and self._rooms.get(name) is room:
                self._drop(name)
                if room.watcher is not None:
                    room.watcher.cancel()

    def _tick_once(self, room: _HeldRoom, now: float) -> list[tuple[HeldPoll, Snapshot | None]]:
        """Which paced polls this tick releases, taken out of the room."""
        released: list[tuple[HeldPoll, Snapshot | None]] = []

        def release(held_poll: HeldPoll, snap: Snapshot | None) -> None:
            if self._take(held_poll):
                released.append((held_poll, snap))

        snap = room.snapshot
        if room.changed:
            room.changed = False
            waiting = []
            for held_poll in room.ready:
                if held_poll.done:
                    continue
                if held_poll.has_news(snap):
                    release(held_poll, snap)
                else:
                    waiting.append(held_poll)
            room.ready = waiting
        not_due = room.not_due
        while not_due and not_due[0][0] <= now:
            held_poll = heapq.heappop(not_due)[2]
            if held_poll.done:
                continue
            if held_poll.has_news(snap):
                release(held_poll, snap)
            else:
                room.ready.append(held_poll)
        newest = snap.last_important
        if cut_fires(newest, room.cut_upto, room.cut_late, now, room.last_cut,
                     self._cut_through_every):
            room.cut_upto, room.cut_late = newest, False
            cut = 0
            for held_poll in list(room.paced):
                if held_poll.epoch == snap.epoch and held_poll.iseq < newest:
                    release(held_poll, snap)
                    cut += 1
            if cut:
                # Only a cut that answered somebody spaces the next one: a
                # room whose polls all had the message already owes nobody.
                room.last_cut = now
                self.releases += 1
        deadlines = room.deadlines
        while deadlines and deadlines[0][0] <= now:
            held_poll = heapq.heappop(deadlines)[2]
            # With news the poll stays held until due (the heap above releases it).
            if not held_poll.done and not held_poll.has_news(snap):
                release(held_poll, None)
        held = len(room.paced)
        room.deadlines = _sweep(deadlines, held)
        room.not_due = _sweep(not_due, held)
        return released

    def note_news(self, room: str) -> bool:
        """The room's news changed (its likes, top givers or slow mode):
        counted in it if it has polls held (a dict lookup); whether it has."""
        state = self._rooms.get(room)
        if state is None or state.empty:
            return False
        state.news += 1
        return True

    def tell_news(self, room: str) -> int:
        """Answer now, empty (same cursors, the room's figures as they are
        now), the room's held polls that were held before its last news and
        have nothing pending: its plain polls, and its paced ones with
        nothing to deliver (a paced poll with messages pending, or a first
        poll held until due, carries the news when it is due). How many."""
        state = self._rooms.get(room)
        if state is None:
            return 0
        news, snap = state.news, state.snapshot
        told = [held_poll for held_poll in state.waiters if held_poll.told < news]
        told += [held_poll for held_poll in state.paced
                 if held_poll.told < news and not held_poll.has_news(snap)]
        # Like _wake_plain: the room stays while it wakes (an answer may let
        # the client's next poll in at once); left below if empty.
        waking, state.waking = state.waking, True
        answered = 0
        try:
            for held_poll in told:
                if self._take(held_poll):  # not answered meanwhile by another's wake-up
                    answered += 1
                    self._wake(held_poll, None)
        finally:
            state.waking = waking
        self._leave(room, state)
        return answered

    def kept(self, room: str) -> int:
        """Entries the room's paced heaps keep now: its held paced polls, and
        released ones not swept yet (at most twice as many, plus a few)."""
        state = self._rooms.get(room)
        return 0 if state is None else len(state.deadlines) + len(state.not_due)

    def take_listener(self, room: str, uid: str) -> list[Wakeable]:
        """Take listener ``uid``'s held polls of ``room`` out of the hold,
        plain and paced, and return them unanswered: the caller answers them
        (a ban). Walks the listener's own entries only."""
        state = self._rooms.get(room)
        if state is None:
            return []
        taken = []
        for by_uid in (state.plain_by_uid, state.paced_by_uid):
            mine = by_uid.get(uid)
            for held_poll in (list(mine) if isinstance(mine, list) else [mine] if mine else []):
                if self._take(held_poll):
                    taken.append(held_poll.poll)
        self._leave(room, state)
        return taken

    def release_all(self) -> None:
        """Wake every held poll with ``None`` now (answered with what it had
        pending, if anything: else empty, same cursors); hold no new ones."""
        self.closing = True
        held_polls = [t for room in self._rooms.values() for t in (*room.waiters, *room.paced)]
        for held_poll in held_polls:
            if self._take(held_poll):
                self._wake(held_poll, None)
        for name, room in list(self._rooms.items()):
            self._leave(name, room)

    async def close(self) -> None:
        tasks = [t for h in self._rooms.values() for t in (h.watcher, h.ticker)
                 if t is not None]
        self.release_all()
        self._deadlines.close()
        for task in tasks:
            task.cancel()
        # One gathering future, not each task in turn (docs/development.md,
        # "Compiled modules").
        await asyncio.gather(*tasks, return_exceptions=True)
