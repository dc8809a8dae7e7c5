"""The listener front: HTTP/1.1 for polls and sends, on a bare asyncio protocol.

A framework's per-request objects cost several times the whole work of a
poll (docs/design.md, "Principles"), so the listener path has its own HTTP/1.1
server: one :class:`Connection` (an ``asyncio.Protocol``) per client
connection, parsing with httptools (llhttp), answering with ready header
bytes and the answer the poll built. Its parser callbacks only record what
arrived; a request is acted on once complete.

**Routes.** ``GET /v1/rooms/{room}/poll`` and ``POST /v1/rooms/{room}/messages``
are served here (another method on those paths is a 405). A connection whose
first request is anything else is handed to aiohttp (the rest of the API):
the front gives the transport, with every byte read so far, to the protocol
aiohttp's low-level server makes, and leaves it (later polls on it are served
by aiohttp, through the same :mod:`.poll`). A later request on a front
connection that is not a listener route is handed over the same way when it
begins a read from the socket (a client waiting for each answer); one
pipelined right behind a listener request in the same read cannot be handed
over and is refused (400, and the connection closes).

**HTTP.** Keep-alive (HTTP/1.1 by default, HTTP/1.0 when asked), pipelined
requests answered in order (one at a time; at most ``max_pipelined`` wait,
the rest of a read stays unparsed and reading pauses until answers free
places; a client more than :data:`BACKLOG_MAX` bytes ahead of its answers
gets a 400 after the waiting ones are answered, then the connection closes),
``Connection: close``, ``Expect: 100-continue`` on sends, chunked request
bodies, and limits: URL (414), header count and bytes (431), body (413; an
oversized body is read and dropped up to :data:`DISCARD_MAX`, past that the
connection closes after the answer), and every byte read for one request,
framing and chunk extensions included (``max_request_bytes``, 413 and close).
A malformed request gets a 400 and the connection closes; so does a request
asking to upgrade the protocol (``Upgrade``, ``CONNECT``): llhttp would skip
its body and hand what follows back as a new request (request smuggling), so
nothing after it on the connection is parsed. A header that decides how a
request is framed or who sends it (``Authorization``, ``Content-Type``,
``Content-Encoding``, ``Content-Length``, ``Transfer-Encoding``, ``Expect``)
given twice is a 400: two readers could pick different copies. HTTP
versions other than 1.0 and 1.1 get a 505. A connection closed after a
refusal first sends its answer and a FIN, then reads and drops what the
client still sends for :data:`LINGER` seconds and at most
:data:`LINGER_MAX` bytes (then it is aborted): closing with unread bytes
would make the kernel send a reset that can destroy the answer.

**Timeouts.** The head of a request must arrive within ``header_timeout`` of
its first byte (bytes that begin no request, like bare CRLFs, do not count as
activity), a body within ``body_timeout`` of the head (else 408), and a
connection with no request in progress closes ``idle_timeout`` after its last
answer (idle connections are found by one sweep a second; the deadlines of
requests still arriving are kept in one shared
:class:`~proxy.deadlines.Deadlines`): never a timer per connection. A client
that leaves mid-hold cancels its poll: nothing stays behind. A client that
half-closes (sends its FIN) right after its requests still gets their answers
(a held poll is answered at once, empty), then the connection closes. Writes
follow the transport's flow control: a client that does not read its answers
is not read either, and has ``write_timeout`` to take them (its unsent
bytes back under the low-water mark; or all sent, once the connection is
closing); past that, or past ``unsent_max`` unsent bytes, the connection is
aborted (a reset: see :meth:`Connection.abort`) and what it held is freed,
its held poll cancelled and its waiting requests dropped (the deadlines of
connections whose writes are paused are kept in a second
:class:`~proxy.deadlines.Deadlines`). A client that closes while its
connection is not read (paused: the transport sees no FIN, and on some loops
no reset, until it reads again) is found by the idle sweep, which asks
``poll(2)`` about the paused sockets: a reset aborts, a FIN is taken as a
half-close.

**Connections.** At most ``connections_max`` open connections per node,
those handed to aiohttp included (default: the open-file limit less a
reserve, :func:`connection_capacity`). At the cap, the connection that has
gone longest without a valid request (an answer under 400, or a poll held)
is aborted to make room; only when there is none is the new one answered 503
``overloaded`` with ``Retry-After`` and closed. At most
``connections_per_ip`` come from one client address (:func:`address_key`),
handed ones included until aiohttp closes them; one more is answered the same
way. A connection from one of ``trusted_proxies`` is not counted under the
proxy's address but under the client each of its requests names in
``X-Forwarded-For`` (:func:`forwarded_client`); over its cap, that request is
answered 503 and the connection closes. The count is a dict entry per
address, updated at each accept and close.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import resource
import select
import socket
import struct
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from functools import partial
from http import HTTPStatus
from time import monotonic as _monotonic
from typing import cast
from urllib.parse import unquote, unquote_plus

import httptools

from liveroom.errors import LiveroomError

from .addresses import address_key
from .deadlines import Deadlines
from .poll import Poll, Polls
from .reply import Reply, error_reply, failure_reply
from .send import Sends

logger = logging.getLogger("liveroom.proxy.front")

MIN_REQUEST = 16
"""Bytes of the shortest request llhttp accepts (``GET / HTTP/1.1`` and
CRLFs is 18): two requests cannot begin closer than this."""
BACKLOG_MAX = 32 * 1024
"""Bytes read and kept unparsed while requests wait their turn; a client
pipelining more than this ahead of its answers is refused."""
DISCARD_MAX = 64 * 1024
"""Bytes of a refused body read and dropped to keep the connection; past
this the connection closes after the answer."""

CONNECTION_RESERVE = 64
"""Open files a node keeps beyond its connections (at least; a hundredth of a
large limit): store connections, log files, the metrics directory."""

POLL, SEND = 1, 2
_NONE, _HEAD, _BODY, _LINGER = 0, 1, 2, 3
LINGER = 2.0
"""Seconds a connection closed after a refusal keeps reading (and dropping)
what the client still sends: closing a socket with unread bytes makes the
kernel send a reset, which can destroy the answer before the client reads it."""
LINGER_MAX = 64 * 1024
"""Bytes a lingering close reads and drops at most (plus the rest of the
read that passes it); past them the connection is aborted: a client that
keeps sending after its refusal is not worth the reading."""
WRITE_HIGH = 64 * 1024
"""The transport's high-water mark (asyncio's and uvloop's default, left as
it is): past it, writing pauses (and reading with it) and the write deadline
runs; below a quarter of it, both resume."""
UNSENT_MAX = 1024 * 1024
"""Bytes of answers written but not yet taken by the client's socket, at
most (unless a node's answers may be larger, see
:attr:`FrontLimits.unsent_max`). Flow control keeps a connection to
:data:`WRITE_HIGH` plus one answer; past this bound it is aborted at once,
whatever its write deadline."""
TRIM_AFTER = 1024 * 1024
"""Bytes of unsent answers dropped by aborted connections after which the
next sweep hands the memory freed back to the system (glibc's
``malloc_trim``): the allocator would keep it otherwise, and a node that
cut off a crowd of clients that did not read would keep their buffers'
worth of RSS for good (measured: 1 000 such clients, +100 MiB without)."""


def _trimmer() -> Callable[[], object] | None:
    """``malloc_trim(0)`` of the C library, where it has one (glibc).
    Looked up at the first trim, not at import: ``find_library`` runs a
    subprocess (about 12 ms) and ctypes takes 1 ms to import, which a node's
    start-up need not wait for."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
        except OSError:
            return None
    trim = getattr(libc, "malloc_trim", None)
    return None if trim is None else partial(trim, 0)


