"""Times and durations as the commands read and print them: the durations of
mutes, bans and slow mode (``30s``, ``10m``, ``1h30m``), and the server's
times in UTC."""

from __future__ import annotations

import time
from typing import Any

import click

from ..durations import duration_text, seconds_of

__all__ = ["MODERATION_SECONDS_MAX", "Duration", "duration_text", "seconds_of", "when"]

MODERATION_SECONDS_MAX = 30 * 86_400
"""The longest mute, ban or slow mode (the server's and the store's limit)."""


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
