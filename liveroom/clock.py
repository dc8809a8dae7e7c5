"""Time, injected: a :class:`Clock` protocol, the system clock and a fake one.

Everything that reads time or sleeps for a period (TTLs, fallback pulls, the
presence window, tiers) takes a clock, so tests move time with
:meth:`FakeClock.advance` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import time as _time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock seconds since the epoch (message timestamps, TTLs)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, ages)."""

    async def sleep(self, seconds: float) -> None:
        """Wait for ``seconds`` of this clock's time."""


class SystemClock:
    # The functions themselves, not methods calling them: read on every poll.
    time = staticmethod(_time.time)
    monotonic = staticmethod(_time.monotonic)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FakeClock:
    """A clock that only moves when told; sleepers wake as it passes their deadline."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = start
        self._mono = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._counter = 0

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._counter += 1
        heapq.heappush(self._sleepers, (self._mono + max(0.0, seconds), self._counter, fut))
        await fut

    def sleepers(self) -> int:
        """How many sleeps are waiting (to know a background loop reached its sleep)."""
        return sum(1 for *_, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        """Move time forward and let every sleeper that became due run once."""
        self._wall += seconds
        self._mono += seconds
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
        # Give woken tasks a few turns of the loop to reach their next await.
        for _ in range(5):
            await asyncio.sleep(0)
