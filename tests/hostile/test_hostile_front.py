"""The attacks the front withstands: clients that hold a node's memory or
sockets by timing alone, or crowd others out.

One test per attack, each named for it, over real sockets on 127.0.0.1
against a node the test starts. The clients that must not read are plain
sockets no event loop reads for them (an asyncio stream would read ahead into
its own buffer), with a small receive buffer so that the node's writes back up
quickly. Deadlines are the front's real ones (loop timers), set small; the
attacks that depend on what a transport reports (a deadline on its write
buffer, a close it is not reading) run on both loops a node may run on:
asyncio's and uvloop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import resource
import select
import socket
import stat
import struct
import termios
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvloop
from raw_http import closed_by_server, connect, get
from support import (
    ADMIN_HEADERS,
    Listener,
    Running,
    fixed_send_buffer,
    read_response,
    running_node,
    send,
)

from liveroom.settings import DEFAULTS

LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"),
         pytest.param(uvloop.new_event_loop, id="uvloop")]
"""The event loops a node runs on: asyncio's (tests) and uvloop (``liveroom serve``)."""

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def on_loop(loop_factory: LoopFactory, scenario: Awaitable[None]) -> None:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(scenario)  # type: ignore[arg-type]


@contextmanager
def raw_client(node: Running, *, rcvbuf: int = 0, sndbuf: int = 0) -> Iterator[socket.socket]:
    """A connected plain socket, read by nobody unless the test does; ``rcvbuf``
    and ``sndbuf`` (bytes, before connecting: they size the TCP window) keep
    the kernel from absorbing what the node writes or what the client sends."""
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    host, port = node.url.removeprefix("http://").split(":")
    sock.connect((host, int(port)))  # loopback: the kernel completes it, no accept needed
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


async def reset_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the node resets ``sock`` within ``within`` seconds (what an
    aborted connection sends), looking every 20 ms without reading it."""
    watch = select.poll()
    watch.register(sock, select.POLLERR | select.POLLHUP)
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while loop.time() < end:
        if any(events & (select.POLLERR | select.POLLHUP) for _, events in watch.poll(0)):
            return True
        await asyncio.sleep(0.02)
    return False


async def until(check: Callable[[], bool], within: float) -> bool:
    """Whether ``check()`` holds within ``within`` seconds (looked at every 10 ms)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not check():
        if loop.time() >= end:
            return False
        await asyncio.sleep(0.01)
    return True


async def cut_off(reader: asyncio.StreamReader) -> bool:
    """Whether the node closed (or reset) the connection ``reader`` reads."""
    try:
        return await closed_by_server(reader)
    except ConnectionResetError:
        return True


def kernel_send_buffer_max() -> int:
    """The most a socket's send buffer may grow to here (Linux's
    ``tcp_wmem``; 4 MiB where it cannot be read): what the node's kernel may
    take of its answers before its own buffer fills."""
    try:
        return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, IndexError, ValueError):
        return 4 << 20


