"""The listener routes and their queries, read from the raw request target.

The front serves three routes itself, ``GET /v1/rooms/{room}/poll``,
``POST /v1/rooms/{room}/messages`` and ``POST /v1/rooms/{room}/likes``; any
other target goes to aiohttp. Both
readers (the front's :func:`route` and :func:`parse_query`, aiohttp's router)
must agree on what a target names, so these read it as aiohttp does: the room
percent-decoded, ``+`` a space in the query, the first of repeated names wins.
"""

from __future__ import annotations

from urllib.parse import unquote, unquote_plus

POLL, SEND, LIKE = 1, 2, 3
"""The kinds of request the front serves (:func:`route`'s first item)."""


def route(url: bytes) -> tuple[int, str, str] | None:
    """``(POLL, SEND or LIKE, room, raw query)`` of a listener route, else None."""
    # Offsets into the URL rather than partitions: fewer objects per request.
    if not url.startswith(b"/v1/rooms/"):
        return None
    mark = url.find(b"?")
    end = len(url) if mark < 0 else mark
    slash = url.find(b"/", 10, end)
    if slash <= 10:
        return None
    tail = end - slash
    if tail == 5 and url.startswith(b"/poll", slash):
        kind = POLL
    elif tail == 9 and url.startswith(b"/messages", slash):
        kind = SEND
    elif tail == 6 and url.startswith(b"/likes", slash):
        kind = LIKE
    else:
        return None
    name = url[10:slash].decode("latin-1")
    if "%" in name:
        name = unquote(name)
    return kind, name, "" if mark < 0 else url[mark + 1:].decode("latin-1")


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
