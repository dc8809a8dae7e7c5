"""A room's news: what its answers show beside its messages changed, told to its held polls.

An answer carries, beside the room's messages, its likes total (``likes``),
its top givers (``ranking``) and its slow mode (``slow``). None of them is a
message: a change of one leaves the room's snapshot as it is and wakes no
held poll, so a listener in a quiet room would see it only with the next
chat line or when its poll timed out (25 s; issue 46).

Whoever learns of such a change calls :meth:`RoomNews.changed`: the likes
at a tap on this node and when a refresh reads a new total, the rankings
when a read finds a new top (or none), the moderation when a room's slow
mode is turned on, off or changed. Within a tick (``tick``, the hold's
0.2 s) the room's held polls that were held before the change and have
nothing pending are answered, empty: the same cursors, no messages, the
room's figures as they are now, an answer every client already takes (a
timeout's; :meth:`~.hold.Holds.tell_news`). A poll with messages pending
carries the news when it is due.

**At most once per room per period.** A room told less than a period ago
waits until the period is over, and every change meanwhile goes with that
one answer: a busy room's taps cost a listener at most one answer a
period, never one a tap. The period is ``news_every`` (1 s), or the room's
tier's interval plus jitter when that is longer (at the default tiers 1 s
from 1 000 online, 2 s from 10 000, 5 s from 100 000, 10 s from a million):
bigger rooms are told less often, and the news never answers a listener
more often than its tier lets messages do (a quiet room whose likes keep
changing costs at most what the same room with a busy chat costs).

**Cost.** A change is a dict lookup or two (a room without held polls:
one); telling a room answers its quiet held polls, each like a timeout
(its ``ctx`` signed, its answer encoded), at most once a period. Polls held
after the last change read it already and are left held. The work is per
room and per answer, never per change; nothing here touches the store.

**A change between an answer and the next poll.** A listener is not held
while its answer travels and its next poll comes back, and a change then
would wait for its next answer. So every answer's ``ctx`` carries a mark of
the likes, slow mode and top givers it left the listener with
(:func:`.context.news_mark`). A poll held in a room whose news
changed in the last :data:`LATELY` seconds (:meth:`RoomNews.lately`, a dict
lookup; a quiet room's polls pay nothing more) compares them with what it
would show now; where they differ it counts as held before the change,
and the room is told at its next turn, within its period, as above
(``proxy.polls.poll``).

Limits: a change is told once the node knows of it: a tap on this node at
once; another node's taps at this node's next read of the totals (a second,
after that node's ``--likes-flush``); gifts at the next read of the rankings
(a second); slow mode set through another node at its next read of the
moderation journal (0.25 s).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import Final

from liveroom.clock import Clock
from liveroom.lifecycle import Periodic
from liveroom.settings import Tier

from .hold import Holds
from .tiers import TierTable

logger: Final = logging.getLogger("liveroom.proxy.news")

LATELY: Final = 10.0
"""Seconds after a room's last change in which a poll held there checks
that its last answer showed the room's figures as they are now: far longer
than an answer's round trip back to the next poll."""


def news_period(news_every: float, tier: Tier) -> float:
    """Seconds a room of ``tier`` waits between two tellings of its news:
    ``news_every``, or the tier's interval plus jitter when longer."""
    return max(news_every, tier.interval + tier.jitter)


class RoomNews:
    """A node's news of its rooms, told to their held polls (see the
    module). Start and stop it with the node."""

    def __init__(self, holds: Holds, clock: Clock, tiers: TierTable,
                 online: Callable[[str], int], *, news_every: float, tick: float) -> None:
        self._holds = holds
        self._clock = clock
        self._tiers = tiers
        self._online = online
        self.news_every = news_every
        self._due: dict[str, float] = {}
        """Rooms with news not told yet, and when they may be told
        (monotonic); ``_order`` orders them by that."""
        self._order: list[tuple[float, str]] = []
        self._free_at: dict[str, float] = {}
        """Rooms told lately, and when they may be told again; in the order
        they were told (forgotten from the front once free)."""
        self._lately: dict[str, float] = {}
        """Rooms whose news changed in the last :data:`LATELY` seconds, and
        when (monotonic); in that order (forgotten from the front)."""
        self.told = 0
        """Rooms told (the times their held polls were answered for news)."""
        self._ticker = Periodic("proxy-news", tick, self._step, clock, logger)

    def start(self) -> None:
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()

    def changed(self, room: str) -> None:
        """What answers show of ``room`` beside its messages changed: tell
        its held polls at the next tick, or when its period since it was
        last told is over. A room without held polls is only noted as
        changed :meth:`lately`."""
        now = self._clock.monotonic()
        lately = self._lately
        lately.pop(room, None)  # to the back: changed last
        lately[room] = now
        if not self._holds.note_news(room) or room in self._due:
            return
        free_at = self._free_at.get(room, now)
        at = self._due[room] = free_at if free_at > now else now
        heapq.heappush(self._order, (at, room))

    def lately(self, room: str) -> bool:
        """Whether the room's news changed in the last :data:`LATELY` seconds."""
        at = self._lately.get(room)
        return at is not None and self._clock.monotonic() - at < LATELY

    def period(self, room: str) -> float:
        """The room's period now (:func:`news_period` of its tier)."""
        return news_period(self.news_every, self._tiers.tier(self._online(room)))

    def tell_due(self) -> int:
        """Tell every room whose news is due; how many rooms answered polls."""
        now = self._clock.monotonic()
        order, due, free_at = self._order, self._due, self._free_at
        told = 0
        while order and order[0][0] <= now:
            _, room = heapq.heappop(order)
            del due[room]
            if self._holds.tell_news(room):
                told += 1
                free_at.pop(room, None)  # to the back: told last
                free_at[room] = now + self.period(room)
        while free_at:
            room = next(iter(free_at))
            if free_at[room] > now:
                break
            del free_at[room]
        lately = self._lately
        while lately:
            room = next(iter(lately))
            if now - lately[room] < LATELY:
                break
            del lately[room]
        self.told += told
        return told

    async def _step(self) -> None:
        self.tell_due()
