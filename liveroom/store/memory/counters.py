"""A room's likes and gifts in memory, laid out like the redis engine's keys
(``lk``, ``lks:<step>``, ``gr``, ``gf``): each table expires on its own, on
the store's clock, as its key does in Redis."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ...clock import Clock
from ..base import (
    RANKING_KEPT,
    SERIES_RESOLUTIONS,
    GiftRank,
    LogPolicy,
    Ranking,
    bucket_horizon,
    bucket_start,
    check_gift,
    check_limit,
    check_taps,
    series_horizon_ms,
)
from .expiring import Expiring
from .outbox import MemoryOutbox


class MemoryCounters:
    """``Counters`` in this process: no method suspends, so each is atomic
    like the redis engine's scripts (and ``add_likes`` atomic across rooms,
    more than the contract asks).

    A gift costs O(log givers) to find its place plus a list move of the
    givers below it (``bisect.insort``): microseconds for the 10 000s of
    givers of a big broadcast."""

    def __init__(self, policy: LogPolicy, clock: Clock) -> None:
        self._ttl_ms = policy.history_ttl_ms
        self.outbox: MemoryOutbox | None = None
        """Where the room actions' webhook events are kept (the store's)."""
        self._series_ms = series_horizon_ms(SERIES_RESOLUTIONS, 0)
        self._dedup_ms = policy.dedup_ttl_ms
        self._writes: Expiring[tuple[str, str], bool] = Expiring(clock)
        """(room, write_id) -> taken (``lkw:<id>``)."""
        self._likes: Expiring[str, int] = Expiring(clock)
        """room -> its current broadcast's likes total (``lk``)."""
        self._series: Expiring[tuple[str, int], dict[int, int]] = Expiring(clock)
        """(room, step) -> bucket start (Unix s) -> taps, ascending (``lks:<step>``)."""
        self._gifts: Expiring[str, _Gifts] = Expiring(clock)
        self._ended_epochs: Expiring[tuple[str, str], int] = Expiring(clock)
        """``(room, epoch)`` -> the broadcast that ended with that epoch."""
        self.add_to_ended: Callable[[str, int, int], bool] = lambda room, broadcast, n: False
        """Adds taps to an ended broadcast's archive (the stats' table keeps
        it); False when it is gone. Set by the store."""
        self.root_of: Callable[[str], str] = lambda room: ""
        """The broadcast (its first epoch) the room's log is of ("": no log).
        Set by the store."""
        """room -> its current broadcast's givers and gift sums (``gr``, ``gf``)."""

    def sweep(self) -> None:
        """Drop whatever expired on the store's clock."""
        for table in (self._likes, self._series, self._gifts, self._writes,
                      self._ended_epochs):
            table.sweep()

    # -- likes -------------------------------------------------------------------

    def ended(self, room: str, epoch: str, broadcast: int, ttl_ms: int) -> None:
        """Broadcast ``broadcast`` of ``room`` ended with ``epoch``: taps
        acknowledged in it and added after go to its archive, while it is
        kept (``p:<epoch>`` in ``lr:{R}:bc`` on Redis)."""
        self._ended_epochs.put((room, epoch), broadcast, ttl_ms)

    async def add_likes(self, taps: Mapping[str, int], now_ms: int,
                        epochs: Mapping[str, str] | None = None, write_id: str = "") -> None:
        check_taps(taps)
        for room, n in taps.items():
            if write_id:
                if self._writes.get((room, write_id)):
                    continue  # this write, tried again
                self._writes.put((room, write_id), True, self._dedup_ms)
            epoch = epochs.get(room) if epochs else None
            ended = None if epoch is None else self._ended_epochs.get((room, epoch))
            if ended is None or not self.add_to_ended(room, ended, n):
                self._likes.put(room, (self._likes.get(room) or 0) + n, self._ttl_ms)
            for step, retention in SERIES_RESOLUTIONS:
                key = (room, step)
                buckets = self._series.get(key) or {}
                self._series.put(key, _add_taps(buckets, bucket_start(now_ms, step), n,
                                                step, retention), self._series_ms)

    async def likes(self, rooms: Sequence[str]) -> dict[str, int]:
        return {room: self._likes.get(room) or 0 for room in rooms}

    async def likes_in(self, rooms: Sequence[str]) -> dict[str, tuple[int, str]]:
        # Read whole between two of the caller's steps: the total is of the
        # root the log holds now.
        return {room: (self._likes.get(room) or 0, self.root_of(room)) for room in rooms}

    async def read_likes(self, room: str, step: int, low: int,
                         high: int) -> list[tuple[int, int]]:
        buckets = self._series.get((room, step)) or {}
        return [(start, n) for start, n in buckets.items() if low <= start <= high]

    # -- gifts -------------------------------------------------------------------

    async def add_gift(self, room: str, giver: str, value: int, gift: str,
                       now_ms: int, *, event: bytes | None = None) -> GiftRank:
        check_gift(value)
        gifts = self._gifts.get(room) or _Gifts()
        score = gifts.add(giver, value)
        self._gifts.put(room, gifts, self._ttl_ms)
        rank = GiftRank(gifts.rank(giver, score), score, gifts.total)
        if self.outbox is not None:
            self.outbox.keep(room, event, rank=rank.rank, score=rank.score, total=rank.total)
        return rank

    async def ranking(self, room: str, limit: int) -> Ranking:
        check_limit(limit)
        gifts = self._gifts.get(room) or _Gifts()
        return Ranking(gifts.top(limit), gifts.total, gifts.count)

    async def rankings(self, rooms: Sequence[str], limit: int) -> dict[str, Ranking]:
        check_limit(limit)
        boards = {}
        for room in rooms:
            gifts = self._gifts.get(room)
            if gifts is not None and gifts.count:
                boards[room] = Ranking(gifts.top(limit), gifts.total, gifts.count)
        return boards

    # -- the end of a broadcast ---------------------------------------------------------

    def take(self, room: str) -> tuple[int, int, tuple[tuple[str, int], ...]]:
        """The current broadcast's likes total, gift total and top
        :data:`RANKING_KEPT` givers, its counters dropped: the next broadcast
        starts at zero (``Operators.end_broadcast``). The likes series stays."""
        likes = self._likes.get(room) or 0
        gifts = self._gifts.get(room) or _Gifts()
        self._likes.pop(room)
        self._gifts.pop(room)
        return likes, gifts.total, gifts.top(RANKING_KEPT)


