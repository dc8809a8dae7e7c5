"""What the front asks of a route's handler.

The front knows no feature: the role builds one :class:`Handler` per route of
the routing table (:mod:`.routing`) and gives them to the
:class:`~.server.Front`. A connection calls its route's handler with each
request in turn and acts on what comes back (:meth:`Handler.start`); it never
looks inside.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ..reply import Reply
from .limits import HeadRules
from .request import Held, Request

Outcome = Reply | Held | Coroutine[Any, Any, Reply] | None
"""What :meth:`Handler.start` gives back: an answer now (a :class:`Reply`),
work held until ``answer`` is called (:class:`Held`), a coroutine the
connection runs in a task and answers with, or None: ``answer`` was called
already, or will be by work the handler keeps (a send waiting for the send
hook's verdict), which nothing lets go of when its client leaves."""


class Handler:
    """Answers the requests of one route of the front. ``head_rules``: what
    the head of a request with a body may be, checked before its body is
    read (None: the route takes no body)."""

    __slots__ = ("finishes", "head_rules")

    def __init__(self, head_rules: HeadRules | None) -> None:
        self.head_rules = head_rules
        self.finishes = False
        """Whether the coroutine of a request read whole runs to its end
        when its client goes (a write: the role sets it from the route's row
        of the cost table); else it is cancelled."""

    def start(self, req: Request, answer: Callable[[Reply], None], address: str,
              peer: asyncio.BaseTransport | None) -> Outcome:
        """Begin answering ``req`` (its head and body read, routed to this
        handler). ``answer`` takes its answer later, for work held;
        ``address`` is the client as the connection is counted (behind a
        trusted proxy, the one ``X-Forwarded-For`` names) and ``peer`` the
        connection's transport, read only if needed."""
        raise NotImplementedError
