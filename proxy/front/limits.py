"""The front's bounds: what one request, one connection and one node may take.

Every limit a hostile client could push against is here, with what it costs
when it is reached (docs/operations.md gives the settings behind them).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Final

from liveroom.errors import TooLarge, UnsupportedMedia
from liveroom.model import check_name
from liveroom.settings import DEFAULTS

CONNECTION_RESERVE: Final = 64
"""Open files a node keeps beyond its connections (at least; a hundredth of a
large limit): store connections, log files, the metrics directory."""
WRITE_HIGH: Final = 64 * 1024
"""The transport's high-water mark (asyncio's and uvloop's default, left as
it is): past it, writing pauses (and reading with it) and the write deadline
runs; below a quarter of it, both resume."""
UNSENT_MAX: Final = 1024 * 1024
"""Bytes of answers written but not yet taken by the client's socket, at
most (unless a node's answers may be larger, see
:attr:`FrontLimits.unsent_max`). Flow control keeps a connection to
:data:`WRITE_HIGH` plus one answer; past this bound it is aborted at once,
whatever its write deadline."""


@dataclass(frozen=True, slots=True)
class FrontLimits:
    """The bounds of one front. Those that are settings take the setting's
    name and its declared default (``liveroom.settings``); the rest are the
    front's own."""

    max_url: int = 8192
    """Bytes of a request's URL (414 beyond)."""
    max_headers: int = 100
    max_header_bytes: int = 16 * 1024
    """Header lines and their bytes (431 beyond)."""
    header_timeout: float = DEFAULTS.header_timeout
    """Seconds from a request's first byte to the end of its head."""
    request_timeout: float = DEFAULTS.request_timeout
    """Seconds from a request's head to the end of its body (408 beyond)."""
    keepalive_timeout: float = DEFAULTS.keepalive_timeout
    """Seconds an idle keep-alive connection stays open."""
    max_pipelined: int = 4
    """Complete requests waiting their turn; past them, what was read stays
    unparsed and reading pauses. Parsed requests cost about 700 bytes of small
    objects each (the rest of a read waits as one buffer): 16 per connection
    let 1 000 clients that never read leave a node 10 MiB bigger after they
    were cut (Python's allocator keeps an arena while one object in it
    lives); 4 leave 4.5 MiB (``loadtest/bench_hostile.py``). Real clients do
    not pipeline further than that."""
    max_request_bytes: int = 128 * 1024
    """Bytes read for one request, head, body and framing together (413 and
    close beyond): bounds what chunk extensions and padding can make a node
    read, since llhttp reports neither."""
    connections_max: int = DEFAULTS.connections_max
    """Open connections per node (0: :func:`connection_capacity`)."""
    connections_per_ip: int = DEFAULTS.connections_per_ip
    """Open connections per client address (an IPv6 one: its /64); 0: no limit."""
    trusted_proxies: tuple[str, ...] = DEFAULTS.trusted_proxies
    """Addresses and networks whose connections name their client in
    ``X-Forwarded-For`` (and are not capped themselves)."""
    write_timeout: float = DEFAULTS.write_timeout
    """Seconds a connection's unsent answers may stay above the low-water
    mark (or unsent at all once it closes) before it is aborted."""
    unsent_max: int = UNSENT_MAX
    """Bytes of unsent answers past which a connection is aborted at once."""
    send_buffer: int = DEFAULTS.send_buffer
    """``SO_SNDBUF`` of each connection's socket (0: the kernel's own, which
    grows to ``tcp_wmem``'s largest for a client that does not read)."""


@dataclass(frozen=True, slots=True)
class HeadRules:
    """What a route whose requests carry a body accepts of a request's head,
    checked before its body is read (on the front and on aiohttp alike): a
    valid room name, a body not compressed, at most :attr:`body_limit`
    bytes. Each such route's handler declares its own."""

    body_limit: int
    """Most bytes a request's body may have (413 beyond)."""

    def check_head(self, room: str, content_encoding: str | None,
                   content_length: int | None) -> str:
        """The room, once the request's head is acceptable (raises a 4xx)."""
        check_name("room", room)
        if (content_encoding or "identity").lower() != "identity":
            raise UnsupportedMedia("compressed bodies are not accepted")
        if content_length is not None and content_length > self.body_limit:
            raise self.too_large()
        return room

    def too_large(self) -> TooLarge:
        return TooLarge(f"request body is larger than {self.body_limit} bytes")


def connection_capacity() -> int:
    """Connections this process may keep open: its open-file limit less the
    reserve."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, soft - max(CONNECTION_RESERVE, soft // 100))
