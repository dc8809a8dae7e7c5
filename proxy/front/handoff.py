"""The hand-over of a front connection to aiohttp (the rest of the API), and
what the front keeps of a connection it handed over.

A connection whose request is not a listener route (:mod:`.routing`) goes to
the protocol aiohttp's low-level server makes (:mod:`.site`), with every
byte read since that request began, and the front stops reading it: later
polls on it are served by aiohttp, through the same :mod:`proxy.polls.poll`.
The front still keeps it in its books until it closes (:class:`Handed`):
counted (under its client address too) against the caps, closed to make room
at a cap when it is idle (:mod:`.admission`), and watched by the sweep while
its reading is paused (a client gone then is found as on the front's own).
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Handed(Protocol):
    """A connection the front handed to aiohttp, as the front sees it
    (:class:`~.site._Handler` is one): what the admission keeps on it and
    what the sweep asks of it."""

    address: str
    """The client address it is counted under (``""``: not counted)."""
    proxied: bool
    """From a trusted proxy (never readdressed once handed over)."""
    forwarded: bytes | None
    unproven: bool
    """Idle after an answer of 400 or more: the first closed at a cap."""
    spare: bool
    """Idle after a valid answer: closed at a cap when none is unproven."""

    def abort(self) -> None:
        """Close it now to make room (it is idle): out of the front's books at
        once."""

    def fileno(self) -> int:
        """Its socket's file descriptor (-1: none any more)."""

    def hung_up(self, reset: bool) -> None:
        """Its client closed while it was not read (the front's sweep saw a
        ``reset``, else a FIN)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def data_received(self, data: bytes) -> None: ...


def hand_over(transport: asyncio.Transport, protocol: Handed, raw: list[bytes],
              reading_paused: bool, hung_up: bool) -> None:
    """Give ``transport`` to ``protocol`` as a new connection that has just
    read ``raw``; reading resumes if the front had paused it, and a client
    seen gone meanwhile (``hung_up``: its FIN) is passed on."""
    transport.set_protocol(protocol)  # type: ignore[arg-type]  # an asyncio.Protocol
    protocol.connection_made(transport)
    if reading_paused:
        transport.resume_reading()
    protocol.data_received(b"".join(raw))
    if hung_up:
        protocol.hung_up(False)
