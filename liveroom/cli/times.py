"""Times and durations as the commands read and print them: the durations of
mutes, bans and slow mode (``30s``, ``10m``, ``1h30m``), and the server's
times in UTC."""

from __future__ import annotations

import re
import time
from typing import Any

import click

MODERATION_SECONDS_MAX = 30 * 86_400
"""The longest mute, ban or slow mode (the server's and the store's limit)."""
_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", re.ASCII)


def seconds_of(text: str) -> int | None:
    """The seconds ``text`` spells: plain seconds (``90``), or numbers with a
    unit each, largest first (``30s``, ``10m``, ``2h``, ``1d``, ``1h30m``);
    ``None`` when it spells no duration."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+", text, re.ASCII):
        return int(text)
    found = _DURATION.fullmatch(text)
    if not text or found is None:
        return None
    return sum(int(n) * size for n, (_, size) in zip(found.groups(), _UNITS, strict=True)
               if n)


def duration_text(seconds: int) -> str:
    """``seconds`` as :func:`seconds_of` reads it back: ``90`` is ``1m30s``."""
    parts = []
    for unit, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


class Duration(click.types.IntParamType):
    """A duration (:func:`seconds_of`) from ``low`` seconds to 30 days (a
    whole number of seconds, as ``click.INT`` makes one)."""

    name = "duration"

    def __init__(self, low: int) -> None:
        self.low = low

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        seconds = value if isinstance(value, int) and not isinstance(value, bool) \
            else seconds_of(str(value))
        if seconds is None:
            self.fail(f"{value!r} is not a duration: give seconds (90) or numbers with a "
                      f"unit, s, m, h or d (30s, 10m, 2h, 1d, 1h30m)", param, ctx)
        if not self.low <= seconds <= MODERATION_SECONDS_MAX:
            self.fail(f"{value!r} is out of range: from {duration_text(self.low)} to "
                      f"{duration_text(MODERATION_SECONDS_MAX)}", param, ctx)
        return seconds


def when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
