"""Deadlines: one timer for many waiting things, instead of a timer each.

Held polls and idle connections all wait for a deadline, and most never reach
it (a message answers the poll first, the next request arrives). A loop timer
per waiting thing would be created and cancelled thousands of times a second;
here waiting things go into buckets of ``resolution`` seconds on the loop's
clock, and one loop timer, armed for the earliest bucket, expires them a whole
bucket at a time. Adding and removing are a dict operation each.

Limits: a deadline fires up to ``resolution`` late (never more than 2 ms early), in the order
of buckets, and within one in the order things were added: a bucket is an
insertion-ordered dict, not a set, whose order would follow the things'
addresses in memory and differ from run to run (the simulator replays a
seed exactly only if nothing depends on them).
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class Deadlines(Generic[T]):
    """Things that expire at a deadline: ``on_due(thing)`` runs once it passed."""

    def __init__(self, on_due: Callable[[T], None], *, resolution: float = 0.05) -> None:
        self._on_due = on_due
        self._resolution = resolution
        self._buckets: dict[int, dict[T, None]] = {}
        self._keys: list[int] = []
        """Heap of the buckets' keys (a key may stay after its bucket emptied)."""
        self._timer: asyncio.TimerHandle | None = None
        self._armed = math.inf
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, thing: T, when: float) -> int:
        """Expire ``thing`` at loop time ``when``; returns the key :meth:`discard` takes."""
        key = math.ceil(when / self._resolution)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = {}
            heapq.heappush(self._keys, key)
            if key < self._armed:
                self._arm(key)
        bucket[thing] = None
        self._count += 1
        return key

    def discard(self, thing: T, key: int) -> None:
        """Forget ``thing`` (added with ``key``); nothing happens if it is not there."""
        bucket = self._buckets.get(key)
        if bucket is not None and thing in bucket:
            del bucket[thing]
            self._count -= 1
            if not bucket:
                del self._buckets[key]

    def close(self) -> None:
        """Forget everything; nothing fires any more."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._armed = None, math.inf
        self._buckets.clear()
        self._keys.clear()
        self._count = 0

    def _arm(self, key: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = float(key)  # a float slot (docs/development.md, "Compiled modules")
        self._timer = asyncio.get_running_loop().call_at(key * self._resolution, self._fire)

    def _fire(self) -> None:
        self._timer, self._armed = None, math.inf
        # A timer may run a hair before its time (the loop's clock ticks in
        # milliseconds): count a bucket due from 2 ms before its deadline.
        now = math.floor((asyncio.get_running_loop().time() + 0.002) / self._resolution)
        keys, due = self._keys, []
        while keys and keys[0] <= now:
            bucket = self._buckets.pop(heapq.heappop(keys), None)
            if bucket:
                self._count -= len(bucket)
                due.append(bucket)
        while keys and keys[0] not in self._buckets:
            heapq.heappop(keys)
        if keys:
            self._arm(keys[0])
        # Expire after the bookkeeping: an expiry may add new deadlines.
        for bucket in due:
            for thing in bucket:
                self._on_due(thing)
