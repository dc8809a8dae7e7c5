"""The room cache of one sect: snapshots, background pulls, and the reader API.

Pulls never run on a poll's path. Rooms that want a pull sit in one ordered
set; ``concurrency`` workers take them in batches (one store round trip per
batch), so many notifies for one room coalesce into one pull in flight and the
store sees a number of reads that grows with rooms, not listeners. A fallback
loop asks for a pull at least every ``fallback_pull_interval`` of every room with
held polls (a watcher in :meth:`RoomCache.wait_changed`) or read in the last
two fallback intervals: it covers lost notifies and rebuilds the cache after a
restart. A room read longer ago is not pulled by the fallback (idle names cost
no store reads and no CPU), but a read of it asks for a pull at once, and
notifies still pull it. Rooms nobody read for ``read_window`` leave memory.

**A room that does not exist** (no log in the store) is cached as the
:func:`~liveroom.snapshot.absent` snapshot, epoch ``"0"``: a pull never
creates a log (only sends and operator actions do), so polls of made-up names
write nothing to the store. When the room comes to exist its snapshot moves to
the real epoch and held polls wake.

**Bounds.** At most ``rooms_max`` rooms per cache, kept rooms that do not
exist left out: beyond, the least recently read idle room is evicted. A room
with held polls is **kept** by the proxy's hold (:meth:`RoomCache.keep`, a
count the hold owns) and leaves the eviction order while kept. Eviction
costs O(1) amortised: a busy room it meets (a watcher of a hold that just let
go, not cancelled until the next turn of the loop; a pull awaited) is
*parked* out of the order instead of moved to its end, and goes back (as just
read) when it settles, so no room is looked at again while it stays busy.
Letting go puts a room back at the end of the order and evicts only past the
bound, so thousands of held polls closed in one turn cost work linear in them
(before, each letting go rescanned the busy rooms: 12 000 took 20 s). A cache whose
other rooms are all busy passes its bound until they settle.

Past ``rooms_max`` kept rooms that exist, a read of a room not cached and a
keep of a room not kept yet (one read while the bound had room, evicted
before its hold, or kept by a poll that waited for its first pull) raise
:class:`~liveroom.errors.Overloaded` (a 503 with ``Retry-After``) instead of
passing the bound. A room whose snapshot is not known yet counts as one that
exists until its pull says otherwise.

**Held polls on made-up names never take a real room's place.** A kept room
that does not exist counts outside ``rooms_max``: each of its held polls keeps
a connection, so the node's ``held_max`` bounds them (about 1.3 KiB of cache
each, beside a held poll's ~3.3 KiB), and a room that exists is read and
kept whatever their number. A kept room that comes to exist counts among
the rooms that exist from then on, past ``rooms_max`` if it must (its polls
are held; only a send or an operator creates a room, and sends may create
only so many a minute): reads of new rooms are refused until kept rooms let
go. One that stops existing counts outside again.

**Absent rooms are not pulled by the fallback** every interval: a room that
does not exist comes to exist through a send, whose notify pulls it; the
fallback only confirms an absence every :data:`ABSENT_RECHECK` seconds (in
the same batched pulls as other rooms), so thousands of held polls on made-up
names cost the store almost nothing.
Every wait for a pull (:meth:`RoomCache.snapshot`, :meth:`RoomCache.wait_pulled`)
ends after ``first_pull_timeout`` with
:class:`~liveroom.errors.StoreUnavailable` (a 503 with ``Retry-After``).

**Faults stay local.** An entry the store could not decode is left out of the
snapshot (readers count it in ``gap``), counted in a metric and logged once per
room while the room is cached.

Each room's snapshot is replaced by one assignment; readers never lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Final

from liveroom.clock import Clock
from liveroom.errors import Overloaded, StoreUnavailable
from liveroom.lifecycle import answer_waiters, stop_task
from liveroom.metrics import Metrics
from liveroom.settings import (
    FALLBACK_INTERVAL,
    FIRST_PULL_TIMEOUT,
    PULL_BATCH,
    PULL_CONCURRENCY,
    READ_WINDOW,
    ROOMS_MAX,
    TOUCH_INTERVAL,
)
from liveroom.snapshot import Snapshot, absent, anchors, is_absent
from liveroom.store.base import MessageLog, Notifier, Pulled, PullRequest

from .next_snapshot import Retention, advance

logger: Final = logging.getLogger("liveroom.recvsvr")


@dataclass(frozen=True, slots=True)
class SectLimits:
    """The pull budget of one sect, each field named after its setting (the vip
    sect's ``pull_batch`` and ``pull_concurrency`` are ``vip_pull_batch`` and
    ``vip_pull_concurrency``)."""

    fallback_pull_interval: float = FALLBACK_INTERVAL
    read_window: float = READ_WINDOW
    pull_batch: int = PULL_BATCH
    pull_concurrency: int = PULL_CONCURRENCY
    touch_interval: float = TOUCH_INTERVAL
    rooms_max: int = ROOMS_MAX
    """Rooms cached at most (least recently read evicted first, never one in use)."""
    first_pull_timeout: float = FIRST_PULL_TIMEOUT
    """Longest wait for a pull a reader asked for, then StoreUnavailable."""


DEFAULT_RETENTION: Final = Retention()
DEFAULT_LIMITS: Final = SectLimits()


def _same(a: Snapshot, b: Snapshot) -> bool:
    return a.epoch == b.epoch and a.head == b.head and a.phead == b.phead


ABSENT_RECHECK: Final = 5.0
"""Seconds between two fallback pulls of a room found absent (a lost notify
delays its first messages by at most this)."""

BEHIND_PATIENCE: Final = 5.0
"""Seconds a log that reads replicas may read behind a room's snapshot before
it counts as lost writes (a new epoch), rather than a lagging replica."""


OnRenewed = Callable[[str, str, str], None]


def _renewed(old: Snapshot, pulled: Pulled) -> bool:
    """Whether ``pulled``, a read of a new epoch from its start, is of the
    broadcast ``old`` was of: a renewal (a store that lost writes). The
    store says so (``root``: the epoch the broadcast began with); for a log
    written before it did, a renewed epoch keeps its messages, so it holds
    some at or before ``old``'s head, where an ended broadcast's next starts
    empty, its seqs going on past it."""
    if pulled.root and old.root:
        return pulled.root == old.root
    return any(e.seq <= old.head for e in pulled.entries) or any(
        e.seq <= old.phead for e in pulled.personal)


@dataclass(eq=False)
class _CachedRoom:
    """One room in the cache: its snapshot, its pulls and their waiters."""

    name: str
    read_at: float
    snapshot: Snapshot | None = None
    pulled_at: float = float("-inf")
    watchers: int = 0
    keeps: int = 0
    """How many times the proxy's hold keeps it: while any, it is out of the eviction order."""
    kept_absent: bool = False
    """Kept while it does not exist: counted outside ``rooms_max``."""
    first: asyncio.Future[Snapshot] | None = None
    changed: asyncio.Future[Snapshot] | None = None
    confirm_next: asyncio.Future[Snapshot] | None = None
    """Waiters for a pull that starts after they asked."""
    confirm_now: list[asyncio.Future[Snapshot]] = field(default_factory=list)
    """Waiters for the pull in flight."""
    behind_since: float | None = None
    """When pulls of a log that reads replicas first came back behind the
    snapshot (a lagging replica, unless it lasts)."""
    restart: bool = False
    """Pull from the beginning: the epoch changed under the snapshot."""
    warned: bool = False
    """An undecodable entry of this room was logged already."""
    readers: tuple[str, ...] = ()
    """The first two distinct uids that read it while cached: enough for the
    store to tell whether somebody other than a room's only sender read it."""

    def busy(self) -> bool:
        """Held polls or pull waiters depend on it: never evicted."""
        return bool(self.keeps or self.watchers or self.first is not None
                    or self.confirm_next is not None or self.confirm_now)


