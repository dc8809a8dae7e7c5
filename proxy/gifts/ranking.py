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

Each ranking is of one broadcast, named by its epoch: the one the room
cache held (``epoch_of``) before the store was read (the store's counters
turn with the log's epoch in one step, so it is of that broadcast or a
later one). An answer in another epoch shows it as a room without gifts
(:meth:`Rankings.of`): right after ``room end`` no answer of the new
broadcast carries the ended one's top, until the next read.

A change (a new top, a ranking gone) is told to ``on_change(room)``, which
wakes the room's held polls (:mod:`proxy.polls.news`).

Limits: a change shows within about a second plus a store round trip (the
ranking read by ``GET /leaderboard`` is exact at once); while the store is
unavailable the last rankings read stay.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from typing import Final

import msgpack
import orjson

from liveroom.clock import Clock
from liveroom.errors import StoreUnavailable
from liveroom.lifecycle import Outage, Periodic
from liveroom.snapshot import ABSENT_EPOCH
from liveroom.store.base import Counters, Ranking

from ..recent_rooms import RecentRooms
from ..renewals import Renewals

logger: Final = logging.getLogger("liveroom.proxy.ranking")

TOP: Final = 3
"""Givers a ranking in answers lists."""
REFRESH_EVERY: Final = 1.0
"""Seconds between two reads of the rooms' rankings."""

_RANKING_MP: Final = msgpack.packb("ranking")


class EncodedRanking:
    """A room's top givers as answers carry them, encoded once, and the
    broadcast (its epoch) they are of ("": any)."""

    __slots__ = ("epoch", "json", "mp", "top", "version")

    def __init__(self, top: tuple[tuple[str, int], ...], epoch: str = "") -> None:
        self.top = top
        self.epoch = epoch
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

    def __init__(self, store: Counters, clock: Clock, recent: RecentRooms, *,
                 epoch_of: Callable[[str], str | None] = lambda room: "",
                 on_change: Callable[[str], None] = lambda room: None,
                 renewals: Renewals | None = None) -> None:
        self._store = store
        self._recent = recent
        self._epoch_of = epoch_of
        """The room's epoch as the node's room cache holds it (None: nothing
        held; "": no cache to ask)."""
        self._on_change = on_change
        self._renewals = renewals if renewals is not None else Renewals()
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
        epochs = {room: self._epoch_of(room) for room in rooms}
        try:
            rankings = await self._store.rankings(rooms, TOP) if rooms else {}
        except StoreUnavailable:
            self._outage.failed("the store is unavailable: answers keep the last rankings")
            return
        self._outage.worked("the store is back: rankings are read again")
        self.update(rankings, epochs)

    def update(self, rankings: dict[str, Ranking],
               epochs: dict[str, str | None] | None = None) -> None:
        """Take the rankings read, each of the broadcast ``epochs`` names
        (None: every one of any): a new encoding for each ranking whose top
        or broadcast changed, the same one for the others; a room without a
        ranking (no gifts, or its broadcast ended), or that the room cache
        holds nothing of, has none (a poll that echoes another version than
        :data:`NO_GIFTS`'s gets that). Tells ``on_change`` of each room
        whose ranking changed or went."""
        before = self.encoded
        encoded: dict[str, EncodedRanking] = {}
        for room, ranking in rankings.items():
            epoch = "" if epochs is None else self._renewals.now(room, epochs.get(room))
            if epoch is None or epoch == ABSENT_EPOCH:
                continue
            old = before.get(room)
            if old is not None and old.top == ranking.top and old.epoch == epoch:
                encoded[room] = old
            else:
                encoded[room] = EncodedRanking(ranking.top, epoch)
                self._on_change(room)
        self.encoded = encoded
        for room in before.keys() - encoded.keys():
            self._on_change(room)

    def of(self, room: str, epoch: str) -> EncodedRanking | None:
        """The room's ranking as an answer in broadcast ``epoch`` shows it:
        None without gifts, or when the ranking read is of another
        broadcast (until the next read). One dict lookup (two in a room
        renewed lately)."""
        current = self.encoded.get(room)
        if current is not None and current.epoch and current.epoch != epoch \
                and current.epoch != self._renewals.now(room, epoch):
            return None
        return current

    def renewed(self, room: str, old: str, new: str) -> None:
        """The room's epoch ``old`` was renewed into ``new`` (noted in the
        node's :class:`~proxy.renewals.Renewals` already): the same
        broadcast, so its ranking is ``new``'s."""
        current = self.encoded.get(room)
        if current is not None and current.epoch == old:
            current.epoch = new
