"""Who may hold a connection to the front: the node's cap and the cap per
client address, and which connection goes first when one is reached.

At most ``connections_max`` open connections per node, those handed to
aiohttp included (default: the open-file limit less a reserve,
:func:`~.limits.connection_capacity`); at most ``connections_per_ip`` from
one client address (:func:`~proxy.addresses.address_key`), handed ones
included. At either cap, one open connection within it makes room for the
new one, in this order:

1. the one longest **unproven**: on the front, no valid request yet (an
   answer under 400, or a poll held); handed to aiohttp, idle after an
   answer of 400 or more (a refused request, a 404);
2. else the one handed to aiohttp longest **spare**: idle (a keep-alive
   between two requests: none queued, none being answered) after a valid
   answer (``GET /healthz``, say).

A front connection is aborted (a reset); a handed one is closed as
aiohttp's keep-alive timeout closes it (a FIN after its last answer, or a
reset if the client has not taken it). Only when there is none is the new
connection answered 503 ``overloaded`` with ``Retry-After`` and closed: a
request being answered is never cut, nor a listener that had one valid
request on the front. So a flood of refused requests, silent connections or
keep-alives on other routes cannot keep listeners out.

A connection from one of ``trusted_proxies`` is not counted under the
proxy's address but under the client each of its requests names in
``X-Forwarded-For`` (:func:`~proxy.addresses.forwarded_client`); over that
client's cap (with none of its connections to close), that request is
answered 503 and the connection closes.

The books are a dict entry per address (the count) and, for the
connections that may be closed, one ordered dict per order above for the
node and for each address that has such a connection: taking a connection
in, marking it proven, idle or busy, and choosing the one to close are each
O(1).
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

from ..addresses import address_key, forwarded_client
from ..reply import error_reply
from .handoff import Handed
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
    """In the books of the first closed at a cap (see the module's docstring)."""

    def abort(self) -> None: ...


S = TypeVar("S", bound=Seated)


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
        """Connections unproven (see the module's docstring), oldest first:
        the first closed at the cap."""
        self.spare: OrderedDict[Handed, None] = OrderedDict()
        """Connections handed to aiohttp, idle after a valid answer, longest
        idle first: closed at the cap when no connection is unproven."""
        self._unproven_at: dict[str, OrderedDict[Seated, None]] = {}
        """:attr:`unproven`, for each address that has one."""
        self._spare_at: dict[str, OrderedDict[Handed, None]] = {}
        """:attr:`spare`, for each address that has one."""
        self.refused = 0
        """Connections refused past ``connections_max`` since start."""
        self.on_refused = on_refused
        """Called for each connection refused (a metric)."""
        self.refused_per_ip = 0
        """Connections (or proxied requests) refused past ``connections_per_ip``."""
        self.evicted = 0
        """Connections closed at a cap to make room (unproven or spare)."""

    def admit(self, conn: Seated, host: str, open_now: int) -> bytes | None:
        """Take ``conn`` (from ``host``, ``""`` if unknown; ``open_now``
        connections are open) in, or return the answer that refuses it: past
        ``connections_per_ip`` for its address, or past ``connections_max``,
        when no connection within that cap can be closed to make room (see
        the module's docstring). A trusted proxy's connection is counted
        under the client its requests name."""
        address = ""
        if self.connections_per_ip and host:
            if self.trusts(host):
                conn.proxied = True
            else:
                address = address_key(host)
                if self.per_address.get(address, 0) >= self.connections_per_ip:
                    if not self._make_room(address):
                        self.refused_per_ip += 1
                        self._shed("per_ip")
                        return _CROWDED
                    open_now -= 1  # closed, though not yet at the node's cap
        if open_now >= self.connections_max and not self._make_room(""):
            self.refused += 1
            if self.on_refused is not None:
                self.on_refused()
            return _FULL
        if address:
            self.per_address[address] = self.per_address.get(address, 0) + 1
            conn.address = address
        conn.unproven = True
        _enter(self.unproven, self._unproven_at, conn)
        return None

    def readdress(self, conn: Seated, forwarded: bytes | None) -> bool:
        """Count a trusted proxy's connection under the client its request
        names in ``X-Forwarded-For`` (none: not counted); False when that
        client has ``connections_per_ip`` already and none of them can be
        closed to make room."""
        if forwarded == conn.forwarded:
            return True  # the header of its last request: the same client, counted
        conn.forwarded = forwarded
        address = forwarded_client(forwarded, self.trusts) if forwarded else ""
        if address == conn.address:
            return True
        if conn.address:
            if conn.unproven:
                _leave_address(self._unproven_at, conn)
            self.release(conn.address)
            conn.address = ""
        if not address:
            return True
        if self.per_address.get(address, 0) >= self.connections_per_ip \
                and not self._make_room(address):
            self.refused_per_ip += 1
            self._shed("per_ip")
            return False
        self.per_address[address] = self.per_address.get(address, 0) + 1
        conn.address = address
        if conn.unproven:
            _enter_address(self._unproven_at, conn)
        return True

    def forget(self, conn: Seated) -> None:
        """``conn`` is closed: count it no more (safe to repeat)."""
        if conn.unproven:
            conn.unproven = False
            _leave(self.unproven, self._unproven_at, conn)
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
        _leave(self.unproven, self._unproven_at, conn)

    # -- connections handed to aiohttp ---------------------------------------

    def hand(self, conn: Seated, handed: Handed) -> None:
        """``conn`` goes to aiohttp as ``handed``, which takes its place
        under its address; busy (its first request is being answered), it
        is in no book until it falls idle."""
        if conn.unproven:
            conn.unproven = False
            _leave(self.unproven, self._unproven_at, conn)
        handed.address, conn.address = conn.address, ""

    def idle(self, handed: Handed, valid: bool) -> None:
        """``handed`` answered its requests and waits for the next one: spare
        after a ``valid`` answer (under 400), else unproven."""
        if handed.unproven or handed.spare:
            self.busy(handed)
        if valid:
            handed.spare = True
            _enter(self.spare, self._spare_at, handed)
        else:
            handed.unproven = True
            _enter(self.unproven, self._unproven_at, handed)

    def busy(self, handed: Handed) -> None:
        """``handed`` has a request again: closed to make room no more."""
        if handed.spare:
            handed.spare = False
            _leave(self.spare, self._spare_at, handed)
        elif handed.unproven:
            handed.unproven = False
            _leave(self.unproven, self._unproven_at, handed)

    def forget_handed(self, handed: Handed) -> None:
        """``handed`` is closed: count it no more (safe to repeat)."""
        self.busy(handed)
        address = handed.address
        if address:
            handed.address = ""
            self.release(address)

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

    def _make_room(self, address: str) -> bool:
        """At the cap of ``address`` (``""``: the node's): close the
        connection within it that goes first (the module's docstring), if
        there is one. It leaves the books (and its count) at once."""
        if address:
            unproven = self._unproven_at.get(address)
            spare = self._spare_at.get(address)
        else:
            unproven, spare = self.unproven, self.spare
        victim: Seated
        if unproven:
            victim = next(iter(unproven))
            victim.unproven = False
            _leave(self.unproven, self._unproven_at, victim)
        elif spare:
            handed = next(iter(spare))
            handed.spare = False
            _leave(self.spare, self._spare_at, handed)
            victim = handed
        else:
            return False
        self.evicted += 1
        self._shed("evicted")
        victim.abort()
        return True


def _enter(book: OrderedDict[S, None], at: dict[str, OrderedDict[S, None]], conn: S) -> None:
    """Put ``conn`` last in ``book``, and in its address's (``at``) if counted."""
    book[conn] = None
    if conn.address:
        _enter_address(at, conn)


def _enter_address(at: dict[str, OrderedDict[S, None]], conn: S) -> None:
    entries = at.get(conn.address)
    if entries is None:
        entries = at[conn.address] = OrderedDict()
    entries[conn] = None


def _leave(book: OrderedDict[S, None], at: dict[str, OrderedDict[S, None]], conn: S) -> None:
    """Take ``conn`` out of ``book`` and out of its address's (``at``)."""
    book.pop(conn, None)
    if conn.address:
        _leave_address(at, conn)


def _leave_address(at: dict[str, OrderedDict[S, None]], conn: S) -> None:
    entries = at.get(conn.address)
    if entries is not None:
        entries.pop(conn, None)
        if not entries:
            del at[conn.address]


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