@dataclass
class _Gifts:
    """One broadcast's gifts (``gr`` and ``gf`` on Redis)."""

    scores: dict[str, int] = field(default_factory=dict)
    ranked: list[tuple[int, str]] = field(default_factory=list)
    """``(score, giver)`` ascending: the best giver last, ties by giver name
    descending before it, as ``ZREVRANGE`` reads a sorted set."""
    total: int = 0
    count: int = 0

    def add(self, giver: str, value: int) -> int:
        """Add a gift; return the giver's new score."""
        before = self.scores.get(giver)
        if before is not None:
            del self.ranked[bisect.bisect_left(self.ranked, (before, giver))]
        score = (before or 0) + value
        self.scores[giver] = score
        bisect.insort(self.ranked, (score, giver))
        self.total += value
        self.count += 1
        return score

    def rank(self, giver: str, score: int) -> int:
        return len(self.ranked) - bisect.bisect_left(self.ranked, (score, giver))

    def top(self, limit: int) -> tuple[tuple[str, int], ...]:
        return tuple((giver, score) for score, giver in reversed(self.ranked[-limit:]))


def _add_taps(buckets: dict[int, int], start: int, n: int,
              step: int, retention: int) -> dict[int, int]:
    """The resolution's buckets, ascending by start, with ``n`` taps added to
    the bucket at ``start`` and those before the horizon dropped; the horizon
    follows the newest bucket, so taps of a bucket already past it (a node's
    clock far behind) count in the total only. The rule of ``counters_likes.lua``."""
    newest = max(start, next(reversed(buckets))) if buckets else start
    horizon = bucket_horizon(newest, step, retention)
    if start >= horizon:
        have = buckets.get(start)
        buckets[start] = n if have is None else have + n
        if have is None and start != newest:
            buckets = dict(sorted(buckets.items()))
    while buckets and next(iter(buckets)) < horizon:
        del buckets[next(iter(buckets))]
    return buckets
