"""One listening socket for the front and aiohttp: an aiohttp site whose
connections start on the front (:mod:`.server`).

:class:`FrontSite` takes the place of aiohttp's ``TCPSite`` (or ``SockSite``)
in a runner: the runner still owns the application's lifecycle and its
connections; the front hands aiohttp every connection that is not on the
listener path, through the runner's low-level server.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from .request import Held
from .server import Front, reset

HELD_POLL = web.RequestKey("held_poll", Held)
"""The poll a request on aiohttp's poll route started, while it runs: a
half-close of its connection answers it at once."""

HANDED_QUEUE = 2
"""Requests a connection handed to aiohttp may have parsed and waiting
(behind the one being answered) before aiohttp stops reading it."""


class _Handler(RequestHandler):
    """aiohttp's protocol for a connection the front handed over
    (:class:`~.handoff.Handed`).

    It stays in the front's books until it closes: counted under its client
    address; between two requests (none queued, none being answered) it is
    unproven after an answer of 400 or more, spare after a valid one, and may
    then be closed to make room at a cap (:mod:`.admission`), as aiohttp's
    keep-alive timeout closes it; while aiohttp does not read it, the front's
    sweep watches it for a client gone. A request aiohttp is answering is
    never cut to make room.

    aiohttp answers a request it cannot parse before any handler or
    middleware runs, as plain text with its own ``Server`` header; here that
    answer is JSON ``{"error", "message"}`` with liveroom's, like every
    other. A half-close is handled as the front handles it
    (:meth:`eof_received`)."""

    write_timeout: float = 0.0
    """Seconds a client has to take what is written once the transport's
    buffer is full (the front's ``--write-timeout``; 0: none)."""
    _stalled: asyncio.TimerHandle | None = None
    half_closed = False
    """The client half-closed (or was seen gone while not read): held polls
    are answered at once."""
    _eof = False
    """The FIN came behind requests still queued: close once they are answered."""
    address = ""
    """The client address it is counted under (``""``: not counted)."""
    proxied = False
    forwarded: bytes | None = None
    unproven = False
    """Idle after an answer of 400 or more: the first closed at a cap."""
    spare = False
    """Idle after a valid answer: closed at a cap when none is unproven."""

    def __init__(self, front: Front, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._front: Front | None = front
        """Whose books it is in (None once closed)."""
        # aiohttp queues up to 32 parsed requests a connection, each with its
        # body's buffer (~3 MB behind one held poll); the front queues at
        # most a few answers. Two here, then reading pauses until one is done.
        self._max_msg_queue_size = HANDED_QUEUE
        self._msg_queue_resume_size = HANDED_QUEUE - 1

    # -- the front's books ----------------------------------------------------

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if (self.spare or self.unproven) and self._messages and self._front is not None:
            self._front.admission.busy(self)  # a request arrived: not one to close

    async def _handle_request(self, request: BaseRequest, start_time: float | None,
                              request_handler: Callable[[BaseRequest],
                                                        Awaitable[web.StreamResponse]],
                              ) -> tuple[web.StreamResponse, bool]:
        answer = await super()._handle_request(request, start_time, request_handler)
        if not self._messages:
            response, reset_ = answer
            front = self._front
            if self._eof:
                self._close = True  # the last request that came before the FIN is answered
            elif front is not None and not reset_ and response.keep_alive \
                    and not self._close and not self._force_close:
                # Idle until the next request: one that may make room.
                front.admission.idle(self, response.status < 400)
        return answer

    def abort(self) -> None:
        """Closed to make room (it is idle): out of the front's books now,
        then a FIN after what it was sent (as aiohttp's keep-alive timeout
        closes it), or a reset if its client has not taken all of it yet."""
        self._forget()
        transport = self.transport
        if transport is not None and transport.get_write_buffer_size():
            reset(transport)
        else:
            self.force_close()

    def _forget(self) -> None:
        front, self._front = self._front, None
        if front is not None:
            front.forget_handed(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._unstall()
        self._forget()
        super().connection_lost(exc)

    # -- a client gone while it is not read ------------------------------------

    def _pause_transport_reading(self) -> None:
        super()._pause_transport_reading()
        if self._front is not None:
            self._front.watch_handed(self, True)

    def _resume_transport_reading(self) -> None:
        super()._resume_transport_reading()
        if self._front is not None:
            self._front.watch_handed(self, False)

    def fileno(self) -> int:
        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        return int(sock.fileno()) if sock is not None else -1

    def hung_up(self, reset_: bool) -> None:
        """Its client closed while aiohttp did not read it (seen by the
        front's sweep, or by the front before the hand-over). A reset closes
        it. A FIN may be a half-close: as after :meth:`eof_received`, held
        polls are answered at once, the requests queued are answered, and
        the connection closes once aiohttp reads the FIN (its reading
        resumes as the queue drains); a client gone for good resets the
        first of these answers, which closes it sooner."""
        if self._front is not None:
            self._front.watch_handed(self, False)  # seen: no need to look again
        transport = self.transport
        if reset_:
            if transport is not None:
                reset(transport)
            return
        self.half_closed = True
        self._release_held()

    # -- flow control ----------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.write_timeout > 0 and self._stalled is None:
            self._stalled = asyncio.get_running_loop().call_later(
                self.write_timeout, self._cut_off)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._unstall()

    def _unstall(self) -> None:
        stalled, self._stalled = self._stalled, None
        if stalled is not None:
            stalled.cancel()

    def _cut_off(self) -> None:
        """The client did not read for ``write_timeout``: reset the connection
        (aiohttp then cancels its handler and drops what it queued), as the
        front does with its own."""
        self._stalled = None
        if self.transport is not None:
            reset(self.transport)

    # -- answers aiohttp makes itself, and the half-close ----------------------

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        # aiohttp's own does the logging and refuses when an answer began.
        super().handle_error(request, status, exc, message)
        phrase = HTTPStatus(status).phrase
        text = "internal error" if status >= 500 else (message or phrase)
        answer = web.Response(
            status=status, content_type="application/json", headers={"Server": "liveroom"},
            body=orjson.dumps({"error": phrase.lower().replace(" ", "_"), "message": text}))
        answer.force_close()
        return answer

    def eof_received(self) -> bool:  # type: ignore[override]  # asyncio.Protocol: bool | None
        """The client half-closed its side (a FIN right behind its requests),
        handled as the front handles it: the requests that arrived whole are
        answered, in order (a held poll at once, as if its hold ran out, and
        one that starts later too), then the connection closes; one
        half-arrived is dropped, and an idle connection closes. aiohttp's own
        closes at once, which cancels the handler (a send was stored and
        never answered), and an EOF that only stops the handler's loop drops
        what waits behind the request being answered (a send pipelined
        behind ``GET /healthz``: neither answered nor stored)."""
        self.half_closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done() and not self._messages:
            return False  # idle: nothing asked
        request = self._current_request
        if request is not None and not request.content.is_eof():
            return False  # its body half-arrived: dropped (the handler is cancelled)
        queued = self._messages
        if queued and not queued[-1][1].is_eof():
            # The last one's body half-arrived: dropped. (When it is all that
            # is left and the loop is about to take it, the connection closes.)
            if len(queued) == 1 and waiter is not None:
                return False
            queued.pop()
        if queued:
            self._eof = True  # closes once those queued are answered
        else:
            self._close = True  # no keep-alive past the answer owed
        self._release_held()
        return True

    def _release_held(self) -> None:
        request = self._current_request
        held = request.get(HELD_POLL) if request is not None else None
        if held is not None:
            held.release()


def hold(request: web.Request, poll: Held) -> None:
    """``poll`` is what ``request`` waits for: a half-close of its connection
    answers it at once (now, if the client half-closed already)."""
    request[HELD_POLL] = poll
    protocol = request.protocol
    if isinstance(protocol, _Handler) and protocol.half_closed:
        poll.release()


def handler_of(server: web.Server, front: Front, *, write_timeout: float = 0.0) -> _Handler:
    """The protocol ``server`` would make for a connection, answering its
    parse errors as :class:`_Handler` does, kept in ``front``'s books until
    it closes, and reset when its client does not read for
    ``write_timeout`` seconds (0: never)."""
    # What web.Server.__call__ does, with our class.
    handler = _Handler(front, server, loop=server._loop, **server._kwargs)
    handler.write_timeout = write_timeout
    return handler


class FrontSite(web.BaseSite):
    """Serve ``front`` on ``host:port`` (or an already bound ``sock``), each
    connection's send buffer bounded at the front's ``send_buffer``
    (:func:`bound_send_buffers`)."""

    __slots__ = ("_front", "_host", "_port", "_reuse_port", "_sock")

    def __init__(self, runner: web.BaseRunner, front: Front, host: str | None = None,
                 port: int = 0, *, sock: socket.socket | None = None,
                 reuse_port: bool = False, backlog: int = 1024) -> None:
        super().__init__(runner, backlog=backlog)
        self._front = front
        self._host = host
        self._port = port
        self._sock = sock
        self._reuse_port = reuse_port

    @property
    def name(self) -> str:
        return f"http://{self._host or '0.0.0.0'}:{self.port}"

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose for port 0)."""
        sockets = getattr(self._server, "sockets", None)  # an asyncio.Server's
        if sockets:
            return int(sockets[0].getsockname()[1])
        return self._port

    async def start(self) -> None:
        await super().start()
        handoff = self._runner.server
        assert handoff is not None
        write_timeout = self._front.limits.write_timeout
        self._front.handoff = lambda front: handler_of(handoff, front,
                                                       write_timeout=write_timeout)
        loop = asyncio.get_running_loop()
        if self._sock is not None:
            server = await loop.create_server(self._front.connection, sock=self._sock,
                                              backlog=self._backlog, start_serving=False)
        else:
            server = await loop.create_server(
                self._front.connection, self._host, self._port, backlog=self._backlog,
                reuse_address=True, reuse_port=self._reuse_port or None, start_serving=False)
        self._server = server
        if self._front.limits.send_buffer:
            bound_send_buffers(server.sockets, self._front.limits.send_buffer)
        await server.start_serving()


def bound_send_buffers(listening: Iterable[socket.socket], size: int) -> None:
    """Fix the send buffer of every connection the ``listening`` sockets
    accept at ``size`` bytes (``SO_SNDBUF``; Linux doubles it, and caps it at
    ``net.core.wmem_max``), before they listen. An accepted socket inherits
    its listening socket's send buffer, fixed (on Linux and the BSDs: what
    nginx's ``listen ... sndbuf=`` relies on), so no connection costs a
    system call for it (one per accept would add 6.5 µs to each under
    uvloop, whose sockets are proxies). Fixed, the kernel no longer grows a
    connection's buffer: left to itself it grows it to ``tcp_wmem``'s largest
    (4 MiB) for a client that asks for answers and never reads them, until the
    write deadline cuts it, and a thousand of those push the host's TCP memory
    past the kernel's pressure mark, where every socket on it is squeezed.
    A connection handed to aiohttp keeps its socket, and so its bound."""
    for sock in listening:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
