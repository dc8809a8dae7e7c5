"""The front's routing table, and the queries of its routes, read from the
raw request target.

The front serves the routes of :data:`ROUTES` itself (``GET
/v1/rooms/{room}/poll``, ``POST /v1/rooms/{room}/messages`` and ``POST
/v1/rooms/{room}/likes``), each through the handler the role built for it
(:class:`~.handler.Handler`); any other target goes to aiohttp. Adding a
route is a row here and its handler in ``proxy/role.py``: nothing in the
connection or the reader. Both readers (the front's :func:`route` and
:func:`parse_query`, aiohttp's router) must agree on what a target names, so
these read it as aiohttp does: the room percent-decoded, ``+`` a space in the
query, the first of repeated names wins.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import unquote, unquote_plus

ROUTES: Final = (("/poll", b"GET"), ("/messages", b"POST"), ("/likes", b"POST"))
"""The routing table: each route's path after ``/v1/rooms/{room}`` and its
method. A route's kind (:func:`route`'s first item) is its place here,
counted from 1 (0: no route). A ``GET`` takes no body; a ``POST``'s head is
checked by its handler's :class:`~.limits.HeadRules` before its body is read."""
POLL: Final = 1
SEND: Final = 2
LIKE: Final = 3
"""The kinds of request the front serves (their rows of :data:`ROUTES`)."""
KINDS: Final = len(ROUTES) + 1
"""Size of a table indexed by kind (0 included)."""
_PATHS: Final = tuple(path for path, _ in ROUTES)
METHODS: Final = (b"", *(method for _, method in ROUTES))
"""Each kind's method (index 0: none)."""


def route(url: bytes) -> tuple[int, str, str] | None:
    """``(kind, room, raw query)`` of a route of :data:`ROUTES`, else None."""
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
    kind = 0
    for at in range(len(_PATHS)):
        path = _PATHS[at]
        if len(path) == tail and text.startswith(path, slash):
            kind = at + 1
            break
    if kind == 0:
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
    # Offsets into the query rather than split and partition: no list, no
    # string per parameter, no tuple; only the names and values are made.
    start, size = 0, len(query)
    while start <= size:
        end = query.find("&", start)
        if end < 0:
            end = size
        if end > start:
            at = query.find("=", start, end)
            if at < 0:
                name, value = query[start:end], ""
            else:
                name, value = query[start:at], query[at + 1:end]
            if escaped:
                name, value = unquote_plus(name), unquote_plus(value)
            found.setdefault(name, value)
        start = end + 1
    return found