@asynccontextmanager
async def big_answers(**overrides: Any) -> AsyncIterator[tuple[Running, bytes]]:
    """A node with a write deadline of 0.5 s (or ``overrides``' settings) and
    a room whose poll answer is one and a half times what the kernel may take
    of a send buffer left to grow (about 6 MB with Linux's default), and the
    request for that answer."""
    size = min(1 << 20, max(60_000, kernel_send_buffer_max() * 3 // 200))  # 100 messages
    async with running_node(**{"write_timeout": 0.5, "max_message_bytes": size + 64,
                               "answer_bytes_max": 200 * size, **overrides}) as node:
        async with aiohttp.ClientSession() as session:
            for i in range(100):
                await send(session, node.url, "big", "x" * size + str(i))
        yield node, b"/v1/rooms/big/poll?uid=u&recent=100"


# -- A: a client that never reads its answers ----------------------------------------------


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_pipelined_polls_never_read_are_cut_off_at_the_write_deadline(
        loop_factory: LoopFactory) -> None:
    async def scenario() -> None:
        async with big_answers() as (node, path):
            front, proxy = node.node.proxy.front, node.node.proxy
            with raw_client(node, rcvbuf=4096) as sock:
                sock.send(get(path.decode()) * 16)
                assert await until(lambda: len(front.connections) == 1, 2)
                assert await reset_by_server(sock, within=3)
            assert not front.connections
            assert proxy.held_polls() == 0
            assert front.write_timeouts == 1
    on_loop(loop_factory, scenario())


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_last_answer_never_read_does_not_keep_the_socket(loop_factory: LoopFactory) -> None:
    """``Connection: close`` on an answer larger than the kernel takes, then
    not a byte read: the transport would wait for ever to send it before
    closing."""
    async def scenario() -> None:
        async with big_answers() as (node, path):
            with raw_client(node, rcvbuf=4096) as sock:
                sock.send(get(path.decode(), "Connection: close"))
                assert await reset_by_server(sock, within=3)
            assert node.node.proxy.front.write_timeouts == 1
    on_loop(loop_factory, scenario())


# -- A': what the kernel holds for a client that never reads ----------------------------------


def send_buffer(fd: int) -> int:
    """The send buffer of the socket ``fd`` (what the kernel lets it fill)."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))


def unsent_in_kernel(fd: int) -> int:
    """Bytes written to the socket ``fd`` that its peer has not yet
    acknowledged: what its send buffer holds (Linux's ``SIOCOUTQ``)."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0" * 4))[0])


def accepted_send_buffers(node: Running) -> list[int]:
    """The send buffer of every connected socket this process holds on
    ``node``'s port: the node's accepted ones, the front's and aiohttp's alike
    (the node runs in this process; its clients' sockets have ports of their own)."""
    port = int(node.url.rsplit(":", 1)[1])
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (the listing's own descriptor, closed by now)
            if not stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                continue
            with socket.socket(fileno=os.dup(int(name))) as sock:
                if (sock.family not in (socket.AF_INET, socket.AF_INET6)
                        or sock.type != socket.SOCK_STREAM or sock.getsockname()[1] != port):
                    continue
                with contextlib.suppress(OSError):  # not connected: the listening socket
                    sock.getpeername()
                    found.append(int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)))
    return found


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_client_that_never_reads_fills_no_more_of_the_kernel_than_its_send_buffer(
        loop_factory: LoopFactory) -> None:
    """A poll whose answer is 6 MB, never read: the node writes what its
    socket takes, and once its own buffer backs up (the connection is
    paused) the kernel holds at most the node's send buffer of it, fixed:
    not a buffer the kernel grew. (Left to grow, it held 2.8 MB of it in a
    4 MiB buffer until the write deadline, here on loopback; a thousand such
    clients took the host past its TCP memory pressure mark.)"""
    async def scenario() -> None:
        async with big_answers(write_timeout=30) as (node, path):
            front = node.node.proxy.front
            with raw_client(node, rcvbuf=4096) as sock:
                sock.send(get(path.decode()))
                assert await until(lambda: len(front.paused) == 1, 5)
                (conn,) = front.paused
                bound = fixed_send_buffer(DEFAULTS.send_buffer)
                assert send_buffer(conn.fileno()) == bound
                assert 0 < unsent_in_kernel(conn.fileno()) <= bound
    on_loop(loop_factory, scenario())


def test_send_buffer_off_leaves_the_kernel_to_grow_it() -> None:
    """``--send-buffer off``: the kernel's own sizing, which lets the same
    client as above hold more than the default bound of kernel memory (what
    the bound is for)."""
    async def scenario() -> None:
        async with big_answers(write_timeout=30, send_buffer=0) as (node, path):
            front = node.node.proxy.front
            with raw_client(node, rcvbuf=4096) as sock:
                sock.send(get(path.decode()))
                assert await until(lambda: len(front.paused) == 1, 5)
                (conn,) = front.paused
                assert unsent_in_kernel(conn.fileno()) > fixed_send_buffer(DEFAULTS.send_buffer)
    on_loop(asyncio.new_event_loop, scenario())


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_fresh_node_fixes_the_send_buffer_of_every_connection(
        loop_factory: LoopFactory) -> None:
    """No setting given: every socket the node accepts has its send buffer
    fixed at the default ``--send-buffer``, a connection the front answers
    and one it handed to aiohttp alike. (Before, the kernel sized each
    itself: 3.9 MB from the start on loopback, and growing.)"""
    async def scenario() -> None:
        async with running_node() as node, connect(node) as (r1, w1), \
                connect(node) as (r2, w2):
            w1.write(get("/v1/rooms/fresh/poll?uid=u"))  # the front's
            assert (await read_response(r1))[0] == 200
            w2.write(get("/healthz"))  # aiohttp's
            assert (await read_response(r2))[0] == 200
            assert node.runner.server is not None
            assert len(node.runner.server.connections) == 1
            assert accepted_send_buffers(node) == [fixed_send_buffer(DEFAULTS.send_buffer)] * 2
    on_loop(loop_factory, scenario())


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_the_largest_answer_of_the_default_settings_is_written_in_one_go(
        loop_factory: LoopFactory) -> None:
    """The default send buffer bounds no honest answer: a first poll's
    answer of a full ``--answer-bytes-max`` (and its last message, and its
    envelope) is taken by the kernel and the transport's buffer below its
    high-water mark, without pausing its connection, even when the
    client's own kernel takes none of it (a 4 KiB window, nothing read
    until the answer began to arrive)."""
    async def scenario() -> None:
        async with running_node() as node:
            front, body = node.node.proxy.front, "x" * (DEFAULTS.max_message_bytes - 96)
            async with aiohttp.ClientSession() as session:
                for i in range(DEFAULTS.answer_bytes_max // len(body) + 8):
                    await send(session, node.url, "full", f"{body}{i}")
            with raw_client(node, rcvbuf=4096) as sock:
                loop = asyncio.get_running_loop()
                arriving = loop.create_future()
                loop.add_reader(sock, lambda: arriving.done() or arriving.set_result(None))
                sock.send(get(f"/v1/rooms/full/poll?uid=u&recent={DEFAULTS.recent_max}"))
                await asyncio.wait_for(arriving, 5)  # the node wrote it all in one call
                loop.remove_reader(sock)
                assert not front.paused
                reader, writer = await asyncio.open_connection(sock=sock.dup())
                status, _, answer = await read_response(reader)
                writer.close()
            assert status == 200
            # As full as an answer gets: within one message of the budget.
            assert len(answer) > DEFAULTS.answer_bytes_max - DEFAULTS.max_message_bytes
    on_loop(loop_factory, scenario())


# -- B: a client that leaves while its pipelined requests wait ---------------------------------


async def held_poll_request(node: Running) -> bytes:
    """A poll of room ``gone`` at its head, that the node holds (60 s)."""
    async with aiohttp.ClientSession() as session:
        first = await Listener(session, "gone").poll(node.url)
    return get(f"/v1/rooms/gone/poll?uid=u&epoch={first['epoch']}&seq={first['seq']}"
               f"&iseq={first['iseq']}&timeout=60")


@pytest.mark.parametrize("closing", ["fin", "reset"])
@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_client_gone_while_its_pipelined_polls_wait_is_let_go(
        loop_factory: LoopFactory, closing: str) -> None:
    async def scenario() -> None:
        # keepalive 0.5 s: the front's sweep (which looks for such clients) every 0.25 s.
        async with running_node(keepalive_timeout=0.5) as node:
            front, proxy = node.node.proxy.front, node.node.proxy
            held = await held_poll_request(node)
            with raw_client(node) as sock:
                # 16 wait their turn behind the held one, the rest is kept
                # unparsed: the front stops reading this connection.
                sock.send(held * 24)
                assert await until(lambda: proxy.held_polls() == 1, 2)
                if closing == "reset":
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # Closed while not read: found and let go within a sweep or two.
            assert await until(lambda: not front.connections and not proxy.held_polls(), 2)
    on_loop(loop_factory, scenario())


@pytest.mark.parametrize("closing", ["fin", "reset"])
@pytest.mark.parametrize("loop_factory", LOOPS)
def test_clients_leaving_all_at_once_do_not_hold_up_the_next_poll(
        loop_factory: LoopFactory, closing: str) -> None:
    """900 held polls whose clients close in one turn of the loop (the node is
    in this process: it sees every close in its next read of the sockets), and
    a poll sent right behind them: it is answered while some of the 900 are
    still being let go of, a slice a turn, instead of after them all (about
    40 µs each: 12 000 clients leaving at once held a probe up 0.45 s). A
    half-closed client still gets its held poll's answer."""
    async def scenario() -> None:
        async with running_node() as node:
            front, proxy = node.node.proxy.front, node.node.proxy
            async with aiohttp.ClientSession() as session:
                await send(session, node.url, "real", "hi")
            n = 900
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if soft < 3 * n:  # both ends of each connection are in this process
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * n), hard))
            held = [get(f"/v1/rooms/junk-{i}/poll?uid=u{i}&epoch=0&seq=0&iseq=0&timeout=60")
                    for i in range(n)]
            host, port = node.url.removeprefix("http://").split(":")
            clients: list[socket.socket] = []
            try:
                for request in held:
                    # Loopback: the kernel completes the connection, no accept needed.
                    clients.append(sock := socket.create_connection((host, int(port))))
                    sock.sendall(request)
                async with connect(node) as (reader, writer):
                    assert await until(lambda: proxy.held_polls() == n, 10)
                    for sock in clients:
                        if closing == "reset":
                            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                            struct.pack("ii", 1, 0))
                            sock.close()
                        else:
                            sock.shutdown(socket.SHUT_WR)
                    writer.write(get("/v1/rooms/real/poll?uid=probe"))
                    status, _, _ = await read_response(reader)
                    still_held = proxy.held_polls()
                assert status == 200
                assert still_held > 0  # none left (all let go of first) before
                assert await until(lambda: proxy.held_polls() == 0, 10)
                if closing == "fin":  # each half-closed client got its empty answer
                    for sock in clients:
                        sock.settimeout(5)
                        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
                assert await until(lambda: not front.connections, 10)
            finally:
                for sock in clients:
                    sock.close()
    on_loop(loop_factory, scenario())


