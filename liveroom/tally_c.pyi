"""The types of :mod:`liveroom.tally_c`, a sender's rate tally at C level
(``tally_c.pyx``, built by Cython where ``pip install .`` compiles)."""

from collections.abc import Sequence

from .ratelimit import Window

class CTally:
    expires_ms: int
    def refused(self, windows: Sequence[Window], now_ms: int,
                held: int = 0) -> tuple[Window, int] | None: ...
    def count(self, windows: Sequence[Window], now_ms: int) -> None: ...
    def counts(self) -> dict[tuple[int, int], int]: ...
