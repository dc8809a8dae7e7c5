"""Notifies in one process: direct calls to every subscriber."""

from __future__ import annotations

import logging
from typing import Final

from ..base import OnNotify, OnResync

logger: Final = logging.getLogger("liveroom.store.memory")


class MemoryNotifier:
    def __init__(self) -> None:
        self._subscribers: list[tuple[OnNotify, OnResync]] = []

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None:
        self._subscribers.append((on_notify, on_resync))

    @property
    def alive(self) -> bool:
        return True

    def watch(self, room: str) -> None:
        """Every notify reaches every reader in one process: nothing to do."""

    def unwatch(self, room: str) -> None:
        """See :meth:`watch`."""

    def hears(self, room: str) -> bool:
        return True

    def publish(self, room: str, seq: int) -> None:
        """Call every subscriber; one that raises is logged and the others still
        hear (the append that notifies has succeeded whatever they do)."""
        for on_notify, _ in self._subscribers:
            try:
                on_notify(room, seq)
            except Exception:
                logger.exception("notify subscriber failed")
