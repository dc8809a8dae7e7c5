"""Flow control of one front connection: a client that does not read its
answers is not read either, and has ``write_timeout`` to take them.

As uvicorn's ``FlowControl``: the transport calls ``pause_writing`` past its
high-water mark (:data:`~.limits.WRITE_HIGH`) and ``resume_writing``
below a quarter of it; while writing is paused the connection answers
nothing more and reads nothing more, and the write deadline runs. Reading
also pauses on its own while a client is ahead of its answers
(``max_pipelined`` requests wait). The front keeps the connections whose
reading is paused in one set (its sweep asks ``poll(2)`` about them: a paused
transport sees no FIN) and their write deadlines in one
:class:`~proxy.deadlines.Deadlines`: never a timer per connection.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from ..deadlines import Deadlines

C = TypeVar("C")


class FlowControl(Generic[C]):
    """Reading and writing, paused or not, for one connection (``owner`` in
    each call: kept out of this object, which the connection holds, so that
    the two make no reference cycle and go as soon as the connection does)."""

    __slots__ = ("_deadlines", "_paused", "_timeout", "reading_paused", "write_due",
                 "writing_paused")

    def __init__(self, paused: set[C], deadlines: Deadlines[C], write_timeout: float) -> None:
        self._paused = paused
        self._deadlines = deadlines
        self._timeout = write_timeout
        self.reading_paused = False
        self.writing_paused = False
        self.write_due = -1
        """Key of the owner's write deadline in ``deadlines`` (-1: none)."""

    def pause_reading(self, owner: C, transport: asyncio.Transport) -> None:
        if not self.reading_paused:
            self.reading_paused = True
            self._paused.add(owner)
            transport.pause_reading()

    def resume_reading(self, owner: C, transport: asyncio.Transport) -> None:
        if self.reading_paused:
            self.reading_paused = False
            self._paused.discard(owner)
            transport.resume_reading()

    def arm_write(self, owner: C) -> None:
        """The client has ``write_timeout`` from now to take what was written
        (kept if already running)."""
        if self.write_due < 0:
            self.write_due = self._deadlines.add(
                owner, asyncio.get_running_loop().time() + self._timeout)

    def disarm_write(self, owner: C) -> None:
        if self.write_due >= 0:
            self._deadlines.discard(owner, self.write_due)
            self.write_due = -1