# -- C: a client that floods a connection after its refusal ---------------------------------


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_flood_after_a_refusal_is_dropped_only_so_far(loop_factory: LoopFactory) -> None:
    async def scenario() -> None:
        async with running_node() as node:
            with raw_client(node, sndbuf=16384) as sock:
                # Refused at its head (413: too large to read and drop), then
                # the lingering close reads what follows to keep the answer safe.
                sock.send(b"POST /v1/rooms/fl/messages HTTP/1.1\r\nHost: t\r\n"
                          b"Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")
                loop, chunk, sent = asyncio.get_running_loop(), b"x" * 65536, 0
                with pytest.raises(ConnectionError):  # noqa: PT012 (the flood is the point)
                    while sent < 64 << 20:
                        await loop.sock_sendall(sock, chunk)
                        sent += len(chunk)
            # What was read and dropped, what the kernels hold on either side.
            assert sent < 16 << 20
            assert node.node.proxy.front.lingers_cut == 1
    on_loop(loop_factory, scenario())


# -- D: one address crowding the node --------------------------------------------------------


async def test_one_address_cannot_take_more_than_its_connections() -> None:
    async with running_node(connections_per_ip=3, trusted_proxies=()) as node:
        front = node.node.proxy.front
        async with aiohttp.ClientSession() as session:
            first = await Listener(session, "ip").poll(node.url)
        held = get(f"/v1/rooms/ip/poll?uid=u&epoch={first['epoch']}&seq={first['seq']}"
                   f"&iseq={first['iseq']}&timeout=60")
        async with connect(node) as (r1, w1), connect(node) as (_r2, w2):
            w1.write(get("/healthz"))  # handed to aiohttp: still counted
            assert (await read_response(r1))[0] == 200
            # Each with a poll held: none to close to make room.
            w1.write(held)
            w2.write(held)
            async with connect(node) as (_r3, w3):
                w3.write(held)
                assert await until(lambda: node.node.proxy.held_polls() == 3, 5)
                async with connect(node) as (r4, _):
                    status, headers, body = await read_response(r4)
                    assert (status, headers["connection"], headers["retry-after"]) == (
                        503, "close", "1")
                    assert json.loads(body)["error"] == "overloaded"
                    assert "your address" in json.loads(body)["message"]
                    assert await closed_by_server(r4)
                assert front.admission.per_address == {"127.0.0.1": 3}
                assert front.admission.refused_per_ip == 1
            # One closed: the next is served.
            assert await until(lambda: front.admission.per_address == {"127.0.0.1": 2}, 5)
            async with connect(node) as (r5, w5):
                w5.write(get("/v1/rooms/ip/poll?uid=v"))
                assert (await read_response(r5))[0] == 200
        assert await until(lambda: not front.admission.per_address, 5)  # aiohttp's too
        async with aiohttp.ClientSession() as session, session.get(
                f"{node.url}/metrics", headers=ADMIN_HEADERS) as resp:
            assert 'liveroom_connections_shed_total{reason="per_ip"} 1.0' in await resp.text()