_TRIM: list[Callable[[], object] | None] = []
"""The trimmer once looked up (empty: not yet)."""
_RESET = struct.pack("ii", 1, 0)
"""``SO_LINGER`` on, zero seconds: closing sends a reset."""
_RDHUP: int = getattr(select, "POLLRDHUP", 0)
"""Linux's "the peer shut down its side": what tells a client gone while its
connection is not read (elsewhere only a reset is seen)."""
TEARDOWN_SLICE = 64
"""Held polls let go of (answered on a half-close, or forgotten on a close)
per loop turn. Many clients leaving at once (a load balancer restarting)
queue their polls' teardown, and the loop reads, accepts and answers between
two slices: a poll arriving behind 12 000 closes waits for a few slices, not
for all of them."""

SWEEP_EVERY = 1.0
"""Seconds between two sweeps for idle connections (at most half the idle timeout)."""


def reset(transport: asyncio.Transport) -> None:
    """Close ``transport`` with a reset, not a FIN after what the kernel still
    holds: the kernel's buffers go too, now, whether the client reads or not."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    transport.abort()


@dataclass(frozen=True, slots=True)
class FrontLimits:
    max_url: int = 8192
    """Bytes of a request's URL (414 beyond)."""
    max_headers: int = 100
    max_header_bytes: int = 16 * 1024
    """Header lines and their bytes (431 beyond)."""
    header_timeout: float = 10.0
    """Seconds from a request's first byte to the end of its head."""
    body_timeout: float = 10.0
    """Seconds from a request's head to the end of its body (408 beyond)."""
    idle_timeout: float = 15.0
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
    connections_max: int = 0
    """Open connections per node (0: :func:`connection_capacity`)."""
    connections_per_ip: int = 0
    """Open connections per client address (an IPv6 one: its /64); 0: no limit."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses and networks whose connections name their client in
    ``X-Forwarded-For`` (and are not capped themselves)."""
    write_timeout: float = 30.0
    """Seconds a connection's unsent answers may stay above the low-water
    mark (or unsent at all once it closes) before it is aborted."""
    unsent_max: int = UNSENT_MAX
    """Bytes of unsent answers past which a connection is aborted at once."""


def connection_capacity() -> int:
    """Connections this process may keep open: its open-file limit less the
    reserve."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, soft - max(CONNECTION_RESERVE, soft // 100))


def route(url: bytes) -> tuple[int, str, str] | None:
    """``(POLL or SEND, room, raw query)`` of a listener route, else None."""
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


def _hop(text: str) -> str:
    """One address of ``X-Forwarded-For`` without its port, if it has one."""
    text = text.strip()
    if text.startswith("["):  # [v6]:port
        return text[1:].partition("]")[0]
    if text.count(":") == 1:  # v4:port
        return text.partition(":")[0]
    return text


def forwarded_client(header: bytes, trusts: Callable[[str], bool]) -> str:
    """The client ``X-Forwarded-For`` names, as :func:`address_key` counts it:
    the last address not of a trusted proxy (each proxy appends the address
    it was reached from, so only those the trusted ones appended can be
    believed); ``""`` when every one is trusted."""
    for hop in reversed(header.decode("latin-1").split(",")):
        address = _hop(hop)
        if address and not trusts(address):
            return address_key(address[:64])
    return ""


_ONCE = {b"authorization": 1, b"content-type": 2, b"content-encoding": 4,
         b"content-length": 8, b"transfer-encoding": 16, b"expect": 32}
"""Headers a request may carry once: a second copy is a 400, so that no two
readers of the same bytes (the front, aiohttp, a proxy in front) can take
different ones."""


def peer_address(transport: asyncio.BaseTransport | None) -> str:
    """The client's address as aiohttp's ``request.remote`` gives it: the
    peer's host, or the whole peer name of a socket with no host (a Unix
    socket's, often empty). Read per send only: a connection keeps none."""
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, (list, tuple)):
        return str(peer[0])
    return "" if peer is None else str(peer)


