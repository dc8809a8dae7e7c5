"""One backend origin, called with ``POST`` over a keep-alive pool of HTTP/1.1
connections: the send hook's calls and the webhooks' deliveries.

Why not ``aiohttp.ClientSession``: its calls were 29 % of a screened
send's samples in a profile of the pure build (its request and response
objects, its stream reader, its connector's bookkeeping;
``loadtest/bench_send.py --kinds hooked --profile``). A call here is one
``write`` of the request's bytes and httptools' parser on the answer's (the
parser the node's front uses for requests), on an ``asyncio.Protocol``.

**What it does.** :meth:`Origin.post` writes ``POST <path>`` with the body
and the given headers (``Host``, ``Content-Length`` and ``User-Agent``
added) on an idle connection, or on a new one, and returns the answer's
status and body (at most ``body_max`` bytes: past it the call fails and
the connection is closed; with ``body_max=None`` the body is read and
dropped, for a caller that wants only the status). ``http`` and ``https`` (the system's default
TLS context). No redirects, no proxies, no cookies, no compression asked
for: a backend answers plainly. ``within`` bounds a call's time (a
connection opened for it included; past it, ``TimeoutError``), by one loop
timer on the answer rather than an ``asyncio.timeout`` around the call
(a coroutine and a context each, the send hook's cost); without it the
caller bounds the call. A call cut short closes its connection, since the
answer may still come on it.

**Keep-alive.** A connection is reused while the origin keeps it open
(``Connection: close`` or HTTP/1.0 ends it) and closed after ``idle``
seconds unused (before the origin's own timeout, 60 s or more on common
servers, is likely to close it under a request). A request written on a
reused connection that closes before any byte of the answer (the origin
closed it meanwhile) is written once more on a new one. Idle connections
beyond ``connections`` are closed.

Limits: one request at a time per connection (no pipelining); callers
bound how many calls are in flight (the send hook's ``--send-hook-calls``);
an answer has a ``Content-Length`` or is chunked (one read to the close
fails); 1xx answers are not expected.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Final, cast
from urllib.parse import urlsplit

import httptools

from .errors import OriginError

USER_AGENT: Final = "liveroom"


class _Connection(asyncio.Protocol):
    """One connection to the origin: one request at a time."""

    __slots__ = ("_answer", "_body", "_body_max", "_got", "_over", "_parser", "_size",
                 "_status", "_timer", "keep", "transport", "used_at")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future[tuple[int, bytes]] | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._body_max: int | None = 0
        """None: the current answer's body is read and dropped."""
        self._status = 0
        self._got = False
        """Any byte of the current answer came."""
        self._over = False
        """The current answer's body passed ``_body_max``."""
        self._timer: asyncio.TimerHandle | None = None
        """The current answer's deadline."""
        self.keep = True
        """The origin lets it be reused."""
        self.used_at = 0.0

    # -- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no asyncio.Transport subclass; they act as one.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._got = True
        if self._answer is None:  # nothing asked: the origin speaks out of turn
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(OriginError(f"the answer is not HTTP/1.1: {exc}"))
            return
        if self._over:
            self._fail(OriginError(f"the answer is over {self._body_max} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep = False
        self.transport = None
        self._fail(OriginError("the connection closed before the whole answer"
                               + (f": {exc}" if exc else "")))

    # -- httptools callbacks --------------------------------------------------

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self._body_max is None:
            return
        self._size += len(body)
        if self._size > self._body_max:
            self._over = True
        elif not self._over:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._over:  # failed by data_received
            return
        answer, self._answer = self._answer, None
        self._stop_timer()
        if not self._parser.should_keep_alive():
            self.keep = False
        if answer is not None and not answer.done():
            answer.set_result((self._status, b"".join(self._body)))

    # -- calls --------------------------------------------------------------

    def ask(self, request: bytes, body_max: int | None,
            deadline: float | None) -> asyncio.Future[tuple[int, bytes]]:
        """Write ``request``; the future answers (status, body), or fails
        with ``TimeoutError`` at ``deadline`` (the loop's time; None: never)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        answer = self._answer = loop.create_future()
        self._body, self._size, self._body_max, self._got, self._over = [], 0, body_max, False, \
            False
        if deadline is not None:
            self._timer = loop.call_at(deadline, self._late)
        self.transport.write(request)
        return answer

    def _late(self) -> None:
        self._timer = None
        self._fail(TimeoutError("no whole answer in time"))

    def _stop_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    @property
    def answered_nothing(self) -> bool:
        """No byte of the current answer came (a reused connection closed
        by the origin before it read the request, most likely)."""
        return not self._got

    def _fail(self, exc: OSError) -> None:
        answer, self._answer = self._answer, None
        self._stop_timer()
        if answer is not None and not answer.done():
            answer.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.keep = False
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()


class Origin:
    """A backend origin (``url``'s scheme, host and port; ``url``'s path and
    query are the path posted to), called over at most ``connections`` idle
    keep-alive connections (see the module)."""

    def __init__(self, url: str, *, connections: int, idle: float = 30.0,
                 user_agent: str = USER_AGENT) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = \
            ssl.create_default_context() if parts.scheme == "https" else None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default_port = parts.port is None or parts.port == (443 if self._ssl else 80)
        host = parts.hostname if default_port else f"{parts.hostname}:{parts.port}"
        if ":" in parts.hostname and not parts.hostname.startswith("["):
            host = f"[{parts.hostname}]" if default_port else f"[{parts.hostname}]:{parts.port}"
        self._head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n").encode("ascii") \
            + f"User-Agent: {user_agent}\r\n".encode("ascii")
        self._connections = connections
        self._idle_for = idle
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._closed = False

    async def post(self, body: bytes, headers: dict[str, str], *, body_max: int | None,
                   within: float | None = None) -> tuple[int, bytes]:
        """``POST`` ``body`` with ``headers``: the answer's status and body
        (at most ``body_max`` bytes; ``None``: read and dropped). Raises :class:`OriginError` (an
        ``OSError``) when the call fails, ``TimeoutError`` when it took
        ``within`` seconds (None: the caller bounds its time)."""
        if self._closed:
            raise OriginError("the origin's connections are closed")
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        lines = [self._head]
        for name, value in headers.items():
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        lines.append(b"Content-Length: %d\r\n\r\n" % len(body))
        lines.append(body)
        request = b"".join(lines)
        # An idle connection is taken without a coroutine (the usual case).
        connection = self._take_idle()
        reused = connection is not None
        if connection is None:
            connection, reused = await self._open(False, deadline)
        # No await inside an except clause: compiled by mypyc, a coroutine
        # that suspends there leaves the exception as the one being handled
        # for whatever the loop runs next (the front's parser then took it
        # for its callbacks' error; found by the webhooks' tests).
        again = False
        try:
            answer = await connection.ask(request, body_max, deadline)
        except OriginError:
            if not (reused and connection.answered_nothing):
                self._drop(connection)
                raise
            again = True
        except BaseException:
            self._drop(connection)
            raise
        if again:
            # The origin closed an idle connection under us: once more, anew.
            self._drop(connection)
            connection, reused = await self._open(True, deadline)
            try:
                answer = await connection.ask(request, body_max, deadline)
            except BaseException:
                self._drop(connection)
                raise
        self._give_back(connection)
        return answer

    def _drop(self, connection: _Connection) -> None:
        """A call on ``connection`` failed: closed, never reused (its answer
        may still come on it)."""
        connection.close()
        self._busy.discard(connection)

    async def _open(self, fresh: bool, deadline: float | None) -> tuple[_Connection, bool]:
        """:meth:`_take`, given up at ``deadline`` (None: never). By
        ``asyncio.wait_for``, not ``async with asyncio.timeout``: compiled, an
        ``async with`` awaits its exit inside an except clause (see :meth:`post`)."""
        if deadline is None:
            return await self._take(fresh=fresh)
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(self._take(fresh=fresh), max(0.0, deadline - loop.time()))

    def _take_idle(self) -> _Connection | None:
        """An idle connection still fresh, now busy (None: none)."""
        idle = self._idle
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            connection = idle.pop()
            if connection.keep and connection.transport is not None \
                    and now - connection.used_at < self._idle_for:
                self._busy.add(connection)
                return connection
            connection.close()
        return None

    async def _take(self, *, fresh: bool = False) -> tuple[_Connection, bool]:
        """An idle connection still fresh (and whether it is reused), or a new one."""
        if not fresh:
            connection = self._take_idle()
            if connection is not None:
                return connection, True
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                _Connection, self.host, self.port, ssl=self._ssl)
        except OSError as exc:
            raise OriginError(f"no connection to {self.host}:{self.port}: {exc}") from exc
        self._busy.add(connection)
        return connection, False

    def _give_back(self, connection: _Connection) -> None:
        self._busy.discard(connection)
        if not connection.keep or self._closed or len(self._idle) >= self._connections:
            connection.close()
            return
        connection.used_at = asyncio.get_running_loop().time()
        self._idle.append(connection)

    def close(self) -> None:
        """Close every connection (calls in flight fail); no new call."""
        self._closed = True
        for connection in (*self._idle, *self._busy):
            connection.close()
        self._idle.clear()
        self._busy.clear()