async def test_x_forwarded_for_names_the_client_only_behind_a_trusted_proxy() -> None:
    forwarded = "X-Forwarded-For: 198.51.100.8, 198.51.100.7"  # the first made up by the client
    async with running_node(connections_per_ip=2, trusted_proxies=("127.0.0.0/8",)) as node:
        front = node.node.proxy.front
        async with connect(node) as (r1, w1), connect(node) as (r2, w2), \
                connect(node) as (r3, w3), connect(node) as (r4, w4):
            # The proxy's own connections are not capped; its clients are.
            for reader, writer in ((r1, w1), (r2, w2)):
                writer.write(get("/v1/rooms/xf/poll?uid=u", forwarded))
                assert (await read_response(reader))[0] == 200
            w3.write(get("/v1/rooms/xf/poll?uid=u", "X-Forwarded-For: 198.51.100.7"))
            status, headers, body = await read_response(r3)
            assert (status, headers["connection"], headers["retry-after"]) == (503, "close", "1")
            assert json.loads(body)["error"] == "overloaded"
            w4.write(get("/v1/rooms/xf/poll?uid=u", "X-Forwarded-For: 203.0.113.9"))
            assert (await read_response(r4))[0] == 200
            assert front.admission.per_address == {"198.51.100.7": 2, "203.0.113.9": 1}
    # From anyone else, X-Forwarded-For says nothing: the connection's address counts.
    async with running_node(connections_per_ip=2, trusted_proxies=()) as node, \
            connect(node) as (r1, w1), connect(node) as (r2, w2):
        for reader, writer in ((r1, w1), (r2, w2)):  # each had a valid request: kept
            writer.write(get("/v1/rooms/xf/poll?uid=u", "X-Forwarded-For: 203.0.113.10"))
            assert (await read_response(reader))[0] == 200
        async with connect(node) as (r3, _w3):
            assert (await read_response(r3))[0] == 503


