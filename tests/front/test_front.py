"""The listener front speaks HTTP/1.1 correctly: keep-alive, pipelining in
order, HTTP/1.0, ``Connection: close``, ``Expect: 100-continue``, chunked
bodies, limits, timeouts, malformed input, clients that leave, and the
hand-over of other routes to aiohttp on the same port.

Raw sockets where a client library would hide what is on the wire.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from raw_http import closed_by_server, connect, get
from support import ADMIN_HEADERS, Listener, Running, read_response, running_node, send

from liveroom.clock import FakeClock
from liveroom.settings import Settings
from proxy.front.limits import FrontLimits


def post(path: str, body: bytes, *extra: str) -> bytes:
    head = "\r\n".join([f"POST {path} HTTP/1.1", "Host: t",
                        "Content-Type: application/json",
                        f"Content-Length: {len(body)}", *extra, "", ""]).encode()
    return head + body


def message(text: str, uid: str = "s") -> bytes:
    return json.dumps({"uid": uid, "body": text}).encode()


@pytest.fixture
async def node() -> AsyncIterator[Running]:
    async with running_node() as running:
        yield running


async def test_keep_alive_serves_many_requests_on_one_connection(node: Running) -> None:
    async with connect(node) as (reader, writer):
        for i in range(5):
            writer.write(post("/v1/rooms/k/messages", message(f"m{i}")))
            status, _, body = await read_response(reader)
            assert status == 201, body
            assert json.loads(body)["seq"] == i + 1
        writer.write(get("/v1/rooms/k/poll?uid=u"))
        status, headers, body = await read_response(reader)
        assert status == 200
        assert headers["server"] == "liveroom"
        assert "connection" not in headers
        assert [m["body"] for m in json.loads(body)["messages"]] == [f"m{i}" for i in range(5)]


async def test_pipelined_requests_are_answered_in_order(node: Running) -> None:
    async with connect(node) as (reader, writer):
        writer.write(get("/v1/rooms/p/poll?uid=u"))
        first = json.loads((await read_response(reader))[2])
        cursor = (f"epoch={first['epoch']}&seq={first['seq']}&iseq={first['iseq']}"
                  f"&ctx={first['ctx']}&timeout=1")
        # A held poll, then a send behind it in the same write: the send waits
        # its turn (the poll times out empty first), then is stored and answered.
        writer.write(get(f"/v1/rooms/p/poll?uid=u&{cursor}")
                     + post("/v1/rooms/p/messages", message("after"))
                     + get("/v1/rooms/p/poll?uid=u&recent=5"))
        status, _, body = await read_response(reader)
        assert status == 200
        assert json.loads(body)["messages"] == []
        status, _, body = await read_response(reader)
        assert (status, json.loads(body)["seq"]) == (201, 1)
        status, _, body = await read_response(reader)
        assert [m["body"] for m in json.loads(body)["messages"]] == ["after"]


async def test_http_1_0_closes_unless_asked_to_keep_alive(node: Running) -> None:
    async with connect(node) as (reader, writer):
        writer.write(get("/v1/rooms/h/poll?uid=u", version="1.0"))
        status, headers, _ = await read_response(reader)
        assert (status, headers["connection"]) == (200, "close")
        assert await closed_by_server(reader)
    async with connect(node) as (reader, writer):
        writer.write(get("/v1/rooms/h/poll?uid=u", "Connection: keep-alive", version="1.0"))
        status, headers, _ = await read_response(reader)
        assert (status, headers["connection"]) == (200, "keep-alive")
        writer.write(get("/v1/rooms/h/poll?uid=u", "Connection: keep-alive", version="1.0"))
        assert (await read_response(reader))[0] == 200


async def test_connection_close_is_honoured(node: Running) -> None:
    async with connect(node) as (reader, writer):
        writer.write(get("/v1/rooms/c/poll?uid=u", "Connection: close"))
        status, headers, _ = await read_response(reader)
        assert (status, headers["connection"]) == (200, "close")
        assert await closed_by_server(reader)


async def test_expect_100_continue(node: Running) -> None:
    async with connect(node) as (reader, writer):
        body = message("continued")
        writer.write(post("/v1/rooms/e/messages", body, "Expect: 100-continue")[:-len(body)])
        async with asyncio.timeout(5):
            assert await reader.readline() == b"HTTP/1.1 100 Continue\r\n"
            assert await reader.readline() == b"\r\n"
        writer.write(body)
        status, _, answer = await read_response(reader)
        assert (status, json.loads(answer)["seq"]) == (201, 1)
    # Too large by its declared length (over the 4 KiB message limit, under
    # what would be read and dropped without the header): refused at once, no
    # 100, the body unread. Without Expect the same head waits for its body.
    async with connect(node) as (reader, writer):
        writer.write("\r\n".join(["POST /v1/rooms/e/messages HTTP/1.1", "Host: t",
                                  "Content-Type: application/json",
                                  "Content-Length: 6000", "Expect: 100-continue",
                                  "", ""]).encode())
        status, headers, answer = await read_response(reader)
        assert status == 413
        assert headers["connection"] == "close"
        assert json.loads(answer)["error"] == "too_large"


async def test_chunked_bodies_on_the_wire(node: Running) -> None:
    body = message("in chunks")
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7])
                      for i in range(0, len(body), 7)) + b"0\r\n\r\n"
    head = "\r\n".join(["POST /v1/rooms/ch/messages HTTP/1.1", "Host: t",
                        "Content-Type: application/json", "Transfer-Encoding: chunked",
                        "", ""]).encode()
    async with connect(node) as (reader, writer):
        writer.write(head)
        for i in range(0, len(chunks), 10):  # in pieces, as a slow client sends them
            writer.write(chunks[i:i + 10])
            await writer.drain()
        status, _, answer = await read_response(reader)
        assert (status, json.loads(answer)["seq"]) == (201, 1)


@pytest.mark.parametrize(("request_bytes", "status"), [
    pytest.param(get("/v1/rooms/l/poll?uid=" + "u" * 9000), 414, id="url-over-8192"),
    pytest.param(get("/v1/rooms/l/poll?uid=u", *(f"X-H{i}: v" for i in range(101))), 431,
                 id="101-headers"),
    pytest.param(get("/v1/rooms/l/poll?uid=u", "X-Big: " + "v" * 17000), 431,
                 id="header-bytes-over-16KiB"),
    pytest.param(b"GET /v1/rooms/l/poll?uid=u HTTP/1.1\r\nHost t\r\n\r\n", 400,
                 id="malformed-header"),
    pytest.param(b"GET /v1/rooms/l/poll?uid=u HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400,
                 id="content-length-not-a-number"),
    pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, id="tls-hello"),
    pytest.param(b"GET /v1/rooms/l/poll?uid=u HTTP/1.1\r\nContent-Length: 1\r\n"
                 b"Content-Length: 2\r\n\r\nab", 400, id="two-content-lengths"),
])
async def test_limits_and_malformed_requests_answer_then_close(
        node: Running, request_bytes: bytes, status: int) -> None:
    async with connect(node) as (reader, writer):
        writer.write(request_bytes)
        got, headers, body = await read_response(reader)
        assert got == status, body
        assert headers["connection"] == "close"
        doc = json.loads(body)
        assert set(doc) == {"error", "message"}
        assert await closed_by_server(reader)
    # The server is still fine.
    async with aiohttp.ClientSession() as session:
        assert (await Listener(session, "l").poll(node.url))["reset"] is False


async def test_a_body_over_the_limit_is_read_and_refused_keeping_the_connection(
        node: Running) -> None:
    async with connect(node) as (reader, writer):
        writer.write(post("/v1/rooms/b/messages", b"x" * 6000))
        status, headers, _ = await read_response(reader)
        assert status == 413
        assert "connection" not in headers
        writer.write(post("/v1/rooms/b/messages", message("fits")))
        assert (await read_response(reader))[0] == 201


async def test_wrong_methods_on_listener_paths_are_405(node: Running) -> None:
    async with connect(node) as (reader, writer):
        for raw, allow in ((post("/v1/rooms/m/poll?uid=u", b"{}"), "GET"),
                           (get("/v1/rooms/m/messages"), "POST"),
                           (b"DELETE /v1/rooms/m/poll HTTP/1.1\r\nHost: t\r\n\r\n", "GET")):
            writer.write(raw)
            status, headers, body = await read_response(reader)
            assert (status, headers["allow"]) == (405, allow)
            assert json.loads(body)["error"] == "method_not_allowed"


async def test_an_upgrade_request_is_refused_and_nothing_after_it_is_read(
        node: Running) -> None:
    async with connect(node) as (reader, writer):
        writer.write(get("/v1/rooms/u/poll?uid=u", "Connection: Upgrade", "Upgrade: h2c")
                     + get("/v1/rooms/u/poll?uid=v"))
        status, headers, body = await read_response(reader)
        assert (status, headers["connection"]) == (400, "close")
        assert "upgrade" in json.loads(body)["message"]
        assert await closed_by_server(reader)  # the second request was never answered


@asynccontextmanager
async def quick_timeouts(**overrides: Any) -> AsyncIterator[Running]:
    async with running_node(header_timeout=0.5, keepalive_timeout=0.5,
                            request_timeout=0.5, **overrides) as running:
        yield running


def test_default_timeouts_close_a_slowloris_within_15_seconds() -> None:
    s = Settings()
    assert s.header_timeout <= 15
    assert s.keepalive_timeout <= 15


async def test_a_slow_head_is_cut_off() -> None:
    async with quick_timeouts() as node, connect(node) as (reader, writer):
        loop = asyncio.get_running_loop()
        started = loop.time()
        writer.write(b"GET /v1/rooms/s/poll?uid=u HTTP/1.1\r\nHost: t\r\n")
        async with asyncio.timeout(5):
            while not reader.at_eof():  # a header byte every 0.1 s, never the end
                try:
                    writer.write(b"X")
                    await writer.drain()
                except ConnectionError:
                    break
                await asyncio.sleep(0.1)
        assert loop.time() - started < 3  # cut at 0.5 s; the client would go on for 5


async def test_an_idle_connection_is_closed() -> None:
    async with quick_timeouts() as node, connect(node) as (reader, writer):
        writer.write(get("/v1/rooms/i/poll?uid=u"))
        assert (await read_response(reader))[0] == 200
        assert await closed_by_server(reader, within=3)
    async with quick_timeouts() as node, connect(node) as (reader, _):
        assert await closed_by_server(reader, within=3)  # never sent a byte


async def test_a_slow_body_gets_408() -> None:
    async with quick_timeouts() as node, connect(node) as (reader, writer):
        writer.write(post("/v1/rooms/sb/messages", message("never finished"))[:-5])
        status, headers, body = await read_response(reader)
        assert status == 408
        assert headers["connection"] == "close"
        assert json.loads(body)["error"] == "request_timeout"


async def test_a_byte_after_an_answered_poll_does_not_keep_the_connection() -> None:
    async with quick_timeouts() as node, connect(node) as (reader, writer):
        writer.write(get("/v1/rooms/tb/poll?uid=u"))
        assert (await read_response(reader))[0] == 200
        writer.write(b"G")  # a request's first byte: its head is due in 0.5 s
        assert await closed_by_server(reader, within=3)
    async with quick_timeouts() as node, connect(node) as (reader, writer):
        writer.write(get("/v1/rooms/tb/poll?uid=u"))
        assert (await read_response(reader))[0] == 200
        for _ in range(30):  # bare CRLFs begin no request: still idle
            writer.write(b"\r\n")
            await writer.drain()
        assert await closed_by_server(reader, within=3)


async def test_connections_past_the_cap_are_answered_503_and_closed() -> None:
    async with running_node(connections_max=3) as node:
        front = node.node.proxy.front
        async with connect(node) as (r1, w1), connect(node) as (r2, w2):
            w1.write(get("/healthz"))  # handed to aiohttp: still counted
            assert (await read_response(r1))[0] == 200
            # A poll held there: busy, not one to close to make room (idle,
            # it would be: tests/hostile/test_hostile_front.py).
            w1.write(get("/v1/rooms/cap/poll?uid=h"))
            first = json.loads((await read_response(r1))[2])
            w1.write(get(f"/v1/rooms/cap/poll?uid=h&epoch={first['epoch']}&seq={first['seq']}"
                         f"&iseq={first['iseq']}&timeout=60"))
            async with asyncio.timeout(5):
                while node.node.proxy.held_polls() < 1:
                    await asyncio.sleep(0.01)
            w2.write(get("/v1/rooms/cap/poll?uid=u"))
            assert (await read_response(r2))[0] == 200
            async with connect(node) as (r3, w3):
                # Served a valid request: not one to close to make room (see
                # tests/hostile/test_hostile_front.py).
                w3.write(get("/v1/rooms/cap/poll?uid=w"))
                assert (await read_response(r3))[0] == 200
                async with connect(node) as (r4, _w4):
                    status, headers, body = await read_response(r4)
                    assert (status, headers["connection"], headers["retry-after"]) == (
                        503, "close", "1")
                    assert json.loads(body)["error"] == "overloaded"
                    assert await closed_by_server(r4)
                assert front.admission.refused == 1
                assert front.open_connections == 3
            # One left: the next is served.
            async with asyncio.timeout(5):
                while front.open_connections > 2:
                    await asyncio.sleep(0.01)
            async with connect(node) as (r5, w5):
                w5.write(get("/v1/rooms/cap/poll?uid=v"))
                assert (await read_response(r5))[0] == 200
        async with aiohttp.ClientSession() as session, session.get(
                f"{node.url}/metrics", headers=ADMIN_HEADERS) as resp:
            text = await resp.text()
        assert "liveroom_connections_refused_total 1.0" in text


async def test_a_pipelining_client_that_does_not_read_is_not_read_either(
        node: Running) -> None:
    """Either the server stops reading the client (it waits for its answers
    to be read), or, once the client is more than 32 KiB of requests ahead,
    refuses it and closes: what it keeps for it is bounded either way."""
    async with aiohttp.ClientSession() as session:
        for i in range(20):
            await send(session, node.url, "bp", "x" * 3000 + str(i))
    async with connect(node) as (_reader, writer):
        batch = get("/v1/rooms/bp/poll?uid=u&recent=20", "X-Pad: " + "p" * 4000) * 8
        blocked = cut = False
        for _ in range(2000):  # at most 66 MB: far past any socket buffer
            writer.write(batch)
            try:
                async with asyncio.timeout(1):
                    await writer.drain()
            except TimeoutError:
                blocked = True  # the server stopped reading us
                break
            except ConnectionResetError:
                cut = True  # refused and closed: ahead past the backlog bound
                break
        assert blocked or cut
        front = node.node.proxy.front
        if cut:
            assert not front.connections
            return
        (conn,) = front.connections
        transport = conn._transport
        assert transport is not None
        # What the server keeps for this client is bounded: the answers it
        # could not write (about one past the high-water mark), the requests
        # waiting their turn, and the bytes it read but did not parse.
        assert transport.get_write_buffer_size() < 256 * 1024
        assert len(conn._reader.waiting) <= FrontLimits().max_pipelined
        backlog = conn._reader.backlog
        assert backlog is None or len(backlog) <= 32 * 1024
        writer.transport.abort()  # its unsent megabytes would never drain


async def test_a_held_poll_is_not_cut_by_the_idle_timeout() -> None:
    async with quick_timeouts() as node, aiohttp.ClientSession() as session:
        listener = Listener(session, "held")
        await listener.poll(node.url)
        answer = await listener.poll(node.url, timeout=2)  # 4 idle timeouts long
        assert answer["messages"] == []


async def test_clients_leaving_mid_hold_leave_nothing_behind(node: Running) -> None:
    proxy = node.node.proxy
    async with aiohttp.ClientSession() as session:
        first = await Listener(session, "gone").poll(node.url)
    baseline = len(asyncio.all_tasks())
    writers = []
    for i in range(50):
        _, writer = await asyncio.open_connection(*node.url[7:].split(":"))
        writer.write(get(f"/v1/rooms/gone/poll?uid=u{i}&epoch={first['epoch']}"
                         f"&seq={first['seq']}&iseq={first['iseq']}&timeout=60"))
        writers.append(writer)
    async with asyncio.timeout(5):
        while proxy.held_polls() < 50:
            await asyncio.sleep(0.01)
    assert len(proxy.front.connections) == 50
    for writer in writers:
        writer.close()
    async with asyncio.timeout(5):
        while proxy.held_polls() or proxy.front.connections:
            await asyncio.sleep(0.01)
        while len(asyncio.all_tasks()) > baseline:
            await asyncio.sleep(0.01)


async def test_other_routes_are_handed_to_aiohttp_on_the_same_port(node: Running) -> None:
    async with connect(node) as (reader, writer):
        # First request elsewhere: aiohttp serves the connection, polls included.
        writer.write(get("/healthz"))
        status, headers, _ = await read_response(reader)
        assert (status, headers["server"]) == (200, "liveroom")
        assert not node.node.proxy.front.connections  # aiohttp's now
        writer.write(get("/v1/rooms/ho/poll?uid=u"))
        status, headers, body = await read_response(reader)
        assert (status, json.loads(body)["room"]) == (200, "ho")
        assert headers["server"] == "liveroom"
        # aiohttp's own refusals are JSON too, with liveroom's Server header.
        writer.write(b"GET /v1/rooms/ho/stats HTTP/1.1\r\nHost t\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert (status, headers["server"]) == (400, "liveroom")
        assert set(json.loads(body)) == {"error", "message"}
        assert await closed_by_server(reader)
    async with connect(node) as (reader, writer):
        # A poll first, then (after its answer) a stats request: handed over.
        writer.write(get("/v1/rooms/ho/poll?uid=u"))
        assert (await read_response(reader))[1]["server"] == "liveroom"
        writer.write(get("/v1/rooms/ho/stats"))
        status, headers, body = await read_response(reader)
        assert (status, json.loads(body)["room"]) == (200, "ho")
        assert not node.node.proxy.front.connections
    async with connect(node) as (reader, writer):
        # Pipelined right behind a poll in one write: cannot be handed over.
        writer.write(get("/v1/rooms/ho/poll?uid=u") + get("/v1/rooms/ho/stats"))
        assert (await read_response(reader))[0] == 200
        status, headers, body = await read_response(reader)
        assert (status, headers["connection"]) == (400, "close")
        assert "connection of its own" in json.loads(body)["message"]


@pytest.mark.parametrize("twice", ["Authorization: Bearer a", "Content-Type: application/json",
                                   "Content-Encoding: identity", "Expect: 100-continue"])
async def test_repeated_framing_headers_are_400_on_aiohttp_too(node: Running,
                                                              twice: str) -> None:
    """The same refusal as the front's (tests/front_corpus.py), on a
    connection aiohttp serves: no two readers take different copies."""
    async with connect(node) as (reader, writer):
        writer.write(get("/healthz"))  # aiohttp's connection from now on
        assert (await read_response(reader))[0] == 200
        writer.write(post("/v1/rooms/twice/messages", message("x"), twice, twice))
        status, headers, body = await read_response(reader)
        while status == 100:  # aiohttp answers Expect before anything else
            status, headers, body = await read_response(reader)
        assert (status, headers["server"]) == (400, "liveroom")
        doc = json.loads(body)
        assert doc["error"] == "bad_request"
        # aiohttp's parser refuses some repeats itself, in its words.
        assert "repeated header" in doc["message"] or "Duplicate" in doc["message"]


async def test_the_front_and_aiohttp_answer_the_same_bytes() -> None:
    clock = FakeClock()  # the same time for both, so the same ctx
    async with running_node(clock=clock) as node:
        async with aiohttp.ClientSession() as session, session.post(
                f"{node.url}/v1/rooms/same/messages",
                json={"uid": "s", "body": {"t": "x"}}) as resp:
            assert resp.status == 201
        bodies: dict[str, list[bytes]] = {"front": [], "aiohttp": []}
        for accept in ("application/json", "application/msgpack"):
            for path in ("/v1/rooms/same/poll?uid=u&recent=5",
                         "/v1/rooms/same/poll?uid=a%20b",
                         "/v1/rooms/same/poll?uid=u&seq=1"):
                async with connect(node) as (reader, writer):
                    writer.write(get(path, f"Accept: {accept}"))
                    bodies["front"].append((await read_response(reader))[2])
                async with connect(node) as (reader, writer):
                    writer.write(get("/healthz"))
                    await read_response(reader)
                    writer.write(get(path, f"Accept: {accept}"))
                    bodies["aiohttp"].append((await read_response(reader))[2])
        assert bodies["front"] == bodies["aiohttp"]
        # Two answers in two formats, and two errors (always JSON).
        assert len(set(bodies["front"])) == 4


async def test_a_closed_connection_is_freed_at_once_not_by_the_garbage_collector() -> None:
    """A connection and its parts (reader, flow control) make no reference
    cycle, whatever ends it (an answer and a close, a refusal, a client gone
    mid-hold, a hand-over to aiohttp): each goes when its last reference does.
    A cycle would keep every closed connection (and its buffers) until the
    next full collection (the first split of the front had one: 1 041 of
    them after 1 000 clients were cut)."""
    ours = {"Connection", "RequestReader", "FlowControl"}

    def alive() -> int:
        return sum(type(o).__name__ in ours and type(o).__module__.startswith("proxy.")
                   for o in gc.get_objects())

    async with running_node() as node:
        gc.collect()
        gc.disable()  # what is left now is kept by a cycle, or still referenced
        try:
            async with connect(node) as (reader, writer):
                writer.write(get("/v1/rooms/freed/poll?uid=u"))
                assert (await read_response(reader))[0] == 200
            async with connect(node) as (reader, writer):
                writer.write(b"NOT HTTP\r\n\r\n")
                assert (await read_response(reader))[0] == 400
                assert await closed_by_server(reader)
            async with connect(node) as (reader, writer):
                writer.write(get("/v1/rooms/freed/poll?uid=u"))
                await read_response(reader)
                writer.write(get("/v1/rooms/freed/poll?uid=u&seq=1"))  # held
                await asyncio.sleep(0)
            async with connect(node) as (reader, writer):
                writer.write(get("/healthz"))  # handed to aiohttp
                assert (await read_response(reader))[0] == 200
            front = node.node.proxy.front
            async with asyncio.timeout(5):
                while front.open_connections or node.node.proxy.held_polls():
                    await asyncio.sleep(0.01)
            assert alive() == 0
        finally:
            gc.enable()
