"""The front's request reader (``proxy/front/reader.py``) on its own: bytes
in; requests, refusals, hand-overs and "need more" out, with no socket, no
loop and no clock.

The framing corpus (``tests/front_corpus.py``) runs here against the reader
directly, as it runs over a real socket in ``tests/front/test_front_corpus.py``:
what the reader decides (each request routed or refused, in order) must be
the statuses a client sees. Where the corpus's answer comes from somewhere
else (a deadline of the connection, aiohttp after a hand-over), the test
says so and checks the reader's part of it. Then the reader's own rules:
the pipelining bound and its backlog, the bytes kept for a hand-over,
``100 Continue`` only when nothing is answered before it, what a trusted
proxy's request keeps, and a stream split anywhere reading as the whole.
"""

from __future__ import annotations

import itertools

import pytest
from front_corpus import CASES, Case, _head, _poll, _send
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from request_streams import streams
from support import BASE, PUBLISHER

from proxy.front.limits import FrontLimits, HeadRules
from proxy.front.reader import BACKLOG_MAX, WHOLE_READ, Arriving, Fed, Request, RequestReader
from proxy.front.routing import KINDS, LIKE, POLL, SEND
from proxy.front.whole import WholeRead, read_whole
from proxy.sends.send import send_heads


def heads() -> tuple[HeadRules | None, ...]:
    """The front's head rules by route, as a node at its defaults gives them
    (a like's are a send's: ``proxy/role.py``)."""
    rules = send_heads(BASE)
    found: list[HeadRules | None] = [None] * KINDS
    found[SEND] = found[LIKE] = rules
    return tuple(found)


class Answering:
    """A connection as the front is one: it takes each request as it is
    complete (the status it will answer is noted then) and answers a send
    or a refusal at once, a poll (the first of a new room waits for the
    room) once the read that brought it has been parsed. ``busy``: a poll
    is held and nothing more is answered until :meth:`answer_all`."""

    def __init__(self, limits: FrontLimits | None = None, busy: bool = False) -> None:
        self.reader = RequestReader(limits or FrontLimits(), heads(), self)
        self.statuses: list[int] = []
        self.requests: list[Request] = []
        self.busy = busy
        self.current: Request | None = None
        self.closed = False

    def on_request(self, req: Request) -> None:
        self._take()

    def _take(self) -> None:
        waiting = self.reader.waiting
        while self.current is None and waiting and not self.closed:
            req = waiting.pop(0)
            self.requests.append(req)
            self.statuses.append(req.error.status if req.error is not None
                                 else 200 if req.kind == POLL else 201)
            self.closed = req.close_after or not req.keep_alive
            if req.kind == POLL and req.error is None:
                self.current = req

    def answering(self) -> bool:
        return self.busy or self.current is not None

    def on_continue(self) -> None:
        self.statuses.append(100)

    def answer_all(self) -> Fed:
        """Hold nothing more: answer every poll taken, waiting or kept."""
        self.busy = False
        return self._answer_polls(Fed.READ)

    def _answer_polls(self, fed: Fed) -> Fed:
        while not self.busy and not self.closed:
            self.current = None  # the poll's room arrived: answered
            self._take()
            if self.current is None:
                if fed is not Fed.READ or self.reader.backlog is None:
                    break
                fed = self.reader.resume()
        return fed

    def read(self, *pieces: bytes) -> Fed:
        """Each piece as one read; between reads the polls taken are
        answered (unless ``busy``) and the backlog parsed as answers free
        places."""
        fed = Fed.READ
        for piece in pieces:
            fed = self._answer_polls(self.reader.receive(piece))
            if fed is not Fed.READ or self.closed:
                break
        return fed


