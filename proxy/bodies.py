"""A request's body as an aiohttp route reads it: to its end, within a bound
and a time, whatever the application's ``client_max_size`` (which is a
send's: the routes that take larger bodies, an operator's word list, read
them through here)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from liveroom.errors import BadRequest, LiveroomError, RequestTimeout


async def read_body(request: web.Request, limit: int, within: float,
                    too_large: Callable[[], LiveroomError]) -> bytes:
    """The body of ``request``, at most ``limit`` bytes (past them,
    ``too_large()`` is raised before any byte is read when its
    ``Content-Length`` says so, else as soon as they arrive), received
    within ``within`` seconds (else 408); 400 for a body shorter than its
    ``Content-Length`` said."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large()
    # ``read(n)`` returns what has arrived so far, not n bytes: read until
    # the end of the body (a chunked body comes in pieces of any size).
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(within):
            while chunk := await request.content.read(limit + 1 - size):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise too_large()
    except TimeoutError:
        raise RequestTimeout("request body not received in time") from None
    length = request.content_length
    if length is not None and size < length:
        raise BadRequest("request body ended early")
    return b"".join(chunks)
