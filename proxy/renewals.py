"""Rooms whose epoch was renewed lately: the same broadcast under a new epoch.

A renewal (a store that lost writes: ``recvsvr`` starts the room in a new
epoch, its log kept) is no new broadcast: a room's likes total and top givers
go on. What a node holds of a room's broadcast is named by an epoch (the
likes' and rankings' totals, the taps waiting for a flush, the answers held on
older snapshots); :class:`Renewals` maps a renewed epoch to the one that
renewed it, so each of them counts it as the newer one's.

Bounds: :data:`KEPT` epochs a room, :data:`ROOMS` rooms (the oldest renewal
forgotten first); a renewal forgotten makes an answer still held on a
snapshot of that epoch show the room as a new broadcast's once.
"""

from __future__ import annotations

from typing import Final

KEPT: Final = 4
"""Renewed epochs remembered a room."""
ROOMS: Final = 10_000
"""Rooms with renewals remembered."""


class Renewals:
    """The node's renewed epochs, by room (see the module's docstring)."""

    __slots__ = ("_by_room",)

    def __init__(self) -> None:
        self._by_room: dict[str, dict[str, str]] = {}

    def note(self, room: str, old: str, new: str) -> None:
        """``room``'s epoch ``old`` was renewed into ``new``."""
        by_room = self._by_room
        aliases = by_room.pop(room, None) or {}
        by_room[room] = aliases  # the newest last
        for was, now in list(aliases.items()):
            if now == old:
                aliases[was] = new
        aliases[old] = new
        while len(aliases) > KEPT:
            del aliases[next(iter(aliases))]
        while len(by_room) > ROOMS:
            del by_room[next(iter(by_room))]

    def now(self, room: str, epoch: str | None) -> str | None:
        """``epoch``, or the epoch that renewed it last: one dict lookup for
        a room never renewed."""
        aliases = self._by_room.get(room)
        return epoch if not aliases or not epoch else aliases.get(epoch, epoch)
