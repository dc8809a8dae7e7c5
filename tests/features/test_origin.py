"""The send hook's keep-alive client (``liveroom/origin.py``) against real
servers on loopback: small ``asyncio`` servers that answer what each test
needs, byte for byte, and count the connections they accept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from liveroom.origin import Origin, OriginError

Answerer = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
"""Given a whole request, writes its answer; whether to keep the connection."""


class Server:
    """A loopback HTTP/1.1 server that reads whole requests (headers and a
    ``Content-Length`` body) and hands each to ``answer``."""

    def __init__(self, answer: Answerer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                if not await self.answer(request, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def serving(answer: Answerer) -> AsyncIterator[tuple[Server, str]]:
    server = Server(answer)
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}/hook?v=1"
    finally:
        listening.close()
        for writer in server.writers:
            writer.close()
        await listening.wait_closed()


def echo(extra: bytes = b"") -> Answerer:
    """Answers 200 with the request's body, with ``extra`` headers."""
    async def answer(request: bytes, writer: asyncio.StreamWriter) -> bool:
        body = request.split(b"\r\n\r\n", 1)[1]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s"
                     % (len(body), extra, body))
        await writer.drain()
        return b"close" not in extra
    return answer


async def test_calls_share_one_keep_alive_connection_and_say_what_was_posted() -> None:
    async with serving(echo()) as (server, url):
        origin = Origin(url, connections=4)
        for n in range(5):
            assert await origin.post(b'{"n": %d}' % n, {"X-Sig": "t=1"}, body_max=100) \
                == (200, b'{"n": %d}' % n)
        origin.close()
    assert server.connections == 1
    head = server.requests[0].split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    assert head[0] == b"POST /hook?v=1 HTTP/1.1"
    assert set(head[1:]) == {b"Host: 127.0.0.1:%s" % url.split(":")[2].split("/")[0].encode(),
                             b"User-Agent: liveroom", b"X-Sig: t=1", b"Content-Length: 8"}


async def test_a_status_alone_drops_any_body_and_keeps_the_connection() -> None:
    """``body_max=None`` (the webhooks: only the status counts): a body of
    any size is read and dropped, the connection reused, the agent named."""
    async with serving(echo()) as (server, url):
        origin = Origin(url, connections=1, user_agent="liveroom/9 (webhooks)")
        assert await origin.post(b"x" * 100_000, {}, body_max=None) == (200, b"")
        assert await origin.post(b"y", {}, body_max=None) == (200, b"")
        origin.close()
    assert server.connections == 1
    assert b"\r\nUser-Agent: liveroom/9 (webhooks)\r\n" in server.requests[0]


async def test_an_origin_that_closes_after_each_answer_gets_a_connection_a_call() -> None:
    async with serving(echo(b"Connection: close\r\n")) as (server, url):
        origin = Origin(url, connections=4)
        for _ in range(3):
            assert await origin.post(b"{}", {}, body_max=100) == (200, b"{}")
        origin.close()
    assert server.connections == 3


async def test_a_reused_connection_the_origin_drops_unanswered_is_replaced_unseen() -> None:
    """An origin may close an idle keep-alive connection just as a request is
    written on it (its own idle timeout): the request is written once more,
    on a new connection. A new connection that fails so is not retried."""
    async def drop_second_on_first(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if server.connections == 1 and len(server.requests) == 2:
            return False  # closed, unanswered
        return await echo()(request, writer)
    async with serving(drop_second_on_first) as (server, url):
        origin = Origin(url, connections=4)
        assert await origin.post(b"1", {}, body_max=100) == (200, b"1")
        assert await origin.post(b"2", {}, body_max=100) == (200, b"2")
        origin.close()
    assert server.connections == 2
    assert server.requests == [server.requests[0], *[server.requests[1]] * 2]

    async def drop(request: bytes, writer: asyncio.StreamWriter) -> bool:
        return False
    async with serving(drop) as (server, url):
        origin = Origin(url, connections=4)
        with pytest.raises(OriginError, match="closed before the whole answer"):
            await origin.post(b"1", {}, body_max=100)
    assert server.connections == 1


async def test_a_chunked_answer_is_read_whole() -> None:
    async def chunked(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        return True
    async with serving(chunked) as (server, url):
        origin = Origin(url, connections=1)
        assert await origin.post(b"x", {}, body_max=100) == (200, b"abcde")
        assert await origin.post(b"x", {}, body_max=100) == (200, b"abcde")
        origin.close()
    assert server.connections == 1


async def test_an_answer_over_its_bound_fails_and_its_connection_is_not_reused() -> None:
    async with serving(echo()) as (server, url):
        origin = Origin(url, connections=4)
        with pytest.raises(OriginError, match="over 10 bytes"):
            await origin.post(b"x" * 11, {}, body_max=10)
        assert await origin.post(b"y" * 10, {}, body_max=10) == (200, b"y" * 10)
        origin.close()
    assert server.connections == 2


@pytest.mark.parametrize("reply", [b"SPAM SPAM SPAM\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Le"])
async def test_garbage_or_a_cut_answer_fails_the_call(reply: bytes) -> None:
    async def bad(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(reply)
        await writer.drain()
        return False  # and close
    async with serving(bad) as (_, url):
        origin = Origin(url, connections=1)
        with pytest.raises(OriginError):
            await origin.post(b"x", {}, body_max=100)
        origin.close()


async def test_no_origin_listening_fails_the_call_as_an_os_error() -> None:
    async with serving(echo()) as (_, url):
        pass  # closed: nothing listens on its port now
    origin = Origin(url, connections=1)
    with pytest.raises(OSError, match="no connection"):
        await origin.post(b"x", {}, body_max=100)


async def test_a_call_cut_short_never_hands_its_late_answer_to_the_next() -> None:
    release = asyncio.Event()

    async def slow_first(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if request.endswith(b"first"):
            await release.wait()
        return await echo()(request, writer)
    async with serving(slow_first) as (server, url):
        origin = Origin(url, connections=1)
        call = asyncio.ensure_future(origin.post(b"first", {}, body_max=100))
        while not server.requests:
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        assert await origin.post(b"second", {}, body_max=100) == (200, b"second")
        origin.close()
    assert server.connections == 2


def test_only_http_urls_are_origins() -> None:
    for url in ("ftp://example.com/x", "example.com/hook", "http:///nohost"):
        with pytest.raises(ValueError, match="not an http"):
            Origin(url, connections=1)
    assert Origin("https://example.com/h", connections=1).port == 443
    assert Origin("http://[::1]:8080/h", connections=1).host == "::1"


async def test_a_call_within_a_time_fails_late_and_leaves_its_connection() -> None:
    """``within``: no whole answer in time is a TimeoutError, and the
    connection it waited on is closed (its answer may still come), so the
    next call opens another."""
    answered = asyncio.Event()

    async def slow_first(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if b"slow" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")  # never whole
            await writer.drain()
            await answered.wait()
            return False
        return await echo()(request, writer)

    async with serving(slow_first) as (server, url):
        origin = Origin(url, connections=1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await origin.post(b"slow", {}, body_max=100, within=0.2)
        assert 0.2 <= loop.time() - started < 2.0
        assert await origin.post(b"fast", {}, body_max=100, within=5.0) == (200, b"fast")
        assert server.connections == 2
        answered.set()
        origin.close()
