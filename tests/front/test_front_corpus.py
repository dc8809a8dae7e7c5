"""The front's corpus (``tests/front_corpus.py``), case by case over a real
socket: the exact answers, in order, and whether the connection closes."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

import pytest
from front_corpus import CASES, Case
from support import Running, read_response, running_node

_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


def statuses(stream: bytes) -> list[int]:
    """The statuses of the answers in ``stream``, in order (bodies skipped by
    their Content-Length, interim answers counted)."""
    found: list[int] = []
    while stream:
        head, sep, rest = stream.partition(b"\r\n\r\n")
        assert sep, f"a cut answer: {stream[:200]!r}"
        match = _STATUS.match(head)
        assert match, f"not an answer: {head[:200]!r}"
        found.append(int(match.group(1)))
        length = re.search(rb"\r\nContent-Length: (\d+)", head)
        stream = rest[int(length.group(1)) if length else 0:]
    return found


@pytest.fixture
async def node() -> AsyncIterator[Running]:
    async with running_node(header_timeout=0.5, keepalive_timeout=0.5,
                            request_timeout=0.5) as running:
        yield running


async def exchange(node: Running, case: Case) -> tuple[list[int], bool]:
    """Send the case's bytes; return the answers and whether the server closed."""
    host, port = node.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(case.raw)
        if case.half_close:
            writer.write_eof()
        with contextlib.suppress(ConnectionError):
            await writer.drain()  # refused while still sending: its answer is read below
        if case.closes:
            async with asyncio.timeout(5):
                received = await reader.read(-1)  # to the server's FIN
            return statuses(received), True
        answers = []
        for _ in case.answers:
            answers.append((await read_response(reader))[0])
        writer.write(b"GET /v1/rooms/after/poll?uid=u HTTP/1.1\r\nHost: t\r\n\r\n")
        after = (await read_response(reader))[0]
        assert after == 200, f"the connection did not serve the next request: {after}"
        return answers, False
    finally:
        writer.transport.abort()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_the_corpus(node: Running, case: Case) -> None:
    answers, closed = await exchange(node, case)
    assert (answers, closed) == (list(case.answers), case.closes)

