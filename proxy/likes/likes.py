"""Likes: taps counted in memory, written to the store as one add per room.

A listener's client batches its taps (``count`` 1 to :data:`MAX_COUNT` a
request). The node checks the uid's windows (:class:`UidWindows`), adds the
taps to the room's pending sum and answers at once: nothing on a tap's path
touches the store. Every ``likes_flush`` seconds one call adds every dirty
room's sum to the store (``Counters.add_likes``: one round trip, atomic per
room), so the store's writes a second depend on the rooms tapped, never on
the tap rate (the seed's counting at huge QPS: merge the increments, write
one ``+n``).

**Never more, never silently less.** A write that fails (the store down,
or its reply lost after the store added it: the node cannot tell) is kept
as it was, its sums and its name (``write_id``), and the next flush tries
it again first: the store adds a named write once (``Counters.add_likes``),
so a lost reply never counts the taps twice while the store remembers the
name (``--dedup-ttl``; a reply lost just before an outage longer than that
counts them twice when the store is back). Meanwhile at most
``likes_rooms_max`` rooms wait (a tap for one more is refused, 503). A clean
stop flushes what is left. A crash loses the taps acknowledged since the
last write that was answered: at most ``likes_flush`` seconds of them while
the store answers.

**Everyone sees it.** Poll answers carry the room's total as ``likes``: what
the store held at the last refresh (at most one a second per node, for the
rooms asked about in the last minute and ``--poll-timeout-max``), plus what
this node has acknowledged and not yet seen written. It never goes down within a broadcast: a total
that went down in the store is a new broadcast (``room end``), which starts
again from the store's figure. A node that learns of a change (a tap here,
another node's taps at a refresh) tells ``on_change(room)``, which wakes the
room's held polls (:mod:`proxy.polls.news`).

**Of one broadcast.** The totals a node holds are of one broadcast of the
room, named by its epoch: the one the room cache held (``epoch_of``) before
the store was read, or the one a tap was acknowledged in. An answer asks for
its own epoch's total (:meth:`Likes.total`): of another broadcast it gets
only this node's taps acknowledged in it (0 right after ``room end``, until
the next refresh reads the new broadcast), never the ended one's figure, and
it changes nothing, so a poll answered from an older snapshot cannot take
the room's shown total back. (The cache's epoch is read before the store:
the store's counters turn with the log's epoch in one step, so a total read
after the cache saw an epoch is of that broadcast or a later one, never an
earlier one.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from liveroom.clock import Clock
from liveroom.errors import Overloaded, RateLimited, StoreUnavailable
from liveroom.lifecycle import Outage, Periodic
from liveroom.metrics import Metrics
from liveroom.ratelimit import UidWindows
from liveroom.snapshot import ABSENT_EPOCH
from liveroom.store.base import Counters

from ..recent_rooms import RecentRooms
from ..renewals import Renewals

logger: Final = logging.getLogger("liveroom.proxy.likes")

MAX_COUNT: Final = 100
"""Taps one request may carry."""
REFRESH_EVERY: Final = 1.0
"""Seconds between two reads of the totals of the rooms asked about
(:class:`~proxy.recent_rooms.RecentRooms`, which forgets a room a minute
and ``--poll-timeout-max`` after it was last asked about)."""



_TAPS: Final = 0
_WRITTEN: Final = 1
_FAILED: Final = 2
_LIMITED: Final = 3
_FULL: Final = 4


@dataclass
class _Write:
    """A write of taps whose outcome is not known (it failed: the store may
    have added it), tried again as it was."""

    taps: dict[str, int]
    epochs: dict[str, str]
    """The epoch each room's taps were acknowledged in."""
    name: str
    """Its ``write_id``: the store adds a named write once."""
    read: set[str] = field(default_factory=set)
    """Rooms whose store total was read since it failed: that total may hold
    these taps already (a reply lost after the store added them), so they
    are neither shown on top of it nor added to it once written: the next
    read gives the store's exact figure (simulator, redis seed 105141)."""


