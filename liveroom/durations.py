"""Durations as people write them: plain seconds (``90``) or numbers with a
unit each, largest first (``30s``, ``10m``, ``2h``, ``1d``, ``1h30m``). The
commands read mutes, bans and slow mode this way (:mod:`liveroom.cli.times`),
and so do settings that are durations (``--webhook-retry-for 24h``)."""

from __future__ import annotations

import re

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
