"""The listener front: HTTP/1.1 for the listener routes, on a bare asyncio protocol.

A framework's per-request objects cost several times the whole work of a
poll (docs/design.md, "Principles"), so the listener path has its own HTTP/1.1
server: one :class:`Connection` (an ``asyncio.Protocol``) per client
connection, answering with ready header bytes and the answer its route's
handler built. It knows no feature: the role gives it one
:class:`~.handler.Handler` per route. Its parts, each in its own module:

- :mod:`.reader`: bytes in, complete requests out (HTTP/1.1 framing, its
  bounds and refusals; no transport, no clock); :mod:`.whole`: a request
  whole in one read, without llhttp; :mod:`.request`: one request;
  :mod:`.headers`: the headers read;
- :mod:`.routing`: the routing table (``GET /v1/rooms/{room}/poll``, ``POST
  /v1/rooms/{room}/messages``, ``POST /v1/rooms/{room}/likes``) and the
  queries; :mod:`.handler`: what the front asks of a route's handler;
- :mod:`.connection`: one connection's life, and what it sees of the
  front (:class:`~.connection.Shared`);
- :mod:`.flow`: flow control (a client that does not read is not read);
- :mod:`.admission`: the caps on open connections, per node and per client,
  and which connection makes room at a cap;
- :mod:`.handoff` and :mod:`.site`: a connection whose request is anything
  else goes to aiohttp (the rest of the API), on the same listening socket,
  and stays in the front's books (counted, closed at a cap when idle,
  watched while paused) until it closes;
- :mod:`.limits`: the bounds; :mod:`.trim`: memory handed back.

Each connection is a :class:`~.connection.Connection` (its life: the
:class:`~.connection.State` it is in); the :class:`Front` is what they
share: the protocol factory, the admission books, the deadlines, the sweep,
the teardown of held requests whose clients left, and the shutdown. It
keeps the connections it handed to aiohttp too (:class:`~.handoff.Handed`).

**Timeouts.** The head of a request must arrive within ``header_timeout`` of
its first byte (bytes that begin no request, like bare CRLFs, do not count as
activity), a body within ``request_timeout`` of the head (else 408), and a
connection with no request in progress closes ``keepalive_timeout`` after its last
answer (idle connections are found by one sweep a second; the deadlines of
requests still arriving are kept in one shared
:class:`~proxy.deadlines.Deadlines`): never a timer per connection. A client
that leaves mid-hold cancels its poll: nothing stays behind. A client that
half-closes (sends its FIN) right after its requests still gets their answers
(a held poll is answered at once, empty), then the connection closes. A
client that does not take its answers within ``write_timeout`` (its unsent
bytes back under the low-water mark; or all sent, once the connection is
closing), or lets more than ``unsent_max`` bytes pile up, is aborted (a
reset: see :meth:`Connection.abort`) and what it held is freed, its held poll
cancelled and its waiting requests dropped. A client that closes while its
connection is not read (paused: the transport sees no FIN, and on some loops
no reset, until it reads again) is found by the idle sweep, which asks
``poll(2)`` about the paused sockets: a reset aborts, a FIN is taken as a
half-close. The sweep asks about the paused connections handed to aiohttp
too (aiohttp stops reading one with two requests queued behind the one it
answers): a reset closes it, a FIN answers its held poll at once, and what it
queued is answered before it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import time
from collections import deque
from collections.abc import Callable, Mapping
from email.utils import formatdate
from http import HTTPStatus
from time import monotonic as _monotonic
from typing import Final

from .admission import Admission
from .connection import Connection, Shared, reset
from .handler import Handler
from .handoff import Handed, hand_over
from .limits import FrontLimits
from .request import Held
from .routing import KINDS, ROUTES
from .trim import Trim

__all__ = ["Connection", "Front", "reset"]

logger: Final = logging.getLogger("liveroom.proxy.front")

TEARDOWN_SLICE: Final = 64
"""Held polls let go of (answered on a half-close, or forgotten on a close)
per loop turn. Many clients leaving at once (a load balancer restarting)
queue their polls' teardown, and the loop reads, accepts and answers between
two slices: a poll arriving behind 12 000 closes waits for a few slices, not
for all of them."""
SWEEP_EVERY: Final = 1.0
"""Seconds between two sweeps for idle connections (at most half the idle timeout)."""

_RDHUP: int = getattr(select, "POLLRDHUP", 0)
"""Linux's "the peer shut down its side": what tells a client gone while its
connection is not read (elsewhere only a reset is seen)."""


class Front(Shared):
    """The listener front of one node: a protocol factory for the listening
    socket, and what its connections share (:class:`~.connection.Shared`)."""

    def __init__(self, handlers: Mapping[int, Handler], limits: FrontLimits | None = None,
                 *, on_shed: Callable[[str], None] | None = None,
                 on_refused: Callable[[], None] | None = None) -> None:
        missing = [ROUTES[kind - 1][0] for kind in range(1, KINDS) if kind not in handlers]
        if missing:
            raise ValueError(f"no handler for the front's routes {', '.join(missing)}")
        limits = limits or FrontLimits()
        super().__init__(tuple(handlers.get(kind) for kind in range(KINDS)), limits,
                         Admission(limits, self.shed, on_refused))
        self.handoff: Callable[[Front], Handed] | None = None
        """Makes aiohttp's protocol for a connection handed over (set when
        serving); it tells this front when it falls idle, gets busy, pauses
        and closes."""
        self.handed: set[Handed] = set()
        """The connections handed to aiohttp, open still."""
        self.handed_paused: set[Handed] = set()
        """Those aiohttp does not read now (the sweep watches them)."""
        self.on_shed = on_shed
        """Called with the reason for each connection shed (a metric): its
        client did not read (``write_timeout``, ``unsent``), flooded a lingering
        close (``linger``), was closed to make room at a cap (``evicted``: one
        handed to aiohttp too) or refused past ``connections_per_ip``
        (``per_ip``)."""
        self.write_timeouts = 0
        """Connections aborted because their client did not take its answers."""
        self.lingers_cut = 0
        """Lingering closes aborted past :data:`~.connection.LINGER_MAX`."""
        self.trim = Trim()
        self.connections: set[Connection] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._teardown: deque[tuple[Held, bool]] = deque()
        """Held requests whose clients left: (held, answer it) in arrival order."""
        self._teardown_due = False
        self._drained = asyncio.Event()
        self._answer_heads: dict[tuple[int, str], bytes] = {}
        self._date_at = 0
        self._date = b""

    def connection(self) -> Connection:
        """A new connection: the listening socket's protocol factory. (Not
        ``__call__``: compiled, a subclass of a native class of another
        module crashed when called.)"""
        return Connection(self)

    def head(self, status: int, content_type: str) -> bytes:
        """The status line and fixed headers of an answer (built once)."""
        key = (status, content_type)
        head = self._answer_heads.get(key)
        if head is None:
            phrase = HTTPStatus(status).phrase
            head = self._answer_heads[key] = (f"HTTP/1.1 {status} {phrase}\r\n"
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

    def seat(self, conn: Connection, host: str) -> bytes | None:
        """Take ``conn`` in, or the answer that refuses it (:class:`~.admission.Admission`)."""
        refusal = self.admission.admit(conn, host, len(self.connections) + len(self.handed))
        if refusal is None:
            self.connections.add(conn)
            if self._sweeper is None and not self.closing:
                self._sweep()
        return refusal

    def forget(self, conn: Connection) -> None:
        """``conn`` is closed, or aiohttp's: count it no more (safe to repeat)."""
        self.connections.discard(conn)
        self.paused.discard(conn)
        self.admission.forget(conn)
        if self.closing and not self.connections:
            self._drained.set()

    def shed(self, reason: str) -> None:
        if reason == "write_timeout":
            self.write_timeouts += 1
        elif reason == "linger":
            self.lingers_cut += 1
        if self.on_shed is not None:
            self.on_shed(reason)

    def dropped(self, unsent: int) -> None:
        self.trim.dropped += unsent

    def hand(self, conn: Connection, transport: asyncio.Transport, raw: list[bytes],
             reading_paused: bool, hung_up: bool) -> None:
        assert self.handoff is not None  # set when serving
        handed = self.handoff(self)
        self.admission.hand(conn, handed)  # before forget: the address is the handed one's
        self.forget(conn)
        self.handed.add(handed)
        hand_over(transport, handed, raw, reading_paused, hung_up)

    def forget_handed(self, handed: Handed) -> None:
        """``handed`` (aiohttp's) is closed: count it no more (safe to repeat)."""
        self.handed.discard(handed)
        self.handed_paused.discard(handed)
        self.admission.forget_handed(handed)

    def watch_handed(self, handed: Handed, paused: bool) -> None:
        """aiohttp paused reading ``handed`` (or resumed it): the sweep
        watches it for a client gone meanwhile (or no more)."""
        if not paused:
            self.handed_paused.discard(handed)
        elif handed in self.handed:
            self.handed_paused.add(handed)
            if self._sweeper is None and not self.closing:
                self._sweeper = asyncio.get_running_loop().call_later(
                    min(SWEEP_EVERY, self.limits.keepalive_timeout / 2), self._sweep)

    def let_go(self, held: Held, answer: bool) -> None:
        """Its client left: answer ``held`` at once, empty (``answer``: a
        half-close), or forget it, on one of the next loop turns, in arrival
        order, :data:`TEARDOWN_SLICE` a turn. Until then it stays held (a
        message may still answer a poll) and its room kept in the cache."""
        self._teardown.append((held, answer))
        if not self._teardown_due:
            self._teardown_due = True
            asyncio.get_running_loop().call_soon(self._tear_down)

    def _tear_down(self) -> None:
        queue = self._teardown
        for _ in range(min(TEARDOWN_SLICE, len(queue))):
            held, answer = queue.popleft()
            try:
                if answer:
                    held.release()
                else:
                    held.cancel()
            except Exception:
                logger.exception("letting go of a held request failed")
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
        if self.finishing:  # writes whose client left end before the store closes
            await asyncio.wait(set(self.finishing), timeout=grace)
        while self._teardown:
            held, _ = self._teardown.popleft()
            held.cancel()
        self.timers.close()
        self.write_deadlines.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    @property
    def open_connections(self) -> int:
        """Connections open on this node: the front's and aiohttp's."""
        return len(self.connections) + len(self.handed)

    def _sweep(self) -> None:
        """Close connections idle for ``keepalive_timeout`` and look for clients
        gone from paused ones; again in a second while there are connections
        (or paused ones handed to aiohttp). A flag check per connection:
        cheaper than arming a deadline after every answer."""
        self.trim.due()
        if not self.connections and not self.handed_paused and not self.trim.dropped:
            self._sweeper = None
            return
        self._sweeper = asyncio.get_running_loop().call_later(
            min(SWEEP_EVERY, self.limits.keepalive_timeout / 2), self._sweep)
        before = _monotonic() - self.limits.keepalive_timeout
        stale = [c for c in self.connections if 0 < c.idle_since <= before]
        for conn in stale:
            conn.close_if_idle()
        if self.paused or self.handed_paused:
            self._watch_paused()

    def _watch_paused(self) -> None:
        """Find clients gone while their connections are not read: a paused
        transport reads nothing, so it sees neither a FIN nor (on some loops)
        a reset until it reads again, which may be a held poll's whole hold
        away. One poll(2) that does not wait, for all of them, the front's
        and aiohttp's."""
        watch = select.poll()
        by_fd: dict[int, Connection] = {}
        for conn in self.paused:
            fd = conn.fileno()
            if fd >= 0:
                watch.register(fd, _RDHUP)
                by_fd[fd] = conn
        handed_by_fd: dict[int, Handed] = {}
        for handed in self.handed_paused:
            fd = handed.fileno()
            if fd >= 0:
                watch.register(fd, _RDHUP)
                handed_by_fd[fd] = handed
        for fd, events in watch.poll(0):
            gone = bool(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL))
            found = by_fd.get(fd)
            if found is not None:
                found.hung_up(gone)
            else:
                handed_by_fd[fd].hung_up(gone)


