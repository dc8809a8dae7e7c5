"""A room's likes and gifts on Redis (``Counters``; keys in :mod:`.keys`).

- **Likes**: one ``lua/counters_likes.lua`` call per room (the total ``lk`` and every
  resolution of the series ``lks:<step>``, atomically), all rooms' calls in one
  pipeline: one round trip for a node's whole flush (two the first time on a
  fresh server, which loads the script). On a Redis Cluster the pipeline sends
  one batch per cluster node, in parallel: each call stays in its room's slot.
  Totals are read with one pipelined ``GET`` per room.
- **Gifts**: one ``lua/counters_gift.lua`` call per gift (``ZINCRBY`` on the ranking
  ``gr``, ``HINCRBY`` on the totals ``gf``); the ranking is ``ZREVRANGE``
  and ``HMGET`` of one slot in one pipeline.

Scores are sorted-set scores, doubles: exact below
:data:`~liveroom.store.base.SCORE_EXACT`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..base import (
    ROOT_MOVED,
    SERIES_RESOLUTIONS,
    GiftRank,
    LogPolicy,
    Ranking,
    check_gift,
    check_limit,
    check_taps,
    series_horizon_ms,
)
from . import keys
from .calls import Call, Client, Lua, run_scripts, text, unavailable


def score(value: Any) -> int:
    """A sorted set's score as Redis prints it ("60", "1e+20" past 17
    digits), as an int."""
    return int(float(text(value)))


def top_of(reply: Sequence[tuple[Any, Any]]) -> tuple[tuple[str, int], ...]:
    """``(giver, score)`` pairs from a ``ZREVRANGE ... WITHSCORES`` reply."""
    return tuple((text(giver), score(points)) for giver, points in reply)


class RedisCounters:
    """:class:`~liveroom.store.base.Counters` on Redis."""

    def __init__(self, client: Client, policy: LogPolicy) -> None:
        self._client = client
        self._ttl_ms = policy.history_ttl_ms
        self._series_ms = series_horizon_ms(SERIES_RESOLUTIONS, 0)
        self._resolution_args = [n for resolution in SERIES_RESOLUTIONS for n in resolution]
        self._dedup_ms = policy.dedup_ttl_ms
        self._likes = Lua("counters_likes.lua")
        self._gift = Lua("counters_gift.lua", uses=["room_event_fn.lua"])

    # -- likes -------------------------------------------------------------------

    async def add_likes(self, taps: Mapping[str, int], now_ms: int,
                        epochs: Mapping[str, str] | None = None, write_id: str = "") -> None:
        check_taps(taps)
        if not taps:
            return
        epochs = epochs or {}
        calls: list[Call] = [
            (self._likes,
             [keys.likes(room), *(keys.likes_series(room, step) for step, _ in SERIES_RESOLUTIONS),
              keys.likes_write(room, write_id), keys.broadcasts(room)],
             [n, now_ms, self._ttl_ms, self._series_ms, *self._resolution_args,
              self._dedup_ms, write_id, epochs.get(room, "")])
            for room, n in taps.items()]
        with unavailable("adding likes"):
            await run_scripts(self._client, calls)

    async def likes(self, rooms: Sequence[str]) -> dict[str, int]:
        if not rooms:
            return {}
        with unavailable("reading likes"):
            async with self._client.pipeline(transaction=False) as pipe:
                for room in rooms:
                    pipe.get(keys.likes(room))
                totals: list[Any] = await pipe.execute()
        return {room: int(total or 0) for room, total in zip(rooms, totals, strict=True)}

    async def likes_in(self, rooms: Sequence[str]) -> dict[str, tuple[int, str]]:
        if not rooms:
            return {}
        # The root before and after the total, in one pipeline: a room's
        # commands reach its node in order, and an end (one script) runs
        # before, between or after them; roots are never used twice.
        with unavailable("reading likes"):
            async with self._client.pipeline(transaction=False) as pipe:
                for room in rooms:
                    pipe.hget(keys.meta(room), "root")
                    pipe.get(keys.likes(room))
                    pipe.hget(keys.meta(room), "root")
                replies: list[Any] = await pipe.execute()
        read = {}
        for i, room in enumerate(rooms):
            before, total, after = replies[3 * i:3 * i + 3]
            root = "" if after is None else text(after)
            read[room] = (int(total or 0), root if before == after else ROOT_MOVED)
        return read

    async def read_likes(self, room: str, step: int, low: int,
                         high: int) -> list[tuple[int, int]]:
        with unavailable("reading the likes series"):
            members: list[Any] = await self._client.zrangebyscore(
                keys.likes_series(room, step), low, high)
        rows = []
        for member in members:
            start, _, taps = text(member).partition(":")
            rows.append((int(start), int(taps)))
        return rows

    # -- gifts -------------------------------------------------------------------

    async def add_gift(self, room: str, giver: str, value: int, gift: str,
                       now_ms: int, *, event: bytes | None = None) -> GiftRank:
        check_gift(value)
        with unavailable("adding a gift"):
            ((rank, points, total),) = await run_scripts(self._client, [(
                self._gift, [keys.givers(room), keys.gifts(room), keys.events(room)],
                [giver, value, self._ttl_ms, event or b""])])
        return GiftRank(int(rank) + 1, score(points), int(total))

    async def ranking(self, room: str, limit: int) -> Ranking:
        check_limit(limit)
        with unavailable("reading the ranking"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zrevrange(keys.givers(room), 0, limit - 1, withscores=True,
                               score_cast_func=bytes)
                pipe.hmget(keys.gifts(room), ["t", "c"])
                top, (total, count) = await pipe.execute()
        return Ranking(top_of(top), int(total or 0), int(count or 0))

    async def rankings(self, rooms: Sequence[str], limit: int) -> dict[str, Ranking]:
        check_limit(limit)
        if not rooms:
            return {}
        with unavailable("reading the rankings"):
            async with self._client.pipeline(transaction=False) as pipe:
                for room in rooms:
                    pipe.hmget(keys.gifts(room), ["t", "c"])
                    pipe.zrevrange(keys.givers(room), 0, limit - 1, withscores=True,
                                   score_cast_func=bytes)
                replies: list[Any] = await pipe.execute()
        boards = {}
        for at, room in enumerate(rooms):
            (total, count), top = replies[2 * at], replies[2 * at + 1]
            if count:
                boards[room] = Ranking(top_of(top), int(total or 0), int(count))
        return boards