def _without_the_reader(case: Case) -> str | None:
    """Why the corpus's answer for ``case`` is not the reader's alone."""
    if case.name == "absolute-form":
        return "handed over: aiohttp answers it"
    if case.name == "a-trailing-byte-after-an-answered-poll":
        return "the byte after it: the head deadline closes"
    if not case.answers:
        return "no request: the connection's deadlines or the FIN close it"
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_corpus_against_the_reader(case: Case) -> None:
    conn = Answering()
    fed = conn.read(case.raw)
    reason = _without_the_reader(case)
    if fed is Fed.HAND_OFF:
        assert reason == "handed over: aiohttp answers it"
        assert conn.statuses == []
        assert conn.reader.raw == [case.raw]
        return
    if reason is not None and not case.answers:
        assert conn.statuses == []
        assert fed is Fed.READ
        return
    assert conn.statuses == list(case.answers)
    stops = fed is Fed.REFUSED or conn.closed
    if reason is None and not case.half_close:
        assert stops == case.closes
    elif reason is not None:
        assert conn.reader.arriving() is Arriving.HEAD  # the deadline's part


def test_at_most_max_pipelined_wait_and_the_rest_waits_unparsed() -> None:
    conn = Answering(busy=True)  # a held poll: nothing is answered
    assert conn.read(_poll("p") * 10) is Fed.READ
    assert conn.current is not None  # the first, held
    reader = conn.reader
    assert reader.places() == 0  # 4 begun: waiting, or the last still arriving
    assert len(reader.waiting) + (reader.arriving() is not Arriving.NOTHING) == 4
    assert conn.reader.backlog is not None
    assert conn.reader.backlog.count(b"GET ") >= 5
    conn.answer_all()
    assert conn.statuses == [200] * 10


