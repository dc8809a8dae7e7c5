"""The request headers the front reads, as codes: one dictionary lookup a
header, no lowercase copy for the usual spellings.

Both readers of a request use them: llhttp's callbacks (:mod:`.reader`) by
the bytes of a name, the whole read (:mod:`.whole`) by its text.
"""

from __future__ import annotations

from typing import Final

AUTHORIZATION: Final = 1
CONTENT_TYPE: Final = 2
CONTENT_ENCODING: Final = 4
CONTENT_LENGTH: Final = 8
TRANSFER_ENCODING: Final = 16
EXPECT: Final = 32
ONCE: Final = AUTHORIZATION | CONTENT_TYPE | CONTENT_ENCODING | CONTENT_LENGTH \
    | TRANSFER_ENCODING | EXPECT
"""Headers a request may carry once (their bits): a second copy is a 400, so
that no two readers of the same bytes (the front, aiohttp, a proxy in front)
can take different ones."""
ACCEPT: Final = 64
FORWARDED: Final = 128
OTHER: Final = 0
HEADERS: Final = {b"authorization": AUTHORIZATION, b"content-type": CONTENT_TYPE,
                  b"content-encoding": CONTENT_ENCODING, b"content-length": CONTENT_LENGTH,
                  b"transfer-encoding": TRANSFER_ENCODING, b"expect": EXPECT,
                  b"accept": ACCEPT, b"x-forwarded-for": FORWARDED}
"""The headers the front reads, by their lowercase names."""
SPELLED: Final = {**HEADERS, **{name.title(): code for name, code in HEADERS.items()},
                  b"X-Forwarded-For": FORWARDED, b"Host": OTHER, b"host": OTHER,
                  b"User-Agent": OTHER, b"Connection": OTHER, b"Accept-Encoding": OTHER,
                  b"Accept-Language": OTHER, b"Origin": OTHER, b"Referer": OTHER}
"""The same and common others as clients spell them: one lookup, no
lowercase copy, for most headers."""

KEEP_ALIVE: Final = -2
"""``Connection``: a whole read takes it only as ``keep-alive``."""
DECLINE: Final = -3
"""A header a whole read leaves to llhttp (it frames or upgrades by it)."""
TEXT_LOWER: Final = {
    **{name.decode(): code for name, code in HEADERS.items()},
    "connection": KEEP_ALIVE, "proxy-connection": DECLINE, "upgrade": DECLINE,
    "transfer-encoding": DECLINE, "content-encoding": DECLINE, "expect": DECLINE}
"""The headers a whole read acts on, by their lowercase names (llhttp reads
``Proxy-Connection`` as ``Connection``)."""
TEXT_NAMES: Final = {
    **{name.decode(): code for name, code in SPELLED.items()},
    **{name.title(): code for name, code in TEXT_LOWER.items()}, **TEXT_LOWER}
"""The same, as clients spell them, and common others: one lookup, no
lowercase copy, for most headers."""
