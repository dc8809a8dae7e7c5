"""``POST /v1/rooms/{room}/likes`` on the front: taps from a request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..front.handler import Handler, Outcome
from ..front.request import Request
from ..reply import Reply
from .taps import Taps


class LikeRoute(Handler):
    """Takes a like request's taps; answered at once (the taps reach the
    store with the node's next flush)."""

    __slots__ = ("_taps",)

    def __init__(self, taps: Taps) -> None:
        super().__init__(taps.head_rules)
        self._taps = taps

    def start(self, req: Request, answer: Callable[[Reply], None], address: str,
              peer: asyncio.BaseTransport | None) -> Outcome:
        return self._taps.tap(req.room, req.content_type, req.content(), req.authorization,
                              req.accept)