def test_a_client_too_far_ahead_of_its_answers_is_refused_after_those_waiting() -> None:
    conn = Answering(busy=True)
    fed = conn.read(_poll("p") * (BACKLOG_MAX // len(_poll("p")) + 10))
    assert fed is Fed.REFUSED
    assert conn.reader.stopped
    conn.answer_all()
    assert conn.statuses == [200, 200, 200, 200, 400]
    assert conn.closed


def test_a_request_beginning_a_read_is_kept_whole_for_the_hand_over() -> None:
    conn = Answering()
    head = _head("GET /v1/stats/rooms/r HTTP/1.1", "Host: t")
    assert conn.read(_poll("p")) is Fed.READ
    assert conn.read(head[:10], head[10:]) is Fed.HAND_OFF
    assert conn.reader.raw == [head[:10], head[10:]]


def test_a_request_behind_a_poll_in_the_same_read_cannot_be_handed_over() -> None:
    conn = Answering()
    fed = conn.read(_poll("p") + _head("GET /v1/stats/rooms/r HTTP/1.1", "Host: t"))
    assert fed is Fed.REFUSED
    assert conn.statuses == [200, 400]


def test_100_continue_goes_only_when_nothing_is_answered_before_it() -> None:
    idle = Answering()
    idle.read(_send("r", "Expect: 100-continue"))
    assert idle.statuses == [100, 201]
    busy = Answering(busy=True)
    busy.read(_send("r", "Expect: 100-continue"))
    assert 100 not in busy.statuses
    refused = Answering()
    fed = refused.read(_send("r", "Expect: 100-continue", "Content-Encoding: gzip"))
    assert fed is Fed.REFUSED
    assert refused.statuses == [415]


def test_x_forwarded_for_is_kept_only_from_a_trusted_proxy() -> None:
    request = _poll("p", "X-Forwarded-For: 203.0.113.9", "X-Forwarded-For: 10.0.0.1")
    plain = Answering()
    plain.read(request)
    assert plain.requests[0].forwarded is None
    proxied = Answering()
    proxied.reader.proxied = True
    proxied.read(request)
    assert proxied.requests[0].forwarded == b"203.0.113.9,10.0.0.1"


def test_a_half_arrived_request_says_what_it_waits_for() -> None:
    conn = Answering()
    send = _send("r")
    conn.read(send[:20])
    assert conn.reader.arriving() is Arriving.HEAD
    conn.read(send[20:-3])
    assert conn.reader.arriving() is Arriving.BODY
    conn.read(send[-3:])
    assert conn.reader.arriving() is Arriving.NOTHING
    assert conn.statuses == [201]


def test_a_dropped_reader_reads_nothing_more() -> None:
    conn = Answering(busy=True)
    conn.read(_poll("p") * 6)
    assert conn.reader.waiting
    assert conn.reader.backlog is not None
    conn.reader.drop()
    assert conn.reader.stopped
    assert not conn.reader.waiting
    assert conn.reader.backlog is None
    assert conn.reader.resume() is Fed.READ
    assert conn.reader.arriving() is Arriving.NOTHING
    assert conn.answer_all() is Fed.READ
    assert conn.statuses == [200]


@settings(max_examples=200, deadline=None)
@given(stream=streams, cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_a_stream_split_anywhere_reads_as_the_whole(stream: bytes, cuts: list[int]) -> None:
    """Except an ``Expect: 100-continue`` behind a poll: whether the poll was
    answered before that head arrived is when the reads came, and decides
    the 100 (or the refusal at once) by design (the test above)."""
    poll = stream.find(b"/poll")
    assume(poll < 0 or stream.find(b"100-continue", poll) < 0)
    marks = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    pieces = [stream[a:b] for a, b in itertools.pairwise(marks) if b > a]
    whole, split = Answering(), Answering()
    whole_fed, split_fed = whole.read(stream), split.read(*pieces)
    assert split.statuses == whole.statuses
    assert split.closed == whole.closed
    if not whole.closed:  # (after a close, what follows is never read)
        assert split_fed == whole_fed


# -- a request read whole, without llhttp ------------------------------------------

_METHODS = st.sampled_from(["GET", "POST", "PUT", "get", "HEAD", "POST "])
_TARGETS = st.sampled_from([
    "/v1/rooms/r1/messages", "/v1/rooms/r1/likes", "/v1/rooms/r1/poll?uid=a&seq=0",
    "/v1/rooms/r%31/messages", "/v1/rooms/bad%20room/messages", "/v1/rooms//messages",
    "/v1/rooms/../messages", "/healthz", "/v1/rooms/r1/messages#x", "/v1/rooms/r1/poll?a b",
    "/v1/rooms/r1/poll?q=\x7f", "/v1/rooms/r\xe91/poll", "http://h/v1/rooms/r1/poll", ""])
_VERSIONS = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ", "http/1.1"])
_NAMES = st.sampled_from([
    "Host", "Content-Type", "content-type", "CONTENT-TYPE", "Content-Length", "content-length",
    "Authorization", "authorization", "Accept", "X-Forwarded-For", "x-forwarded-for",
    "Connection", "connection", "Proxy-Connection", "Transfer-Encoding", "Expect", "Upgrade",
    "Content-Encoding", "X-Custom", "User-Agent", "X_Under", "X.Dot", " Folded", "Bad Name",
    "-", "Caf\xe9"])
_VALUES = st.sampled_from([
    "keep-alive", "Keep-Alive", "close", "application/json", "application/msgpack",
    "  padded  ", "chunked", "100-continue", f"Bearer {PUBLISHER}", "Bearer nope",
    "1.2.3.4", "", "a\tb", "caf\xe9", "\x01", "a\rb", "a\x7f", "\x00", "gzip", "identity",
    "5", "0", "abc", "+5",
    "007", "1234567890"])
_BODIES = st.sampled_from([
    b"", b'{"uid":"u","body":"hi"}', b'{"uid":"u"', b"x" * 40])
_TAILS = st.sampled_from([b"", b"GE", b"GET /v1/rooms/r1/poll?uid=a HTTP/1.1\r\n\r\n", b"\r\n"])


@st.composite
def _requests(draw: st.DrawFn) -> bytes:
    """One request as a client may write it: mostly plain, often not quite."""
    body = draw(_BODIES)
    headers = draw(st.lists(st.tuples(_NAMES, _VALUES), max_size=6))
    length = draw(st.sampled_from(["right", "none", "wrong"]))
    if length == "right":
        headers.append(("Content-Length", str(len(body))))
    elif length == "wrong":
        headers.append(("Content-Length", str(len(body) + draw(st.sampled_from([-1, 1, 50])))))
    headers = draw(st.permutations(headers))
    eol = draw(st.sampled_from(["\r\n", "\r\n", "\r\n", "\n"]))
    line = f"{draw(_METHODS)} {draw(_TARGETS)} {draw(_VERSIONS)}"
    head = eol.join([line, *(f"{n}:{draw(st.sampled_from([' ', '', '  ']))}{v}"
                             for n, v in headers)])
    return (head + eol + eol).encode("latin-1") + body + draw(_TAILS)


def _outcome(conn: Answering, fed: Fed) -> list[object]:
    """What a reader's connection saw: every field a route reads, in order."""
    seen: list[object] = [fed, conn.statuses, conn.closed, conn.reader.arriving(),
                          conn.reader.raw is None, conn.reader.stopped]
    seen += [_fields(req) for req in conn.requests]
    return seen


def _fields(req: Request) -> tuple[object, ...]:
    """Every field of ``req`` a route reads (its body however it was read)."""
    body = None if req.body is None and req.whole is None else req.content()
    return (req.method, req.http10, req.accept, req.content_type, req.content_length,
            req.content_encoding, req.authorization, req.expect, req.kind, req.room,
            req.query, req.keep_alive, req.close_after, body, req.discarded,
            None if req.error is None else (req.error.status, req.error.body), req.forwarded)


_WHOLE_READS: list[WholeRead] = list(dict.fromkeys([read_whole, WHOLE_READ]))
"""The whole reads of this build: the pure one, and on the compiled build the
one at C level (``proxy/front/whole_c.pyx``), which the reader takes there
(``tests/node/test_compiled_build.py`` checks it is taken)."""


def _which(read: WholeRead) -> str:
    return "pure" if read is read_whole else "c"


_NAMES_PLAIN = st.sampled_from([
    "Host", "host", "HOST", "Accept", "accept", "Content-Type", "content-type", "CoNtEnT-TyPe",
    "Authorization", "authorization", "X-Forwarded-For", "x-forwarded-for", "Connection",
    "connection", "CONNECTION", "Proxy-Connection", "Upgrade", "Expect", "Transfer-Encoding",
    "Content-Encoding", "User-Agent", "X-Thing", "X_Thing", "-", "A-", "Content-Length",
    "content-length"])
_VALUES_PLAIN = st.sampled_from([
    "", "x", "keep-alive", "Keep-Alive", "close", "keep-alive ", "application/json", "Bearer t",
    "10.0.0.1", "2", "007", "1234567890", "-1"])


@st.composite
def _plain_requests(draw: st.DrawFn) -> bytes:
    """A request that is mostly what a whole read takes, one detail off now and then."""
    method, path = draw(st.sampled_from([("GET", "/poll"), ("POST", "/messages"),
                                         ("POST", "/likes"), ("GET", "/messages")]))
    room = draw(st.sampled_from(["r1", "a%20b", "x" * 70, "", "r/1"]))
    query = draw(st.sampled_from(["", "?uid=a&seq=1", "?", "?a=%zz+b"]))
    body = draw(st.sampled_from([b"", b"{}", b'{"uid":"u","body":"hi"}']))
    headers = draw(st.lists(st.tuples(_NAMES_PLAIN, _VALUES_PLAIN), max_size=6))
    if draw(st.booleans()):
        headers.append(("Content-Length", str(len(body))))
    space = draw(st.sampled_from([" ", "", "  "]))
    head = "\r\n".join([f"{method} /v1/rooms/{room}{path}{query} HTTP/1.1",
                         *(f"{n}:{space}{v}" for n, v in headers)])
    return (head + "\r\n\r\n").encode() + body


@pytest.mark.parametrize("read", _WHOLE_READS, ids=_which)
@settings(max_examples=400, deadline=None)
@given(raw=st.one_of(_requests(), _plain_requests()), proxied=st.booleans())
def test_a_request_read_whole_is_what_llhttp_would_have_given(read: WholeRead, raw: bytes,
                                                               proxied: bool) -> None:
    """Each whole read of this build (``proxy.front.whole.read_whole``; on
    the compiled build also the one at C level) against llhttp's callbacks,
    on the same bytes: the same requests with the same fields, the same
    refusals and hand-overs, the same state after."""
    whole, llhttp = Answering(), Answering()
    whole.reader.whole_read = read
    llhttp.reader.whole_read = None
    whole.reader.proxied = llhttp.reader.proxied = proxied
    assert _outcome(whole, whole.read(raw)) == _outcome(llhttp, llhttp.read(raw))


@pytest.mark.parametrize("read", _WHOLE_READS, ids=_which)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_corpus_reads_alike_whole_and_through_llhttp(read: WholeRead, case: Case) -> None:
    """The framing corpus through each whole read of this build and through
    llhttp alone, each as one read and split before its last byte: the
    same requests, refusals, hand-overs and state after."""
    for reads in ([case.raw], [case.raw[:-1], case.raw[-1:]]):
        whole, llhttp = Answering(), Answering()
        whole.reader.whole_read = read
        llhttp.reader.whole_read = None
        pieces = [data for data in reads if data]
        assert _outcome(whole, whole.read(*pieces)) == _outcome(llhttp, llhttp.read(*pieces))


@pytest.mark.parametrize("read", _WHOLE_READS, ids=_which)
@settings(max_examples=300, deadline=None)
@given(raw=st.one_of(_requests(), _plain_requests(), st.binary(max_size=300)),
       proxied=st.booleans())
def test_the_whole_reads_read_alike(read: WholeRead, raw: bytes, proxied: bool) -> None:
    """The whole read at C level against the pure one, field by field, on
    requests and on any bytes (on the pure build, the pure one against
    itself called twice: nothing to compare but its determinism)."""
    def fields(req: Request | None) -> object:
        # How the body was read too (both reads give it whole, never gathered).
        return None if req is None else (_fields(req), req.whole, req.body)
    limits, rules = FrontLimits(), heads()
    assert fields(read(raw, limits, rules, proxied)) == fields(
        read_whole(raw, limits, rules, proxied))


@pytest.mark.parametrize("raw", [
    # wrk's send, as loadtest/bench_send.py writes it
    b"POST /v1/rooms/r1/messages HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: "
    b"application/json\r\nAuthorization: Bearer t\r\nContent-Length: 2\r\n\r\n{}",
    # curl's send
    b"POST /v1/rooms/r1/messages HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: curl/7.88.1"
    b"\r\nAccept: */*\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    # aiohttp's like and a browser's poll
    b"POST /v1/rooms/r1/likes HTTP/1.1\r\nHost: h\r\nAccept: */*\r\nAccept-Encoding: gzip, "
    b"deflate\r\nUser-Agent: Python/3.11 aiohttp/3.9.5\r\nContent-Length: 2\r\nContent-Type: "
    b"application/json\r\n\r\n{}",
    b"GET /v1/rooms/r1/poll?uid=a&seq=0 HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n"
    b"Accept: application/json\r\nOrigin: http://h\r\nSec-Fetch-Mode: cors\r\nReferer: "
    b"http://h/r1\r\nAccept-Language: en-US,en;q=0.9\r\n\r\n",
])
@pytest.mark.parametrize("read", _WHOLE_READS, ids=_which)
def test_the_usual_clients_requests_are_read_whole(read: WholeRead, raw: bytes) -> None:
    """What the differential test above holds to llhttp's reading is the
    path most requests take: each of these is taken whole."""
    req = read(raw, FrontLimits(), heads(), False)
    assert req is not None
    assert req.error is None
    conn = Answering()
    conn.read(raw)
    assert len(conn.requests) == 1
    assert conn.requests[0].error is None
