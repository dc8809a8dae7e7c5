"""The front against generated request streams (hypothesis).

- **Differential**: h11, an independent strict HTTP/1.1 parser, reads the same
  bytes; the front must never find more requests in a stream than h11 does
  (finding more is how smuggling starts: a body or a header taken for a
  request).
- **Fragmentation**: the same stream, split into reads anywhere, gets the same
  answers and the same close.

One node serves every example, on an event loop of its own thread; the
differential speaks to it over real sockets, the fragmentation property hands
its reads to a front connection directly (a socket cannot be made to split
reads where the property says).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from request_streams import streams
from support import Running, running_node

_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")
_REFUSALS = {400, 408, 413, 414, 431, 505}
"""Statuses the front closes a connection with when it stops parsing it."""


class NodeThread:
    """A node on its own loop in a thread, for tests hypothesis drives."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.node: Running | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self.loop.run_until_complete,
                                        args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with running_node(header_timeout=1.0, keepalive_timeout=1.0,
                                request_timeout=1.0) as node:
            self.node = node
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> NodeThread:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self.loop.close()

    @property
    def address(self) -> tuple[str, int]:
        assert self.node is not None
        host, port = self.node.url.removeprefix("http://").split(":")
        return host, int(port)

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)


@pytest.fixture(scope="module")
def served() -> Iterator[NodeThread]:
    with NodeThread() as node:
        yield node


def h11_finds(stream: bytes) -> int:
    """Requests h11 reads whole from ``stream`` followed by the client's FIN,
    answering each (as a server must before reading the next). Empty lines
    where a request line is due are skipped first: RFC 9112 (2.2) says a
    server should, llhttp does, h11 does not."""
    found = 0
    while True:
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(stream.lstrip(b"\r\n"))
        conn.receive_data(b"")
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                return found
            if event in (h11.NEED_DATA, h11.PAUSED) or isinstance(event, h11.ConnectionClosed):
                return found
            if isinstance(event, h11.EndOfMessage):
                break
        found += 1
        conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
        conn.send(h11.EndOfMessage())
        if conn.our_state is h11.MUST_CLOSE:
            return found
        stream = conn.trailing_data[0]


def answers(received: bytes) -> list[tuple[int, bool]]:
    """(status, closes) of every final answer in ``received``."""
    found = []
    while received:
        head, sep, rest = received.partition(b"\r\n\r\n")
        assert sep, received[:300]
        match = _STATUS.match(head)
        assert match, head[:300]
        length = re.search(rb"\r\nContent-Length: (\d+)", head)
        received = rest[int(length.group(1)) if length else 0:]
        status = int(match.group(1))
        if status >= 200:
            found.append((status, b"\r\nConnection: close" in head))
    return found


def front_finds(found: list[tuple[int, bool]]) -> int:
    """Requests the front acted on: its answers, less a closing refusal."""
    if found and found[-1][1] and found[-1][0] in _REFUSALS:
        return len(found) - 1
    return len(found)


def exchange(address: tuple[str, int], stream: bytes) -> bytes:
    with socket.create_connection(address, timeout=10) as sock:
        try:
            sock.sendall(stream)
            sock.shutdown(socket.SHUT_WR)
        except ConnectionError:
            pass  # refused while sending: what it answered is read below
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(stream=streams)
def test_the_front_never_finds_more_requests_than_h11(served: NodeThread,
                                                      stream: bytes) -> None:
    found = answers(exchange(served.address, stream))
    assert front_finds(found) <= h11_finds(stream), found


# -- fragmentation -------------------------------------------------------------

class Reads(asyncio.Transport):
    """The transport a front connection writes to when the test hands it its
    reads: it records what was written and when it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = asyncio.Event()
        self._protocol: asyncio.Protocol | None = None

    def attach(self, protocol: asyncio.Protocol) -> None:
        self._protocol = protocol
        protocol.connection_made(self)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            assert self._protocol is not None
            asyncio.get_running_loop().call_soon(self._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def write_eof(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def is_closing(self) -> bool:
        return self.closed.is_set()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def answered(served: NodeThread, pieces: list[bytes]) -> list[tuple[int, bool]]:
    """The answers a front connection gives ``pieces`` read one by one, then
    the client's FIN."""
    assert served.node is not None
    reads = Reads()
    conn = served.node.node.proxy.front.connection()
    reads.attach(conn)
    for piece in pieces:
        conn.data_received(piece)
        await asyncio.sleep(0)  # the loop runs between two reads, as it would
    if not reads.closed.is_set() and not conn.eof_received():
        reads.close()
    async with asyncio.timeout(10):
        await reads.closed.wait()
    return answers(bytes(reads.written))


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(stream=streams, cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_answers_do_not_depend_on_how_the_bytes_are_split(
        served: NodeThread, stream: bytes, cuts: list[int]) -> None:
    marks = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    pieces = [stream[a:b] for a, b in itertools.pairwise(marks) if b > a]
    whole = served.run(answered(served, [stream]))
    split = served.run(answered(served, pieces))
    assert split == whole
