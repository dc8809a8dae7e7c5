"""Log lines a client can trigger, at a bounded rate.

A malformed request, a store that went away, a corrupt entry: each is worth
one line in the log, not one per request (a hostile client, or every
listener of a node while Redis restarts, would otherwise fill the disk and
spend the CPU on tracebacks). :class:`Throttled` writes the first line of a
kind, then at most one every ``every`` seconds, saying how many it left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

MAX_KINDS = 1024
"""Kinds remembered at once (kinds are a handful of fixed names; the bound
only guards against a caller that makes them from input)."""


class Throttled:
    """One logger's warnings, at most one per kind per ``every`` seconds."""

    def __init__(self, logger: logging.Logger, every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.every = every
        self._clock = clock
        self._seen: dict[str, tuple[float, int]] = {}

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless a line of ``kind`` went out less than
        ``every`` seconds ago; return whether it was logged."""
        now = self._clock()
        last, left_out = self._seen.get(kind, (float("-inf"), 0))
        if now - last < self.every:
            self._seen[kind] = (last, left_out + 1)
            return False
        if left_out:
            msg += " (and %d more like it in the last %.0f s)"
            args = (*args, left_out, now - last)
        if len(self._seen) >= MAX_KINDS and kind not in self._seen:
            self._seen.clear()
        self._seen[kind] = (now, 0)
        self.logger.warning(msg, *args)
        return True


class ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server logger, quiet: what it would log as an exception with
    a traceback (a malformed request, a body it could not read) becomes one
    throttled warning line naming the error."""

    def __init__(self, logger: logging.Logger, every: float = 10.0) -> None:
        super().__init__(logger, {})
        self.throttled = Throttled(logger, every)

    def exception(self, msg: object, *args: object, exc_info: Any = True,
                  **kwargs: Any) -> None:
        self.error(msg, *args, exc_info=exc_info, **kwargs)

    def error(self, msg: object, *args: object, exc_info: Any = None,
              **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        text = str(msg) % args if args else str(msg)
        if exc is None:
            self.throttled.warning(text, "%s", text)
            return
        detail = " ".join(str(exc).split())[:200]
        self.throttled.warning(type(exc).__name__, "%s: %s: %s", text,
                               type(exc).__name__, detail)
