"""The rooms this node's listeners asked about lately: the rooms whose like
totals and gift rankings the node keeps fresh.

One :class:`RecentRooms` per node serves both: the likes note a room each
time they show its total (every poll answer, every tap's answer), the
likes' refresher ages the set once a second and forgets the rooms not noted
for :data:`KEPT_FOR` refreshes more than the longest poll a listener may
hold (``--poll-timeout-max``: a room whose one listener holds its polls
that long is noted only at their answers, and its total must still be there
at the next), and the rankings are read for the same rooms. Noting a room
is one dict store: nothing on a poll's path reads a clock or the store.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Final

KEPT_FOR: Final = 60
"""Refreshes (about seconds) a room stays after it was last noted, beyond
the longest poll a listener may hold."""


class RecentRooms:
    """The rooms asked about lately (see the module's docstring)."""

    __slots__ = ("_age", "_kept_for", "_noted")

    def __init__(self, poll_timeout_max: float = 0) -> None:
        self._noted: dict[str, int] = {}
        """Each room and the age at which it was last noted."""
        self._age = 0
        self._kept_for = KEPT_FOR + math.ceil(poll_timeout_max)
        """Refreshes a room stays after it was last noted."""

    def note(self, room: str) -> None:
        """``room`` was asked about now."""
        self._noted[room] = self._age

    def rooms(self) -> Collection[str]:
        """The rooms asked about lately (a view: read it at once)."""
        return self._noted.keys()

    def age(self) -> list[str]:
        """One refresh more: forget the rooms not noted in the last
        :data:`KEPT_FOR` refreshes (plus the longest poll's seconds), and
        return them."""
        self._age += 1
        oldest = self._age - self._kept_for
        gone = [room for room, at in self._noted.items() if at < oldest]
        for room in gone:
            del self._noted[room]
        return gone
