"""``GET /v1/rooms/{room}/poll`` on the front: a poll started from a request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..front.handler import Handler, Outcome
from ..front.request import Request
from ..front.routing import parse_query
from ..reply import Reply
from .poll import Polls


class PollRoute(Handler):
    """Starts a poll; a poll held is the front's held work (no body: no head rules)."""

    __slots__ = ("_polls",)

    def __init__(self, polls: Polls) -> None:
        super().__init__(None)
        self._polls = polls

    def start(self, req: Request, answer: Callable[[Reply], None], address: str,
              peer: asyncio.BaseTransport | None) -> Outcome:
        # A held poll keeps none of its URL, query, room name, Accept or
        # ticket (the poll keeps the room's own name, see Poll.begin).
        query, req.query, req.url = req.query, "", b""
        authorization, req.authorization = req.authorization, None
        room, req.room = req.room, ""
        accept, req.accept = req.accept, ""
        return self._polls.start(room, parse_query(query), accept, answer, authorization)
