"""Edges a hostile or careless client finds (issue 31): a half-close after a
request on a connection aiohttp serves, a fragment in a poll's query, weak
tokens on the memory engine; and bounds that held already, pinned here."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from support import ADMIN, PUBLISHER, Running, clean_env, read_response, running_node

Raw = tuple[asyncio.StreamReader, asyncio.StreamWriter]
PATHS = ["front", "aiohttp"]


@asynccontextmanager
async def connection(node: Running, path: str) -> AsyncIterator[Raw]:
    """A raw connection served by the front, or by aiohttp (its first request
    elsewhere hands it over for good)."""
    host, port = node.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        if path == "aiohttp":
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await read_response(reader))[0] == 200
        yield reader, writer
    finally:
        writer.close()
        await writer.wait_closed()


def post(path: str, body: bytes, length: int | None = None) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
            ).encode() + body


async def stored(session: aiohttp.ClientSession, node: Running, room: str) -> list[Any]:
    async with session.get(f"{node.url}/v1/rooms/{room}/poll",
                           params={"uid": "reader", "recent": 10}) as resp:
        return [m["body"] for m in (await resp.json())["messages"]]


# -- a half-close (FIN) right behind a request ---------------------------------------------


@pytest.mark.parametrize("path", PATHS)
async def test_a_send_then_a_half_close_is_answered_then_closed(
        engine_url: str, path: str, session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url) as node, connection(node, path) as (reader, writer):
        writer.write(post("/v1/rooms/fin/messages",
                          json.dumps({"uid": "s", "body": "then FIN"}).encode()))
        writer.write_eof()
        status, _, body = await read_response(reader)
        assert status == 201, body
        assert json.loads(body)["seq"] == 1
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # closed after the answer
        assert await stored(session, node, "fin") == ["then FIN"]


@pytest.mark.parametrize("path", PATHS)
async def test_a_held_poll_then_a_half_close_is_answered_at_once(
        path: str, session: aiohttp.ClientSession) -> None:
    async with running_node() as node:
        async with session.post(f"{node.url}/v1/rooms/fin/messages",
                                json={"uid": "s", "body": "open"}) as resp:
            assert resp.status == 201
        async with connection(node, path) as (reader, writer):
            writer.write(b"GET /v1/rooms/fin/poll?uid=a HTTP/1.1\r\nHost: t\r\n\r\n")
            first = json.loads((await read_response(reader))[2])
            writer.write(f"GET /v1/rooms/fin/poll?uid=a&epoch={first['epoch']}&seq="
                         f"{first['seq']}&iseq={first['iseq']}&timeout=60 HTTP/1.1\r\n"
                         "Host: t\r\n\r\n".encode())
            holds = node.node.proxy.polls.holds
            async with asyncio.timeout(5):
                while holds.count < 1:
                    await asyncio.sleep(0.01)
            writer.write_eof()
            # Answered as if its hold ran out (not after its 60 s), then closed.
            status, _, body = await read_response(reader, within=5)
            assert status == 200
            answer = json.loads(body)
            assert (answer["seq"], answer["messages"]) == (first["seq"], [])
            async with asyncio.timeout(5):
                assert await reader.read() == b""


@pytest.mark.parametrize("path", PATHS)
async def test_a_send_cut_short_by_a_half_close_is_dropped_and_stores_nothing(
        path: str, session: aiohttp.ClientSession) -> None:
    async with running_node() as node, connection(node, path) as (reader, writer):
        writer.write(post("/v1/rooms/cut/messages", b'{"uid": "s", "bo', length=40))
        await asyncio.sleep(0.05)  # the head is read, the body awaited
        writer.write_eof()
        async with asyncio.timeout(5):
            assert await reader.read() == b""
        async with session.get(f"{node.url}/v1/rooms/cut/poll", params={"uid": "r"}) as resp:
            assert (await resp.json())["seq"] == 0


# -- a fragment in a poll's query --------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
async def test_a_fragment_in_a_polls_query_is_refused_on_both_paths(path: str) -> None:
    async with running_node() as node, connection(node, path) as (reader, writer):
        writer.write(b"GET /v1/rooms/r/poll?uid=a#frag HTTP/1.1\r\nHost: t\r\n\r\n")
        status, _, body = await read_response(reader)
        assert status == 400, body
        assert json.loads(body)["message"].startswith("uid must match")


# -- weak tokens on the memory engine -------------------------------------------------------


def serve_refused(*args: str) -> str:
    """``python -m liveroom serve ARGS`` (memory engine), which must refuse to start."""
    done = subprocess.run([sys.executable, "-m", "liveroom", "serve", "--port", "0", *args],
                          env=clean_env(), capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return " ".join(done.stderr.split())


@pytest.mark.parametrize(("given", "said"), [
    pytest.param(("--admin-token", "a"), "--admin-token has 1 bytes: give at least 32",
                 id="one-letter-admin"),
    pytest.param(("--publisher-token", "p"), "--publisher-token has 1 bytes",
                 id="one-letter-publisher"),
    pytest.param(("--admin-token", PUBLISHER, "--publisher-token", PUBLISHER),
                 "--admin-token and --publisher-token are the same", id="same-tokens"),
])
def test_the_memory_engine_refuses_weak_or_equal_tokens(given: tuple[str, ...],
                                                        said: str) -> None:
    assert said in serve_refused(*given)


def test_the_memory_engine_takes_strong_distinct_tokens_or_makes_them_up() -> None:
    # Refused for another reason only (the port), so the tokens passed.
    for args in (("--admin-token", ADMIN, "--publisher-token", PUBLISHER), ()):
        done = subprocess.run(
            [sys.executable, "-m", "liveroom", "serve", "--port", "70000", *args],
            env=clean_env(), capture_output=True, text=True, timeout=30, check=False)
        assert "bytes: give at least" not in done.stderr
        assert "--port" in done.stderr
