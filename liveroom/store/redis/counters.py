"""A room's likes and gifts in Redis (``Counters``): not built yet."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..base import GiftRank, Leaderboard, LogPolicy
from .calls import Client


class RedisCounters:
    """``Counters`` on Redis: the next commits build it; every method raises
    ``NotImplementedError`` until then."""

    def __init__(self, client: Client, policy: LogPolicy) -> None:
        self._client = client
        self._ttl_ms = policy.history_ttl_ms

    async def add_likes(self, taps: Mapping[str, int], now_ms: int) -> None:
        raise NotImplementedError("likes on the redis engine: a later commit")

    async def likes(self, rooms: Sequence[str]) -> dict[str, int]:
        raise NotImplementedError("likes on the redis engine: a later commit")

    async def read_likes(self, room: str, step: int, low: int,
                         high: int) -> list[tuple[int, int]]:
        raise NotImplementedError("likes on the redis engine: a later commit")

    async def add_gift(self, room: str, giver: str, value: int, gift: str,
                       now_ms: int) -> GiftRank:
        raise NotImplementedError("gifts on the redis engine: a later commit")

    async def leaderboard(self, room: str, limit: int) -> Leaderboard:
        raise NotImplementedError("gifts on the redis engine: a later commit")
