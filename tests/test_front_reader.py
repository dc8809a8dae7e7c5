"""The front's request reader (``proxy/request_reader.py``) on its own: bytes
in; requests, refusals, hand-overs and "need more" out, with no socket, no
loop and no clock.

The framing corpus (``tests/front_corpus.py``) runs here against the reader
directly, as it runs over a real socket in ``tests/test_front_corpus.py``:
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
from hypothesis import given, settings
from hypothesis import strategies as st
from support import ADMIN, BASE, PUBLISHER
from test_front_streams import streams

from liveroom.clock import FakeClock
from liveroom.metrics import Metrics
from liveroom.store.base import LogPolicy
from liveroom.store.memory import MemoryStore
from proxy.auth import Tokens
from proxy.front_limits import FrontLimits
from proxy.request_reader import BACKLOG_MAX, Arriving, Fed, Request, RequestReader
from proxy.routing import POLL
from proxy.send import Sends


def heads() -> Sends:
    """The send path's own head rules (:meth:`proxy.send.Sends.check_head`),
    at a node's defaults, over a memory log nothing is sent to."""
    clock = FakeClock()
    return Sends(BASE, MemoryStore(LogPolicy(), clock).log,
                 Tokens(admin=ADMIN, publisher=PUBLISHER), clock, Metrics())


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
    marks = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    pieces = [stream[a:b] for a, b in itertools.pairwise(marks) if b > a]
    whole, split = Answering(), Answering()
    whole_fed, split_fed = whole.read(stream), split.read(*pieces)
    assert split.statuses == whole.statuses
    assert split.closed == whole.closed
    if not whole.closed:  # (after a close, what follows is never read)
        assert split_fed == whole_fed
