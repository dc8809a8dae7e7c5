"""The hand-over of a front connection to aiohttp (the rest of the API).

A connection whose request is not a listener route (:mod:`.routing`) goes to
the protocol aiohttp's low-level server makes (:mod:`.site`), with every
byte read since that request began, and the front leaves it: later polls on
it are served by aiohttp, through the same :mod:`proxy.polls.poll`. It stays counted
under its client address until aiohttp closes it (the ``on_lost`` the
protocol was made with).
"""

from __future__ import annotations

import asyncio


def hand_over(transport: asyncio.Transport, protocol: asyncio.Protocol, raw: list[bytes],
              reading_paused: bool) -> None:
    """Give ``transport`` to ``protocol`` as a new connection that has just
    read ``raw``; reading resumes if the front had paused it."""
    transport.set_protocol(protocol)
    protocol.connection_made(transport)
    if reading_paused:
        transport.resume_reading()
    protocol.data_received(b"".join(raw))
