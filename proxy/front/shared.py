"""What a front's connections share, and all they may ask of it.

A :class:`~.connection.Connection` sees its :class:`~.server.Front` only
through :class:`Shared`, as uvicorn's protocols see their server through its
``ServerState``: the bounds, the route handlers, the books of paused
connections and of deadlines, and a few calls. A base class rather than a
``typing.Protocol``: compiled (mypyc), a call through a base class is a
direct call, through a Protocol a lookup by name on every answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..deadlines import Deadlines
from .admission import Admission
from .handler import Handler, Held
from .limits import FrontLimits, HeadRules

if TYPE_CHECKING:
    from .connection import Connection


class Shared:
    """The front as its connections see it (see the module's docstring)."""

    limits: FrontLimits
    handlers: tuple[Handler | None, ...]
    """Each route's handler, by kind (:mod:`.routing`; index 0: none)."""
    heads: tuple[HeadRules | None, ...]
    """Each route's head rules, by kind (None: a route without a body)."""
    admission: Admission
    paused: set[Connection]
    """Connections not read now (their client is ahead of its answers)."""
    timers: Deadlines[Connection]
    """The deadlines of requests still arriving, and of lingering closes."""
    write_deadlines: Deadlines[Connection]
    """The deadlines of answers not taken (flow control)."""
    closing: bool
    """The node is shutting down: answers close their connections."""

    def admit(self, conn: Connection, host: str) -> bytes | None:
        """Take ``conn`` in, or the answer that refuses it."""
        raise NotImplementedError

    def forget(self, conn: Connection) -> None:
        """``conn`` is closed, or aiohttp's: count it no more (safe to repeat)."""
        raise NotImplementedError

    def shed(self, reason: str) -> None:
        """A connection was cut for ``reason`` (counted)."""
        raise NotImplementedError

    def dropped(self, unsent: int) -> None:
        """An aborted connection dropped ``unsent`` bytes of answers."""
        raise NotImplementedError

    def let_go(self, held: Held, answer: bool) -> None:
        """Its client left: answer ``held`` at once, empty (``answer``: a
        half-close), or forget it, soon."""
        raise NotImplementedError

    def head(self, status: int, content_type: str) -> bytes:
        """The status line and fixed headers of an answer."""
        raise NotImplementedError

    def date(self) -> bytes:
        """The ``Date`` header line."""
        raise NotImplementedError

    def protocol_for(self, address: str) -> asyncio.Protocol:
        """aiohttp's protocol for a connection handed over, counted under
        ``address`` (``""``: not counted) until it closes."""
        raise NotImplementedError
