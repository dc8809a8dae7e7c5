"""A room's likes and gifts in memory, laid out like the redis engine's keys
(``lk``, ``lks:<step>``, ``gr``, ``gf``): each table expires on its own, on
the store's clock, as its key does in Redis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...clock import Clock
from ..base import (
    SERIES_RESOLUTIONS,
    GiftRank,
    Leaderboard,
    LogPolicy,
    bucket_horizon,
    bucket_start,
    check_taps,
    series_horizon_ms,
)
from .expiring import Expiring


class MemoryCounters:
    """``Counters`` in this process: no method suspends, so each is atomic
    like the redis engine's scripts (and ``add_likes`` atomic across rooms,
    more than the contract asks)."""

    def __init__(self, policy: LogPolicy, clock: Clock) -> None:
        self._ttl_ms = policy.history_ttl_ms
        self._series_ms = series_horizon_ms(SERIES_RESOLUTIONS, 0)
        self._likes: Expiring[str, int] = Expiring(clock)
        """room -> its current broadcast's likes total (``lk``)."""
        self._series: Expiring[tuple[str, int], dict[int, int]] = Expiring(clock)
        """(room, step) -> bucket start (Unix s) -> taps, ascending (``lks:<step>``)."""

    def sweep(self) -> None:
        """Drop whatever expired on the store's clock."""
        for table in (self._likes, self._series):
            table.sweep()

    # -- likes -------------------------------------------------------------------

    async def add_likes(self, taps: Mapping[str, int], now_ms: int) -> None:
        check_taps(taps)
        for room, n in taps.items():
            self._likes.put(room, (self._likes.get(room) or 0) + n, self._ttl_ms)
            for step, retention in SERIES_RESOLUTIONS:
                key = (room, step)
                buckets = self._series.get(key) or {}
                self._series.put(key, _add_taps(buckets, bucket_start(now_ms, step), n,
                                                step, retention), self._series_ms)

    async def likes(self, rooms: Sequence[str]) -> dict[str, int]:
        return {room: self._likes.get(room) or 0 for room in rooms}

    async def read_likes(self, room: str, step: int, low: int,
                         high: int) -> list[tuple[int, int]]:
        buckets = self._series.get((room, step)) or {}
        return [(start, n) for start, n in buckets.items() if low <= start <= high]

    # -- gifts -------------------------------------------------------------------

    async def add_gift(self, room: str, giver: str, value: int, gift: str,
                       now_ms: int) -> GiftRank:
        raise NotImplementedError("gifts on the memory engine: the next commit")

    async def leaderboard(self, room: str, limit: int) -> Leaderboard:
        raise NotImplementedError("gifts on the memory engine: the next commit")


def _add_taps(buckets: dict[int, int], start: int, n: int,
              step: int, retention: int) -> dict[int, int]:
    """The resolution's buckets, ascending by start, with ``n`` taps added to
    the bucket at ``start`` and those before the horizon dropped; the horizon
    follows the newest bucket, so taps of a bucket already past it (a node's
    clock far behind) count in the total only. The rule of ``likes.lua``."""
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
