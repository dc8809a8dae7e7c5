"""What the listener path answers, before any HTTP framing: a :class:`Reply`.

The front (:mod:`.front`) frames a reply with ready header bytes; aiohttp
(:mod:`.api.routes`, for connections it serves) turns it into a ``web.Response``.
Both send the same bytes in the body, so a client cannot tell which served it.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Final

import msgpack
import orjson

from liveroom.codec import JSON, MSGPACK
from liveroom.errors import LiveroomError, StoreRefused, StoreUnavailable
from liveroom.lograte import Throttled

JSON_UTF8: Final = "application/json; charset=utf-8"
"""Content type of error answers and small documents (as aiohttp's
``json_response`` labels them)."""


class Reply:
    """An answer: status, body, content type (a slotted class:
    docs/development.md, "Compiled modules")."""

    __slots__ = ("body", "content_type", "retry_after", "status")

    def __init__(self, status: int, body: bytes, content_type: str = JSON,
                 retry_after: int | None = None) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.retry_after = retry_after
        """Whole seconds for a ``Retry-After`` header."""

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body!r}, {self.content_type!r})"


def error_reply(status: int, code: str, message: str,
                retry_after: float | None = None) -> Reply:
    """``{"error", "message"}``, always JSON. ``Retry-After`` is whole seconds,
    rounded up, so a client never comes back early."""
    body = json.dumps({"error": code, "message": message}).encode()
    return Reply(status, body, JSON_UTF8,
                 max(1, math.ceil(retry_after)) if retry_after else None)


STORE_UNAVAILABLE: Final = "store unavailable"
"""What a 503 of the store says to a client; the detail (which store, where,
what failed) goes to the log, once in a while."""

_store_log: Final = Throttled(logging.getLogger("liveroom.store"))


def failure_reply(exc: LiveroomError) -> Reply:
    message = exc.message
    if isinstance(exc, StoreRefused):
        message = "internal error"  # logged where it was raised
    elif isinstance(exc, StoreUnavailable):
        _store_log.warning("unavailable", "answered 503: %s", message)
        message = STORE_UNAVAILABLE
    return error_reply(exc.status, exc.code, message,
                       exc.retry_after if exc.temporary else None)


INTERNAL: Final = error_reply(500, "internal", "internal error")


def answer_to(exc: Exception, log: logging.Logger, what: str, *args: object) -> Reply:
    """The answer to a request whose handling raised ``exc`` (call it while
    handling it): a :class:`LiveroomError`'s own 4xx or 503, else a 500 with
    the traceback logged as ``what % args`` (a bug, not the client's fault)."""
    if isinstance(exc, LiveroomError):
        return failure_reply(exc)
    log.exception(what, *args)
    return INTERNAL


def document_reply(doc: dict[str, object], *, use_msgpack: bool, status: int = 200) -> Reply:
    """A small document (a send's answer, stats) in the format asked for."""
    if use_msgpack:
        return Reply(status, msgpack.packb(doc), MSGPACK)
    return Reply(status, orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS), JSON_UTF8)
