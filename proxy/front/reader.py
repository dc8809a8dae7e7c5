"""Requests read from a connection's bytes: HTTP/1.1 framing and its bounds,
with no I/O.

A :class:`RequestReader` is given what a connection reads and gives back
complete requests, in order, to its ``on_request``: each routed (a row of
the routing table, :mod:`.routing`) and, on a route with a body, with its
body gathered under that route's head rules
(:class:`~.limits.HeadRules`), or carrying the error that answers it. It
also says when it stopped: a refusal (the last request it gives carries it,
then nothing more is read) or a
hand-over (the request is not a listener route: the connection goes to
aiohttp with :attr:`RequestReader.raw`, every byte since that request
began). It holds no transport, reads no clock and writes nothing; deadlines,
flow control and answers are the connection's (:mod:`.connection`).
``tests/front/test_front_reader.py`` runs the framing corpus against it directly.

**HTTP.** Keep-alive (HTTP/1.1 by default, HTTP/1.0 when asked), pipelined
requests (at most ``max_pipelined`` complete ones wait: the rest of a read
stays unparsed, in :attr:`RequestReader.backlog`, until the connection
answers and calls :meth:`RequestReader.resume`; a client more than
:data:`BACKLOG_MAX` bytes ahead of its answers is refused, after the waiting
ones), ``Expect: 100-continue`` on a route with a body, chunked request bodies, and
limits: URL (414), header count and bytes (431), body (413; an oversized
body is read and dropped up to :data:`DISCARD_MAX`, past that the refusal
stops the reader), and every byte read for one request, framing and chunk
extensions included (``max_request_bytes``, 413 and stop). A malformed
request is refused (400); so is a request asking to upgrade the protocol
(``Upgrade``, ``CONNECT``): llhttp would skip its body and hand what follows
back as a new request (request smuggling), so nothing after it is parsed. A
header that decides how a request is framed or who sends it
(``Authorization``, ``Content-Type``, ``Content-Encoding``,
``Content-Length``, ``Transfer-Encoding``, ``Expect``) given twice is a
400: two readers could pick different copies. HTTP versions other than 1.0
and 1.1 get a 505. A request that is not a listener route is handed over
when it begins a read (a client waiting for each answer); one pipelined
right behind a listener request in the same read cannot be told apart from
it and is refused.

**Whole reads.** A plain request that arrives whole in one read, with nothing
after it, and that llhttp would read without a refusal, is read without llhttp
(:func:`~.whole.read_whole`): its callbacks cost more than the rest of
a send. Whatever is not plain (a refusal to make, a hand-over, chunks,
``Expect``, pipelining, a request split over reads) goes to llhttp, which
stays the reference: ``tests/front/test_front_reader.py`` holds the two readings
equal on generated requests.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final, Protocol

import httptools

from liveroom.errors import LiveroomError

from ..reply import Reply, error_reply, failure_reply
from .headers import (
    ACCEPT,
    AUTHORIZATION,
    CONTENT_ENCODING,
    CONTENT_LENGTH,
    CONTENT_TYPE,
    EXPECT,
    FORWARDED,
    HEADERS,
    ONCE,
    OTHER,
    SPELLED,
)
from .limits import FrontLimits, HeadRules
from .request import Request
from .routing import METHODS, route
from .whole import WholeRead, whole_read

__all__ = ["BACKLOG_MAX", "Arriving", "Fed", "Request", "RequestReader"]

WHOLE_READ: Final = whole_read()
"""The whole read of this build: at C level where it was built (Cython,
:mod:`.whole_c`), else :func:`~.whole.read_whole`."""

MIN_REQUEST: Final = 16
"""Bytes of the shortest request llhttp accepts (``GET / HTTP/1.1`` and
CRLFs is 18): two requests cannot begin closer than this."""
BACKLOG_MAX: Final = 32 * 1024
"""Bytes read and kept unparsed while requests wait their turn; a client
pipelining more than this ahead of its answers is refused."""
DISCARD_MAX: Final = 64 * 1024
"""Bytes of a refused body read and dropped to keep the connection; past
this the reader stops after the refusal."""

class Arriving(enum.IntEnum):
    """What of a request is still to come (the connection's deadline follows it)."""

    NOTHING = 0
    HEAD = 1
    BODY = 2


class Fed(enum.IntEnum):
    """How a :meth:`RequestReader.feed` ended."""

    READ = 0
    """Everything was parsed or kept (more may come)."""
    REFUSED = 1
    """The reader stopped: the last request given carries the refusal."""
    HAND_OFF = 2
    """The reader stopped: the connection goes to aiohttp."""


class Answerer(Protocol):
    """The connection a reader reads for."""

    def on_request(self, req: Request) -> None:
        """``req`` is complete and waits (last) in ``waiting``: called from
        inside :meth:`RequestReader.feed`, so that the connection may answer
        it before the rest of the read is parsed. (websockets' pull model,
        parse a read whole, then take its requests, was tried: the first of
        a read then still waits while the rest are parsed, so the pipelining
        bounds trip one request sooner and the corpus's answers change; and
        the connection's guard would stay, since a poll may answer inside
        its own start.)"""

    def answering(self) -> bool:
        """Whether a request is being answered now."""

    def on_continue(self) -> None:
        """Write ``100 Continue``: a request's head asks for it and nothing is
        answered or waits before it. (When nothing is, a request refused by its
        head is answered at once instead: its client waits before sending
        the body.)"""


class _Refuse(Exception):
    """Stop parsing: answer ``reply``, then read nothing more."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply


class _HandOff(Exception):
    """Stop parsing: the request is not ours, aiohttp takes the connection."""


class RequestReader:
    """The parsing side of one connection (see the module's docstring); what
    it reads goes to ``answerer``."""

    __slots__ = (
        "_answerer",
        "_between",
        "_feeding",
        "_fresh",
        "_heads",
        "_inflow",
        "_limits",
        "_parser",
        "_req",
        "backlog",
        "proxied",
        "raw",
        "stopped",
        "waiting",
        "whole_read",
    )

    def __init__(self, limits: FrontLimits, heads: Sequence[HeadRules | None],
                 answerer: Answerer) -> None:
        self._limits = limits
        self._heads = heads
        """Each route's head rules, by kind (None: a route without a body)."""
        self._answerer = answerer
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        """None between two requests while nothing is to parse (a parser costs
        more memory than the rest of a held poll); made again when bytes arrive."""
        self._req: Request | None = None
        """The request being parsed."""
        self.waiting: list[Request] = []
        """Complete requests waiting their turn (the connection takes them)."""
        self.backlog: bytes | None = None
        """Bytes read but not parsed while ``max_pipelined`` requests wait."""
        self.raw: list[bytes] | None = []
        """Bytes read since a request began at the start of a read, until it is
        routed (to hand the connection to aiohttp); None when none did."""
        self.proxied = False
        """From a trusted proxy: ``X-Forwarded-For`` is kept (see ``forwarded``)."""
        self.stopped = False
        """Refused or handed over (or told by the connection): parse no more."""
        self._between = True
        """The parser stands between two requests."""
        self._fresh = False
        """This read began between two requests (its bytes start a request)."""
        self._inflow = 0
        """Bytes read since the last request was complete."""
        self._feeding = False
        self.whole_read: WholeRead | None = WHOLE_READ
        """How a plain request that arrives whole in one read is read without
        llhttp: the build's whole read (:data:`WHOLE_READ`); None: every
        request through llhttp (the differential test compares them)."""

    # -- what the connection asks ----------------------------------------------

    def arriving(self) -> Arriving:
        """What of the request being parsed is still to come."""
        req = self._req
        if req is None:
            return Arriving.NOTHING
        return Arriving.BODY if req.method else Arriving.HEAD

    def places(self) -> int:
        """Requests that may still begin before ``max_pipelined`` wait."""
        return (self._limits.max_pipelined - len(self.waiting)
                - (self._req is not None))

    def full(self) -> bool:
        """As many requests wait as may: read no more until they are answered."""
        return len(self.waiting) >= self._limits.max_pipelined

    def idle(self) -> bool:
        """Nothing waits and nothing is half-arrived."""
        return self._req is None and not self.waiting

    def receive(self, data: bytes) -> Fed:
        """A read from the socket: keep it for a hand-over if a request begins
        with it, then parse it."""
        if self._between:
            whole_read = self.whole_read
            if whole_read is not None and self._req is None and not self.waiting \
                    and not self.stopped and self.backlog is None:
                req = whole_read(data, self._limits, self._heads, self.proxied)
                if req is not None:
                    # As llhttp's callbacks leave a request that arrived whole.
                    self.raw = None
                    self._inflow = 0
                    self.waiting.append(req)
                    self._answerer.on_request(req)
                    return Fed.READ
            self.raw, self._fresh = [data], True
        elif self.raw is not None:
            self.raw.append(data)
        self._inflow += len(data)
        return self.feed(data)

    def resume(self) -> Fed:
        """Parse the backlog, if there is one and answers freed places for it
        (not from inside a feed: the feed goes on with it)."""
        backlog = self.backlog
        if backlog is None or self._feeding or self.stopped or self.places() <= 0:
            return Fed.READ
        self.backlog = None
        return self.feed(backlog)

    def stop(self) -> Request | None:
        """Parse no more (the client half-closed, or the connection gives up
        on it): the request half-arrived, if any, is dropped and returned."""
        self.stopped = True
        req, self._req = self._req, None
        return req

    def drop(self) -> None:
        """The connection is closed (or aiohttp's): stop, and drop what waits,
        what is kept and the parser (it refers back to this reader, and this
        reader to its connection: a cycle only gc would free)."""
        self.stopped = True
        self._req = None
        self.waiting.clear()
        self.backlog = None
        self._parser = None
        self._answerer = _NOBODY

    def rest(self) -> None:
        """Nothing to parse for now: let the parser go (see ``_parser``)."""
        if self._req is None and not self.waiting and not self._feeding and self.backlog is None:
            self._parser = None

    def refuse(self, reply: Reply) -> None:
        """Stop, and give ``reply`` as the answer to the request half-arrived
        (or to none) after those waiting."""
        self.stopped = True
        req = self._req or Request()
        self._req = None
        req.error, req.close_after = reply, True
        self.waiting.append(req)

    def feed(self, data: bytes) -> Fed:
        """Parse ``data`` (read now, or kept from an earlier read)."""
        try:
            self._feed(data)
            if self._req is not None and self._inflow > self._limits.max_request_bytes:
                raise _Refuse(error_reply(
                    413, "too_large",
                    f"more than {self._limits.max_request_bytes} bytes read for one request"))
        except _Refuse as refusal:
            self.refuse(refusal.reply)
            return Fed.REFUSED
        except httptools.HttpParserCallbackError as exc:
            # httptools raises what a callback raised as this error's context.
            cause = exc.__context__
            if not isinstance(cause, (_HandOff, _Refuse)):
                raise (cause or exc) from None  # the connection's own callback failed
            # Its traceback holds the frames of this reader's feed, which hold
            # the exception: a cycle that would keep the connection until gc.
            cause.__traceback__ = exc.__traceback__ = None
            if isinstance(cause, _HandOff):
                self.stopped = True
                return Fed.HAND_OFF
            self.refuse(cause.reply)
            return Fed.REFUSED
        except httptools.HttpParserError as exc:
            self.refuse(error_reply(400, "bad_request", f"malformed HTTP request: {exc}"))
            return Fed.REFUSED
        return Fed.READ

    # -- parsing ----------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpRequestParser(self)
        self._feeding = True
        try:
            places = self.places()
            # Each request line names its version once: a read with no more of
            # them than free places cannot fill the queue (a header that says
            # " HTTP/" only sends it the slow way).
            if data.count(b" HTTP/") <= places:
                self._feed_to(parser, data)
            else:
                self._feed_pieces(parser, data, places)
        finally:
            self._feeding = False

    def _feed_pieces(self, parser: httptools.HttpRequestParser, data: bytes,
                     places: int) -> None:
        """Feed a read that holds more requests than may wait, a piece at a
        time: a piece of ``places`` times :data:`MIN_REQUEST` bytes cannot begin
        more requests than there are places. What is left when no place is
        kept (at most :data:`BACKLOG_MAX` bytes, else the client is refused)."""
        at, size = 0, len(data)
        while at < size:
            if places <= 0:
                rest = data[at:]
                if len(rest) > BACKLOG_MAX:
                    raise _Refuse(error_reply(
                        400, "bad_request",
                        f"more than {BACKLOG_MAX} bytes of requests pipelined ahead of their "
                        "answers: read the answers before sending more"))
                self.backlog = rest
                return
            end = at + places * MIN_REQUEST
            self._feed_to(parser, data[at:end])
            at = end
            if self.stopped:
                return  # the connection stopped it while answering
            places = self.places()

    @staticmethod
    def _feed_to(parser: httptools.HttpRequestParser, data: bytes) -> None:
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Upgrades are refused when their head completes (_UPGRADE); should
            # llhttp still stop at one, what follows is never parsed as HTTP.
            raise _Refuse(_UPGRADE) from None

    # -- parser callbacks: record what arrived ----------------------------------

    def on_message_begin(self) -> None:
        """A request begins, at its first byte."""
        self._req = Request()
        self._between = False
        if self._fresh:
            self._fresh = False
        else:
            self.raw = None  # began inside a read: its bytes cannot be told apart

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
        code = SPELLED.get(name, -1)
        if code < 0:
            code = HEADERS.get(name.lower(), OTHER)
        if code == OTHER:
            return
        if code & ONCE:
            if req.seen & code:
                raise _Refuse(error_reply(
                    400, "bad_request",
                    f"repeated header: {name.decode('latin-1').title()} (send it once)"))
            req.seen |= code
        if code == CONTENT_TYPE:
            req.content_type = value.decode("latin-1")
        elif code == CONTENT_LENGTH:
            # Not contextlib.suppress: an object per request on the send path.
            try:  # noqa: SIM105
                req.content_length = int(value)
            except ValueError:
                pass  # llhttp refuses the request
        elif code == AUTHORIZATION:
            req.authorization = value
        elif code == ACCEPT:
            req.accept = value.decode("latin-1")
        elif code == CONTENT_ENCODING:
            req.content_encoding = value.decode("latin-1")
        elif code == EXPECT:
            req.expect = value.lower() == b"100-continue"
        elif code == FORWARDED and self.proxied:
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
            if self.raw is None:
                raise _Refuse(error_reply(
                    400, "bad_request",
                    "only polls, sends and likes may be pipelined on this connection: send "
                    "this request on a connection of its own"))
            raise _HandOff
        self.raw = None
        req.kind, req.room, req.query = found
        method = METHODS[req.kind]
        rules = self._heads[req.kind]
        if req.method != method:
            req.error = _not_allowed(method.decode())
        elif rules is not None:
            try:
                rules.check_head(req.room, req.content_encoding, req.content_length)
            except LiveroomError as exc:
                req.error = failure_reply(exc)
                if (req.content_length or 0) > DISCARD_MAX:
                    raise _Refuse(req.error) from None  # not worth reading to keep the connection
            else:
                req.body = bytearray()
            if req.expect and not self.waiting and not self._answerer.answering():
                if req.error is None:
                    self._answerer.on_continue()
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
            rules = self._heads[req.kind]
            assert rules is not None  # a body is gathered only under a route's rules
            if len(req.body) > rules.body_limit:
                req.discarded, req.body = len(req.body), None
                req.error = failure_reply(rules.too_large())
        if req.discarded > DISCARD_MAX:
            req.close_after = True
            raise _Refuse(req.error or _NO_BODY)

    def on_message_complete(self) -> None:
        req = self._req
        assert req is not None
        self._req = None
        self._between = True
        self._inflow = 0
        self.waiting.append(req)
        self._answerer.on_request(req)


class _Nobody:
    """The answerer of a reader whose connection is gone."""

    def on_request(self, req: Request) -> None:
        pass

    def answering(self) -> bool:
        return True

    def on_continue(self) -> None:
        pass


_NOBODY: Answerer = _Nobody()

_UPGRADE: Final = error_reply(400, "bad_request",
                       "protocol upgrades (Upgrade, CONNECT) are not served here; nothing "
                       "after this request is read")


_NO_BODY: Final = error_reply(413, "too_large", "this route takes no request body")
"""The refusal of a body too large to drop on a route that takes none (a
``GET`` with more than :data:`DISCARD_MAX` bytes of body)."""


def _not_allowed(method: str) -> Reply:
    return error_reply(405, "method_not_allowed", f"use {method} on this path")
