"""The tier table: from a room's online count to the minimum interval between
two non-empty answers to one listener (the adaptive hold).

A listener's next answer is due ``interval + jitter * u`` after its last
non-empty one, with ``u`` in [0, 1) drawn from a hash of its uid and that
answer's time: stable across polls and nodes (every node computes the same due
time from the same signed context), different between listeners, so a cohort
answered together spreads over the jitter instead of coming back as one burst.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections.abc import Sequence
from typing import Final

from liveroom.model import same_value, value_hash
from liveroom.settings import Tier

PLAIN: Final = Tier(0, 0.0, 0.0)
"""Under the first tier: a plain long poll."""


class Pace:
    """One listener's pace in a room: its tier and when its next answer is due
    (one is made per poll: a slotted value class, docs/development.md,
    "Compiled modules")."""

    __slots__ = ("due_ms", "interval_ms", "last_ms", "tier")

    def __init__(self, tier: Tier, last_ms: int, due_ms: int, interval_ms: int) -> None:
        self.tier = tier
        self.last_ms = last_ms
        """Unix ms of the listener's last non-empty answer (as its context says)."""
        self.due_ms = due_ms
        """Unix ms before which a poll with messages pending is held."""
        self.interval_ms = interval_ms
        """What the answer's ``interval_ms`` says: the longest the hold may add."""

    def _fields(self) -> tuple[Tier, int, int, int]:
        return self.tier, self.last_ms, self.due_ms, self.interval_ms

    def __eq__(self, other: object) -> bool:
        return same_value(self, other)

    def __hash__(self) -> int:
        return value_hash(self)

    def __repr__(self) -> str:
        return f"Pace({self.tier!r}, {self.last_ms}, {self.due_ms}, {self.interval_ms})"

    @property
    def plain(self) -> bool:
        return self.tier.interval <= 0


class TierTable:
    def __init__(self, tiers: Sequence[Tier]) -> None:
        self._tiers = sorted(tiers, key=lambda t: t.online)
        self._thresholds = [t.online for t in self._tiers]
        self._spans = {t: round((t.interval + t.jitter) * 1000) for t in (PLAIN, *tiers)}

    def tier(self, online: int) -> Tier:
        """The tier of a room with ``online`` listeners."""
        i = bisect_right(self._thresholds, online)
        return self._tiers[i - 1] if i else PLAIN

    def pace(self, online: int, uid: str, last_ms: int) -> Pace:
        return self.pace_in(self.tier(online), uid, last_ms)

    def pace_in(self, tier: Tier, uid: str, last_ms: int) -> Pace:
        """The pace of ``uid`` in a room of ``tier``, its last non-empty answer
        at ``last_ms``."""
        if tier.interval <= 0:
            return Pace(tier, last_ms, last_ms, 0)
        offset = tier.interval
        if tier.jitter:
            # crc32 is stable across processes (``hash`` is salted per process).
            u = zlib.crc32(f"{uid}\x00{last_ms}".encode()) / 2**32
            offset += tier.jitter * u
        return Pace(tier, last_ms, last_ms + round(offset * 1000), self._spans[tier])
