"""``POST /v1/rooms/{room}/messages`` on the front: a send from a request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..front.handler import Handler, Outcome
from ..front.request import Request
from ..reply import Reply
from .send import Sends


class SendRoute(Handler):
    """Sends a message: answered at once when the store appends at once
    (memory), else by the coroutine that awaits the store (Redis). A send
    the hook screens, on a store that appends at once, is answered through
    ``answer`` when its verdict comes (no task)."""

    __slots__ = ("_sends",)

    def __init__(self, sends: Sends) -> None:
        super().__init__(sends.head_rules)
        self._sends = sends

    def start(self, req: Request, answer: Callable[[Reply], None], address: str,
              peer: asyncio.BaseTransport | None) -> Outcome:
        sends, body = self._sends, req.content()
        reply = sends.send_at_once(req.room, req.content_type, body, req.authorization,
                                   req.accept, address, peer)
        if reply is not None:
            return reply
        if sends.screens_at_once and not sends.from_backend(req.authorization):
            return sends.send_screened(req.room, req.content_type, body, req.authorization,
                                       req.accept, address, peer, answer)
        return sends.send(req.room, req.content_type, body, req.authorization, req.accept,
                          address, peer)
