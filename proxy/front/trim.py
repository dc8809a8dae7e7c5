"""Handing the memory of aborted connections back to the system.

glibc's allocator keeps what it freed, so a node that cut off a crowd of
clients that did not read would keep their buffers' worth of RSS for good
(measured: 1 000 such clients, +100 MiB without). The front counts the
unsent bytes its aborted connections dropped; past :data:`TRIM_AFTER`, its
next sweep calls ``malloc_trim(0)`` (a few ms for a heap of hundreds of
MiB), and so does the first sweep that finds nothing more dropped (the crowd
has left). Python's own small-object arenas are not glibc's: one still
holding a live object stays, so a node keeps a few MiB of a crowd's small
objects (docs/performance.md, "Clients that never read").
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Final

TRIM_AFTER: Final = 1024 * 1024
"""Bytes of unsent answers dropped by aborted connections after which the
next sweep hands the memory freed back to the system."""


def _trimmer() -> Callable[[], object] | None:
    """``malloc_trim(0)`` of the C library, where it has one (glibc).
    Looked up at the first trim, not at import: ``find_library`` runs a
    subprocess (about 12 ms) and ctypes takes 1 ms to import, which a node's
    start-up need not wait for."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
        except OSError:
            return None
    trim = getattr(libc, "malloc_trim", None)
    return None if trim is None else partial(trim, 0)


class Trim:
    """Dropped bytes counted, and the trim they call for."""

    def __init__(self) -> None:
        self.dropped = 0
        """Unsent bytes aborted connections dropped since memory was last
        handed back."""
        self._seen = 0
        """``dropped`` at the last sweep."""
        self._trim: list[Callable[[], object] | None] = []
        """The trimmer once looked up (empty: not yet)."""

    def due(self) -> None:
        """Hand memory back if :data:`TRIM_AFTER` bytes were dropped since the
        last time, or if some were and none since the last sweep (a crowd cut
        off has finished leaving: what it left is handed back too)."""
        dropped = self.dropped
        quiet = dropped > 0 and dropped == self._seen
        self._seen = dropped
        if dropped < TRIM_AFTER and not quiet:
            return
        self.dropped = self._seen = 0
        if not self._trim:
            self._trim.append(_trimmer())
        trim = self._trim[0]
        if trim is not None:
            trim()
