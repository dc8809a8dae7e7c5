"""Gifts and the ranking of a broadcast's givers.

``POST /v1/rooms/{room}/gifts`` with ``{"uid": giver, "value": v, "gift":
name}`` is the backend's call (gifts are paid): it needs the publisher or
admin token, or a ticket with ``publish`` good for the room. It adds ``v``
(1 to :data:`~liveroom.store.base.GIFT_VALUE_MAX`) to the giver's score for
the room's current broadcast and to the room's gift total, exactly and
atomically (``Counters.add_gift``), and answers the giver's rank and score
and the total. A gift worth at least ``--gift-important`` (0: none) also
goes out as an important message of the giver, ``{"gift", "value"}`` its
body, so every listener sees it ahead of the chat.

``GET /v1/rooms/{room}/leaderboard?limit=N`` (1 to
:data:`~liveroom.store.base.RANKING_MAX`, default 10) gives the top
givers with their scores, the gift total and count. ``room end`` freezes the
ranking into the broadcast's archive (``/broadcasts``) and starts a new one.
Givers with equal scores rank by uid, descending (the store's order).
"""

from __future__ import annotations

from typing import Any

from liveroom.clock import Clock
from liveroom.errors import BadBody, Forbidden, Unauthorized
from liveroom.events import NO_EVENTS, Events
from liveroom.metrics import Metrics
from liveroom.model import NewMessage, check_name
from liveroom.store.base import GIFT_VALUE_MAX, Counters, GiftRank, MessageLog, Ranking

from ..auth import Right, Tokens, bearer
from ..params import body_uid
from ..tickets import Tickets

GIFT_NAME_MAX = 64
"""Characters of a gift's name."""


def parse_gift(doc: Any) -> tuple[str, int, str]:
    """``(giver, value, gift)`` of a gift request's document."""
    uid = body_uid(doc, fields="uid, value and gift", uid_required=True)
    assert uid is not None
    value = doc.get("value")
    if type(value) is not int or not 1 <= value <= GIFT_VALUE_MAX:
        raise BadBody(f"value must be a whole number from 1 to {GIFT_VALUE_MAX}")
    gift = doc.get("gift")
    if not isinstance(gift, str) or not 1 <= len(gift) <= GIFT_NAME_MAX:
        raise BadBody(f"gift must be a name of 1 to {GIFT_NAME_MAX} characters")
    unknown = set(doc) - {"uid", "value", "gift"}
    if unknown:
        raise BadBody(f"unknown fields: {', '.join(sorted(unknown))}")
    return uid, value, gift


class Gifts:
    """A node's gift requests and rankings (the backend's calls: no
    listener waits on them, they go to the store)."""

    def __init__(self, counters: Counters, log: MessageLog, tokens: Tokens, clock: Clock, *,
                 gift_important: int, tickets: Tickets | None = None,
                 metrics: Metrics | None = None, events: Events = NO_EVENTS,
                 event_min: int = 0) -> None:
        self._metrics = metrics
        self._events = events
        self.event_min = event_min
        """A gift worth at least this much is a ``gift.given`` event (0: none is)."""
        self._counters = counters
        self._log = log
        self._tokens = tokens
        self._clock = clock
        self.gift_important = gift_important
        self.tickets = tickets
        """The ticket verifier in ``ticket`` mode; None: open."""

    def require_publisher(self, room: str, authorization: str | None) -> None:
        """A gift is the backend's: the publisher or admin token, or a ticket
        with ``publish`` good for ``room`` (401 / 403 otherwise)."""
        token = bearer(authorization)
        right = self._tokens.right_of(token)
        if right is Right.ADMIN or right is Right.PUBLISH:
            return
        tickets = self.tickets
        if tickets is None:
            raise Unauthorized("a gift needs the publisher token (or the admin token)")
        claims = tickets.good_for(room, token, None)
        if not claims.publish:
            raise Forbidden("this ticket cannot give gifts (it has no publish right)")

    async def give(self, room: str, doc: Any, authorization: str | None) -> tuple[GiftRank, str]:
        """Add the gift in ``doc`` to ``room`` (its name checked with the
        request's head): the giver's place, and the giver."""
        self.require_publisher(room, authorization)
        giver, value, gift = parse_gift(doc)
        now_ms = int(self._clock.time() * 1000)
        # Kept by the store with the gift, its rank, score and total added.
        ahead = await self._events.ahead("gift.given", room, uid=giver, gift=gift,
                                         value=value) \
            if self.event_min and value >= self.event_min else None
        try:
            rank = await self._counters.add_gift(room, giver, value, gift, now_ms,
                                                 event=None if ahead is None else ahead.event)
        finally:
            await self._events.settle(ahead)
        if self._metrics is not None:
            self._metrics.gifts.inc()
            self._metrics.gift_value.inc(value)
        if self.gift_important and value >= self.gift_important:
            await self._log.append(room, NewMessage(
                uid=giver, body={"gift": gift, "value": value}, important=True, ts=now_ms))
        return rank, giver

    async def ranking(self, room: str, limit: int) -> Ranking:
        check_name("room", room)
        return await self._counters.ranking(room, limit)