class RoomCache:
    """The recvsvr of one sect, implementing :class:`liveroom.roles.RoomReader`."""

    def __init__(self, log_: MessageLog, clock: Clock, metrics: Metrics, *,
                 retention: Retention = DEFAULT_RETENTION,
                 limits: SectLimits = DEFAULT_LIMITS,
                 name: str = "normal", notifier: Notifier | None = None) -> None:
        self._log = log_
        self._notifier = notifier
        """Told which rooms this cache holds (a cluster subscribes their notifies)."""
        self._clock = clock
        self._metrics = metrics
        self._notified = metrics.tally([metrics.notifies])
        """Notifies since the last scrape (one a send): a plain count."""
        self.retention = retention
        self._limits = limits
        self.name = name
        self.on_renewed: OnRenewed | None = None
        """Told ``(room, old, new)`` when the room's epoch changed and kept
        its log (a renewal: the same broadcast, see :func:`_renewed`)."""
        self._rooms: OrderedDict[str, _CachedRoom] = OrderedDict()
        """Rooms neither kept nor parked, least recently read first: the
        eviction order."""
        self._kept: dict[str, _CachedRoom] = {}
        """Rooms kept by held polls: never evicted."""
        self._absent_kept = 0
        """Rooms in ``_pinned`` that do not exist (counted outside ``rooms_max``)."""
        self._parked: dict[str, _CachedRoom] = {}
        """Rooms eviction found busy (a watcher not gone yet, a pull awaited):
        out of the eviction order until :meth:`_settle` puts them back."""
        self._recent = 2 * limits.fallback_pull_interval
        """A room read within this long (or with held polls) gets fallback pulls."""
        self._dirty: dict[str, None] = {}
        self._touch_soon: dict[str, tuple[str, ...]] = {}
        """Rooms this cache just found to exist, or that got a new reader
        (:meth:`read_by`), with their readers then: their reads are pushed to
        the store at the next fallback pass (a room of one sender, with its
        short expiry, becomes a room like any other once another uid reads
        it), not only at the next ``touch_interval``. The readers are kept
        here too: a room let go before that pass still says who read it."""
        self._in_flight: set[str] = set()
        self._work = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        """Set by ``stop``: redis-py may finish a pull in flight despite a
        cancel and swallow it, and a worker must not take the next batch."""
        self._pull_limit = retention.normal_keep + retention.important_keep

    # -- lifecycle ---------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        for i in range(self._limits.pull_concurrency):
            self._tasks.append(asyncio.create_task(self._pull_worker(),
                                                   name=f"recvsvr-{self.name}-pull-{i}"))
        self._tasks.append(asyncio.create_task(self._fallback_loop(),
                                               name=f"recvsvr-{self.name}-fallback"))

    async def stop(self) -> None:
        self._stopping = True
        self._work.set()
        for task in self._tasks:
            await stop_task(task)
        self._tasks.clear()
        error = StoreUnavailable("the node is shutting down")
        for room in (*self._rooms.values(), *self._kept.values(),
                     *self._parked.values()):
            for fut in (room.first, room.confirm_next, *room.confirm_now):
                if fut is not None:
                    answer_waiters(fut, None, error)
            if room.changed is not None:
                room.changed.cancel()

    # -- the reader interface ------------------------------------------------

    def __len__(self) -> int:
        return len(self._rooms) + len(self._kept) + len(self._parked)

    @property
    def kept(self) -> int:
        """Rooms kept by held polls now (those that do not exist included)."""
        return len(self._kept)

    @property
    def kept_absent(self) -> int:
        """Kept rooms that do not exist now (outside ``rooms_max``)."""
        return self._absent_kept

    def _excess(self) -> int:
        """Rooms cached past ``rooms_max``, kept rooms that do not exist left out."""
        return (len(self._rooms) + len(self._parked) + len(self._kept) - self._absent_kept
                - self._limits.rooms_max)

    def _full(self) -> Overloaded:
        return Overloaded("this node holds polls in as many rooms as it may cache "
                          f"({self._limits.rooms_max}); retry later", retry_after=5.0)

    def _get(self, name: str) -> _CachedRoom | None:
        room = self._rooms.get(name)
        if room is None:
            room = self._kept.get(name)
            if room is None:
                room = self._parked.get(name)
        return room

    def _room(self, name: str) -> _CachedRoom:
        rooms = self._rooms
        room = rooms.get(name)
        now = self._clock.monotonic()
        if room is not None:
            room.read_at = now
            rooms.move_to_end(name)
            return room
        room = self._kept.get(name)
        if room is None:
            room = self._parked.get(name)
        if room is not None:
            room.read_at = now
            return room
        if len(self._kept) - self._absent_kept >= self._limits.rooms_max:
            raise self._full()
        room = rooms[name] = _CachedRoom(name, read_at=now)
        if self._notifier is not None:
            self._notifier.watch(name)
        if self._excess() > 0:
            self._evict(keep=room)
        return room

    def _evict(self, keep: _CachedRoom | None = None) -> None:
        """Bring the cache back within ``rooms_max``: forget the least recently
        read idle rooms, never ``keep`` (a room being read, last in the order).

        A busy room met on the way (a watcher not gone yet, a pull awaited) is
        *parked*: taken out of the order until it is idle (:meth:`_settle`),
        so no room is looked at twice while it stays busy and each call costs
        O(1) amortised over the rooms put in the order. A cache whose other
        rooms are all busy stays past its bound until they settle."""
        rooms = self._rooms
        while rooms and self._excess() > 0:
            name, state = rooms.popitem(last=False)
            if state is keep:
                rooms[name] = state
                return
            if state.busy():
                self._parked[name] = state
                continue
            self._forget(name, state)
            self._metrics.evictions.inc()

    def _settle(self, state: _CachedRoom) -> None:
        """``state`` may have stopped being busy: a parked room that did goes
        back in the eviction order (as just read), and the cache back within
        its bound."""
        name = state.name
        if self._parked.get(name) is state and not state.busy():
            del self._parked[name]
            self._rooms[name] = state
            if self._excess() > 0:
                self._evict()

    def keep(self, room: str) -> None:
        """The proxy holds polls in ``room``: keep it cached (and out of the
        eviction order) until as many :meth:`let_go`.

        A room that does not exist (its snapshot is the absent one) is kept
        outside ``rooms_max``: held polls on made-up names never take a real
        room's place (each holds a connection, so the node's ``held_max``
        bounds them). A room that exists, or one not cached any more (evicted
        between the read and the hold), raises
        :class:`~liveroom.errors.Overloaded` when ``rooms_max`` rooms that
        exist are kept already, rather than pass the bound; then nothing
        changed. Another keep of a kept room never refuses."""
        state = self._kept.get(room)
        if state is not None:
            state.keeps += 1
            return
        self._keep_new(room, 1, admit=True)

    def adopt(self, room: str, keeps: int) -> None:
        """Keep ``room`` ``keeps`` times, never refusing: its polls are held
        already (a room that moved here from another sect)."""
        if keeps <= 0:
            return
        state = self._kept.get(room)
        if state is not None:
            state.keeps += keeps
            return
        self._keep_new(room, keeps, admit=False)

    def _keep_new(self, room: str, keeps: int, *, admit: bool) -> None:
        """Keep a room not kept yet; ``admit``: refuse past ``rooms_max``."""
        state = self._rooms.get(room)
        if state is None:
            state = self._parked.get(room)
        exists = state is None or state.snapshot is None or not is_absent(state.snapshot)
        if admit and exists and len(self._kept) - self._absent_kept >= self._limits.rooms_max:
            raise self._full()
        if state is None:  # evicted between the read and the hold
            state = _CachedRoom(room, read_at=self._clock.monotonic())
            if self._notifier is not None:
                self._notifier.watch(room)
            self.request_pull(room)
        else:
            self._rooms.pop(room, None)
            self._parked.pop(room, None)
        state.keeps = keeps
        state.kept_absent = not exists
        if not exists:
            self._absent_kept += 1
        self._kept[room] = state
        if self._excess() > 0:
            self._evict()

    def keeps_of(self, room: str) -> int:
        state = self._kept.get(room)
        return state.keeps if state is not None else 0

    def let_go(self, room: str) -> None:
        """One keep of ``room`` less; the last puts it back at the end of the
        eviction order (as just read). O(1) amortised, however many rooms are
        let go in one turn of the loop (see :meth:`_evict`)."""
        state = self._kept.get(room)
        if state is None:
            return
        state.keeps -= 1
        if state.keeps > 0:
            return
        del self._kept[room]
        if state.kept_absent:
            state.kept_absent = False
            self._absent_kept -= 1
        state.read_at = self._clock.monotonic()
        self._rooms[room] = state
        if self._excess() > 0:
            self._evict()

    def _forget(self, name: str, state: _CachedRoom) -> None:
        """Drop ``name`` (``state``), already taken out of the eviction order."""
        if state.snapshot is not None and state.snapshot.personal is not None:
            state.snapshot.personal.release()
        self._dirty.pop(name, None)
        if self._notifier is not None:
            self._notifier.unwatch(name)

    def current(self, room: str) -> Snapshot | None:
        state = self._rooms.get(room)
        if state is None:
            state = self._kept.get(room)
            if state is None:
                state = self._parked.get(room)
                if state is None:
                    return self._room(room).snapshot
        else:
            self._rooms.move_to_end(room)
        # ``_room``, inlined: every poll asks.
        now = state.read_at = self._clock.monotonic()
        if now - state.pulled_at > self._recent:
            snap = state.snapshot
            # Not pulled by the fallback while nobody read it: catch up now
            # (an absent room only once its absence is old enough to recheck).
            if snap is None or not is_absent(snap) or now - state.pulled_at > ABSENT_RECHECK:
                self.request_pull(room)
        return state.snapshot

    async def _wait_pull(self, room: str, fut: asyncio.Future[Snapshot]) -> Snapshot:
        timeout = self._limits.first_pull_timeout
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            raise StoreUnavailable(
                f"no pull of room {room} within {timeout:g} s") from None

    async def snapshot(self, room: str) -> Snapshot:
        state = self._room(room)
        if state.snapshot is not None:
            return state.snapshot
        if state.first is None:
            state.first = asyncio.get_running_loop().create_future()
            self.request_pull(room)
        return await self._wait_pull(room, state.first)

    def read_by(self, room: str, uid: str) -> None:
        state = self._get(room)
        if state is None or len(state.readers) >= 2 or uid in state.readers:
            return
        state.readers += (uid,)
        # A new reader may be the one that makes a room of one sender last:
        # the store hears of it at the next fallback pass.
        self._touch_soon[room] = state.readers

    async def wait_changed(self, room: str, snapshot: Snapshot) -> Snapshot:
        state = self._room(room)
        current = state.snapshot
        if current is None:
            return await self.snapshot(room)
        if not _same(current, snapshot):
            return current
        if state.changed is None or state.changed.done():
            state.changed = asyncio.get_running_loop().create_future()
        state.watchers += 1
        try:
            return await asyncio.shield(state.changed)
        finally:
            state.watchers -= 1
            state.read_at = self._clock.monotonic()
            self._settle(state)

    async def wait_pulled(self, room: str) -> Snapshot:
        state = self._room(room)
        if state.confirm_next is None:
            state.confirm_next = asyncio.get_running_loop().create_future()
        fut = state.confirm_next
        self.request_pull(room)
        return await self._wait_pull(room, fut)

    def peek(self, room: str) -> Snapshot | None:
        """The snapshot held now, without counting a read."""
        state = self._get(room)
        return state.snapshot if state is not None else None

    # -- notifies ------------------------------------------------------------

    def on_notify(self, room: str, seq: int) -> None:
        """A hint that ``room`` reached ``seq`` (0: that it changed otherwise):
        pull it if we hold it and lag, or if a pull of it is under way."""
        self._notified[0] += 1
        state = self._get(room)
        if state is None:
            return
        if state.snapshot is None or seq > state.snapshot.head or seq == 0 \
                or room in self._in_flight:
            # seq 0: a personal message (or a room an operator opened). A pull
            # under way may have read the store before this change: a store
            # that lost the room (a restart, an expiry) starts its new log at
            # seq 1 again, which the head this copy holds cannot tell from a
            # notify it has seen, and the pull would then leave the room
            # absent until its next message.
            self.request_pull(room)

    def on_resync(self, rooms: Collection[str] | None = None) -> None:
        """Notifies of ``rooms`` (None: every room) may have been lost: pull
        those this cache holds at once."""
        for cached in (self._rooms, self._kept, self._parked):
            for room in list(cached) if rooms is None else [r for r in rooms if r in cached]:
                self.request_pull(room)

    def request_pull(self, room: str) -> None:
        self._dirty[room] = None
        self._work.set()

    # -- pulling -------------------------------------------------------------

    def _take_batch(self) -> list[_CachedRoom]:
        batch: list[_CachedRoom] = []
        for name in list(self._dirty):
            if name in self._in_flight:
                continue
            del self._dirty[name]
            state = self._get(name)
            if state is None:
                continue
            batch.append(state)
            if len(batch) >= self._limits.pull_batch:
                break
        return batch

    async def _pull_worker(self) -> None:
        while not self._stopping:
            batch = self._take_batch()
            if not batch:
                self._work.clear()
                await self._work.wait()
                continue
            names = {s.name for s in batch}
            self._in_flight |= names
            try:
                await self._pull_batch(batch)
            except Exception:  # never let one bad batch kill the worker
                logger.exception("pull of %d rooms failed", len(batch))
            finally:
                self._in_flight -= names

    async def _pull_batch(self, batch: list[_CachedRoom]) -> None:
        requests = []
        for state in batch:
            if state.confirm_next is not None:
                state.confirm_now.append(state.confirm_next)
                state.confirm_next = None
            snap = state.snapshot
            if snap is None or state.restart:
                after = pafter = anchor = panchor = 0
            else:
                after, pafter = snap.head, snap.phead
                anchor, panchor = anchors(snap)
            # Read enough entries for the normal list even with important ones
            # interleaved (those beyond the log are returned anyway).
            requests.append(PullRequest(state.name, after, self._pull_limit, pafter,
                                        anchor, panchor))
        self._metrics.pull_batches.inc()
        try:
            results = await self._log.pull(requests)
        except StoreUnavailable as exc:
            self._metrics.store_errors.labels("pull").inc()
            for state in batch:
                self._fail(state, exc)
            return
        self._metrics.pulls.inc(len(results))
        now = self._clock.monotonic()
        now_ms = int(self._clock.time() * 1000)
        for state, request, pulled in zip(batch, requests, results, strict=True):
            state.pulled_at = now
            try:
                await self._apply(state, request, pulled, now_ms)
            except StoreUnavailable as exc:
                self._metrics.store_errors.labels("open").inc()
                self._fail(state, exc)

    def _fail(self, state: _CachedRoom, error: StoreUnavailable) -> None:
        if state.first is not None and state.snapshot is None:
            answer_waiters(state.first, None, error)
            state.first = None
        for fut in state.confirm_now:
            answer_waiters(fut, None, error)
        state.confirm_now.clear()
        self._settle(state)

    async def _apply(self, state: _CachedRoom, request: PullRequest, pulled: Pulled,
                     now_ms: int) -> None:
        old = state.snapshot
        if pulled.epoch is None:
            # No log (never written, expired, or the store lost it): the room
            # does not exist. Reading never creates it: sends and operators do.
            state.restart = False
            if old is not None and not is_absent(old):
                logger.warning("room %s: the store has no log of it any more (epoch %s, "
                               "head %d here; pulled after %d)", state.name, old.epoch,
                               old.head, request.after)
            self._install(state, old if old is not None and is_absent(old)
                          else absent(state.name))
            return
        if pulled.undecodable:
            self._metrics.undecodable.inc(pulled.undecodable)
            if not state.warned:
                state.warned = True
                logger.warning("room %s: skipped %d log entries the store could not decode "
                            "(listeners see them in gap; not logged again for this room)",
                            state.name, pulled.undecodable)
        if old is not None and pulled.epoch != old.epoch and request.after:
            state.restart = True
            self.request_pull(state.name)
            return
        if old is not None and pulled.epoch == old.epoch and pulled.rewritten:
            # The store holds another message where this copy ends: a restart
            # lost its last writes and appends took their seqs again.
            logger.warning("room %s: the store holds another message at seq %d or personal "
                           "position %d than this node: its log was rewritten, new epoch",
                           state.name, old.head, old.phead)
            await self._log.renew_epoch(state.name, old.epoch)
            state.restart = True
            self.request_pull(state.name)
            return
        if old is not None and pulled.epoch == old.epoch and (
                pulled.head < old.head or pulled.phead < old.phead):
            if self._log.reads_replicas:
                # A replica behind the one read before catches up within
                # moments: keep the snapshot and pull again at the fallback.
                now = self._clock.monotonic()
                if state.behind_since is None:
                    state.behind_since = now
                if now - state.behind_since < BEHIND_PATIENCE:
                    return
            state.behind_since = None
            # The store went backwards within an epoch (a failover lost writes):
            # never let a snapshot go back; start a new epoch instead.
            logger.warning("room %s: store heads %d/%d behind cache heads %d/%d (room/"
                           "personal), new epoch", state.name, pulled.head, pulled.phead,
                           old.head, old.phead)
            await self._log.renew_epoch(state.name, old.epoch)
            state.restart = True
            self.request_pull(state.name)
            return
        state.behind_since = None
        base = None if (old is None or pulled.epoch != old.epoch) else old
        if old is None or is_absent(old):
            self._touch_soon[state.name] = state.readers
        elif base is None and self.on_renewed is not None and _renewed(old, pulled):
            self.on_renewed(state.name, old.epoch, pulled.epoch)
        snap = advance(base, pulled, request.after, self.retention, now_ms)
        state.restart = False
        self._install(state, snap)

    def _install(self, state: _CachedRoom, snap: Snapshot) -> None:
        self._swap(state, snap)
        for fut in state.confirm_now:
            answer_waiters(fut, snap)
        state.confirm_now.clear()
        self._settle(state)

    def _swap(self, state: _CachedRoom, snap: Snapshot) -> None:
        old = state.snapshot
        state.snapshot = snap
        if old is not None and old.personal is not None and old.personal is not snap.personal:
            old.personal.release()  # a new epoch's, or none: the node's count lets go
        if state.keeps and state.kept_absent != is_absent(snap):
            # A kept room came to exist (it now counts in ``rooms_max``,
            # even past it: its polls are held) or stopped existing.
            state.kept_absent = not state.kept_absent
            self._absent_kept += 1 if state.kept_absent else -1
            if self._excess() > 0:
                self._evict()
        if state.first is not None:
            answer_waiters(state.first, snap)
            state.first = None
        if old is not None and not _same(old, snap) and state.changed is not None:
            answer_waiters(state.changed, snap)
            state.changed = None

    # -- the fallback --------------------------------------------------------

    async def _fallback_loop(self) -> None:
        limits = self._limits
        last_touch = self._clock.monotonic()
        while not self._stopping:
            await self._clock.sleep(limits.fallback_pull_interval)
            now = self._clock.monotonic()
            due = now - limits.fallback_pull_interval * 0.5
            recheck = now - ABSENT_RECHECK
            for name, state in list(self._rooms.items()):
                since_read = now - state.read_at
                if since_read > limits.read_window and not state.busy():
                    del self._rooms[name]
                    self._forget(name, state)
                elif (state.watchers or since_read <= self._recent) \
                        and self._fallback_due(state, due, recheck):
                    self.request_pull(name)
            for name, state in list(self._parked.items()):
                if not state.busy():
                    # A net under _settle, which every end of busyness calls.
                    self._settle(state)
                elif (state.watchers or now - state.read_at <= self._recent) \
                        and self._fallback_due(state, due, recheck):
                    self.request_pull(name)
            for name, state in self._kept.items():
                if self._fallback_due(state, due, recheck):
                    self.request_pull(name)
            self._metrics.rooms.set(len(self))
            soon, self._touch_soon = self._touch_soon, {}
            if now - last_touch >= limits.touch_interval:
                last_touch = now
                await self._touch(soon)
            elif soon:
                await self._touch_names(list(soon), soon)

    @staticmethod
    def _fallback_due(state: _CachedRoom, due: float, recheck: float) -> bool:
        """Whether the fallback pulls ``state`` now: last pulled before ``due``,
        or before ``recheck`` for a room found absent."""
        snap = state.snapshot
        if snap is not None and is_absent(snap):
            return state.pulled_at <= recheck
        return state.pulled_at <= due

    async def _touch(self, soon: dict[str, tuple[str, ...]]) -> None:
        # Rooms that do not exist have nothing to push back (and must not get a log).
        names = [name for cached in (self._rooms, self._kept, self._parked)
                 for name, state in cached.items()
                 if state.snapshot is not None and not is_absent(state.snapshot)]
        cached = set(names)
        await self._touch_names([*names, *(name for name in soon if name not in cached)], soon)

    async def _touch_names(self, names: list[str],
                           soon: dict[str, tuple[str, ...]]) -> None:
        """Push the reads of ``names`` to the store, with their readers (those
        ``soon`` kept for a room let go meanwhile)."""
        for i in range(0, len(names), 1000):
            batch = names[i:i + 1000]
            readers = {}
            for name in batch:
                state = self._get(name)
                known = state.readers if state is not None else soon.get(name, ())
                if known:
                    readers[name] = known
            try:
                await self._log.touch(batch, readers)
            except StoreUnavailable:
                self._metrics.store_errors.labels("touch").inc()
                return
