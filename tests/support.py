"""A listener and a node for end-to-end tests, over real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import BaseTestServer
from yarl import URL

from liveroom.clock import Clock, FakeClock
from liveroom.metrics import Metrics
from liveroom.model import name_slot
from liveroom.node import NODE, Node, build_app, node_runner, node_site
from liveroom.ratelimit import RateLimits
from liveroom.sects import Sect
from liveroom.settings import Settings
from liveroom.store import Store
from liveroom.store.base import LogPolicy
from liveroom.store.memory import MemoryStore
from liveroom.whitelist import SectChange, pin_room, read_sects, release_room
from proxy.auth import Tokens
from proxy.sends.send import Sends


def in_page_order(uids: Iterable[str], count: int) -> list[str]:
    """``uids`` in the order ``/online`` pages list a room split into ``count``
    shards: by shard, then by uid (one shard: sorted)."""
    return sorted(uids, key=lambda uid: (name_slot(uid, max(count, 1)), uid))


async def pin(store: Store, room: str, sect: Sect | None = "vip", *,
              now_ms: int = 1) -> SectChange:
    """An operator's pin made in the store (``liveroom vip pin ROOM SECT
    --store``; ``None``: unpin)."""
    return await pin_room(store.operators, store.log, room, sect, now_ms)


async def release(store: Store, room: str, *, now_ms: int = 1) -> SectChange:
    """An operator's ``liveroom vip remove ROOM --store``."""
    return await release_room(store.operators, room, now_ms)


async def vip_rooms(store: Store) -> frozenset[str]:
    """The rooms the store has in the vip sect."""
    return frozenset(room for room, r in (await read_sects(store.operators)).items() if r.vip)


