"""Who may hold a connection to the front: the node's cap and the cap per
client address.

At most ``connections_max`` open connections per node, those handed to
aiohttp included (default: the open-file limit less a reserve,
:func:`~.limits.connection_capacity`). At the cap, the connection that
has gone longest without a valid request (an answer under 400, or a poll
held) is aborted to make room; only when there is none is the new one
answered 503 ``overloaded`` with ``Retry-After`` and closed. At most
``connections_per_ip`` come from one client address
(:func:`~proxy.addresses.address_key`), handed ones included until aiohttp closes
them; one more is answered the same way. A connection from one of
``trusted_proxies`` is not counted under the proxy's address but under the
client each of its requests names in ``X-Forwarded-For``
(:func:`~proxy.addresses.forwarded_client`); over its cap, that request is
answered 503 and the connection closes. The count is a dict entry per
address, updated at each accept and close.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Protocol

from ..addresses import address_key, forwarded_client
from ..reply import error_reply
from .limits import FrontLimits, connection_capacity


class Seated(Protocol):
    """What admission keeps on a connection it counts."""

    address: str
    """The client address it is counted under (``""``: not counted)."""
    proxied: bool
    """From a trusted proxy: its requests name the client."""
    forwarded: bytes | None
    """The ``X-Forwarded-For`` its address was last taken from."""
    unproven: bool
    """Open, and no valid request yet (first closed at the cap)."""

    def abort(self) -> None: ...


class Admission:
    """The caps of one node's front, and the books they are kept in."""

    def __init__(self, limits: FrontLimits, shed: Callable[[str], None],
                 on_refused: Callable[[], None] | None = None) -> None:
        self.connections_max = limits.connections_max or connection_capacity()
        self.connections_per_ip = limits.connections_per_ip
        self._shed = shed
        self._trusted = tuple(ipaddress.ip_network(proxy, strict=False)
                              for proxy in limits.trusted_proxies)
        self.per_address: dict[str, int] = {}
        """Open connections per client address (those counted: with a cap)."""
        self.unproven: OrderedDict[Seated, None] = OrderedDict()
        """Connections that have had no valid request yet, oldest first: the
        first closed at the cap."""
        self.refused = 0
        """Connections refused past ``connections_max`` since start."""
        self.on_refused = on_refused
        """Called for each connection refused (a metric)."""
        self.refused_per_ip = 0
        """Connections (or proxied requests) refused past ``connections_per_ip``."""
        self.evicted = 0
        """Connections closed at the cap to make room, never having had a valid request."""

    def admit(self, conn: Seated, host: str, open_now: int) -> bytes | None:
        """Take ``conn`` (from ``host``, ``""`` if unknown; ``open_now``
        connections are open) in, or return the answer that refuses it: past
        ``connections_per_ip`` for its address, or past ``connections_max``
        when no connection that never had a valid request can be closed to
        make room (the oldest such is). A trusted proxy's connection is
        counted under the client its requests name."""
        address = ""
        if self.connections_per_ip and host:
            if self.trusts(host):
                conn.proxied = True
            else:
                address = address_key(host)
                if self.per_address.get(address, 0) >= self.connections_per_ip:
                    self.refused_per_ip += 1
                    self._shed("per_ip")
                    return _CROWDED
        if open_now >= self.connections_max and not self._make_room():
            self.refused += 1
            if self.on_refused is not None:
                self.on_refused()
            return _FULL
        if address:
            self.per_address[address] = self.per_address.get(address, 0) + 1
            conn.address = address
        conn.unproven = True
        self.unproven[conn] = None
        return None

    def readdress(self, conn: Seated, forwarded: bytes | None) -> bool:
        """Count a trusted proxy's connection under the client its request
        names in ``X-Forwarded-For`` (none: not counted); False when that
        client has ``connections_per_ip`` already."""
        if forwarded == conn.forwarded:
            return True  # the header of its last request: the same client, counted
        conn.forwarded = forwarded
        address = forwarded_client(forwarded, self.trusts) if forwarded else ""
        if address == conn.address:
            return True
        if conn.address:
            self.release(conn.address)
            conn.address = ""
        if not address:
            return True
        if self.per_address.get(address, 0) >= self.connections_per_ip:
            self.refused_per_ip += 1
            self._shed("per_ip")
            return False
        self.per_address[address] = self.per_address.get(address, 0) + 1
        conn.address = address
        return True

    def forget(self, conn: Seated) -> None:
        """``conn`` is closed, or aiohttp's: count it no more (safe to repeat)."""
        if conn.unproven:
            conn.unproven = False
            self.unproven.pop(conn, None)
        address = conn.address
        if address:
            conn.address = ""
            self.release(address)

    def release(self, address: str) -> None:
        """One connection from ``address`` closed."""
        left = self.per_address[address] - 1
        if left:
            self.per_address[address] = left
        else:
            del self.per_address[address]

    def prove(self, conn: Seated) -> None:
        """``conn`` had a valid request: no longer the first closed at the cap."""
        conn.unproven = False
        self.unproven.pop(conn, None)

    def trusts(self, host: str) -> bool:
        """Whether ``host`` is one of the trusted proxies."""
        if not self._trusted:
            return False
        try:
            ip = ipaddress.ip_address(host.partition("%")[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self._trusted)

    def _make_room(self) -> bool:
        """At the cap: close the connection that has gone longest without a
        valid request, if there is one (a flood of refused requests must not
        keep listeners out)."""
        if not self.unproven:
            return False
        conn, _ = self.unproven.popitem(last=False)
        conn.unproven = False
        self.evicted += 1
        self._shed("evicted")
        conn.abort()
        return True


def _refusal(message: str) -> bytes:
    """A 503 ``overloaded`` answer to a connection refused at once (``%s``:
    where its Date header goes)."""
    body = b'{"error":"overloaded","message":"%s"}' % message.encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nServer: liveroom\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n%%sRetry-After: 1\r\n"
            b"Connection: close\r\n\r\n%s" % (len(body), body))


_FULL: Final = _refusal("too many connections to this node: retry")
_CROWDED_MESSAGE: Final = "too many connections from your address to this node: retry"
_CROWDED: Final = _refusal(_CROWDED_MESSAGE)
CROWDED_REPLY: Final = error_reply(503, "overloaded", _CROWDED_MESSAGE, retry_after=1)
"""The answer to a proxied request whose client has ``connections_per_ip``."""
