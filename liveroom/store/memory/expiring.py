"""Keys that expire on the store's clock, as Redis's do: the memory engine's
building block for every table with a TTL."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from ...clock import Clock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Expiring(Generic[K, V]):
    """Values that vanish at a deadline on the store's clock, like Redis keys with a TTL.

    Expiry is checked when a value is read and by :meth:`sweep`.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._items: dict[K, tuple[V, int]] = {}
        """key -> (value, deadline in clock ms)"""

    def __len__(self) -> int:
        """Values held, the expired ones included until read or swept."""
        return len(self._items)

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if self._now_ms() > item[1]:
            del self._items[key]
            return None
        return item[0]

    def put(self, key: K, value: V, ttl_ms: int) -> None:
        self._items[key] = (value, self._now_ms() + ttl_ms)

    def expire(self, key: K, ttl_ms: int, *, only_later: bool = False) -> bool:
        """Set the key's deadline ``ttl_ms`` from now (never earlier with
        ``only_later``); False when there is no such key."""
        value = self.get(key)
        if value is None:
            return False
        deadline = self._now_ms() + ttl_ms
        if only_later:
            deadline = max(deadline, self._items[key][1])
        self._items[key] = (value, deadline)
        return True

    def replace(self, key: K, value: V) -> bool:
        """Put ``value`` in the place of the key's, its deadline kept; False
        when there is no such key (nothing stored)."""
        if self.get(key) is None:
            return False
        self._items[key] = (value, self._items[key][1])
        return True

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def sweep(self) -> None:
        now = self._now_ms()
        for key in [k for k, (_, deadline) in self._items.items() if now > deadline]:
            del self._items[key]
