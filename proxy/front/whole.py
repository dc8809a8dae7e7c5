"""A request read whole from one read, without llhttp: the front's fast path.

llhttp's callbacks cost more than the rest of a send, and a client waiting
for each answer sends each request in one write, so most requests arrive
whole in one read. :func:`read_whole` takes such a read as one request when
it is one plain request, whole, and nothing else; anything else is left to
llhttp (:mod:`.reader`), which stays the reference:
``tests/front/test_front_reader.py`` holds the two readings equal on generated
requests. A pure function: no state, no I/O, no clock.

The same function is written at C level in ``whole_c.pyx`` (Cython), which
``pip install .`` builds beside the modules mypyc compiles: the reader takes
that one where it is there (:func:`whole_read`), and the differential test
holds all three readings (llhttp's, this one, the C one) equal. A change
here is made there too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, TypeAlias

from liveroom.errors import LiveroomError

from .headers import (
    ACCEPT,
    AUTHORIZATION,
    CONTENT_LENGTH,
    CONTENT_TYPE,
    FORWARDED,
    KEEP_ALIVE,
    ONCE,
    OTHER,
    TEXT_LOWER,
    TEXT_NAMES,
)
from .limits import FrontLimits, HeadRules
from .request import Request
from .routing import METHODS, route_text

WholeRead: TypeAlias = Callable[[bytes, FrontLimits, Sequence[HeadRules | None], bool],
                                Request | None]
"""What :func:`read_whole` is, at either level."""

_PRINTABLE: Final = bytes(range(0x20, 0x7F))
"""Printable ASCII, the space included."""


def read_whole(data: bytes, limits: FrontLimits, heads: Sequence[HeadRules | None],
               proxied: bool) -> Request | None:
    """``data`` as one request without llhttp, when it is one plain request,
    whole, and nothing else: a ``GET`` or a ``POST`` of a front route (by
    its row of the routing table), ``HTTP/1.1``, printable ASCII, headers
    whose names are letters, digits and ``-``, a ``Content-Length`` for
    exactly the rest of the read (none on a route without a body), and
    nothing llhttp would frame differently or the reader would refuse (no
    ``Transfer-Encoding``, ``Upgrade``, ``Expect``, ``Connection`` other than
    ``keep-alive``, a header it reads given twice, a limit of ``limits``
    passed, a head its route's ``heads[kind]`` refuses). Anything else is
    None, and llhttp reads it as before: what is taken here is exactly what
    llhttp's callbacks would have given. ``proxied``: the connection is a
    trusted proxy's (``X-Forwarded-For`` is kept)."""
    head_end = data.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    # Printable ASCII and CRLFs only: once the printable bytes are taken
    # out, what is left is two bytes for each CRLF, or something else is
    # there (a control byte, DEL, a byte past ASCII, a bare CR or LF).
    head = data[:head_end]
    if len(head.translate(None, _PRINTABLE)) != 2 * head.count(b"\r\n"):
        return None
    # latin-1 maps each byte to one character: offsets in the text are
    # offsets in the bytes.
    text = head.decode("latin-1")
    line_end = text.find("\r\n")
    if line_end < 0:
        line_end = head_end
    if text.startswith("POST "):
        at, method = 5, b"POST"
    elif text.startswith("GET "):
        at, method = 4, b"GET"
    else:
        return None
    version = line_end - 9
    if text.find(" HTTP/1.1", version, line_end) != version \
            or text.find(" ", at, version) >= 0:
        return None
    if not at < version <= at + limits.max_url:
        return None
    found = route_text(text[at:version])
    if found is None:
        return None
    kind = found[0]
    if METHODS[kind] != method:
        return None  # a method the route does not take: refused the usual way
    req = Request()
    count = size = seen = 0
    pos = line_end + 2
    while pos < head_end:
        end = text.find("\r\n", pos, head_end)
        if end < 0:
            end = head_end
        colon = text.find(":", pos, end)
        if colon <= pos:
            return None
        name = text[pos:colon]
        code = TEXT_NAMES.get(name, -1)
        if code < 0:
            if not name.replace("-", "").isalnum():
                return None  # other token characters, or none: llhttp decides
            code = TEXT_LOWER.get(name.lower(), OTHER)
        start = colon + 1
        while start < end and text[start] == " ":
            start += 1
        count += 1
        size += colon - pos + end - start
        pos = end + 2
        if code == OTHER:
            continue
        if code < 0:
            if code != KEEP_ALIVE or text[start:end].lower() != "keep-alive":
                return None
            continue
        if code & ONCE:
            if seen & code:
                return None
            seen |= code
        if code == CONTENT_TYPE:
            req.content_type = text[start:end]
        elif code == CONTENT_LENGTH:
            digits = text[start:end]
            if not 0 < len(digits) <= 9 or not digits.isdigit():
                return None
            req.content_length = int(digits)
        elif code == AUTHORIZATION:
            req.authorization = data[start:end]
        elif code == ACCEPT:
            req.accept = text[start:end]
        elif code == FORWARDED:
            if proxied:
                forwarded = req.forwarded
                value = data[start:end]
                req.forwarded = value if forwarded is None else forwarded + b"," + value
        else:
            return None  # Content-Encoding, Transfer-Encoding, Expect: llhttp's way
    if count > limits.max_headers or size > limits.max_header_bytes:
        return None
    return with_body(req, data, head_end + 4, heads[kind], found, method)


def with_body(req: Request, data: bytes, body_at: int, rules: HeadRules | None,
              found: tuple[int, str, str], method: bytes) -> Request | None:
    """The end of a whole read, at either level (``whole_c.pyx`` calls it
    too): ``req``, its head read, taken with the rest of ``data`` from
    ``body_at`` as its body when its route takes one (``rules``: its head
    rules) and its ``Content-Length`` says exactly that, else None."""
    length = req.content_length
    if rules is None:
        if length or len(data) != body_at:
            return None
    else:
        if length is None or len(data) - body_at != length:
            return None
        try:
            rules.check_head(found[1], None, length)
        except LiveroomError:
            return None
        req.whole = data[body_at:]
    req.method = method
    req.kind, req.room, req.query = found
    return req


def whole_read() -> WholeRead:
    """The whole read at C level (:mod:`.whole_c`, Cython) where this
    install built it (``pip install .``), else :func:`read_whole`: the same
    function, held equal by ``tests/front/test_front_reader.py``."""
    try:
        from .whole_c import read_whole as at_c_level
    except ImportError:
        return read_whole
    return at_c_level
