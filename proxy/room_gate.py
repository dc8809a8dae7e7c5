"""Whether a room exists, for the routes whose row in the cost table says
:data:`~proxy.route_costs.EXISTS`: a like, a gift or a recall in a room that
does not exist is refused (404 ``no_such_room``) before it creates anything.

The node's room cache answers, as it answers a first poll: a room it holds
costs a dict lookup; one it does not hold waits for the cache's pull (one
batched store read, shared by every request that asks meanwhile), and a
made-up name is then cached as absent, within the cache's own bounds (the
least recently read idle room is evicted past ``--rooms-max``). So a request
naming a made-up room costs the node what a first poll of it costs, and
writes nothing.

A room comes to exist with its first message or an operator's ``room
start``; a node learns it with the room's notify (at once) or, notifies
lost, the cache's next check of an absent room (at most 5 s).
"""

from __future__ import annotations

from typing import Final

from liveroom.errors import NoSuchRoom
from liveroom.model import check_name
from liveroom.roles import RoomReader
from liveroom.snapshot import ABSENT_EPOCH

_HINT: Final = ("a room exists from its first message or an operator's room start; "
                "a like, a gift or a recall needs one that exists")


class RoomGate:
    """Asks the node's room cache whether rooms exist."""

    __slots__ = ("_reader",)

    def __init__(self, reader: RoomReader) -> None:
        self._reader = reader

    def epoch(self, room: str) -> str | None:
        """The room's epoch as the cache holds it now, without waiting:
        :data:`~liveroom.snapshot.ABSENT_EPOCH` for a room that does not
        exist; None when the cache holds nothing of it yet."""
        snap = self._reader.peek(room)
        return None if snap is None else snap.epoch

    def root(self, room: str) -> str | None:
        """The broadcast the cache's copy of the room is of: the epoch it
        began with (``Snapshot.root``; "" unknown); None when the cache holds
        nothing of it yet."""
        snap = self._reader.peek(room)
        return None if snap is None else snap.root

    def refusal(self, room: str) -> NoSuchRoom:
        return NoSuchRoom(f"no such room: {room} ({_HINT})")

    async def require(self, room: str) -> str:
        """The epoch of ``room``, a room that exists; raise :class:`NoSuchRoom`
        (404) when it does not, ``BadRequest`` for a name that is not one,
        or what the cache's first pull raises (503 with the store
        unreachable)."""
        epoch = self.epoch(check_name("room", room))
        if epoch is None:
            epoch = (await self._reader.snapshot(room)).epoch
        if epoch == ABSENT_EPOCH:
            raise self.refusal(room)
        return epoch
