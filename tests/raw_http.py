"""HTTP/1.1 on a raw connection to a node, for the tests that need to see what
a client library would hide on the wire: the connection, a request's bytes,
and whether the server closed it. (An answer off it: ``support.read_response``.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from support import Running

Raw = tuple[asyncio.StreamReader, asyncio.StreamWriter]
"""A raw connection to a node."""


@asynccontextmanager
async def connect(node: Running) -> AsyncIterator[Raw]:
    """A raw connection to ``node``, closed after the block."""
    host, port = node.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionResetError):  # the node may have reset it
            await writer.wait_closed()


async def closed_by_server(reader: asyncio.StreamReader, within: float = 5.0) -> bool:
    """Whether the server closes the connection, sending nothing more, within
    ``within`` seconds."""
    async with asyncio.timeout(within):
        return await reader.read() == b""


def get(path: str, *extra: str, version: str = "1.1") -> bytes:
    """A GET request's bytes, ``extra`` header lines after ``Host``."""
    return "\r\n".join([f"GET {path} HTTP/{version}", "Host: t", *extra, "", ""]).encode()