async def test_silent_connections_of_one_address_make_room_for_its_listener() -> None:
    """At ``--connections-per-ip`` as at ``--connections-max``: the address's
    connection longest without a valid request makes room (one address
    behind a NAT, some of its clients silent)."""
    async with running_node(connections_per_ip=2, trusted_proxies=()) as node:
        front = node.node.proxy.front
        async with connect(node) as (r1, _w1), connect(node) as (_r2, _w2):
            async with connect(node) as (reader, writer):
                writer.write(get("/v1/rooms/ip/poll?uid=listener"))
                assert (await read_response(reader))[0] == 200
                assert await cut_off(r1)
                assert front.admission.per_address == {"127.0.0.1": 2}
            assert (front.admission.evicted, front.admission.refused_per_ip) == (1, 0)


async def test_a_proxied_client_refused_on_its_connections_makes_room_for_its_listener() -> None:
    forwarded = "X-Forwarded-For: 198.51.100.7"
    async with running_node(connections_per_ip=2, trusted_proxies=("127.0.0.0/8",)) as node:
        front = node.node.proxy.front
        async with connect(node) as (r1, w1), connect(node) as (r2, w2), \
                connect(node) as (r3, w3):
            for reader, writer in ((r1, w1), (r2, w2)):
                writer.write(get("/v1/rooms/xf/poll", forwarded))  # no uid: a 400, kept alive
                assert (await read_response(reader))[0] == 400
            assert front.admission.per_address == {"198.51.100.7": 2}
            w3.write(get("/v1/rooms/xf/poll?uid=listener", forwarded))
            assert (await read_response(r3))[0] == 200
            assert await cut_off(r1)
            assert front.admission.per_address == {"198.51.100.7": 2}
            assert (front.admission.evicted, front.admission.refused_per_ip) == (1, 0)


