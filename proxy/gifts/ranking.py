"""The gift ranking in poll answers: a room's top givers, sent only when they changed.

Once a second a node reads the rankings of the rooms its listeners asked
about lately (:class:`~proxy.recent_rooms.RecentRooms`, the rooms the likes
keep fresh too: one ``Counters.rankings`` call for all of them) and keeps,
per room with gifts, its ranking's :data:`TOP` givers ready encoded as an
:class:`EncodedRanking`. Its ``version`` is a checksum of what it says, the
same on every node.

Words: a room's *ranking* is its givers by score; its *top* is the list of
the best of them (``Counters.ranking``'s, and the answers').

An answer carries ``ranking`` (``{"version", "top": [{"uid", "score"}, ...]}``)
when the room has a ranking and the poll did not echo its version as
``ranking``: a client that echoes the last version it got hears of the
ranking again only when the top changed, on whichever node it polls. Without
gifts in the room nothing is added; a room whose broadcast ended after gifts
gets an empty ``top`` once (when its poll echoes a version), so clients
clear theirs. On the poll's path this
costs one dict lookup; nothing there touches the store.

Limits: a change shows within about a second plus a store round trip (the
ranking read by ``GET /leaderboard`` is exact at once); while the store is
unavailable the last rankings read stay.
"""

from __future__ import annotations

import logging
import zlib
from typing import Final

import msgpack
import orjson

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.lifecycle import Outage, Periodic
from liveroom.store.base import Counters, Ranking

from ..recent_rooms import RecentRooms

logger: Final = logging.getLogger("liveroom.proxy.ranking")

TOP: Final = 3
"""Givers a ranking in answers lists."""
REFRESH_EVERY: Final = 1.0
"""Seconds between two reads of the rooms' rankings."""

_RANKING_MP: Final = msgpack.packb("ranking")


class EncodedRanking:
    """A room's top givers as answers carry them, encoded once."""

    __slots__ = ("json", "mp", "top", "version")

    def __init__(self, top: tuple[tuple[str, int], ...]) -> None:
        self.top = top
        entries = [{"uid": uid, "score": score} for uid, score in top]
        listed = orjson.dumps(entries)
        self.version = zlib.crc32(listed)
        """A checksum of the top: equal on every node for an equal top."""
        doc = {"version": self.version, "top": entries}
        self.json = b',"ranking":' + orjson.dumps(doc)
        """The JSON answer's field, with its leading comma."""
        self.mp = _RANKING_MP + msgpack.packb(doc)
        """The msgpack answer's key and value."""


NO_GIFTS: Final = EncodedRanking(())
"""What a poll that echoes a ranking's version hears of a room without
gifts (its broadcast ended, or the client's version is from elsewhere)."""


class Rankings:
    """A node's rankings of the rooms asked about lately, encoded for
    answers. Start and stop it with the node."""

    def __init__(self, store: Counters, clock: Clock, recent: RecentRooms) -> None:
        self._store = store
        self._recent = recent
        self.encoded: dict[str, EncodedRanking] = {}
        """By room: read by every answer (a room without gifts is absent)."""
        self._outage = Outage(logger)
        self._refresher = Periodic("proxy-ranking", REFRESH_EVERY, self.refresh, clock, logger)

    def start(self) -> None:
        self._refresher.start()

    async def stop(self) -> None:
        await self._refresher.stop()

    async def refresh(self) -> None:
        """Read the rankings of the rooms asked about lately; forget the rooms no
        longer polled. Logs an outage once, and once when it ends."""
        rooms = list(self._recent.rooms())
        try:
            rankings = await self._store.rankings(rooms, TOP) if rooms else {}
        except StoreUnavailable:
            self._outage.failed("the store is unavailable: answers keep the last rankings")
            return
        self._outage.worked("the store is back: rankings are read again")
        self.update(rankings)

    def update(self, rankings: dict[str, Ranking]) -> None:
        """Take the rankings read: a new encoding for each ranking whose top
        changed, the same one for the others; a room without a ranking (no
        gifts, or its broadcast ended) has none (a poll that
        echoes another version than :data:`NO_GIFTS`'s gets that)."""
        before = self.encoded
        encoded: dict[str, EncodedRanking] = {}
        for room, ranking in rankings.items():
            old = before.get(room)
            encoded[room] = old if old is not None and old.top == ranking.top \
                else EncodedRanking(ranking.top)
        self.encoded = encoded