class _Refuse(Exception):
    """Stop parsing this connection: answer ``reply`` and close."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply


class _HandOff(Exception):
    """Stop parsing: the request is not ours, aiohttp takes the connection."""


class _Request:
    """One request as it arrives. Class attributes are the defaults, so a
    request only pays for what it sets (most carry three headers)."""

    url = b""
    method = b""
    http10 = False
    """An HTTP/1.0 request (its keep-alive answer says so)."""
    headers = 0
    header_bytes = 0
    accept = ""
    content_type = ""
    content_length: int | None = None
    content_encoding: str | None = None
    authorization: bytes | None = None
    """As it arrived: decoded only by a route that reads it."""
    expect = False
    seen = 0
    """The framing and identity headers met so far (bits of :data:`_ONCE`)."""
    kind = 0
    room = ""
    query = ""
    keep_alive = True
    close_after = False
    body: bytearray | None = None
    discarded = 0
    error: Reply | None = None
    work: Poll | asyncio.Task[Reply] | asyncio.Handle | None = None
    forwarded: bytes | None = None
    """``X-Forwarded-For`` (every copy, in order), kept only on a trusted
    proxy's connection."""


class Front:
    """The listener front of one node: a protocol factory for the listening
    socket, and what its connections share."""

    def __init__(self, polls: Polls, sends: Sends, limits: FrontLimits | None = None) -> None:
        self.polls = polls
        self.sends = sends
        self.limits = limits or FrontLimits()
        self.connections_max = self.limits.connections_max or connection_capacity()
        self.handoff: Callable[[Callable[[], None] | None], asyncio.Protocol] | None = None
        """Makes aiohttp's protocol for a connection handed over (set when
        serving); it calls what it is given when the connection closes."""
        self.handed: Callable[[], int] = lambda: 0
        """How many connections handed over are still open (set when serving)."""
        self.refused = 0
        """Connections refused past ``connections_max`` since start."""
        self.on_refused: Callable[[], None] | None = None
        """Called for each connection refused (a metric)."""
        self.on_shed: Callable[[str], None] | None = None
        """Called with the reason for each connection shed (a metric): its
        client did not read (``write_timeout``, ``unsent``), flooded a lingering
        close (``linger``), was closed to make room (``evicted``) or refused
        past ``connections_per_ip`` (``per_ip``)."""
        self.connections_per_ip = self.limits.connections_per_ip
        self.refused_per_ip = 0
        """Connections (or proxied requests) refused past ``connections_per_ip``."""
        self.evicted = 0
        """Connections closed at the cap to make room, never having had a valid request."""
        self.write_timeouts = 0
        """Connections aborted because their client did not take its answers."""
        self.lingers_cut = 0
        """Lingering closes aborted past :data:`LINGER_MAX`."""
        self.dropped = 0
        """Unsent bytes aborted connections dropped since memory was last
        handed back (see :data:`TRIM_AFTER`)."""
        self._trusted = tuple(ipaddress.ip_network(proxy, strict=False)
                              for proxy in self.limits.trusted_proxies)
        self.per_address: dict[str, int] = {}
        """Open connections per client address (those counted: with a cap)."""
        self.connections: set[Connection] = set()
        self.unproven: OrderedDict[Connection, None] = OrderedDict()
        """Connections that have had no valid request yet, oldest first: the
        first closed at the cap."""
        self.paused: set[Connection] = set()
        """Connections not read now (their client is ahead of its answers)."""
        self.timers: Deadlines[Connection] = Deadlines(Connection.timed_out, resolution=0.1)
        self.write_deadlines: Deadlines[Connection] = Deadlines(Connection.write_timed_out,
                                                                resolution=0.1)
        self._sweeper: asyncio.TimerHandle | None = None
        self._teardown: deque[tuple[Poll, bool]] = deque()
        """Held polls whose clients left: (poll, answer it) in arrival order."""
        self._teardown_due = False
        self.closing = False
        self._drained = asyncio.Event()
        self._heads: dict[tuple[int, str], bytes] = {}
        self._date_at = 0
        self._date = b""

    def __call__(self) -> Connection:
        return Connection(self)

    def head(self, status: int, content_type: str) -> bytes:
        """The status line and fixed headers of an answer (built once)."""
        key = (status, content_type)
        head = self._heads.get(key)
        if head is None:
            phrase = HTTPStatus(status).phrase
            head = self._heads[key] = (f"HTTP/1.1 {status} {phrase}\r\n"
                                       f"Server: liveroom\r\n"
                                       f"Content-Type: {content_type}\r\n").encode("latin-1")
        return head

    def date(self) -> bytes:
        """The ``Date`` header line, rebuilt once a second."""
        now = int(time.time())
        if now != self._date_at:
            self._date_at = now
            self._date = f"Date: {formatdate(now, usegmt=True)}\r\n".encode()
        return self._date

    def forget(self, conn: Connection) -> None:
        """``conn`` is closed, or aiohttp's: count it no more (safe to repeat)."""
        self.connections.discard(conn)
        self.paused.discard(conn)
        if conn.unproven:
            conn.unproven = False
            self.unproven.pop(conn, None)
        address = conn.address
        if address:
            conn.address = ""
            self.release(address)
        if self.closing and not self.connections:
            self._drained.set()

    def release(self, address: str) -> None:
        """One connection from ``address`` closed."""
        left = self.per_address[address] - 1
        if left:
            self.per_address[address] = left
        else:
            del self.per_address[address]

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

    def prove(self, conn: Connection) -> None:
        """``conn`` had a valid request: no longer the first closed at the cap."""
        conn.unproven = False
        self.unproven.pop(conn, None)

    def let_go(self, poll: Poll, answer: bool) -> None:
        """Its client left: answer ``poll`` at once, empty (``answer``: a
        half-close), or forget it, on one of the next loop turns, in arrival
        order, :data:`TEARDOWN_SLICE` a turn. Until then the poll stays held
        (a message may still answer it) and its room pinned."""
        self._teardown.append((poll, answer))
        if not self._teardown_due:
            self._teardown_due = True
            asyncio.get_running_loop().call_soon(self._tear_down)

    def _tear_down(self) -> None:
        queue = self._teardown
        for _ in range(min(TEARDOWN_SLICE, len(queue))):
            poll, answer = queue.popleft()
            try:
                if answer:
                    poll.release()
                else:
                    poll.cancel()
            except Exception:
                logger.exception("letting go of a poll of room %s failed", poll.p.room)
        if queue:
            asyncio.get_running_loop().call_soon(self._tear_down)
        else:
            self._teardown_due = False

    async def shutdown(self, grace: float) -> None:
        """Close idle connections now; give requests in progress ``grace``
        seconds (held polls were answered already), then close the rest."""
        self.closing = True
        for conn in list(self.connections):
            conn.close_if_idle()
        if self.connections:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), grace)
        for conn in list(self.connections):
            conn.abort()
        while self._teardown:
            poll, _ = self._teardown.popleft()
            poll.cancel()
        self.timers.close()
        self.write_deadlines.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    @property
    def open_connections(self) -> int:
        """Connections open on this node: the front's and aiohttp's."""
        return len(self.connections) + self.handed()

    def admit(self, conn: Connection, host: str) -> bytes | None:
        """Take ``conn`` (from ``host``, ``""`` if unknown) in, or return the
        answer that refuses it: past ``connections_per_ip`` for its address,
        or past ``connections_max`` when no connection that never had a valid
        request can be closed to make room (the oldest such is). A trusted
        proxy's connection is counted under the client its requests name."""
        address = ""
        if self.connections_per_ip and host:
            if self.trusts(host):
                conn.proxied = True
            else:
                address = address_key(host)
                if self.per_address.get(address, 0) >= self.connections_per_ip:
                    self.refused_per_ip += 1
                    self.shed("per_ip")
                    return _CROWDED
        if len(self.connections) + self.handed() >= self.connections_max \
                and not self._make_room():
            self.refused += 1
            if self.on_refused is not None:
                self.on_refused()
            return _FULL
        if address:
            self.per_address[address] = self.per_address.get(address, 0) + 1
            conn.address = address
        self.connections.add(conn)
        conn.unproven = True
        self.unproven[conn] = None
        if self._sweeper is None and not self.closing:
            self._sweep()
        return None

    def readdress(self, conn: Connection, forwarded: bytes | None) -> bool:
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
            self.shed("per_ip")
            return False
        self.per_address[address] = self.per_address.get(address, 0) + 1
        conn.address = address
        return True

    def _make_room(self) -> bool:
        """At the cap: close the connection that has gone longest without a
        valid request, if there is one (a flood of refused requests must not
        keep listeners out)."""
        if not self.unproven:
            return False
        conn, _ = self.unproven.popitem(last=False)
        conn.unproven = False
        self.evicted += 1
        self.shed("evicted")
        conn.abort()
        return True

    def shed(self, reason: str) -> None:
        if self.on_shed is not None:
            self.on_shed(reason)

    def _sweep(self) -> None:
        """Close connections idle for ``idle_timeout``; again in a second while
        there are connections. A flag check per connection: cheaper than
        arming a deadline after every answer."""
        if self.dropped >= TRIM_AFTER:
            self.dropped = 0
            if not _TRIM:
                _TRIM.append(_trimmer())
            trim = _TRIM[0]
            if trim is not None:
                trim()  # a few ms for a heap of hundreds of MiB
        if not self.connections:
            self._sweeper = None
            return
        self._sweeper = asyncio.get_running_loop().call_later(
            min(SWEEP_EVERY, self.limits.idle_timeout / 2), self._sweep)
        before = _monotonic() - self.limits.idle_timeout
        stale = [c for c in self.connections if 0 < c.idle_since <= before]
        for conn in stale:
            conn.close_if_idle()
        if self.paused:
            self._watch_paused()

    def _watch_paused(self) -> None:
        """Find clients gone while their connections are not read: a paused
        transport reads nothing, so it sees neither a FIN nor (on some loops)
        a reset until it reads again, which may be a held poll's whole hold
        away. One poll(2) that does not wait, for all of them."""
        watch = select.poll()
        by_fd: dict[int, Connection] = {}
        for conn in self.paused:
            fd = conn.fileno()
            if fd >= 0:
                watch.register(fd, _RDHUP)
                by_fd[fd] = conn
        for fd, events in watch.poll(0):
            conn = by_fd[fd]
            conn.hung_up(bool(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL)))


