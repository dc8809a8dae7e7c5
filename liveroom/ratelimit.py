"""Sender rate limits: multi-level time-bucket windows (seed 001's method).

A window allows ``limit`` accepted sends per ``seconds``. It is counted in
buckets of ``bucket_ms`` (a tenth of windows under a minute, a sixtieth of longer
ones), so a check reads a bounded number of counters whatever the window's
length (a day-long window: 60 buckets of 24 minutes), and the window slides at
bucket granularity: a send at time ``t`` counts the buckets whose index is in
``(t // bucket_ms - buckets, t // bucket_ms]``.

The engines count these buckets under the room's keys, inside the append's one
round trip; only accepted sends count.
"""

from __future__ import annotations

from dataclasses import dataclass

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


@dataclass(frozen=True, slots=True)
class Window:
    limit: int
    """Accepted sends allowed within the window."""
    seconds: int
    """The window's length."""

    def __post_init__(self) -> None:
        if self.limit < 1 or self.seconds < 1:
            raise ValueError(f"a rate window needs a positive limit and length: {self}")

    @property
    def buckets(self) -> int:
        return 10 if self.seconds < 60 else 60

    @property
    def bucket_ms(self) -> int:
        return self.seconds * 1000 // self.buckets

    def __str__(self) -> str:
        for unit, size in reversed(_UNITS.items()):
            if self.seconds % size == 0:
                n = self.seconds // size
                return f"{self.limit}/{'' if n == 1 else n}{unit}"
        return f"{self.limit}/{self.seconds}s"  # pragma: no cover - 's' always divides


@dataclass(frozen=True, slots=True)
class RateLimits:
    """The sender limits of every room."""

    per_uid: tuple[Window, ...] = (Window(5, 1), Window(30, 60), Window(300, 3600))
    """Windows counted per (room, uid); all must allow a send."""
    room_per_second: int = 0
    """Accepted sends per second in one room, all senders together; 0 is off."""

    @property
    def off(self) -> bool:
        return not self.per_uid and not self.room_per_second


def parse_windows(text: str) -> tuple[Window, ...]:
    """``"5/s,30/m,300/h"`` (also ``10/5m``, ``1000/d``); ``""`` or ``"off"`` for none."""
    text = text.strip()
    if text in ("", "off", "none"):
        return ()
    windows = []
    for part in text.split(","):
        limit, sep, span = part.strip().partition("/")
        unit = span[-1:] if span[-1:] in _UNITS else ""
        count = span[:len(span) - len(unit)] or "1"
        if not sep or not unit or not limit.isdigit() or not count.isdigit():
            raise ValueError(f"bad rate window {part.strip()!r}: write LIMIT/[N]UNIT "
                             f"with UNIT one of s, m, h, d (e.g. 5/s, 30/m, 100/10m)")
        windows.append(Window(int(limit), int(count) * _UNITS[unit]))
    return tuple(sorted(windows, key=lambda w: w.seconds))