def nginx_including(tmp: Path, snippet: Path) -> Path:
    """A minimal nginx.conf in ``tmp`` (its pid, logs and temporary files
    there too, in the foreground) that includes the http-level ``snippet`` as a
    distribution's conf.d would; run it with ``nginx -p TMP/ -c PATH -e LOG``."""
    temp = " ".join(f"{kind}_temp_path {tmp / kind};"
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = tmp / "nginx.conf"
    conf.write_text(
        f"daemon off;\npid {tmp / 'nginx.pid'};\nerror_log {tmp / 'error.log'};\n"
        f"events {{}}\nhttp {{\n  {temp}\n  access_log off;\n"
        f"  include {snippet};\n}}\n")
    return conf


DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def deploy_snippet(upstreams: Iterable[str], port: int, *, location: str = "",
                   changes: Mapping[str, str] | None = None) -> str:
    """deploy/nginx.conf with its nodes replaced by ``upstreams``, its port 80
    by ``port`` on loopback, ``location`` (directives) added to its ``location
    /`` and each text of ``changes`` replaced by its value."""
    snippet = (DEPLOY / "nginx.conf").read_text()
    servers = "\n".join(f"    server {u.removeprefix('http://')} max_fails=0;"
                        for u in upstreams)
    replaced = {"    server 127.0.0.1:8080 max_fails=1 fail_timeout=10s;": servers,
                "    listen 80 ": f"    listen 127.0.0.1:{port} ",
                "    location / {\n": "    location / {\n" + location, **(changes or {})}
    for text, value in replaced.items():
        assert text in snippet, text
        snippet = snippet.replace(text, value)
    return snippet


@contextmanager
def running_nginx(prefix: Path, conf: Path, port: int) -> Iterator[str]:
    """nginx run on ``conf`` in the foreground (``-p PREFIX/``, its error log
    ``PREFIX/error.log``), once it accepts on ``port`` of 127.0.0.1: its URL."""
    binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    assert binary, "nginx is not installed: run scripts/install-test-deps"
    proc = subprocess.Popen([binary, "-p", f"{prefix}/", "-c", str(conf),
                             "-e", str(prefix / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=0.1):
                break
            assert proc.poll() is None, (prefix / "error.log").read_text()
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def deployed_nginx(tmp: Path, upstreams: Iterable[str], *, location: str = "",
                   changes: Mapping[str, str] | None = None) -> Iterator[str]:
    """nginx running deploy/nginx.conf as a distribution would include it
    (:func:`deploy_snippet`: its nodes ``upstreams``, its port a free loopback
    one); its URL."""
    port = free_port()
    (tmp / "liveroom.conf").write_text(
        deploy_snippet(upstreams, port, location=location, changes=changes))
    with running_nginx(tmp, nginx_including(tmp, tmp / "liveroom.conf"), port) as url:
        yield url


def fixed_send_buffer(size: int) -> int:
    """What the kernel makes of ``SO_SNDBUF`` set to ``size`` (Linux doubles
    it and caps it at ``net.core.wmem_max``), read back off a socket of our own."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        return int(probe.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (right now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


ADMIN = "admin-token-of-the-tests-0123456789"
PUBLISHER = "publisher-token-of-the-tests-012345"
SHARED_SECRET = "secret-every-test-node-shares-0123456789"
"""Over a shared store, tokens and the secret have at least 32 bytes."""
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
"""What reads ``/metrics`` (no metrics token set: the admin token)."""
# Tests send faster than a person chats: sender rate limits are off unless a
# test turns them on (tests/front/test_traffic.py, tests/hostile/test_rate_limits.py).
BASE = Settings(admin_token=ADMIN, publisher_token=PUBLISHER, secret="test-secret",
                rate_limits=RateLimits(per_uid=()), rooms_per_uid=(), rooms_per_node=(),
                rooms_per_address=())


@dataclass
class Running:
    url: str
    node: Node
    runner: web.AppRunner

    async def stop(self) -> None:
        await self.runner.cleanup()


class FrontTestServer(BaseTestServer):
    """pytest-aiohttp's test server, serving a node's application the way
    ``liveroom serve`` does: on the front (polls, sends and likes) with aiohttp behind."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app = app

    async def _make_runner(self, **kwargs: Any) -> web.AppRunner:
        return node_runner(self.app)

    async def start_server(self, loop: asyncio.AbstractEventLoop | None = None,
                           **kwargs: Any) -> None:
        if self.runner:
            return
        runner = self.runner = await self._make_runner()
        await runner.setup()
        site = node_site(runner, self.host, 0)
        await site.start()
        self.port = site.port
        self.scheme = "http"
        self._root = URL(f"http://{self.host}:{self.port}")


@asynccontextmanager
async def running_node(store: str = "memory", clock: Clock | None = None,
                       **overrides: Any) -> AsyncIterator[Running]:
    """A node serving on a free loopback port, stopped (gracefully) on exit."""
    settings = replace(BASE, store=store, **overrides)
    app = build_app(settings, clock)
    runner = node_runner(app)
    await runner.setup()
    site = node_site(runner, "127.0.0.1", 0)
    await site.start()
    running = Running(f"http://127.0.0.1:{site.port}", app[NODE], runner)
    try:
        yield running
    finally:
        await running.stop()


@asynccontextmanager
async def liveroom_process(*args: str,
                           env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m liveroom ARGS`` (a ``listen``, say) with its stdout and
    stderr piped to the test; killed on exit if it still runs (a test that
    stops it itself checks how it exited)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "liveroom", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def send(session: aiohttp.ClientSession, url: str, room: str, body: Any, *,
               important: bool = False, uid: str = "sender",
               client_msg_id: str | None = None, to: str | None = None) -> dict[str, Any]:
    """Send one message (``to``: a personal one, with the publisher token)."""
    doc: dict[str, Any] = {"uid": uid, "body": body}
    if to is None:
        doc["important"] = important
    else:
        doc["to"] = to
    if client_msg_id is not None:
        doc["client_msg_id"] = client_msg_id
    headers = {"Authorization": f"Bearer {PUBLISHER}"} if important or to else {}
    async with session.post(f"{url}/v1/rooms/{room}/messages", json=doc,
                            headers=headers) as resp:
        assert resp.status == 201, await resp.text()
        answer: dict[str, Any] = await resp.json()
        return answer


class PollRefused(AssertionError):
    """A poll answered with another status than 200 (an assertion failure
    for any test that does not expect one)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text}")
        self.status = status


@dataclass
class Listener:
    """A client that long-polls one room and passes its cursors back."""

    session: aiohttp.ClientSession
    room: str
    uid: str = "listener"
    epoch: str | None = None
    seq: int | None = None
    iseq: int | None = None
    ctx: str | None = None
    spread: int | None = None
    """A vip room's routing hint from the last answer, echoed as a client does."""
    pseq: int | None = None
    """The personal cursor from the last answer, echoed as a client does."""
    received: list[dict[str, Any]] = field(default_factory=list)
    personal: list[dict[str, Any]] = field(default_factory=list)
    """The personal messages it got, in order."""
    answers: list[dict[str, Any]] = field(default_factory=list)
    via: list[str | None] = field(default_factory=list)
    """Each answer's ``X-Upstream`` header: the node a load balancer that
    sets it (the spread test's nginx) passed the poll to."""

    async def poll(self, url: str, timeout: int = 25, **extra: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"uid": self.uid, "timeout": timeout}
        if self.spread is not None:
            params["spread"] = self.spread
        if self.pseq is not None:
            params["pseq"] = self.pseq
        params.update(extra)
        if self.seq is not None:
            params.update(epoch=self.epoch, seq=self.seq, iseq=self.iseq, ctx=self.ctx or "")
        async with self.session.get(f"{url}/v1/rooms/{self.room}/poll", params=params,
                                    timeout=aiohttp.ClientTimeout(total=timeout + 15)) as resp:
            if resp.status != 200:
                raise PollRefused(resp.status, await resp.text())
            answer: dict[str, Any] = await resp.json()
            self.via.append(resp.headers.get("X-Upstream"))
        self.epoch, self.seq, self.iseq = answer["epoch"], answer["seq"], answer["iseq"]
        self.ctx = answer["ctx"]
        self.spread = answer.get("spread")
        self.pseq = answer["pseq"]
        self.answers.append(answer)
        self.received += answer["important"] + answer["messages"]
        self.personal += answer.get("personal", [])
        return answer

    def bodies(self) -> list[Any]:
        return [m["body"] for m in self.received]

    async def poll_until(self, url: str, count: int, *, limit: float = 20.0) -> None:
        """Poll until ``count`` messages arrived in all (bounded in time)."""
        async with asyncio.timeout(limit):
            while len(self.received) < count:
                await self.poll(url, timeout=5)


async def poll_once(session: aiohttp.ClientSession, url: str, room: str,
                    params: dict[str, Any]) -> dict[str, Any]:
    """One poll of ``room`` with exactly ``params`` (a made-up or replayed
    cursor, unlike :class:`Listener`, which keeps its own): its 200 answer."""
    async with session.get(f"{url}/v1/rooms/{room}/poll", params=params) as resp:
        assert resp.status == 200, await resp.text()
        answer: dict[str, Any] = await resp.json()
        return answer


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``LIVEROOM_*``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIVEROOM_")}
    env.update(extra)
    return env


async def read_response(reader: asyncio.StreamReader,
                        within: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response off a raw socket: status, headers (lower-case
    names), body (by its Content-Length)."""
    async with asyncio.timeout(within):
        status_line = await reader.readline()
        assert status_line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), status_line
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


class LoopTurns:
    """Counts the turns another task gets on the event loop while the block
    runs: proof that work inside the block yields (``async with LoopTurns() as t``,
    then ``t.turns``)."""

    def __init__(self) -> None:
        self.turns = 0
        self._done = False
        self._task: asyncio.Task[None] | None = None

    async def _count(self) -> None:
        while not self._done:
            self.turns += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._count())
        await asyncio.sleep(0)
        self.turns = 0
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done = True
        assert self._task is not None
        await self._task


async def until(clock: FakeClock, check: Callable[[], Awaitable[bool]], *,
                step: float = 0.5, limit: float = 10.0) -> float:
    """Move the fake clock by ``step`` until ``check()`` holds; returns the fake
    seconds it took. Bounded by ``limit`` fake seconds (and 20 real ones)."""
    moved = 0.0
    async with asyncio.timeout(20):
        while not await check():
            assert moved < limit, f"not true after {moved} fake seconds"
            await clock.advance(step)
            moved += step
            await asyncio.sleep(0.01)  # store round trips are real I/O
    return moved


STEP = 0.05

IO_MARGIN = 0.75
"""Fake seconds a fake-time check allows for real I/O: the helpers below move
the clock one STEP per 5 ms of real time, so 15 steps leave a loopback round
trip (request, store, answer) 75 ms or more, which a loaded 2-core machine keeps;
every interval these tests tell apart differs by more than that."""


async def settle() -> None:
    """Let real I/O that a step of fake time set off happen."""
    await asyncio.sleep(0.005)


async def advance_until(clock: FakeClock, done: Callable[[], bool], *, limit: float) -> float:
    """Move the fake clock in small steps until ``done()``; the fake seconds it took
    (steps times :data:`STEP`: a running sum of 0.05 drifts below the exact
    figure, 100 steps summing to 4.99999999999999)."""
    steps = 0
    async with asyncio.timeout(30):
        while not done():
            assert steps * STEP <= limit, f"not done after {steps * STEP:.2f} fake seconds"
            await clock.advance(STEP)
            steps += 1
            await settle()
    return steps * STEP


async def answered(clock: FakeClock, poll: Awaitable[dict[str, Any]], *,
                   limit: float = 12) -> tuple[dict[str, Any], float]:
    """The answer to ``poll`` and the fake seconds it was held."""
    task = asyncio.ensure_future(poll)
    await settle()
    took = await advance_until(clock, task.done, limit=limit)
    return task.result(), took


async def held_polls(holds: Any, count: int) -> None:
    """Wait (real time, bounded) until ``holds`` (a node's ``proxy.holds``)
    holds ``count`` polls."""
    async with asyncio.timeout(10):
        while holds.count != count:
            await asyncio.sleep(0.01)


async def counted_online(node: Any, clock: FakeClock, room: str) -> None:
    """Walk the fake clock (real time bounded) until ``room`` counts one
    listener online on ``node`` (a running node): the room is then in its tier."""
    async with asyncio.timeout(20):
        while node.node.proxy.polls.stats.online(room) < 1:
            await clock.advance(0.5)
            await asyncio.sleep(0.01)


def _echo(stream: IO[str], port: int) -> None:
    """Print a node's output as it comes (pytest shows it for a failing test)."""
    for line in stream:
        print(f"[node :{port}] {line}", end="")


@contextmanager
def serve(*args: str, nofile: int | None = None) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A real ``liveroom serve`` process on a free port (killed on exit): its
    URL and process. Tokens, secret and open auth come from the environment;
    ``nofile``: its open-file limit, soft and hard."""

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    port = free_port()
    env = {**os.environ, "LIVEROOM_ADMIN_TOKEN": ADMIN,
           "LIVEROOM_PUBLISHER_TOKEN": PUBLISHER, "LIVEROOM_SECRET": SHARED_SECRET,
           "LIVEROOM_RATE_LIMITS": "off", "LIVEROOM_AUTH": "open"}
    proc = subprocess.Popen([sys.executable, "-m", "liveroom", "serve", "--port", str(port),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, preexec_fn=limit)
    drain: threading.Thread | None = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded by the per-test timeout
            if "listening on" in line:
                break
        else:
            raise AssertionError(f"serve exited with {proc.wait()}")
        # Drained while it runs (a full pipe would block the node's logging),
        # printed if the test fails.
        drain = threading.Thread(target=_echo, args=(proc.stdout, port), daemon=True)
        drain.start()
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if drain is not None:
            drain.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def idle_sends() -> Sends:
    """The send path at the tests' settings (``BASE``), over a memory log
    nothing is sent to: its checks and answers, without a node."""
    clock = FakeClock()
    return Sends(BASE, MemoryStore(LogPolicy(), clock).log,
                 Tokens(admin=ADMIN, publisher=PUBLISHER), clock, Metrics())