async def test_a_flood_of_refused_requests_does_not_keep_a_listener_out() -> None:
    async with running_node(connections_max=4) as node:
        front = node.node.proxy.front
        async with connect(node) as (r1, w1), connect(node) as (r2, w2), \
                connect(node) as (r3, w3), connect(node) as (r4, w4):
            flood = ((r1, w1), (r2, w2), (r3, w3), (r4, w4))
            for reader, writer in flood:
                writer.write(get("/v1/rooms/fd/poll"))  # no uid: a 400, kept alive
                status, headers, _ = await read_response(reader)
                assert status == 400
                assert "connection" not in headers
            # The node is full of connections that never had a valid request:
            # the oldest makes room for the listener.
            async with connect(node) as (reader, writer):
                writer.write(get("/v1/rooms/fd/poll?uid=listener"))
                assert (await read_response(reader))[0] == 200
            assert await cut_off(r1)
            assert (front.admission.evicted, front.admission.refused) == (1, 0)


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_polls_never_read_on_a_connection_aiohttp_serves_are_cut_off_too(
        loop_factory: LoopFactory) -> None:
    """A connection the front handed to aiohttp (its first request was not a
    poll, a send or a like) has the same write deadline."""
    async def scenario() -> None:
        async with big_answers() as (node, path):
            with raw_client(node, rcvbuf=4096) as sock:
                sock.send(get("/healthz") + get(path.decode()) * 16)
                assert await until(lambda: node.runner.server is not None
                                   and len(node.runner.server.connections) == 1, 2)
                assert await reset_by_server(sock, within=3)
            assert node.node.proxy.held_polls() == 0
    on_loop(loop_factory, scenario())


# -- E: connections aiohttp serves crowding the node (issue 44) -------------------------------


@pytest.mark.parametrize(("path", "status"), [("/healthz", 200), ("/no/such/path", 404)])
async def test_connections_kept_alive_on_aiohttp_do_not_keep_a_listener_out(
        path: str, status: int) -> None:
    """Before: a connection handed to aiohttp was counted but never closed
    to make room, so a few clients asking ``/healthz`` (or a 404) and keeping
    their connections kept every listener at 503."""
    async with running_node(connections_max=4) as node:
        front = node.node.proxy.front
        async with connect(node) as (r1, w1), connect(node) as (r2, w2), \
                connect(node) as (r3, w3), connect(node) as (r4, w4):
            for reader, writer in ((r1, w1), (r2, w2), (r3, w3), (r4, w4)):
                writer.write(get(path))
                answered, headers, _ = await read_response(reader)
                assert answered == status
                assert "connection" not in headers  # kept alive
            assert front.open_connections == 4
            async with connect(node) as (reader, writer):
                writer.write(get("/v1/rooms/ka/poll?uid=listener"))
                assert (await read_response(reader))[0] == 200
            assert await closed_by_server(r1)  # the one idle longest, at a request's end
            assert (front.admission.evicted, front.admission.refused) == (1, 0)
            # The others still serve.
            w2.write(get(path))
            assert (await read_response(r2))[0] == status


