"""The online count over time, kept in the store: who samples a room, and the query.

Every :data:`~statsvr.series.SAMPLE_EVERY` seconds the statsvr
node that writes a room's series records one sample of its online count into
every resolution of the room's series in the store (``StatsStore.record_online``:
buckets of ``(min, max, sum, count)``, the rule of :mod:`statsvr.series`).
``GET /v1/rooms/{room}/stats/online`` reads one resolution back with :meth:`OnlineSeries.query`.

**One writer per room.** :func:`writer_of` picks it by rendezvous (highest
random weight) hashing over the nodes that hold shards of the room: every node
sees the same set and so picks the same writer; while the set stays the same
the writer does; when a node leaves, only the rooms it wrote move, each to the
node with the next highest weight, and a node that joins takes only the rooms
it now weighs most for. During a change two nodes may briefly both sample a
room; the store skips a sample that comes less than half an interval after the
room's last one, so the series is not doubled.

**What is not sampled.** A room whose shards are all gone (nobody online) has
no writer, so it gets no sample: its buckets stop, they do not go to zero.

**Pace.** The loop of :meth:`OnlineSeries.start` samples on multiples of
``every`` of the clock's Unix time (10 s: at :00, :10, ...), so the nodes'
samples line up and fall at the same place in their buckets.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Collection, Iterable, Sequence

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.lifecycle import Outage, stop_task
from liveroom.store.base import OnlineSample, StatsStore

from .series import (
    DEFAULT_RESOLUTIONS,
    SAMPLE_EVERY,
    Point,
    Resolution,
    query_window,
    to_point,
    validate_resolutions,
)

__all__ = ["OnlineSeries", "SampleSource", "writer_of"]

logger = logging.getLogger("liveroom.statsvr.sampler")

SampleSource = Callable[[], Iterable[tuple[str, int, Collection[str]]]]
"""What the sampling loop asks each time: ``(room, online, nodes)`` of the rooms
this node merges, ``nodes`` being the nodes that hold shards of the room."""


def _weight(node: str, room: str) -> bytes:
    # A NUL cannot occur in a room name, so (node, room) pairs never collide
    # by concatenation.
    return hashlib.blake2b(f"{node}\0{room}".encode(), digest_size=8).digest()


def writer_of(room: str, nodes: Collection[str]) -> str | None:
    """The node of ``nodes`` that writes ``room``'s series, ``None`` for no nodes.

    Rendezvous hashing: the node with the highest BLAKE2b-64 of ``node NUL
    room`` (ties, practically impossible, go to the greater node id). The same
    on every process and release; removing a node from the set moves only the
    rooms it wrote, adding one moves only rooms to it.
    """
    best: tuple[bytes, str] | None = None
    for node in nodes:
        candidate = (_weight(node, room), node)
        if best is None or candidate > best:
            best = candidate
    return None if best is None else best[1]


class OnlineSeries:
    """The online-count series of the rooms one statsvr node writes, and their reader.

    ``node`` is this node's stable id (as in the rooms' ``nodes`` sets);
    ``resolutions`` the resolution table (validated like
    :func:`statsvr.series.validate_resolutions`);
    ``every`` the sampling interval in seconds.
    """

    def __init__(self, stats: StatsStore, clock: Clock, node: str, *,
                 resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS,
                 every: float = SAMPLE_EVERY) -> None:
        if not every > 0:
            raise ValueError(f"the sampling interval must be positive, not {every!r}")
        self.node = node
        self.resolutions = validate_resolutions(resolutions)
        self.every = every
        self._stats = stats
        self._clock = clock
        self._pairs = [(r.step, r.retention) for r in self.resolutions]
        self._min_gap_ms = int(every * 500)
        self._outage = Outage(logger)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # -- writing -----------------------------------------------------------------

    async def sample(self, rooms: Iterable[tuple[str, int, Collection[str]]]) -> int:
        """Record one sample now for each of ``rooms`` this node writes; returns how many.

        ``rooms`` are ``(room, online, nodes)``; a room is sampled here when
        :func:`writer_of` of its ``nodes`` is this node. One ``record_online``
        round trip for all of them (none when there is nothing to write). A
        sample that comes less than half an interval after the room's last
        stored one is skipped by the store and not counted. On
        :class:`StoreUnavailable` nothing is recorded (that sample is lost, the
        next comes an interval later), it is logged once per outage, and 0 is
        returned.
        """
        t_ms = round(self._clock.time() * 1000)
        samples = [OnlineSample(room, t_ms, online) for room, online, nodes in rooms
                   if writer_of(room, nodes) == self.node]
        if not samples:
            return 0
        try:
            taken = await self._stats.record_online(samples, self._pairs, self._min_gap_ms)
        except StoreUnavailable as exc:
            self._outage.failed("cannot record online samples, will retry: %s", exc.message)
            return 0
        self._outage.worked("recording online samples again")
        return taken

    async def start(self, source: SampleSource) -> None:
        """Start sampling ``source()`` every ``every`` seconds, on multiples of it."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(source), name="statsvr-series")

    async def stop(self) -> None:
        """Stop the sampling loop (a sample in flight is abandoned or finished)."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            await stop_task(task)
            self._stopping = False

    async def _loop(self, source: SampleSource) -> None:
        every = self.every
        due = (self._clock.time() // every + 1) * every
        # The flag as well as the cancel: redis-py may finish a command in
        # flight and swallow the cancel, and the loop must not sleep again.
        while not self._stopping:
            await self._clock.sleep(max(0.0, due - self._clock.time()))
            # The next multiple of ``every``, not a second sample at this one when
            # woken a hair early, nor a burst of late ones after a stall.
            due = max(due + every, (self._clock.time() // every + 1) * every)
            try:
                await self.sample(source())
            except Exception:  # one bad pass must not end the series
                logger.exception("sampling online counts failed")

    # -- reading -----------------------------------------------------------------

    def window(self, since: float, until: float) -> tuple[int, int, int]:
        """``(step, low, high)``: the resolution's step and the bucket starts
        that answer ``[since, until]`` now (:func:`statsvr.series.query_window`;
        ``low > high``: none). Every series of a room (online, likes) reads its
        buckets this way."""
        index, low, high = query_window(self.resolutions, since, until, self._clock.time())
        return self.resolutions[index].step, low, high

    async def query(self, room: str, since: float, until: float) -> tuple[int, list[Point]]:
        """The room's series from ``since`` to ``until`` (Unix s): ``(step, [(t, avg, max)])``.

        One resolution answers, picked as :meth:`statsvr.series.SeriesState.query`
        picks it (:func:`statsvr.series.choose_resolution`): the finest whose retention
        reaches back to ``since``, else the coarsest with ``since`` clamped to its
        retention. Points are that resolution's buckets overlapping the range and still
        within retention now, oldest first, with ``avg`` rounded to
        :data:`~statsvr.series.AVG_DIGITS` places; buckets without samples are
        left out, not zero-filled. A room never sampled answers no points. One
        round trip (none when ``since > until``). Raises
        :class:`ValueError` for a non-finite time and :class:`StoreUnavailable`.
        """
        step, low, high = self.window(since, until)
        if low > high:
            return step, []
        rows = await self._stats.read_online(room, step, low, high)
        return step, [to_point(start, (least, most, total, count))
                      for start, least, most, total, count in rows if count > 0]