class Likes:
    """One node's likes: taps merged per room, flushed, and the totals shown.
    Start and stop it with the node."""

    def __init__(self, store: Counters, clock: Clock, limits: UidWindows, recent: RecentRooms,
                 *, likes_flush: float, likes_rooms_max: int,
                 metrics: Metrics | None = None,
                 epoch_of: Callable[[str], str | None] = lambda room: "",
                 root_of: Callable[[str], str | None] = lambda room: "",
                 on_change: Callable[[str], None] = lambda room: None,
                 renewals: Renewals | None = None) -> None:
        self._store = store
        self._epoch_of = epoch_of
        """The room's epoch as the node's room cache holds it (None: nothing
        held; "": no cache to ask, every total of one broadcast)."""
        self._root_of = root_of
        """The broadcast (its first epoch) the cache's copy is of ("" or None:
        unknown): a total the store says is another's is not taken."""
        self._on_change = on_change
        self._recent = recent
        self._clock = clock
        self.limits = limits
        self.likes_rooms_max = likes_rooms_max
        self._pending: dict[str, int] = {}
        """Taps acknowledged and not yet handed to the store, by room."""
        self._writing: dict[str, int] = {}
        """Taps in the flush under way."""
        self._stored: dict[str, int] = {}
        """The store's totals at the last refresh."""
        self._shown: dict[str, int] = {}
        """The totals answered so far (never down within a broadcast)."""
        self._epoch: dict[str, str] = {}
        """The broadcast (its epoch) ``_stored`` and ``_shown`` are of ("":
        not known, any)."""
        self._ended: dict[str, tuple[str, int]] = {}
        """By room: the broadcast (epoch) its totals were of before, and the
        last total shown in it: what answers still in it show (held on an
        older snapshot), never less."""
        self.counts = [0] * 5 if metrics is None else metrics.tally([
            metrics.likes_taps, metrics.likes_flushes.labels("written"),
            metrics.likes_flushes.labels("failed"), metrics.likes_refused.labels("rate_limited"),
            metrics.likes_refused.labels("full")])
        """Taps acknowledged, flushes written and failed, requests refused by
        the windows and for want of room (the metrics' :meth:`Metrics.tally`)."""
        if metrics is not None:
            metrics.track(metrics.likes_pending, lambda: self.pending)
            metrics.track(metrics.likes_flush_lag, self.flush_lag)
        self.oldest_pending = 0.0
        """When the oldest taps not yet written were acknowledged (monotonic; 0: none)."""
        self._refreshed = 0.0
        self._flushes = 0
        """Flushes begun (:meth:`learn` reads again if one began while it read)."""
        self._learning: dict[str, asyncio.Future[None]] = {}
        self._pending_epoch: dict[str, str] = {}
        """The epoch each room's pending taps were acknowledged in."""
        self._writing_epoch: dict[str, str] = {}
        """The same for the taps in the flush under way."""
        self._older: dict[tuple[str, str], int] = {}
        """Taps of an epoch their room left while they waited: (room, epoch) -> n."""
        self._renewals = renewals if renewals is not None else Renewals()
        """Rooms' epochs renewed lately (the same broadcast)."""
        self._flush_ended: asyncio.Future[None] | None = None
        """Resolved when the flush under way ends (None: none under way)."""
        self._retries: list[_Write] = []
        """Writes that failed, in order: tried again first, each as it was."""
        # A prefix and a count, not a generator expression over
        # itertools.count(): compiled by mypyc, that one ran on without end
        # when the node was made (the node never started).
        self._name_prefix = secrets.token_hex(8)
        """Each write's name: this node's (random) prefix, and a count."""
        self._named = 0
        self._outage = Outage(logger)
        # One task flushes, then refreshes when due: a refresh never reads the
        # store while a flush of this node's taps may or may not be in it.
        # A stop lets a flush under way end: cancelled after Redis ran it, it
        # would put its taps back and the stop would write them again.
        self._flusher = Periodic("proxy-likes", likes_flush, self.step, clock, logger,
                                 finish_step=True)

    def start(self) -> None:
        self._flusher.start()

    async def stop(self) -> None:
        """Stop flushing and refreshing, then hand the store what is left."""
        await self._flusher.stop()
        with contextlib.suppress(StoreUnavailable):  # what is left is said below
            await self.flush()
        left = (sum(self._pending.values()) + sum(self._older.values())
                + sum(n for write in self._retries for n in write.taps.values()))
        if left:
            rooms = {*self._pending, *(room for room, _ in self._older),
                     *(room for write in self._retries for room in write.taps)}
            logger.warning("%d acknowledged taps in %d rooms were not written (or not known "
                           "to be): the store was unavailable at shutdown", left, len(rooms))

    @property
    def pending(self) -> int:
        """Taps acknowledged and not yet written."""
        return (sum(self._pending.values()) + sum(self._writing.values())
                + sum(self._older.values())
                + sum(n for write in self._retries for n in write.taps.values()))

    def renewed(self, room: str, old: str, new: str) -> None:
        """The room's epoch ``old`` was renewed into ``new`` (noted in the
        node's :class:`~proxy.renewals.Renewals` already): the same
        broadcast, so what this node holds of ``old`` is ``new``'s; taps,
        answers and reads still naming ``old`` count as ``new``'s."""
        for held in (self._epoch, self._pending_epoch, self._writing_epoch,
                     *(write.epochs for write in self._retries)):
            if held.get(room) == old:
                held[room] = new

    def _now(self, room: str, epoch: str | None) -> str | None:
        return self._renewals.now(room, epoch)

    def tap(self, room: str, uid: str, count: int, slow: int = 0, epoch: str = "") -> int:
        """Acknowledge ``count`` taps of ``uid`` in ``room``; the room's total
        as this node knows it. ``epoch``: the room's, as this node's cache
        holds it (the broadcast the taps belong to: taps that waited in an
        epoch the room has left are written to the broadcast that ended
        with it). Raises :class:`RateLimited` past the uid's windows (or its
        room's slow mode, ``slow`` seconds), :class:`Overloaded` when
        ``likes_rooms_max`` rooms wait for a flush already."""
        pending = self._pending
        counts = self.counts
        if room not in pending and len(pending) + len(self._writing) + sum(
                len(write.taps) for write in self._retries) >= self.likes_rooms_max:
            counts[_FULL] += 1
            raise Overloaded("this node holds as many rooms' taps as it may until the store "
                             "takes them; retry later", retry_after=1.0)
        try:
            self.limits.take(room, uid, count, int(self._clock.time() * 1000), slow)
        except RateLimited:
            counts[_LIMITED] += 1
            raise
        except Overloaded:
            counts[_FULL] += 1
            raise
        epoch = self._now(room, epoch) or ""
        if epoch:
            was = self._pending_epoch.get(room)
            if was is not None and was != epoch:
                # The broadcast ended while they waited: they are the ended
                # one's.
                older = self._older
                older[room, was] = older.get((room, was), 0) + pending.pop(room, 0)
            self._pending_epoch[room] = epoch
            self._turn(room, epoch)
        if not pending and not self._writing and not self._retries:
            self.oldest_pending = self._clock.monotonic()
        pending[room] = pending.get(room, 0) + count
        counts[_TAPS] += count
        self._on_change(room)
        return self.total(room, epoch or None)

    def _turn(self, room: str, epoch: str) -> None:
        """The room's totals are of broadcast ``epoch`` from now: those of
        another one are forgotten (the room's total starts again)."""
        known = self._epoch.get(room)
        if known != epoch:
            if known:
                self._stored.pop(room, None)
                self._ended[room] = (known, self._shown.pop(room, 0))
            self._epoch[room] = epoch

    def knows(self, room: str, epoch: str = "") -> bool:
        """Whether this node holds the room's stored total (read while it
        was asked about lately, :mod:`~proxy.recent_rooms`), of broadcast
        ``epoch`` ("": any): else :meth:`learn` it before a tap is answered,
        so an answer never shows less than one before it."""
        if room not in self._stored:
            return False
        known = self._epoch.get(room, "")
        return not epoch or not known or known == self._now(room, epoch)

    async def learn(self, room: str, epoch: str = "") -> None:
        """Read the store's total of ``room`` (one round trip, shared by the
        taps that ask meanwhile), for a room this node forgot (not asked
        about for a minute), or whose total it holds is of another
        broadcast than ``epoch`` (the one the room cache holds now: the
        total read is of it or a later one). A flush under way may or may
        not be in what a read finds: the read waits for it to end, and one
        that begins during the read makes it read again (at most three
        reads, then it leaves the room to the next refresh). A total of
        another broadcast than the room cache holds (read after ``room
        end``, before the cache pulled it) is not taken: the room stays
        unknown until the cache holds the new broadcast."""
        waiting = self._learning.get(room)
        if waiting is not None:
            await asyncio.shield(waiting)
            return
        future = self._learning[room] = asyncio.get_running_loop().create_future()
        try:
            for _ in range(3):
                while self._flush_ended is not None and not self.knows(room, epoch):
                    await asyncio.shield(self._flush_ended)
                if self.knows(room, epoch):
                    break
                flushes = self._flushes
                noted = self._root_of(room)
                total, root = (await self._store.likes_in([room]))[room]
                if self.knows(room, epoch):
                    break
                if root and noted and root != noted:
                    # Another broadcast's total (the room ended, and the room
                    # cache has not pulled the end yet): taken for this one's,
                    # its taps would show in the ended broadcast's answers.
                    # The tap is answered from what this node holds.
                    break
                if flushes == self._flushes:  # no flush began while it read
                    epoch = self._now(room, epoch) or ""
                    if epoch:
                        self._turn(room, epoch)
                    self._stored[room] = total
                    self._read_past_retries(room)
                    self._recent.note(room)
                    break
        finally:
            del self._learning[room]
            future.set_result(None)

    def total(self, room: str, epoch: str | None = None) -> int:
        """The room's total as shown in broadcast ``epoch`` (None: the one
        this node's totals are of; see the module's docstring): a few dict
        lookups, nothing more (read on every poll answer). Of another
        broadcast than the node's totals, only this node's taps
        acknowledged in it, and nothing is noted as shown."""
        self._recent.note(room)
        known = self._epoch.get(room, "")
        epoch = self._now(room, epoch)
        if epoch is not None and known and epoch != known:
            ended = self._ended.get(room)
            taps = self._taps_in(room, epoch)
            return max(ended[1], taps) if ended is not None and ended[0] == epoch else taps
        count = self._stored.get(room, 0) + self._taps_in(room, known)
        shown = self._shown.get(room, 0)
        if count > shown:
            self._shown[room] = shown = count
        return shown

    def _taps_in(self, room: str, epoch: str) -> int:
        """This node's taps of ``room`` not yet seen written, acknowledged
        in broadcast ``epoch`` ("": any)."""
        taps = 0
        pending = self._pending.get(room)
        if pending and (not epoch or self._pending_epoch.get(room, epoch) == epoch):
            taps += pending
        writing = self._writing.get(room)
        if writing and (not epoch or self._writing_epoch.get(room, epoch) == epoch):
            taps += writing
        for write in self._retries:
            retried = write.taps.get(room)
            if retried and room not in write.read and (
                    not epoch or write.epochs.get(room, epoch) == epoch):
                taps += retried
        return taps

    async def current(self, room: str) -> int:
        """The room's total read now, for a reader off the poll's path (``GET
        /stats``): the store's total (one round trip) plus the taps this node
        acknowledged and has not handed to it yet. Exact at once where an
        answer's :meth:`total` may lag a refresh (a broadcast just ended);
        it notes nothing and changes nothing, so reading it keeps nothing
        fresh. (Taps in a flush under way are left out: the store may or may
        not hold them yet; so are taps acknowledged in a broadcast the room
        cache knows has ended: they go to its archive.)"""
        # The cache's epoch before the store's total, as a refresh reads them.
        epoch = self._now(room, self._epoch_of(room))
        stored = (await self._store.likes([room]))[room]
        pending = self._pending.get(room, 0)
        # As _taps_in reads them (renewed() keeps _pending_epoch current).
        if pending and epoch and self._pending_epoch.get(room, epoch) != epoch:
            pending = 0
        return stored + pending

    async def step(self) -> None:
        """A flush, and a refresh if :data:`REFRESH_EVERY` passed since the
        last. While the store is unavailable, one warning when it goes and
        one line when it is back (not a traceback each step)."""
        try:
            await self.flush()
            now = self._clock.monotonic()
            if now - self._refreshed >= REFRESH_EVERY:
                self._refreshed = now
                await self.refresh()
        except StoreUnavailable:
            self._outage.failed("the store is unavailable: likes wait in memory (%d taps in "
                                "%d rooms) and are written when it is back", self.pending,
                                len(self._pending))
            return
        self._outage.worked("the store is back: the likes that waited are written")

    async def flush(self) -> None:
        """Hand every room's pending taps to the store in one call (each
        room's with the epoch it was tapped in). The writes that failed go
        first, each again as it was (the store adds a named write once);
        a write that fails joins them. Taps of an epoch their room has left
        go in calls of their own before the pending ones (one per epoch a
        room left while they waited: rare)."""
        if self._writing:
            return
        while self._retries:
            write = self._retries[0]
            await self._write(write)  # raises, and stays first, if it fails again
            self._retries.remove(write)
        if self._older:
            await self._flush_older()
        if not self._pending:
            if not self._retries:
                self.oldest_pending = 0.0  # the retries drained: nothing waits
            return
        batch, self._pending = self._pending, {}
        epochs, self._pending_epoch = self._pending_epoch, {}
        self._writing, self._writing_epoch = batch, epochs
        try:
            await self._write(_Write(batch, epochs, self._name()))
        finally:
            self._writing, self._writing_epoch = {}, {}
            if not self._pending and not self._retries:
                self.oldest_pending = 0.0

    async def _write(self, write: _Write) -> None:
        """One call of :meth:`Counters.add_likes`, a flush under way for
        :meth:`learn` while it runs; kept for a retry if it fails."""
        self._flushes += 1
        self._flush_ended = asyncio.get_running_loop().create_future()
        try:
            await self._store.add_likes(write.taps, int(self._clock.time() * 1000),
                                        write.epochs, write_id=write.name)
        except BaseException:
            self.counts[_FAILED] += 1
            if write not in self._retries:
                self._retries.append(write)
            raise
        else:
            self.counts[_WRITTEN] += 1
            stored = self._stored
            for room, n in write.taps.items():
                # A room whose total this node does not hold is read whole
                # later (these taps in it): n alone would be far too low.
                # Taps of another broadcast than the total's are not in it,
                # nor those a read since the write failed may hold already.
                if room in stored and room not in write.read \
                        and self.knows(room, write.epochs.get(room, "")):
                    stored[room] += n
        finally:
            ended, self._flush_ended = self._flush_ended, None
            ended.set_result(None)

    async def _flush_older(self) -> None:
        """Write the taps whose room left their epoch while they waited, a
        call for each epoch a room left (a failed one is tried again as it
        was, with the writes that failed)."""
        while self._older:
            taps: dict[str, int] = {}
            epochs: dict[str, str] = {}
            for (room, epoch), n in list(self._older.items()):
                if room not in taps:
                    taps[room], epochs[room] = n, epoch
                    del self._older[room, epoch]
            await self._write(_Write(taps, epochs, self._name()))

    async def refresh(self) -> None:
        """Read the totals of the rooms asked about lately (one call), each
        of the broadcast the room cache held before the read (a room the
        cache holds nothing of, or that does not exist, is left as it
        was); forget the others. Tells ``on_change`` of each room whose
        total or broadcast changed."""
        recent = self._recent
        for room in recent.age():
            self._stored.pop(room, None)
            self._shown.pop(room, None)
            self._epoch.pop(room, None)
            self._ended.pop(room, None)
        rooms = list(recent.rooms())
        if not rooms:
            return
        epochs = {room: self._epoch_of(room) for room in rooms}
        roots = {room: self._root_of(room) for room in rooms}
        totals = await self._store.likes_in(rooms)
        for room, (total, root) in totals.items():
            epoch = self._now(room, epochs.get(room))
            if epoch is None or epoch == ABSENT_EPOCH:
                continue
            noted = roots.get(room)
            if root and noted and root != noted:
                # Another broadcast's total (the read reached the store after
                # room end): this one's answers keep what they show, and a
                # read once the cache holds the new broadcast takes it.
                continue
            known = self._epoch.get(room)
            before = self._stored.get(room)
            if epoch and known and epoch != known:  # a new broadcast
                before = None
            elif before is not None and total < before:
                # The store's total went down: a new broadcast the room cache
                # has not seen yet (none of its taps are this epoch's), or a
                # store that lost writes. This epoch's answers keep what they
                # show; a read once the cache holds the new epoch is of it.
                continue
            if epoch:
                self._turn(room, epoch)
            self._stored[room] = total
            self._read_past_retries(room)
            if total != (before or 0):  # (answers showed no stored total before)
                self._on_change(room)

    def _read_past_retries(self, room: str) -> None:
        """The store's total of ``room`` was just taken: it may hold the taps
        of every write that failed so far (see :attr:`_Write.read`)."""
        for write in self._retries:
            if room in write.taps:
                write.read.add(room)

    def _name(self) -> str:
        """A new write's name (:meth:`Counters.add_likes`'s ``write_id``)."""
        self._named += 1
        return f"{self._name_prefix}.{self._named}"

    def flush_lag(self) -> float:
        """Seconds the oldest taps not yet written have waited (0: none)."""
        oldest = self.oldest_pending
        return 0.0 if not oldest else self._clock.monotonic() - oldest