async def test_a_request_aiohttp_is_answering_is_not_cut_to_make_room() -> None:
    async with running_node(connections_max=3) as node:
        front = node.node.proxy.front
        async with aiohttp.ClientSession() as session:
            first = await Listener(session, "busy").poll(node.url)
        held = get(f"/v1/rooms/busy/poll?uid=u&epoch={first['epoch']}&seq={first['seq']}"
                   f"&iseq={first['iseq']}&timeout=60")
        async with connect(node) as (r1, w1), connect(node) as (r2, w2):
            for reader, writer in ((r1, w1), (r2, w2)):
                writer.write(get("/healthz"))  # handed to aiohttp, then a poll held there
                assert (await read_response(reader))[0] == 200
                writer.write(held)
            async with connect(node) as (_r3, w3):
                w3.write(held)  # and one held on the front
                assert await until(lambda: node.node.proxy.held_polls() == 3, 5)
                async with connect(node) as (reader, _):
                    assert (await read_response(reader))[0] == 503
                assert (front.admission.evicted, front.admission.refused) == (0, 1)
            assert await until(lambda: front.open_connections == 2, 5)
            async with aiohttp.ClientSession() as session:
                await send(session, node.url, "busy", "still here")
            for reader in (r1, r2):
                status, _, body = await read_response(reader)
                assert status == 200
                assert [m["body"] for m in json.loads(body)["messages"]] == ["still here"]


async def test_one_address_kept_alive_on_aiohttp_does_not_keep_its_own_listener_out() -> None:
    async with running_node(connections_per_ip=2, trusted_proxies=()) as node:
        front = node.node.proxy.front
        async with connect(node) as (r1, w1), connect(node) as (r2, w2):
            for reader, writer in ((r1, w1), (r2, w2)):
                writer.write(get("/healthz"))
                assert (await read_response(reader))[0] == 200
            async with connect(node) as (reader, writer):
                writer.write(get("/v1/rooms/ip/poll?uid=listener"))
                assert (await read_response(reader))[0] == 200
                assert await closed_by_server(r1)
                assert front.admission.per_address == {"127.0.0.1": 2}
            assert (front.admission.evicted, front.admission.refused_per_ip) == (1, 0)


@pytest.mark.parametrize("closing", ["fin", "reset"])
@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_client_gone_while_its_requests_wait_on_aiohttp_is_let_go(
        loop_factory: LoopFactory, closing: str) -> None:
    """As B, on a connection handed to aiohttp: it queues two requests behind
    the one it answers, then stops reading the connection, and so sees no FIN
    (nor, on some loops, a reset). Before: the client's held poll and the
    connection stayed until each poll's hold ran out, one after the other."""
    async def scenario() -> None:
        async with running_node(keepalive_timeout=0.5) as node:
            front, proxy = node.node.proxy.front, node.node.proxy
            held = await held_poll_request(node)
            host, port = node.url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(get("/healthz"))
                assert (await read_response(reader))[0] == 200
                writer.write(held * 24)
                assert await until(lambda: proxy.held_polls() == 1, 2)
                if closing == "reset":
                    writer.get_extra_info("socket").setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            finally:
                writer.close()
            # Closed while not read: found and let go within a sweep or two.
            assert await until(lambda: not front.open_connections and not proxy.held_polls(), 2)
    on_loop(loop_factory, scenario())
