"""The merge: every statsvr node's background task that keeps each wanted room's
:class:`~statsvr.view.OnlineView` in step with the shard keys in the store
(docs/design.md step 8).

Which rooms. A room is *wanted* while something touched it in the last
``read_window`` seconds (:meth:`Merge.want`: a poll, an ``/online`` or ``/stats``
query, this node's own table). Wanted rooms are merged every ``merge_every``
seconds; the others leave memory. :meth:`Merge.ready` waits for a room's first
merge, which runs at once rather than at the next tick.

What a pass costs. Rooms go in batches of ``batch``: one
:meth:`~liveroom.store.base.StatsStore.shard_index` round trip per batch, then,
per room whose live ``(node, index, count, version)`` set differs from its
view's, :func:`~statsvr.view.build_view`: the count comes from the index's
sizes, and only a small room's shared groups are read (the blobs its view does
not hold yet, at most about ``exact_up_to`` uids). So a pass reads the index
and not the members of a big room: its cost grows with the room's shard keys
(nodes x shards), not with its members. An unchanged room costs a set
comparison and a sum of its entries' trusted counts (a refresh changes the
trusted count, :attr:`~statsvr.view.OnlineView.trusted`, without a new
version). Members are read for pages only (:attr:`Merge.pages`), and what a
page read is forgotten seconds after its last use (:data:`statsvr.member_pages.KEEP_FOR`).

Views are replaced by one assignment; readers never lock and never wait on
the store (except :meth:`Merge.ready` before a room's first merge).

When the store is unavailable the views held stay as they are, the outage is
logged once (and its end once), waiters of :meth:`Merge.ready` get
:class:`~liveroom.errors.StoreUnavailable`, and the loop tries again on its
next tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.lifecycle import Outage, answer_waiters, stop_task
from liveroom.settings import DEFAULTS
from liveroom.store.base import ShardEntry, StatsStore

from .member_pages import MemberPages
from .members import contributor
from .view import EXACT_UP_TO, OnlineView, build_view

__all__ = ["Merge", "OnMerged"]

logger: Final = logging.getLogger("liveroom.statsvr")

OnMerged = Callable[[OnlineView], None]
"""Called with a room's new view right after it was swapped in."""


@dataclass(eq=False, slots=True)
class _MergedRoom:
    """A room this node serves: its view as last merged from the store."""

    name: str
    wanted_at: float
    view: OnlineView
    merged: bool = False
    first: asyncio.Future[OnlineView] | None = None
    """Shared by every :meth:`Merge.ready` waiting for the first merge."""


