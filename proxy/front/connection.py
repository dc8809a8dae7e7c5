"""One client connection to the front: requests read, answered in order,
timed, paused and closed (see :mod:`.server` for the whole picture).

**A connection's life** (:class:`State`). ``READING``: requests are read
(:class:`~.reader.RequestReader`) and answered in order, one at a
time (a send the store appends at once is answered without a task; a poll
is held until its answer). ``STOPPED``: the reader stopped (a refusal, a
body that did not arrive in time, the client's half-close): what waits is
answered, then the connection closes; after a refusal it is ``LINGERING``:
the answer and a FIN go, what the client still sends is read and dropped for
:data:`LINGER` seconds and at most :data:`LINGER_MAX` bytes (closing with
unread bytes would make the kernel send a reset that can destroy the
answer). ``HANDING_OFF``: once what waits is answered, the connection goes
to aiohttp (:mod:`.handoff`). ``CLOSED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import socket
import struct
from functools import partial
from time import monotonic as _monotonic
from typing import Final, cast

from ..deadlines import Deadlines
from ..reply import Reply, error_reply
from .admission import CROWDED_REPLY, Admission
from .flow import FlowControl
from .handler import Handler
from .limits import FrontLimits
from .reader import Arriving, Fed, RequestReader
from .request import Held, Request
from .routing import METHODS

logger: Final = logging.getLogger("liveroom.proxy.front")

LINGER: Final = 2.0
"""Seconds a connection closed after a refusal keeps reading (and dropping)
what the client still sends."""
LINGER_MAX: Final = 64 * 1024
"""Bytes a lingering close reads and drops at most (plus the rest of the
read that passes it); past them the connection is aborted: a client that
keeps sending after its refusal is not worth the reading."""
_RESET: Final = struct.pack("ii", 1, 0)
"""``SO_LINGER`` on, zero seconds: closing sends a reset."""


class State(enum.IntEnum):
    """Where a connection is in its life (see the module's docstring)."""

    READING = 0
    STOPPED = 1
    HANDING_OFF = 2
    LINGERING = 3
    CLOSED = 4


class _Timing(enum.IntEnum):
    """What a connection's deadline in the front's ``timers`` is for."""

    NONE = 0
    HEAD = 1
    BODY = 2
    LINGER = 3


def reset(transport: asyncio.Transport) -> None:
    """Close ``transport`` with a reset, not a FIN after what the kernel still
    holds: the kernel's buffers go too, now, whether the client reads or not."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    transport.abort()


# What a connection sees of its front (as uvicorn's protocols see their
# server through its ServerState): a base class rather than a
# typing.Protocol, since compiled (mypyc) a call through a base class is a
# direct call, through a Protocol a lookup by name on every answer.
def _finishes(handler: Handler | None) -> bool:
    return handler is not None and handler.finishes


class Shared:
    """The front as its connections see it: all they may ask of it
    (:class:`~.server.Front` is one). Its attributes are set here, once: a
    subclass that declared them again would give a compiled build two
    layouts of one object."""

    def __init__(self, handlers: tuple[Handler | None, ...], limits: FrontLimits,
                 admission: Admission) -> None:
        self.limits = limits
        self.handlers = handlers
        """Each route's handler, by kind (:mod:`.routing`; index 0: none)."""
        self.heads = tuple(None if handler is None else handler.head_rules
                           for handler in handlers)
        """Each route's head rules, by kind (None: a route without a body)."""
        self.admission = admission
        self.paused: set[Connection] = set()
        """Connections not read now (their client is ahead of its answers)."""
        self.timers: Deadlines[Connection] = Deadlines(Connection.timed_out, resolution=0.1)
        """The deadlines of requests still arriving, and of lingering closes."""
        self.write_deadlines: Deadlines[Connection] = Deadlines(Connection.write_timed_out,
                                                                resolution=0.1)
        """The deadlines of answers not taken (flow control)."""
        self.closing = False
        """The node is shutting down: answers close their connections."""
        self.finishing: set[asyncio.Task[Reply]] = set()
        """Writes whose client left, running to their end (:meth:`finish`)."""

    def finish(self, task: asyncio.Task[Reply]) -> None:
        """Keep ``task``, a write whose client left, until it ends: its answer
        goes nowhere, but what it counts and creates is settled as if the
        client had stayed."""
        self.finishing.add(task)
        task.add_done_callback(self.finishing.discard)

    def seat(self, conn: Connection, host: str) -> bytes | None:
        """Take ``conn`` in, or the answer that refuses it."""
        raise NotImplementedError

    def forget(self, conn: Connection) -> None:
        """``conn`` is closed, or aiohttp's: count it no more (safe to repeat)."""
        raise NotImplementedError

    def shed(self, reason: str) -> None:
        """A connection was cut for ``reason`` (counted)."""
        raise NotImplementedError

    def dropped(self, unsent: int) -> None:
        """An aborted connection dropped ``unsent`` bytes of answers."""
        raise NotImplementedError

    def let_go(self, held: Held, answer: bool) -> None:
        """Its client left: answer ``held`` at once, empty (``answer``: a
        half-close), or forget it, soon."""
        raise NotImplementedError

    def head(self, status: int, content_type: str) -> bytes:
        """The status line and fixed headers of an answer."""
        raise NotImplementedError

    def date(self) -> bytes:
        """The ``Date`` header line."""
        raise NotImplementedError

    def hand(self, conn: Connection, transport: asyncio.Transport, raw: list[bytes],
             reading_paused: bool, hung_up: bool) -> None:
        """Give ``conn``'s ``transport`` to aiohttp with the bytes ``raw`` of
        its request (:func:`~.handoff.hand_over`); the connection aiohttp
        serves takes its place in the front's books."""
        raise NotImplementedError


class Connection(asyncio.Protocol):
    """One client connection to the front (slotted: a held poll's connection
    is most of what holding it costs in memory)."""

    __slots__ = ("_current", "_dispatching", "_eof", "_flow", "_front", "_hangup", "_limits",
                 "_lingered", "_reader", "_state", "_timer", "_timing", "_transport", "address",
                 "forwarded", "idle_since", "proxied", "unproven")

    def __init__(self, front: Shared) -> None:
        self._front = front
        self._limits = front.limits
        self._transport: asyncio.Transport | None = None
        self._reader = RequestReader(front.limits, front.heads, self)
        self._flow: FlowControl[Connection] | None = None
        """Made the first time reading or writing pauses (:meth:`_flow_control`):
        most connections never pause, and a held poll's connection is most
        of what holding it costs."""
        self._state = State.READING
        self._current: Request | None = None
        """The request being answered."""
        self.idle_since = 0.0
        """When the connection last fell idle (monotonic; 0 while busy)."""
        self._timer = -1
        """Key of this connection's deadline in the front's timers (-1: none)."""
        self._timing = _Timing.NONE
        self.address = ""
        """The client address it is counted under (``""``: not counted)."""
        self.proxied = False
        """From a trusted proxy: its requests name the client."""
        self.forwarded: bytes | None = None
        """The ``X-Forwarded-For`` its address was last taken from."""
        self.unproven = False
        """Open, and no valid request yet (in the admission's ``unproven``)."""
        self._eof = False
        """The client half-closed: answer what arrived, then close."""
        self._hangup = False
        """The client shut its side while it was not read: held polls answer at once."""
        self._dispatching = False
        self._lingered = 0
        """Bytes a lingering close dropped."""

    # -- the transport ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        front = self._front
        peer = transport.get_extra_info("peername") if front.admission.connections_per_ip \
            else None
        refusal = front.seat(self, peer[0] if isinstance(peer, tuple) else "")
        if refusal is not None:
            # Past a cap: one answer, read nothing. (Pausing accept would leave
            # the clients waiting in the backlog with no word of why.)
            self._state = State.CLOSED
            self._transport.write(refusal % front.date())
            self._transport.close()
            return
        self._reader.proxied = self.proxied
        self.idle_since = _monotonic()

    def connection_lost(self, exc: Exception | None) -> None:
        self._let_go()
        self._transport = None

    def fileno(self) -> int:
        """The socket's file descriptor (-1: none any more)."""
        transport = self._transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        return int(sock.fileno()) if sock is not None else -1

    def pause_writing(self) -> None:
        """Past the high-water mark: answer nothing more, read nothing more, and
        the client has ``write_timeout`` to take what was written."""
        flow = self._flow_control()
        flow.writing_paused = True
        flow.arm_write(self)
        self._pause_reading()

    def resume_writing(self) -> None:
        flow = self._flow_control()
        flow.writing_paused = False
        if self._state is not State.CLOSED and self._state is not State.LINGERING:
            flow.disarm_write(self)  # else what is left must still go within its deadline
        self._resume_reading()
        self._next()

    def _closed(self) -> bool:
        return self._state >= State.LINGERING

    def _flow_control(self) -> FlowControl[Connection]:
        """The connection's flow control, made the first time it is needed."""
        flow = self._flow
        if flow is None:
            front = self._front
            flow = self._flow = FlowControl(front.paused, front.write_deadlines,
                                            self._limits.write_timeout)
        return flow

    def _writing_paused(self) -> bool:
        return self._flow is not None and self._flow.writing_paused

    def _pause_reading(self) -> None:
        if self._transport is not None and not self._closed():
            self._flow_control().pause_reading(self, self._transport)

    def _resume_reading(self) -> None:
        reader = self._reader
        flow = self._flow
        if (flow is not None and self._state is State.READING and not flow.writing_paused
                and reader.backlog is None and not reader.full()
                and self._transport is not None):
            flow.resume_reading(self, self._transport)

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
        if self._hangup or self._closed():
            return
        self._hangup = True
        self._release_held()

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state is State.READING:
            # Not activity by itself: a connection stays idle (see ``idle_since``)
            # until a request is complete, so bytes that begin none keep nothing open.
            self._take_in(data)
        elif state is State.HANDING_OFF:
            raw = self._reader.raw
            if raw is not None:
                raw.append(data)
        elif state is not State.STOPPED:
            # A lingering close: dropped, up to LINGER_MAX.
            self._lingered += len(data)
            if self._lingered > LINGER_MAX:
                self._front.shed("linger")
                self.abort()

    def eof_received(self) -> bool | None:
        """The client half-closed: nothing more arrives. Requests already
        complete are answered (a held poll at once, as if its hold ran out),
        then the connection closes; a request half-arrived is dropped. A client
        that closed for good cannot be told from one that half-closed, so
        nothing is kept for it past these answers."""
        if self._state is State.HANDING_OFF or self._closed():
            return None  # (closed: a lingering close, over now)
        self._eof = True
        reader = self._reader
        if reader.backlog is None:
            # Else the backlog still holds requests (and the rest of the one
            # half-parsed): they are parsed as places free, and answered too.
            self._state = State.STOPPED
            reader.stop()
            self._disarm()
            if self._current is None and not reader.waiting:
                return None  # nothing to answer: the transport closes
        self._release_held()
        return True

    def _take_in(self, data: bytes | None) -> None:
        """Parse ``data`` (read now; None: the backlog kept from an earlier
        read) and act on what it holds: deadlines, refusals, a hand-over."""
        reader = self._reader
        try:
            fed = reader.resume() if data is None else reader.receive(data)
        except Exception:
            logger.exception("front callback failed")
            reader.refuse(error_reply(500, "internal", "internal error"))
            fed = Fed.REFUSED
        if fed is Fed.READ:
            if reader.backlog is not None:
                self._pause_reading()  # until answers free places
            # A request still arriving has a deadline for its head (or body)
            # from now. One whole in this read needs no timer at all.
            arriving = reader.arriving()
            if arriving is Arriving.HEAD:
                if self._timing is not _Timing.HEAD:
                    self._arm(_Timing.HEAD, self._limits.header_timeout)
            elif arriving is Arriving.BODY and self._timing is not _Timing.BODY:
                self._arm(_Timing.BODY, self._limits.request_timeout)
        elif self._state is State.READING:
            self._state = State.HANDING_OFF if fed is Fed.HAND_OFF else State.STOPPED
            self._pause_reading()
            self._next()
        if self._current is not None:
            reader.rest()

    # -- what the reader asks (reader.Answerer) ------------------------

    def on_request(self, req: Request) -> None:
        self.idle_since = 0.0
        if self._timing is not _Timing.NONE:
            self._disarm()
        if self._reader.full():
            self._pause_reading()
        self._next()

    def answering(self) -> bool:
        return self._current is not None

    def on_continue(self) -> None:
        self._write(b"HTTP/1.1 100 Continue\r\n\r\n")

    # -- answering, in order ----------------------------------------------------

    def _next(self) -> None:
        """Answer the waiting requests in order, one at a time."""
        if self._dispatching:
            return
        self._dispatching = True
        reader = self._reader
        try:
            while self._current is None and not self._closed() and not self._writing_paused():
                waiting = reader.waiting
                if not waiting:
                    if self._state is State.HANDING_OFF:
                        self._hand_off()
                    elif self._eof and reader.backlog is None:
                        self._close()
                    elif self._state is State.READING and reader.arriving() is Arriving.NOTHING:
                        self.idle_since = _monotonic()
                    break
                req = self._current = waiting.pop(0)
                if self._flow is not None and self._flow.reading_paused:
                    self._resume_reading()
                self._dispatch(req)
            if self._current is not None:
                reader.rest()
        finally:
            self._dispatching = False
        if reader.backlog is not None and self._state is State.READING and reader.places() > 0:
            # Answers freed places: parse what was kept, then read again.
            self._take_in(None)
            self._resume_reading()

    def _dispatch(self, req: Request) -> None:
        front = self._front
        if self.proxied and req.error is None \
                and not front.admission.readdress(self, req.forwarded):
            req.error, req.close_after = CROWDED_REPLY, True
        if req.error is not None:
            self._answer(req, req.error)
            return
        handler = front.handlers[req.kind]
        assert handler is not None  # the reader routes only to kinds with a handler
        # The client as the connection is counted: behind a trusted proxy the
        # one X-Forwarded-For names (one client is one client to the
        # new-room window too, not every client of the proxy); else the
        # peer, read only if the handler needs it.
        # The connection itself is the ``answer`` a handler keeps (its
        # ``__call__``): no bound method made for each request and kept by
        # each held poll.
        outcome = handler.start(req, self, self.address, self._transport)
        if isinstance(outcome, Reply):
            if self._reader.waiting and front.heads[req.kind] is not None:
                # A write answered at once (a store that appends at once:
                # memory): requests pipelined behind it are answered from the
                # next turn, as behind a write that awaited its store, so
                # that a poll there reads the room with the write pulled.
                req.work = asyncio.get_running_loop().call_soon(self._answer, req, outcome)
            else:
                self._answer(req, outcome)
        elif isinstance(outcome, Held):
            req.work = outcome
            if self.unproven:
                front.admission.prove(self)  # held: a valid request
            if self._eof or self._hangup:
                outcome.release()
        elif outcome is not None:
            task = asyncio.create_task(outcome)
            req.work = task
            task.add_done_callback(partial(self._sent, req))

    def _sent(self, req: Request, task: asyncio.Task[Reply]) -> None:
        if not task.cancelled():
            self._answer(req, task.result())

    def __call__(self, reply: Reply) -> None:
        """Answer the request being answered with ``reply``: what a handler
        calls ``answer`` (:meth:`.handler.Handler.start`), for a poll's
        answer or a screened send's. That request is the one ``reply`` is
        for (requests are answered one at a time, and a poll cancelled never
        answers; a send's answer after its client left goes nowhere, the
        connection closed)."""
        if self._current is not None:
            self._answer(self._current, reply)

    def _answer(self, req: Request, reply: Reply) -> None:
        if req is not self._current or self._closed():
            return
        self._current = None
        req.work = None
        front = self._front
        close = req.close_after or not req.keep_alive or front.closing
        extra = b""
        if reply.retry_after is not None:
            extra += b"Retry-After: %d\r\n" % reply.retry_after
        if reply.status == 405:
            extra += b"Allow: %s\r\n" % METHODS[req.kind]
        if close:
            extra += b"Connection: close\r\n"
        elif req.http10:
            extra += b"Connection: keep-alive\r\n"
        if self.unproven and reply.status < 400:
            front.admission.prove(self)
        body = reply.body
        self._write(b"%sContent-Length: %d\r\n%s%s\r\n%s" % (
            front.head(reply.status, reply.content_type), len(body), front.date(), extra, body))
        if close:
            self._close()
        else:
            self._next()

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not self._closed():
            transport.write(data)
            if self._writing_paused() \
                    and transport.get_write_buffer_size() > self._limits.unsent_max:
                self._front.shed("unsent")
                self.abort()  # answers pile up on a client that does not read

    def _release_held(self) -> None:
        """The client half-closed: its held request is answered at once, empty."""
        work = self._current.work if self._current is not None else None
        if isinstance(work, Held) and work.holding():
            self._front.let_go(work, True)

    def _cancel(self, req: Request) -> None:
        work, req.work = req.work, None
        if isinstance(work, Held) and work.holding():
            self._front.let_go(work, False)  # its answer, if any, goes nowhere now
        elif isinstance(work, asyncio.Task) and _finishes(self._front.handlers[req.kind]):
            # A write read whole runs to its end whatever its client does: a
            # send cancelled while the store may still run its append would
            # free its new-room place as "nothing created". Its answer goes
            # nowhere (the request is no longer current).
            self._front.finish(work)
        elif work is not None:
            work.cancel()

    # -- timeouts, closing, handing over --------------------------------------

    def _arm(self, timing: _Timing, seconds: float) -> None:
        timers = self._front.timers
        if self._timer >= 0:
            timers.discard(self, self._timer)
        self._timing = timing
        self._timer = timers.add(self, asyncio.get_running_loop().time() + seconds)

    def _disarm(self) -> None:
        if self._timer >= 0:
            self._front.timers.discard(self, self._timer)
            self._timer, self._timing = -1, _Timing.NONE

    def write_timed_out(self) -> None:
        """Its answers were not taken within ``write_timeout``: the client does
        not read. Abort it and free what it holds."""
        self._flow_control().write_due = -1
        self._front.shed("write_timeout")
        self.abort()

    def timed_out(self) -> None:
        """Its deadline passed: an idle connection closes, a slow request gets
        a 408 when it is the next to answer (else the connection just closes)."""
        lingering = self._timing is _Timing.LINGER
        self._timer, self._timing = -1, _Timing.NONE
        if lingering and self._transport is not None:
            self._transport.close()
            return
        if self._closed():
            return
        reader = self._reader
        if reader.arriving() is Arriving.BODY and self._current is None and not reader.waiting:
            # Its head arrived, its body did not.
            self._state = State.STOPPED
            reader.refuse(error_reply(408, "request_timeout",
                                      "request body not received in time"))
            self._next()
            return
        self._close()

    def close_if_idle(self) -> None:
        if self._current is None and self._reader.idle():
            self._close()

    def _close(self) -> None:
        self._disarm()
        transport = self._transport
        if transport is not None and not self._closed():
            stopped = self._state is State.STOPPED
            self._state = State.CLOSED
            self._front.forget(self)
            if transport.get_write_buffer_size():
                # A transport closes once its buffer is sent, which a client that
                # does not read would put off for ever.
                self._flow_control().arm_write(self)
            if stopped and not self._eof and transport.can_write_eof():
                # Refused with bytes perhaps still coming: a lingering close (as
                # nginx's): the answer and a FIN now, the rest read and dropped
                # until the client closes too, LINGER runs out or LINGER_MAX
                # bytes were dropped.
                transport.write_eof()
                self._state = State.LINGERING
                self._lingered = 0
                self._arm(_Timing.LINGER, LINGER)
                if self._flow is not None:
                    self._flow.resume_reading(self, transport)
                return
            transport.close()

    def _let_go(self) -> None:
        """Closed: no more deadlines, out of the front's books, its poll or
        send cancelled, its waiting requests and unparsed bytes dropped."""
        self._state = State.CLOSED
        self._disarm()
        if self._flow is not None:
            self._flow.disarm_write(self)
        self._front.forget(self)
        current, self._current = self._current, None
        if current is not None:
            self._cancel(current)
        self._reader.drop()

    def abort(self) -> None:
        """Close at once, unsent answers dropped, and let go of everything the
        connection holds: its poll or send cancelled, its waiting requests and
        unparsed bytes dropped."""
        self._let_go()
        transport = self._transport
        if transport is not None:
            self._front.dropped(transport.get_write_buffer_size())
            reset(transport)

    def _hand_off(self) -> None:
        """Give the connection, and every byte since its request began, to aiohttp."""
        front, transport, reader = self._front, self._transport, self._reader
        assert transport is not None
        assert reader.raw is not None
        self._disarm()
        if self._flow is not None:
            self._flow.disarm_write(self)
        self._state = State.CLOSED  # for this protocol
        raw, reader.raw = reader.raw, None
        reader.drop()
        # aiohttp's connection stays in the front's books until it closes.
        front.hand(self, transport, raw, self._flow is not None and self._flow.reading_paused,
                   self._hangup)
