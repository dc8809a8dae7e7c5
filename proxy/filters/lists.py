"""The word filter on a node: its copy of the store's lists, applied to sends.

The store keeps the lists (``store.filters``:
:class:`~liveroom.store.filters.FilterStore`); every node keeps a copy,
each list built into its automaton (:class:`~.screen.WordScreen`), in one
:class:`~.screen.Screens` value that a change replaces whole
(:attr:`Filters.screens`). It reads them all at start, then every
:data:`FILTERS_EVERY` seconds asks the store for the filters' version (one
round trip, nothing more when nothing changed) and reads again only the
lists put since. The node a change goes through applies it at once. So a
change applies everywhere within about :data:`FILTERS_EVERY` plus two
round trips, and the automaton's build (20 to 100 ms for 10 000 words, in
a thread: the event loop goes on meanwhile).

**On a send's path** a room no list applies to costs one dict lookup
(:meth:`~.screen.Screens.screen`): nothing is folded, nothing touches the
store. While the store is unavailable the lists stay as last read.
"""

from __future__ import annotations

import asyncio
import logging

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.lifecycle import Outage, Periodic
from liveroom.store.base import FilterStore, WordList

from .screen import Screens, WordScreen

logger = logging.getLogger("liveroom.proxy.filters")

FILTERS_EVERY = 0.25
"""Seconds between two reads of the filters' version."""


def _described(word_list: WordList) -> str:
    rooms = ", ".join(word_list.rooms) if word_list.rooms else "every room"
    return (f"{word_list.name} ({word_list.action}, {len(word_list.words)} words, "
            f"{rooms})")


class Filters:
    """A node's copy of the word filter's lists. Start and stop it with the
    node."""

    def __init__(self, store: FilterStore, clock: Clock, *,
                 every: float = FILTERS_EVERY) -> None:
        self._store = store
        self.screens = Screens()
        """Every list as the node applies it (replaced whole by a change)."""
        self.version = -1
        """The filters' version last read (-1: nothing read yet)."""
        self._outage = Outage(logger)
        self._reader = Periodic("proxy-filters", every, self.refresh, clock, logger)
        self._reading = asyncio.Lock()
        """One refresh at a time: the reader's and an operator's change's
        (else a slower one could put back an older copy)."""

    async def start(self) -> None:
        """Read every list (a store that is down is logged and read by the
        next refresh), then keep up with the version."""
        await self.refresh()
        self._reader.start()

    async def stop(self) -> None:
        await self._reader.stop()

    async def refresh(self) -> None:
        """Read the lists put since :attr:`version`, drop the ones deleted
        (all of them again when the store's version went back: it lost its
        lists)."""
        async with self._reading:
            await self._refresh()

    async def _refresh(self) -> None:
        try:
            version, versions = await self._store.versions(max(self.version, 0))
            if versions is None:
                self.version = version
                return
            reset = version < self.version
            kept = {} if reset else self.screens.lists
            stale = [name for name, listed in versions.items()
                     if name not in kept or kept[name].version != listed]
            fresh = await self._store.lists(stale) if stale else {}
        except StoreUnavailable:
            self._outage.failed("the store is unavailable: word lists stay as last read")
            return
        self._outage.worked("the store is back: word lists are read again")
        screens = [kept[name] for name in versions if name in kept and name not in stale]
        for name in stale:
            word_list = fresh.get(name)
            if word_list is None:
                continue  # deleted since the version was read: the next refresh says
            # Folding the words holds the GIL; building the automaton does not.
            screens.append(await asyncio.to_thread(WordScreen, word_list))
            logger.info("word filter: list %s read", _described(word_list))
        gone = set(self.screens.lists) - set(versions)
        if gone:
            logger.info("word filter: lists %s deleted", ", ".join(sorted(gone)))
        if version < self.version:
            logger.warning("word filter: the store's version went back from %d to %d (it "
                           "lost its lists): read them all again", self.version, version)
        self.screens = Screens(screens)
        self.version = version
