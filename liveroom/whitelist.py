"""The node's copy of the vip whitelist.

Operators whitelist rooms into the vip sect in the store (``Operators``); every
node keeps the list in memory and rereads it in a background task every
``refresh`` seconds of the node's clock. Nothing on a poll's path reads the
store: :meth:`VipList.is_vip` is a set lookup.

Limits and trade-offs:

* **Staleness.** Another node's change shows here within one refresh period
  (plus a store round trip). A change made through this node is noted at once
  (:meth:`VipList.note`), and a reread that was already in flight when it was
  noted is discarded so it cannot undo the change.
* **Outages.** While the store is down the last list read stays in force; the
  outage is logged once when it starts and once when it ends.
* **Start-up.** :meth:`VipList.start` reads the list before the node listens,
  retrying for at most ``start_wait`` seconds of real time (the node's clock may
  be a test's fake one that nobody moves yet); past that the node starts with
  every room in the normal sect and the refresh task keeps trying.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from .clock import Clock
from .errors import StoreUnavailable
from .lifecycle import Outage, Periodic
from .store.base import Operators

logger = logging.getLogger("liveroom.whitelist")

OnChange = Callable[[frozenset[str]], None]
"""Called with the rooms that entered or left the whitelist."""


class VipList:
    """The vip whitelist as this node knows it, refreshed in the background."""

    def __init__(self, operators: Operators, clock: Clock, *, refresh: float = 2.0,
                 start_wait: float = 5.0) -> None:
        if refresh <= 0:
            raise ValueError("the vip whitelist refresh period must be positive")
        self._operators = operators
        self._start_wait = start_wait
        self._listeners: list[OnChange] = []
        self._refresher = Periodic("vip-whitelist", refresh, self.refresh, clock, logger)
        self._noted = 0
        """Changes noted locally: a reread started before the last one is stale."""
        self._outage = Outage(logger)
        self.rooms: frozenset[str] = frozenset()
        self.version = 0
        """Goes up by one every time the list changes."""

    # -- reading ------------------------------------------------------------------

    def is_vip(self, room: str) -> bool:
        return room in self.rooms

    def on_change(self, listener: OnChange) -> None:
        """Call ``listener`` with the rooms that changed, right after every change."""
        self._listeners.append(listener)

    # -- changing -----------------------------------------------------------------

    def note(self, room: str, vip: bool) -> None:
        """Apply a change this node made in the store (no store call)."""
        self._noted += 1
        self._apply(self.rooms | {room} if vip else self.rooms - {room})

    def _apply(self, rooms: frozenset[str]) -> None:
        changed = rooms ^ self.rooms
        if not changed:
            return
        self.rooms = rooms
        self.version += 1
        for listener in self._listeners:
            try:
                listener(changed)
            except Exception:  # one listener failing must not stop the others
                logger.exception("a vip whitelist listener failed")

    async def refresh(self) -> bool:
        """Read the whitelist from the store once; False if the store is down
        (the list stays as it was)."""
        noted = self._noted
        try:
            rooms = await self._operators.vip_rooms()
        except StoreUnavailable as exc:
            self._outage.failed("cannot read the vip whitelist, keeping the last one "
                                "(%d rooms): %s", len(self.rooms), exc.message)
            return False
        self._outage.worked("vip whitelist read again (%d rooms)", len(rooms))
        if noted == self._noted:
            self._apply(frozenset(rooms))
        return True

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Read the list (bounded retries, see the module docstring), then
        start the refresh task."""
        delay = 0.1
        read = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._start_wait):
                while not (read := await self.refresh()):
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
        if not read:
            logger.warning("starting without the vip whitelist: every room is in the "
                        "normal sect until the store answers")
        self._refresher.start()

    async def stop(self) -> None:
        await self._refresher.stop()
