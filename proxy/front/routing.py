"""The listener routes and their queries, read from the raw request target.

The front serves three routes itself, ``GET /v1/rooms/{room}/poll``,
``POST /v1/rooms/{room}/messages`` and ``POST /v1/rooms/{room}/likes``; any
other target goes to aiohttp. Both
readers (the front's :func:`route` and :func:`parse_query`, aiohttp's router)
must agree on what a target names, so these read it as aiohttp does: the room
percent-decoded, ``+`` a space in the query, the first of repeated names wins.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import unquote, unquote_plus

POLL: Final = 1
SEND: Final = 2
LIKE: Final = 3
"""The kinds of request the front serves (:func:`route`'s first item)."""


def route(url: bytes) -> tuple[int, str, str] | None:
    """``(POLL, SEND or LIKE, room, raw query)`` of a listener route, else None."""
    # One decode (latin-1 maps each byte to one character), then offsets into
    # the text: str's find and startswith are compiled to direct calls where
    # bytes' find is a method lookup, and offsets make fewer objects than
    # partitions.
    return route_text(url.decode("latin-1"))


def route_text(text: str) -> tuple[int, str, str] | None:
    """:func:`route` of a target already decoded as latin-1."""
    if not text.startswith("/v1/rooms/"):
        return None
    mark = text.find("?")
    end = len(text) if mark < 0 else mark
    slash = text.find("/", 10, end)
    if slash <= 10:
        return None
    tail = end - slash
    if tail == 5 and text.find("/poll", slash, end) == slash:
        kind = POLL
    elif tail == 9 and text.find("/messages", slash, end) == slash:
        kind = SEND
    elif tail == 6 and text.find("/likes", slash, end) == slash:
        kind = LIKE
    else:
        return None
    name = text[10:slash]
    if "%" in name:
        name = unquote(name)
    return kind, name, "" if mark < 0 else text[mark + 1:]


def parse_query(query: str) -> dict[str, str]:
    """A query string as aiohttp reads it: ``+`` is a space, percent-escapes
    are UTF-8, the first of repeated names wins."""
    found: dict[str, str] = {}
    if not query:
        return found
    escaped = "%" in query or "+" in query
    for part in query.split("&"):
        if not part:
            continue
        # find and slices rather than partition: no tuple per parameter.
        at = part.find("=")
        if at < 0:
            name, value = part, ""
        else:
            name, value = part[:at], part[at + 1:]
        if escaped:
            name, value = unquote_plus(name), unquote_plus(value)
        found.setdefault(name, value)
    return found