class Merge:
    """The online views of the rooms this node serves, merged from the store.

    ``on_merged`` (also settable as an attribute) is called with each new view
    right after it is swapped in (one whose trusted count alone changed too):
    not when a pass found the room unchanged. It
    runs on the merge task and must not block; an exception it raises is
    logged and ignored.
    """

    def __init__(self, stats: StatsStore, clock: Clock, *,
                 merge_every: float = DEFAULTS.merge_every,
                 read_window: float = DEFAULTS.read_window, batch: int = 256,
                 exact_up_to: int = EXACT_UP_TO,
                 on_merged: OnMerged | None = None) -> None:
        if batch < 1 or merge_every <= 0:
            raise ValueError("batch must be at least 1 and merge_every positive")
        self._stats = stats
        self._clock = clock
        self._merge_every = merge_every
        self._read_window = read_window
        self._batch = batch
        self._exact_up_to = exact_up_to
        self.on_merged = on_merged
        self.pages = MemberPages(stats, clock)
        """Where views read the members a page needs."""
        self._rooms: dict[str, _MergedRoom] = {}
        self._fresh: dict[str, None] = {}
        """Rooms waiting for their first merge, merged before the next tick."""
        self._woken = asyncio.Event()
        self._passes = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._outage = Outage(logger)
        self._stopping = False

    # -- readers (memory only) ---------------------------------------------------

    def want(self, room: str) -> OnlineView:
        """Mark ``room`` wanted now and return its current view.

        :meth:`OnlineView.empty` until the room's first merge. O(1), no I/O.
        """
        state = self._rooms.get(room)
        now = self._clock.monotonic()
        if state is None:
            state = self._rooms[room] = _MergedRoom(room, now, OnlineView.empty(room, self.pages))
        else:
            state.wanted_at = now
        return state.view

    def view(self, room: str) -> OnlineView:
        """The current view of ``room``, without marking it wanted."""
        state = self._rooms.get(room)
        return state.view if state is not None else OnlineView.empty(room, self.pages)

    def trusted_counts(self) -> Iterator[tuple[str, int]]:
        """The rooms merged at least once, each with its trusted count
        (:attr:`OnlineView.trusted`, what the automatic vip rule reads);
        memory only, does not mark them wanted."""
        return ((state.name, state.view.trusted) for state in self._rooms.values()
                if state.merged)

    def trusted(self, room: str) -> int | None:
        """Mark ``room`` wanted; its trusted count once merged, else ``None``
        (its first merge comes with the next pass)."""
        self.want(room)
        state = self._rooms[room]
        return state.view.trusted if state.merged else None

    def rooms(self) -> list[str]:
        """The rooms held (wanted in the last ``read_window`` s, up to the next pass)."""
        return list(self._rooms)

    async def ready(self, room: str) -> OnlineView:
        """The view of ``room`` after its first merge; at once if merged already.

        Marks the room wanted. Waits for the merge task (which merges the room
        without waiting for its next tick) or for a :meth:`merge_now` call;
        every caller waiting on one room shares one future. Raises
        :class:`~liveroom.errors.StoreUnavailable` when that merge could not
        read the store, or when the merge stops.
        """
        self.want(room)
        state = self._rooms[room]
        if state.merged:
            return state.view
        if state.first is None:
            state.first = asyncio.get_running_loop().create_future()
            self._fresh[room] = None
            self._woken.set()
        return await asyncio.shield(state.first)

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Start the merge task (one pass every ``every`` seconds)."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="statsvr-merge")

    async def stop(self) -> None:
        """Cancel the merge task and fail the :meth:`ready` waiters."""
        task, self._task = self._task, None
        self._stopping = True
        await stop_task(task)
        error = StoreUnavailable("the node is shutting down")
        for state in self._rooms.values():
            answer_waiters(state.first, None, error)
            state.first = None

    async def _run(self) -> None:
        # The flag as well as the cancel: redis-py may finish a read in flight
        # and swallow the cancel.
        while not self._stopping:
            started = self._clock.monotonic()
            await self._pass_guarded(None)
            while (left := started + self._merge_every - self._clock.monotonic()) > 0:
                if self._fresh:
                    fresh = list(self._fresh)
                    self._fresh.clear()
                    await self._pass_guarded(fresh)
                else:
                    await self._rest(left)
            # A pass longer than ``every`` must still let other tasks run.
            await asyncio.sleep(0)

    async def _pass_guarded(self, rooms: Sequence[str] | None) -> None:
        try:
            await self.merge_now(rooms)
        except Exception:  # one bad pass must not end the merge for good
            logger.exception("merge pass failed")

    async def _rest(self, seconds: float) -> None:
        """Sleep ``seconds`` on the clock, or until a room wants its first merge."""
        self._woken.clear()
        if self._fresh:
            return
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        waker = asyncio.ensure_future(self._woken.wait())
        try:
            await asyncio.wait((sleeper, waker), return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waker.cancel()

    # -- merging ------------------------------------------------------------------

    async def merge_now(self, rooms: Sequence[str] | None = None) -> None:
        """One pass: merge ``rooms`` (held or not: they count as wanted), or,
        with ``None``, drop the rooms nobody wanted for ``read_window`` s and merge
        every other one.

        Passes never overlap (a second call waits for the first). A store
        outage ends the pass early; it never raises.
        """
        async with self._passes:
            if rooms is None:
                self._drop_unwanted()
                self.pages.sweep()
                self._fresh.clear()
                states = list(self._rooms.values())
            else:
                states = []
                for name in dict.fromkeys(rooms):
                    state = self._rooms.get(name)
                    if state is None:
                        self.want(name)
                        state = self._rooms[name]
                    states.append(state)
            for start in range(0, len(states), self._batch):
                if not await self._merge_batch(states[start:start + self._batch]):
                    return
                # The memory engine answers without suspending: let others run.
                await asyncio.sleep(0)

    def _drop_unwanted(self) -> None:
        cutoff = self._clock.monotonic() - self._read_window
        for name, state in list(self._rooms.items()):
            if state.wanted_at < cutoff and state.first is None:
                del self._rooms[name]

    async def _merge_batch(self, batch: list[_MergedRoom]) -> bool:
        """Merge one batch; False when the store is unavailable."""
        now_ms = int(self._clock.time() * 1000)
        try:
            listed = await self._stats.shard_index([state.name for state in batch], now_ms)
            self._store_back()
            for state, entries in zip(batch, listed, strict=True):
                await self._merge_room(state, entries)
        except StoreUnavailable as exc:
            self._store_down(exc)
            return False
        return True

    async def _merge_room(self, state: _MergedRoom, entries: Sequence[ShardEntry]) -> None:
        view = state.view
        if set(map(contributor, entries)) == view.versions:
            # The same members; a refresh may have changed the trusted count alone.
            new = view.with_trusted(entries)
            if new is view:
                self._merged(state, view)
                return
        else:
            new = await build_view(state.name, entries, view, fetch=partial(
                self._stats.read_shards, state.name), pages=self.pages,
                exact_up_to=self._exact_up_to)
        state.view = new
        self._merged(state, new)
        if self.on_merged is not None:
            try:
                self.on_merged(new)
            except Exception:
                logger.exception("on_merged failed for room %s", state.name)

    def _merged(self, state: _MergedRoom, view: OnlineView) -> None:
        state.merged = True
        answer_waiters(state.first, view)
        state.first = None

    def _store_down(self, error: StoreUnavailable) -> None:
        self._outage.failed("cannot read online shards, keeping the last views: %s",
                            error.message)
        for state in self._rooms.values():
            answer_waiters(state.first, None, error)
            state.first = None

    def _store_back(self) -> None:
        self._outage.worked("online shards readable again")