class Connection(asyncio.Protocol):
    """One client connection to the front (slotted: a held poll's connection
    is most of what holding it costs in memory)."""

    __slots__ = ("_backlog", "_between", "_closed", "_current", "_dead", "_dispatching", "_eof",
                 "_feeding", "_fresh", "_front", "_handing_off", "_hangup", "_inflow", "_limits",
                 "_parser", "_queue", "_raw", "_reading_paused", "_req", "_timer", "_timing",
                 "_transport", "_write_due", "_writing_paused", "address", "forwarded",
                 "idle_since", "proxied", "unproven")

    def __init__(self, front: Front) -> None:
        self._front = front
        self._limits = front.limits
        self._transport: asyncio.Transport | None = None
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        """None between two requests while one is held (a parser costs more
        memory than the rest of a held poll); made again when bytes arrive."""
        self._req: _Request | None = None
        """The request being parsed."""
        self._queue: list[_Request] = []
        """Complete requests waiting their turn."""
        self._backlog: bytes | None = None
        """Bytes read but not parsed while ``max_pipelined`` requests wait."""
        self._current: _Request | None = None
        """The request being answered."""
        self.idle_since = 0.0
        """When the connection last fell idle (monotonic; 0 while busy)."""
        self._timer = -1
        """Key of this connection's deadline in the front's timers (-1: none)."""
        self._timing = _NONE
        """What the deadline is for: idle, a request's head, or its body."""
        self._write_due = -1
        """Key of its write deadline in the front's ``write_deadlines`` (-1: none)."""
        self.address = ""
        """The client address it is counted under (``""``: not counted)."""
        self.proxied = False
        """From a trusted proxy: its requests name the client."""
        self.forwarded: bytes | None = None
        """The ``X-Forwarded-For`` its address was last taken from."""
        self.unproven = False
        """Open, and no valid request yet (in the front's ``unproven``)."""
        self._raw: list[bytes] | None = []
        """Bytes read since a request began at the start of a read, until it is
        routed (to hand the connection to aiohttp); None when none did."""
        self._between = True
        """The parser stands between two requests."""
        self._fresh = False
        """This read began between two requests (its bytes start a request)."""
        self._dead = False
        """The parser stopped (a refusal or a hand-over): read no more."""
        self._handing_off = False
        self._eof = False
        """The client half-closed: answer what arrived, then close."""
        self._hangup = False
        """The client shut its side while it was not read: held polls answer at once."""
        self._inflow = 0
        """Bytes read since the last request was complete."""
        self._dispatching = False
        self._feeding = False
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False

    # -- the transport ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        front = self._front
        peer = transport.get_extra_info("peername") if front.connections_per_ip else None
        refusal = front.admit(self, peer[0] if isinstance(peer, tuple) else "")
        if refusal is not None:
            # Past a cap: one answer, read nothing. (Pausing accept would leave
            # the clients waiting in the backlog with no word of why.)
            self._closed = self._dead = True
            self._transport.write(refusal % front.date())
            self._transport.close()
            return
        self.idle_since = _monotonic()

    def connection_lost(self, exc: Exception | None) -> None:
        self._let_go()
        self._transport = None
        self._parser = None  # it refers back to this protocol: a cycle only gc would free

    def fileno(self) -> int:
        """The socket's file descriptor (-1: none any more)."""
        transport = self._transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        return int(sock.fileno()) if sock is not None else -1

    def pause_writing(self) -> None:
        """Past the high-water mark: answer nothing more, read nothing more, and
        the client has ``write_timeout`` to take what was written."""
        self._writing_paused = True
        self._arm_write()
        self._pause_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if not self._closed:  # else what is left must still go within its deadline
            self._disarm_write()
        self._resume_reading()
        self._next()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None and not self._closed:
            self._reading_paused = True
            self._front.paused.add(self)
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if (self._reading_paused and not self._dead and not self._writing_paused
                and self._backlog is None and len(self._queue) < self._limits.max_pipelined
                and self._transport is not None and not self._closed):
            self._reading_paused = False
            self._front.paused.discard(self)
            self._transport.resume_reading()

    def hung_up(self, reset: bool) -> None:
        """Its client closed while it was not read (seen by the front's
        sweep). A reset aborts the connection. A FIN may be a half-close (the
        client still reads): as after :meth:`eof_received`, held polls are
        answered at once, empty, the requests sent before it are still read
        and answered, then the connection closes; a client gone for good
        resets the first of these answers, which closes it sooner."""
        if reset:
            self.abort()
            return
        self._front.paused.discard(self)  # seen: no need to look again
        if self._hangup or self._closed:
            return
        self._hangup = True
        work = self._current.work if self._current is not None else None
        if isinstance(work, Poll) and work.held_poll is not None:
            self._front.let_go(work, True)

    def data_received(self, data: bytes) -> None:
        if self._dead:
            if self._handing_off and self._raw is not None:
                self._raw.append(data)
            elif self._closed:
                # A lingering close: dropped, up to LINGER_MAX.
                self._inflow += len(data)
                if self._inflow > LINGER_MAX:
                    self._front.lingers_cut += 1
                    self._front.shed("linger")
                    self.abort()
            return
        # Not activity by itself: a connection stays idle (see ``idle_since``)
        # until a request is complete, so bytes that begin none keep nothing open.
        if self._between:
            self._raw, self._fresh = [data], True
        elif self._raw is not None:
            self._raw.append(data)
        self._inflow += len(data)
        self._take_in(data)

    def _take_in(self, data: bytes) -> None:
        """Parse ``data`` (read now, or kept from an earlier read) and act on
        what it holds: deadlines, refusals, a hand-over."""
        try:
            self._feed(data)
            req = self._req
            if req is not None:
                # A request is still arriving: its head (or body) has a deadline
                # from now. One whole in this read needs no timer at all.
                if self._inflow > self._limits.max_request_bytes:
                    raise _Refuse(error_reply(
                        413, "too_large",
                        f"more than {self._limits.max_request_bytes} bytes read for one "
                        "request"))
                if not req.method:
                    if self._timing != _HEAD:
                        self._arm(_HEAD, self._limits.header_timeout)
                elif self._timing != _BODY:
                    self._arm(_BODY, self._limits.body_timeout)
        except _Refuse as refusal:
            self._refuse(refusal.reply)
        except httptools.HttpParserCallbackError as exc:
            # httptools raises what a callback raised as this error's context.
            cause = exc.__context__
            if isinstance(cause, _HandOff):
                self._dead = self._handing_off = True
                self._pause_reading()
                self._next()
            elif isinstance(cause, _Refuse):
                self._refuse(cause.reply)
            else:
                logger.error("front callback failed", exc_info=cause)
                self._refuse(error_reply(500, "internal", "internal error"))
        except httptools.HttpParserError as exc:
            self._refuse(error_reply(400, "bad_request", f"malformed HTTP request: {exc}"))

    def _rest(self) -> None:
        """Held between two requests: let the parser go (see ``_parser``)."""
        if (self._current is not None and self._req is None and not self._queue
                and not self._feeding and self._backlog is None):
            self._parser = None

    def _places(self) -> int:
        """Requests that may still begin before ``max_pipelined`` wait."""
        return (self._limits.max_pipelined - len(self._queue)
                - (self._req is not None))

    def _feed(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpRequestParser(self)
        self._feeding = True
        try:
            places = self._places()
            # Each request line names its version once: a read with no more of
            # them than free places cannot fill the queue (a header that says
            # " HTTP/" only sends it the slow way).
            if data.count(b" HTTP/") <= places:
                self._feed_to(parser, data)
            else:
                self._feed_pieces(parser, data, places)
        finally:
            self._feeding = False
        self._rest()

    def _feed_pieces(self, parser: httptools.HttpRequestParser, data: bytes,
                     places: int) -> None:
        """Feed a read that holds more requests than may wait, a piece at a
        time: a piece of ``places`` times :data:`MIN_REQUEST` bytes cannot begin
        more requests than there are places. What is left when no place is
        kept (at most :data:`BACKLOG_MAX` bytes, else the client is refused)
        and reading pauses until answers free places."""
        at, size = 0, len(data)
        while at < size:
            if places <= 0:
                rest = data[at:]
                if len(rest) > BACKLOG_MAX:
                    raise _Refuse(error_reply(
                        400, "bad_request",
                        f"more than {BACKLOG_MAX} bytes of requests pipelined ahead of their "
                        "answers: read the answers before sending more"))
                self._backlog = rest
                self._pause_reading()
                return
            end = at + places * MIN_REQUEST
            self._feed_to(parser, data[at:end])
            at = end
            places = self._places()

    @staticmethod
    def _feed_to(parser: httptools.HttpRequestParser, data: bytes) -> None:
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Upgrades are refused when their head completes (_UPGRADE); should
            # llhttp still stop at one, what follows is never parsed as HTTP.
            raise _Refuse(_UPGRADE) from None

    def _refuse(self, reply: Reply) -> None:
        """The parser stopped: answer ``reply`` in turn, then close."""
        self._dead = True
        self._pause_reading()
        req = self._req or _Request()
        self._req = None
        req.error, req.close_after = reply, True
        self._queue.append(req)
        self._next()

    # -- parser callbacks: record what arrived ----------------------------------

    def on_message_begin(self) -> None:
        """A request begins, at its first byte: its head deadline runs from here."""
        self._req = _Request()
        self._between = False
        if self._fresh:
            self._fresh = False
        else:
            self._raw = None  # began inside a read: its bytes cannot be told apart

    def on_url(self, url: bytes) -> None:
        req = self._req
        assert req is not None
        req.url += url
        if len(req.url) > self._limits.max_url:
            raise _Refuse(error_reply(414, "uri_too_long",
                                      f"the URL is longer than {self._limits.max_url} bytes"))

    def on_header(self, name: bytes, value: bytes) -> None:
        req = self._req
        assert req is not None
        req.headers += 1
        req.header_bytes += len(name) + len(value)
        limits = self._limits
        if req.headers > limits.max_headers or req.header_bytes > limits.max_header_bytes:
            raise _Refuse(error_reply(
                431, "headers_too_large",
                f"at most {limits.max_headers} header lines and "
                f"{limits.max_header_bytes} bytes of headers"))
        name = name.lower()
        once = _ONCE.get(name)
        if once is not None:
            if req.seen & once:
                raise _Refuse(error_reply(
                    400, "bad_request",
                    f"repeated header: {name.decode('latin-1').title()} (send it once)"))
            req.seen |= once
        if name == b"accept":
            req.accept = value.decode("latin-1")
        elif name == b"content-type":
            req.content_type = value.decode("latin-1")
        elif name == b"content-length":
            with contextlib.suppress(ValueError):
                req.content_length = int(value)
        elif name == b"content-encoding":
            req.content_encoding = value.decode("latin-1")
        elif name == b"authorization":
            req.authorization = value
        elif name == b"expect":
            req.expect = value.lower() == b"100-continue"
        elif name == b"x-forwarded-for" and self.proxied:
            forwarded = req.forwarded
            req.forwarded = value if forwarded is None else forwarded + b"," + value

    def on_headers_complete(self) -> None:
        req = self._req
        assert req is not None
        parser = self._parser
        assert parser is not None
        if parser.should_upgrade():
            raise _Refuse(_UPGRADE)
        req.method = parser.get_method()
        version = parser.get_http_version()
        if version != "1.1":
            if version != "1.0":
                raise _Refuse(error_reply(505, "http_version_not_supported",
                                          f"HTTP/{version} is not served here: use HTTP/1.1"))
            req.http10 = True
        req.keep_alive = parser.should_keep_alive()
        found = route(req.url)
        if found is None:
            if self._raw is None:
                raise _Refuse(error_reply(
                    400, "bad_request",
                    "only polls and sends may be pipelined on this connection: send "
                    "this request on a connection of its own"))
            raise _HandOff
        self._raw = None
        req.kind, req.room, req.query = found
        if req.kind == POLL:
            if req.method != b"GET":
                req.error = _not_allowed("GET")
        elif req.method != b"POST":
            req.error = _not_allowed("POST")
        else:
            try:
                self._front.sends.check_head(req.room, req.content_encoding,
                                             req.content_length)
            except LiveroomError as exc:
                req.error = failure_reply(exc)
                if (req.content_length or 0) > DISCARD_MAX:
                    raise _Refuse(req.error) from None  # not worth reading to keep the connection
            else:
                req.body = bytearray()
            if req.expect and self._current is None and not self._queue:
                if req.error is None:
                    self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
                else:
                    # The client waits before sending its body: answer now.
                    req.close_after = True
                    raise _Refuse(req.error)

    def on_body(self, body: bytes) -> None:
        req = self._req
        assert req is not None
        if req.body is None:
            req.discarded += len(body)
        else:
            req.body += body
            if len(req.body) > self._front.sends.body_limit:
                req.discarded, req.body = len(req.body), None
                req.error = failure_reply(self._front.sends.too_large())
        if req.discarded > DISCARD_MAX:
            req.close_after = True
            raise _Refuse(req.error or failure_reply(self._front.sends.too_large()))

    def on_message_complete(self) -> None:
        req = self._req
        assert req is not None
        self._req = None
        self._between = True
        self._inflow = 0
        self.idle_since = 0.0
        if self._timing != _NONE:
            self._disarm()
        self._queue.append(req)
        if len(self._queue) >= self._limits.max_pipelined:
            self._pause_reading()
        self._next()

    # -- answering, in order ----------------------------------------------------

    def _next(self) -> None:
        """Answer the waiting requests in order, one at a time."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._current is None and not self._closed and not self._writing_paused:
                if not self._queue:
                    if self._handing_off:
                        self._hand_off()
                    elif self._eof and self._backlog is None:
                        self._close()
                    elif self._req is None and not self._dead:
                        self.idle_since = _monotonic()
                    break
                req = self._current = self._queue.pop(0)
                if self._reading_paused:
                    self._resume_reading()
                self._dispatch(req)
            self._rest()
        finally:
            self._dispatching = False
        backlog = self._backlog
        if (backlog is not None and not self._feeding and not self._dead and not self._closed
                and self._places() > 0):
            # Answers freed places: parse what was kept, then read again.
            self._backlog = None
            self._take_in(backlog)
            self._resume_reading()

    def _dispatch(self, req: _Request) -> None:
        if self.proxied and req.error is None \
                and not self._front.readdress(self, req.forwarded):
            req.error, req.close_after = _CROWDED_REPLY, True
        if req.error is not None:
            self._answer(req, req.error)
        elif req.kind == POLL:
            # A held poll keeps none of its URL, query, room name, Accept or
            # ticket (the poll keeps the room's own name, see Poll.begin).
            query, req.query, req.url = req.query, "", b""
            authorization, req.authorization = req.authorization, None
            room, req.room = req.room, ""
            accept, req.accept = req.accept, ""
            poll = req.work = self._front.polls.start(room, parse_query(query), accept,
                                                      self._answer_current, authorization)
            if poll is not None:
                if self.unproven:
                    self._front.prove(self)  # held: a valid poll
                if self._eof or self._hangup:
                    poll.release()
        else:
            assert req.body is not None
            sends, body = self._front.sends, bytes(req.body)
            # The client as the connection is counted: behind a trusted proxy
            # the one X-Forwarded-For names, so one client is one client to
            # the new-room window too (not every client of the proxy).
            address = self.address or peer_address(self._transport)
            # A store that appends at once (memory) answers here, without a task.
            reply = sends.send_at_once(req.room, req.content_type, body, req.authorization,
                                       req.accept, address)
            if reply is not None:
                if self._queue:
                    # Requests pipelined behind it are answered from the next
                    # turn, as behind a send that awaited its store: a poll
                    # there then reads the room with this message pulled.
                    req.work = asyncio.get_running_loop().call_soon(self._answer, req, reply)
                else:
                    self._answer(req, reply)
                return
            task = asyncio.create_task(sends.send(
                req.room, req.content_type, body, req.authorization, req.accept, address))
            req.work = task
            task.add_done_callback(partial(self._sent, req))

    def eof_received(self) -> bool | None:
        """The client half-closed: nothing more arrives. Requests already
        complete are answered (a held poll at once, as if its hold ran out),
        then the connection closes; a request half-arrived is dropped. A client
        that closed for good cannot be told from one that half-closed, so
        nothing is kept for it past these answers."""
        if self._handing_off or self._closed:
            return None  # (closed: a lingering close, over now)
        self._eof = True
        if self._backlog is None:
            # Else the backlog still holds requests (and the rest of the one
            # half-parsed): they are parsed as places free, and answered too.
            self._dead = True
            self._req = None
            self._disarm()
            if self._current is None and not self._queue:
                return None  # nothing to answer: the transport closes
        work = self._current.work if self._current is not None else None
        if isinstance(work, Poll) and work.held_poll is not None:
            self._front.let_go(work, True)
        return True

    def _sent(self, req: _Request, task: asyncio.Task[Reply]) -> None:
        if not task.cancelled():
            self._answer(req, task.result())

    def _answer_current(self, reply: Reply) -> None:
        """A poll's answer: the request being answered is its own (requests
        are answered one at a time, and a poll cancelled never answers)."""
        if self._current is not None:
            self._answer(self._current, reply)

    def _answer(self, req: _Request, reply: Reply) -> None:
        if req is not self._current or self._closed:
            return
        self._current = None
        req.work = None
        front = self._front
        close = req.close_after or not req.keep_alive or front.closing
        extra = b""
        if reply.retry_after is not None:
            extra += b"Retry-After: %d\r\n" % reply.retry_after
        if reply.status == 405:
            extra += b"Allow: GET\r\n" if req.kind == POLL else b"Allow: POST\r\n"
        if close:
            extra += b"Connection: close\r\n"
        elif req.http10:
            extra += b"Connection: keep-alive\r\n"
        if self.unproven and reply.status < 400:
            front.prove(self)
        body = reply.body
        self._write(b"%sContent-Length: %d\r\n%s%s\r\n%s" % (
            front.head(reply.status, reply.content_type), len(body), front.date(), extra, body))
        if close:
            self._close()
        else:
            self._next()

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not self._closed:
            transport.write(data)
            if self._writing_paused and transport.get_write_buffer_size() > self._limits.unsent_max:
                self._front.shed("unsent")
                self.abort()  # answers pile up on a client that does not read

    def _cancel(self, req: _Request) -> None:
        work, req.work = req.work, None
        if isinstance(work, Poll) and work.held_poll is not None:
            self._front.let_go(work, False)  # its answer, if any, goes nowhere now
        elif work is not None:
            work.cancel()

    # -- timeouts, closing, handing over --------------------------------------

    def _arm(self, timing: int, seconds: float) -> None:
        timers = self._front.timers
        if self._timer >= 0:
            timers.discard(self, self._timer)
        self._timing = timing
        self._timer = timers.add(self, asyncio.get_running_loop().time() + seconds)

    def _disarm(self) -> None:
        if self._timer >= 0:
            self._front.timers.discard(self, self._timer)
            self._timer, self._timing = -1, _NONE

    def _arm_write(self) -> None:
        if self._write_due < 0:
            self._write_due = self._front.write_deadlines.add(
                self, asyncio.get_running_loop().time() + self._limits.write_timeout)

    def _disarm_write(self) -> None:
        if self._write_due >= 0:
            self._front.write_deadlines.discard(self, self._write_due)
            self._write_due = -1

    def write_timed_out(self) -> None:
        """Its answers were not taken within ``write_timeout``: the client does
        not read. Abort it and free what it holds."""
        self._write_due = -1
        self._front.write_timeouts += 1
        self._front.shed("write_timeout")
        self.abort()

    def timed_out(self) -> None:
        """Its deadline passed: an idle connection closes, a slow request gets
        a 408 when it is the next to answer (else the connection just closes)."""
        lingering = self._timing == _LINGER
        self._timer, self._timing = -1, _NONE
        if lingering and self._transport is not None:
            self._transport.close()
            return
        if self._closed:
            return
        req = self._req
        if req is not None and req.method and self._current is None and not self._queue:
            # Its head arrived, its body did not.
            self._req = None
            self._dead = True
            req.error = error_reply(408, "request_timeout", "request body not received in time")
            req.close_after = True
            self._queue.append(req)
            self._next()
            return
        self._close()

    def close_if_idle(self) -> None:
        if self._current is None and not self._queue and self._req is None:
            self._close()

    def _close(self) -> None:
        self._disarm()
        transport = self._transport
        if transport is not None and not self._closed:
            self._closed = True
            self._front.forget(self)
            if transport.get_write_buffer_size():
                # A transport closes once its buffer is sent, which a client that
                # does not read would put off for ever.
                self._arm_write()
            if self._dead and not self._eof and not self._handing_off \
                    and transport.can_write_eof():
                # Refused with bytes perhaps still coming: a lingering close (as
                # nginx's): the answer and a FIN now, the rest read and dropped
                # until the client closes too, LINGER runs out or LINGER_MAX
                # bytes were dropped.
                transport.write_eof()
                self._inflow = 0
                self._arm(_LINGER, LINGER)
                if self._reading_paused:
                    self._reading_paused = False
                    transport.resume_reading()
                return
            transport.close()

    def _let_go(self) -> None:
        """Closed: no more deadlines, out of the front's books, its poll or
        send cancelled, its waiting requests and unparsed bytes dropped."""
        self._closed = True
        self._disarm()
        self._disarm_write()
        self._front.forget(self)
        current, self._current = self._current, None
        if current is not None:
            self._cancel(current)
        self._queue.clear()
        self._backlog = None

    def abort(self) -> None:
        """Close at once, unsent answers dropped, and let go of everything the
        connection holds: its poll or send cancelled, its waiting requests and
        unparsed bytes dropped."""
        self._dead = True
        self._let_go()
        self._req = None
        transport = self._transport
        if transport is not None:
            self._front.dropped += transport.get_write_buffer_size()
            reset(transport)

    def _hand_off(self) -> None:
        """Give the connection, and every byte since its request began, to aiohttp."""
        front, transport = self._front, self._transport
        assert transport is not None
        assert self._raw is not None
        assert front.handoff is not None
        self._disarm()
        self._disarm_write()
        self._closed = True  # for this protocol
        # aiohttp's connection stays counted under its address until it closes.
        address, self.address = self.address, ""
        front.forget(self)
        protocol = front.handoff(partial(front.release, address) if address else None)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if self._reading_paused:
            transport.resume_reading()
        protocol.data_received(b"".join(self._raw))
        self._raw = None


_UPGRADE = error_reply(400, "bad_request",
                       "protocol upgrades (Upgrade, CONNECT) are not served here; nothing "
                       "after this request is read")


def _refusal(message: str) -> bytes:
    """A 503 ``overloaded`` answer to a connection refused at once (``%s``:
    where its Date header goes)."""
    body = b'{"error":"overloaded","message":"%s"}' % message.encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nServer: liveroom\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n%%sRetry-After: 1\r\n"
            b"Connection: close\r\n\r\n%s" % (len(body), body))


_FULL = _refusal("too many connections to this node: retry")
_CROWDED_MESSAGE = "too many connections from your address to this node: retry"
_CROWDED = _refusal(_CROWDED_MESSAGE)
_CROWDED_REPLY = error_reply(503, "overloaded", _CROWDED_MESSAGE, retry_after=1)


def _not_allowed(method: str) -> Reply:
    return error_reply(405, "method_not_allowed", f"use {method} on this path")
