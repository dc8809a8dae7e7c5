"""Likes and gifts over Redis (issue 35): taps per node, the store's load, exactness, a crash.

This driver starts a throw-away ``redis-server`` (a free loopback port, a
temporary directory, no persistence) and, for each run, ``--nodes`` fresh
``liveroom serve`` processes of this checkout over it (``--store
redis://127.0.0.1:PORT/0``, ``--auth open``, the publisher token of
loadtest/kit/servers.py, each on its own free loopback port, the default
likes settings but ``--likes-flush``), ready once ``/healthz`` answers 200.

**Tap runs**, one per rate of ``--rates`` (default: ``--taps-per-second`` and
a tenth of it): ``--client-procs`` processes (multiprocessing, fork), each
with ``--connections`` raw keep-alive HTTP/1.1 connections to every node
(``asyncio.Protocol`` on uvloop, answers parsed by httptools), post ``POST
/v1/rooms/ROOM/likes`` ``{"uid": "u<n>", "count": c}`` with ``n`` drawn from
``--uids`` distinct uids and ``c`` from 1 to 100 (a burst, the client's
batch), each request to a node drawn at random, paced so the taps (not the
requests) reach the rate, for ``--seconds`` (then they stop and wait for the
answers in flight). ``max`` in ``--rates`` sends without pacing, each
connection again at once after its answer: the ceiling on this machine.
Before the taps, ``--idle`` seconds with the nodes up and nothing sent give
the store's background load. Measured over the window, per node:

- **taps and requests acknowledged a second** (202s), those refused (429
  ``rate_limited``, 503) apart, the latency p50/p99 (client's clock);
- **server CPU** (utime + stime of its process from /proc): a share of a core,
  **µs a request** and **taps per core-second** (acknowledged taps / CPU s),
  each also over the node's CPU in the idle window (its timers, its reads):
  at low rates a node's fixed costs (4 flushes a second) dominate;
- **Redis**: ``INFO stats`` and ``INFO commandstats`` around the window (the
  harness's own ``INFO`` taken off): the **likes' adds** a second (one
  ``counters_likes.lua`` call adds one room's merged taps; counted by its ``INCRBY``,
  which no other command or script of liveroom's sends) against the bound
  ``nodes x rooms / likes-flush`` (4 a second a room a node at 250 ms), each
  node's flushes a second (``liveroom_likes_flushes_total``: one pipeline
  each), the ``GET`` a second (each node reads the totals of the rooms it
  was asked about once a second), ``EVALSHA`` a second and every command a
  second (the commands scripts run inside included), each beside the idle
  window's;
- **exactness**: the nodes stopped with SIGTERM (a clean stop writes what is
  left), the store's total (``GET lr:{ROOM}:lk``) against the sum of the
  acknowledged taps: **lost** = acknowledged - stored, 0 expected (below 0:
  the store holds taps nobody was acknowledged, written twice). The nodes get
  SIGTERM as soon as the clients have their answers, so each stop still has
  its last taps to write. A request whose connection closed before its answer
  is **unanswered**: not acknowledged, counted apart.

**The crash run** (unless ``--no-crash``; ``--crash-runs`` of them): the same
at ``--crash-rate`` (default: the first of ``--rates``), node 0 killed with
SIGKILL halfway; the clients drop its connections and go on with the others
(which stop cleanly at the end). Lost = acknowledged - stored, all of it the
killed node's, against its bound: its acknowledged taps a second over the 5
s before the kill x ``--likes-flush``, and the taps it acknowledged in its
last ``--likes-flush`` before the kill (from the answers' arrival times, in
10 ms buckets); also how far back its last ``lost`` acknowledged taps go.
Requests in flight to it at the kill are not acknowledged, and counted apart.

**The gift run**: ``--gifts`` gifts from ``--givers`` givers (values drawn
from a price list), ``--gift-concurrency`` at once over the nodes with the
publisher token; the harness keeps the ledger (201s only). Then the
leaderboard (``limit=100``) read from every node must equal the ledger's top
100 (score descending, equal scores by uid descending: the store's order),
and its total and count the ledger's. Gifts a second and latency p50/p99.

The clients and the servers share this machine's cores: the output says how
many, and what the nodes, the clients, Redis and other processes took.

    python loadtest/bench_likes.py --quick          # about a minute
    python loadtest/bench_likes.py                  # 1 000 000 uids, 100 000 taps/s, 60 s
    python loadtest/bench_likes.py --rates 100000,10000,max --crash-runs 3

Everything it starts is stopped at the end, also on Ctrl-C. Progress goes to
stderr; the results (stamped with the command, the commit and the date) to
stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import multiprocessing
import os
import random
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from array import array
from collections import Counter, deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import httptools
import numpy as np
import redis
import uvloop
from kit.machine import cpu_seconds, die_with_parent, machine_busy, own_cpu, raise_nofile
from kit.provenance import commit, invocation, versions
from kit.servers import (
    ADMIN_TOKEN,
    PUBLISHER_TOKEN,
    Server,
    interrupt_on_signals,
    liveroom_server,
    redis_server,
)

from liveroom.store.redis import keys

MAX_COUNT = 100
"""Taps one request may carry (proxy/likes/likes.py's MAX_COUNT)."""
PRICES = (1, 1, 1, 2, 5, 5, 10, 20, 52, 99, 188, 520, 1314)
"""Gift values, drawn uniformly (cheap gifts more often)."""
LEADERBOARD = 100
NOFILE = 4096
BEFORE_KILL = 5.0
"""Seconds before the kill over which the killed node's tap rate is taken."""
CONNECT_TIMEOUT = 30.0
TICK = 0.01
"""Seconds of a bucket of acknowledged taps (when they were answered)."""
DRAIN = 5.0
"""Seconds the clients wait for answers in flight after the window."""


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- the tapping clients (child processes) ---------------------------------------


@dataclass(frozen=True)
class TapConfig:
    ports: tuple[int, ...]
    rooms: tuple[tuple[str, ...], ...]
    """The rooms tapped through each node (the same for every node but in a
    crash run)."""
    uids: int
    rate: float | None
    """This process's taps a second; None: no pacing (each connection sends
    again at once after its answer)."""
    seconds: float
    connections: int
    """Keep-alive connections to each node."""
    seed: int


class NodeTally:
    """What one client process saw of one node."""

    def __init__(self) -> None:
        self.acked_taps = self.acked_requests = 0
        self.refused_taps = self.refused_requests = 0
        self.limited = 0
        """Of the refused requests, those answered 429 (the uid's windows); the
        others were 503 (the node's bounds: --likes-uids-max, --likes-rooms-max)."""
        self.other: Counter[int] = Counter()
        self.unanswered_taps = self.unanswered_requests = 0
        self.connect_errors = 0
        self.latency_ms = array("f")
        self.ticks: Counter[int] = Counter()
        """Acknowledged taps by :data:`TICK` of the window (the answer's arrival)."""
        self.last_error = ""

    def report(self) -> dict[str, Any]:
        return {"acked_taps": self.acked_taps, "acked_requests": self.acked_requests,
                "refused_taps": self.refused_taps, "refused_requests": self.refused_requests,
                "limited": self.limited,
                "other": dict(self.other), "unanswered_taps": self.unanswered_taps,
                "unanswered_requests": self.unanswered_requests,
                "connect_errors": self.connect_errors, "latency_ms": self.latency_ms.tobytes(),
                "ticks": dict(self.ticks), "last_error": self.last_error}


class Tapper(asyncio.Protocol):
    """One keep-alive connection to one node, one request in flight at most."""

    def __init__(self, client: TapClient, node: int) -> None:
        self.client = client
        self.node = node
        self.tally = client.tallies[node]
        self.transport: Any = None
        self.parser: Any = None
        self.head = f"Host: 127.0.0.1:{client.cfg.ports[node]}\r\n".encode()
        self.count = 0
        """Taps of the request in flight (0: none)."""
        self.sent_at = 0.0
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.parser = httptools.HttpResponseParser(self)
        self.client.made(self)

    def send(self, room: str, uid: int, count: int) -> None:
        body = b'{"uid":"u%d","count":%d}' % (uid, count)
        self.count = count
        self.sent_at = time.monotonic()
        self.transport.write(
            b"POST /v1/rooms/%s/likes HTTP/1.1\r\n%sContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (room.encode(), self.head, len(body), body))

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.tally.last_error = f"unparsable answer: {exc!r}"
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        now = time.monotonic()
        status = self.parser.get_status_code()
        count, self.count = self.count, 0
        tally = self.tally
        tally.latency_ms.append((now - self.sent_at) * 1000)
        if status == 202:
            tally.acked_taps += count
            tally.acked_requests += 1
            tally.ticks[int((now - self.client.start) / TICK)] += count
        elif status in (429, 503):
            tally.refused_taps += count
            tally.refused_requests += 1
            tally.limited += status == 429
        else:
            tally.other[status] += 1
            tally.last_error = f"{status} {b''.join(self.body)[:200]!r}"
        self.body.clear()
        if self.parser.should_keep_alive():
            self.client.idle_again(self)
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.count:
            self.tally.unanswered_taps += self.count
            self.tally.unanswered_requests += 1
            self.count = 0
        if exc is not None:
            self.tally.last_error = repr(exc)
        self.client.lost(self)


class TapClient:
    """One client process's connections and its paced sending."""

    def __init__(self, cfg: TapConfig) -> None:
        self.cfg = cfg
        self.tallies = [NodeTally() for _ in cfg.ports]
        self.idle: list[deque[Tapper]] = [deque() for _ in cfg.ports]
        """Each node's idle connections, the longest idle first: taken in turn,
        none idles long enough for the node's keep-alive timeout to close it
        as a request goes out on it."""
        self.every: list[Tapper] = []
        self.down: set[int] = set()
        """Nodes that refused a new connection (a killed node): not tried again."""
        self.start = 0.0
        self.stopping = False
        self.waiter: asyncio.Future[None] | None = None
        self.sent_taps = self.sent_requests = 0
        self.max_lag = 0.0

    async def connect(self, node: int) -> bool:
        loop = asyncio.get_running_loop()
        try:
            # uvloop makes the protocol before connecting: it counts once
            # connection_made is called (see made()).
            await loop.create_connection(lambda: Tapper(self, node), "127.0.0.1",
                                         self.cfg.ports[node])
        except OSError as exc:
            self.tallies[node].connect_errors += 1
            self.tallies[node].last_error = repr(exc)
            self.down.add(node)
            return False
        return True

    def made(self, tapper: Tapper) -> None:
        self.idle[tapper.node].append(tapper)
        self.every.append(tapper)
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def idle_again(self, tapper: Tapper) -> None:
        self.idle[tapper.node].append(tapper)
        self._wake()

    def lost(self, tapper: Tapper) -> None:
        with contextlib.suppress(ValueError):
            self.idle[tapper.node].remove(tapper)
        self.every.remove(tapper)
        if not self.stopping and tapper.node not in self.down:
            asyncio.get_running_loop().create_task(self.connect(tapper.node))
        self._wake()

    def pick(self, rng: random.Random) -> Tapper | None:
        """An idle connection to a node drawn at random (another's when that
        node has none idle)."""
        node = rng.randrange(len(self.idle))
        if self.idle[node]:
            return self.idle[node].popleft()
        others = [conns for conns in self.idle if conns]
        return rng.choice(others).popleft() if others else None

    async def run(self, start: float) -> None:
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        per_tap = 1.0 / cfg.rate if cfg.rate else 0.0
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        self.start = start
        end = start + cfg.seconds
        next_at = start
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if per_tap and next_at > now:
                await asyncio.sleep(min(next_at, end) - now)
                continue
            tapper = self.pick(rng)
            if tapper is None or tapper.transport is None:
                self.waiter = loop.create_future()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.waiter, end - now)
                self.waiter = None
                continue
            if per_tap:
                self.max_lag = max(self.max_lag, now - next_at)
            count = rng.randint(1, MAX_COUNT)
            rooms = cfg.rooms[tapper.node]
            tapper.send(rooms[rng.randrange(len(rooms))], rng.randrange(cfg.uids), count)
            self.sent_taps += count
            self.sent_requests += 1
            next_at += count * per_tap
        # Answers in flight: wait for them, a while.
        self.stopping = True
        deadline = time.monotonic() + DRAIN
        while any(t.count for t in self.every) and (left := deadline - time.monotonic()) > 0:
            self.waiter = loop.create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.waiter, left)
            self.waiter = None


def run_tapper(conn: Connection, cfg: TapConfig) -> None:
    """A client process: connect, say ready, wait for the start time, tap,
    report. Stops by itself when the parent goes away."""
    die_with_parent()
    uvloop.install()

    async def main() -> dict[str, Any]:
        client = TapClient(cfg)
        loop = asyncio.get_running_loop()
        for node in range(len(cfg.ports)):
            for _ in range(cfg.connections):
                await client.connect(node)
        conn.send(("ready", sum(len(c) for c in client.idle)))
        if not await loop.run_in_executor(None, conn.poll, CONNECT_TIMEOUT):
            return {}
        _, start = conn.recv()
        t0 = os.times()
        await client.run(start)
        t1 = os.times()
        for tapper in list(client.every):
            if tapper.transport is not None:
                tapper.transport.close()
        await asyncio.sleep(0)
        return {"nodes": [t.report() for t in client.tallies], "sent_taps": client.sent_taps,
                "sent_requests": client.sent_requests, "max_lag": client.max_lag,
                "cpu": (t1.user + t1.system) - (t0.user + t0.system)}

    result = asyncio.run(main())
    conn.send(("done", result))
    conn.close()


class Tappers:
    """The client processes of one tap run."""

    def __init__(self, cfg: TapConfig, procs: int) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conns: list[Connection] = []
        self.procs: list[multiprocessing.process.BaseProcess] = []
        for i in range(procs):
            parent, child = ctx.Pipe()
            share = TapConfig(cfg.ports, cfg.rooms, cfg.uids,
                              None if cfg.rate is None else cfg.rate / procs, cfg.seconds,
                              cfg.connections, cfg.seed * 1000 + i)
            proc = ctx.Process(target=run_tapper, args=(child, share), daemon=True,
                               name=f"likes-tapper-{i}")
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def ready(self) -> int:
        connections = 0
        for conn, proc in zip(self.conns, self.procs, strict=True):
            if not conn.poll(CONNECT_TIMEOUT):
                raise RuntimeError(f"{proc.name} did not connect within {CONNECT_TIMEOUT} s")
            what, n = conn.recv()
            assert what == "ready"
            connections += n
        return connections

    def go(self, start: float) -> None:
        for conn in self.conns:
            conn.send(("go", start))

    def results(self, timeout: float) -> list[dict[str, Any]]:
        out = []
        for conn, proc in zip(self.conns, self.procs, strict=True):
            if not conn.poll(timeout):
                raise RuntimeError(f"{proc.name} did not report within {timeout:.0f} s")
            what, result = conn.recv()
            assert what == "done"
            out.append(result)
        return out

    def stop(self) -> None:
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


# -- the store, the nodes ----------------------------------------------------------


class RedisProbe:
    """``INFO stats`` and ``INFO commandstats`` of the store, the harness's own
    commands taken off (one connection, opened once: its ``HELLO`` is not in
    any window)."""

    def __init__(self, port: int) -> None:
        self.client = redis.Redis(port=port)
        self.client.ping()

    def sample(self) -> dict[str, int]:
        info = self.client.execute_command("INFO", "stats", "commandstats")
        out = {"total": int(info["total_commands_processed"])}
        for key, value in info.items():
            if key.startswith("cmdstat_"):
                out[key.removeprefix("cmdstat_")] = int(value["calls"])
        return out

    @staticmethod
    def delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        """Commands between two samples, less the first sample's INFO (a
        sample is counted by the next one)."""
        out = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
        out["total"] -= 1
        out["info"] = out.get("info", 0) - 1
        return {k: v for k, v in out.items() if v}

    def likes(self, room: str) -> int:
        return int(self.client.get(keys.likes(room)) or 0)


def open_rooms(port: int, rooms: tuple[str, ...]) -> None:
    """Start each room's broadcast (the operators' ``room start``): likes and
    gifts go to rooms that exist (issue 44)."""
    for room in rooms:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/admin/rooms/{room}/start", data=b"", method="POST",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status in (200, 201), resp.status


def get(port: int, path: str, token: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def wait_healthy(node: Server, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while get(node.port, "/healthz")[0] != 200:
        node.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{node.name}: /healthz not 200 within {timeout:.0f} s:\n"
                               f"{node.log_tail()}")
        time.sleep(0.1)


FLUSHES = re.compile(rb'^liveroom_likes_flushes_total\{outcome="written"\} ([0-9.e+]+)$', re.M)


def flushes(node: Server) -> float:
    """The node's flushes written so far (its /metrics)."""
    status, text = get(node.port, "/metrics", ADMIN_TOKEN)
    found = FLUSHES.search(text) if status == 200 else None
    return float(found.group(1)) if found else 0.0


def start_nodes(stack: contextlib.ExitStack, tmp: Path, store_url: str, args: argparse.Namespace,
                tag: str) -> list[Server]:
    nofile = raise_nofile(NOFILE)
    extra = ["--likes-flush", f"{args.likes_flush:g}", *args.serve_arg]
    nodes = []
    for i in range(args.nodes):
        name = f"{tag}-node{i}"
        for attempt in range(3):
            try:
                node = stack.enter_context(liveroom_server(
                    tmp, nofile, None, store_url, 1, name=name,
                    extra=["--node-id", name, *extra]))
                break
            except RuntimeError as e:
                # A free port taken by another process meanwhile: another one.
                if "address already in use" not in str(e) or attempt == 2:
                    raise
        nodes.append(node)
    for node in nodes:
        wait_healthy(node)
    return nodes


def keep_logs(args: argparse.Namespace, nodes: list[Server]) -> None:
    """Copy the nodes' logs into ``--logs`` (if given)."""
    if args.logs:
        args.logs.mkdir(parents=True, exist_ok=True)
        for node in nodes:
            shutil.copy(node.log, args.logs / node.log.name)


def stop_clean(node: Server) -> tuple[int | None, bool]:
    """SIGTERM, wait; the exit status and whether the log says taps were left
    unwritten."""
    node.stop()
    left = "were not written" in node.log.read_text(errors="replace")
    return node.proc.returncode, left


def percentile(values: np.ndarray[Any, Any], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


# -- one tap run -------------------------------------------------------------------


def tap_run(args: argparse.Namespace, tmp: Path, store: Server, probe: RedisProbe,
            label: str, rate: float | None, kill: bool, seed: int) -> dict[str, Any]:
    # A crash run taps rooms of each node's own, so each node's taps are
    # counted apart in the store: what the killed node lost, what the others
    # wrote on their clean stop.
    by_node = tuple(
        tuple(f"{label}-n{n}-{i}" if kill else f"{label}-{i}" for i in range(args.rooms))
        for n in range(args.nodes))
    rooms = tuple(dict.fromkeys(room for node_rooms in by_node for room in node_rooms))
    with contextlib.ExitStack() as stack:
        say(f"{label}: starting {args.nodes} nodes over redis://127.0.0.1:{store.port}/0")
        nodes = start_nodes(stack, tmp, f"redis://127.0.0.1:{store.port}/0", args, label)
        ports = tuple(node.port for node in nodes)
        open_rooms(ports[0], rooms)
        time.sleep(1.0)
        say(f"{label}: idle for {args.idle:g} s (the store's background load)")
        r0 = probe.sample()
        idle_cpu0, t0 = [node.cpu() for node in nodes], time.monotonic()
        time.sleep(args.idle)
        idle = RedisProbe.delta(r0, probe.sample())
        idle_cpu = [(node.cpu() - c) / (time.monotonic() - t0)
                    for node, c in zip(nodes, idle_cpu0, strict=True)]
        cfg = TapConfig(ports, by_node, args.uids, rate, args.seconds, args.connections, seed)
        tappers = Tappers(cfg, args.client_procs)
        stack.callback(tappers.stop)
        connections = tappers.ready()
        what = "as fast as answered" if rate is None else f"{rate:,.0f} taps/s"
        say(f"{label}: {args.client_procs} client processes, {connections} connections; "
            f"tapping {what} for {args.seconds:g} s"
            + (" (node 0 killed halfway)" if kill else ""))
        start = time.monotonic() + 0.5
        tappers.go(start)
        time.sleep(max(0.0, start - time.monotonic()))
        cpu0 = [node.cpu() for node in nodes]
        rcpu0, ccpu0, busy0 = store.cpu(), cpu_seconds(tappers.pids()), machine_busy()
        own0 = own_cpu()
        f0 = [flushes(node) for node in nodes]
        s0 = probe.sample()
        cpu1: list[float | None] = [None] * len(nodes)
        f1: list[float | None] = [None] * len(nodes)
        killed_at = None
        if kill:
            time.sleep(max(0.0, start + args.seconds / 2 - time.monotonic()))
            f1[0] = flushes(nodes[0])
            cpu1[0] = nodes[0].cpu()
            nodes[0].proc.kill()
            killed_at = time.monotonic() - start
            say(f"{label}: node 0 killed (SIGKILL) at {killed_at:.2f} s")
        last = start
        while (now := time.monotonic()) < start + args.seconds:
            time.sleep(min(5.0, start + args.seconds - now))
            if now - last >= 10:
                last = now
                say(f"{label}: {now - start:.0f} s of {args.seconds:g}")
            for i, node in enumerate(nodes):
                if not (kill and i == 0):
                    node.check_alive()
        window = time.monotonic() - start
        s1 = probe.sample()
        cpu1 = [c if c is not None else node.cpu() for c, node in zip(cpu1, nodes, strict=True)]
        f1 = [f if f is not None else flushes(node) for f, node in zip(f1, nodes, strict=True)]
        rcpu1, ccpu1, busy1 = store.cpu(), cpu_seconds(tappers.pids()), machine_busy()
        own1 = own_cpu()
        results = tappers.results(DRAIN + 30)
        say(f"{label}: stopping the nodes (SIGTERM)")
        exits = [stop_clean(node) for node in nodes[1 if kill else 0:]]
        stored = {room: probe.likes(room) for room in rooms}
        keep_logs(args, nodes)
    tapping = RedisProbe.delta(s0, s1)
    per_node = []
    for i, _ in enumerate(ports):
        parts = [r["nodes"][i] for r in results]
        lat = np.concatenate([np.frombuffer(p["latency_ms"], dtype=np.float32) for p in parts])
        ticks: Counter[int] = Counter()
        for p in parts:
            ticks.update(p["ticks"])
        other: Counter[int] = Counter()
        for p in parts:
            other.update(p["other"])
        acked = sum(p["acked_taps"] for p in parts)
        requests = sum(p["acked_requests"] for p in parts)
        refused = sum(p["refused_requests"] for p in parts)
        cpu = cpu1[i] - cpu0[i]
        alive = killed_at if (kill and i == 0) else window
        # The node's CPU over what it spent idle (its timers and background reads).
        busy = max(0.0, cpu - idle_cpu[i] * alive)
        per_node.append({
            "acked_taps": acked, "acked_requests": requests, "refused_requests": refused,
            "refused_taps": sum(p["refused_taps"] for p in parts), "other": dict(other),
            "limited": sum(p["limited"] for p in parts),
            "unanswered_taps": sum(p["unanswered_taps"] for p in parts),
            "unanswered_requests": sum(p["unanswered_requests"] for p in parts),
            "connect_errors": sum(p["connect_errors"] for p in parts),
            "last_error": next((p["last_error"] for p in parts if p["last_error"]), ""),
            "seconds_up": alive, "taps_per_s": acked / alive, "requests_per_s": requests / alive,
            "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "cpu_s": cpu, "cpu_share": cpu / alive,
            "cpu_us_per_request": 1e6 * cpu / (requests + refused) if requests + refused else 0,
            "idle_cpu_share": idle_cpu[i], "cpu_over_idle_s": busy,
            "cpu_us_per_request_over_idle":
                1e6 * busy / (requests + refused) if requests + refused else 0,
            "taps_per_core_s": acked / cpu if cpu > 0 else 0.0,
            "flushes_per_s": ((f1[i] or 0) - f0[i]) / alive,
            "ticks": ticks})
    acked_total = sum(n["acked_taps"] for n in per_node)
    stored_total = sum(stored.values())
    out: dict[str, Any] = {
        "label": label, "rate": rate, "rooms": len(rooms), "window_s": window,
        "sent_taps": sum(r["sent_taps"] for r in results),
        "sent_requests": sum(r["sent_requests"] for r in results),
        "max_lag_s": max(r["max_lag"] for r in results),
        "clients_cpu_share": (ccpu1 - ccpu0) / window, "redis_cpu_share": (rcpu1 - rcpu0) / window,
        "machine_busy_share": (busy1 - busy0) / window,
        "others_cpu_share": max(0.0, (busy1 - busy0) - (ccpu1 - ccpu0) - (rcpu1 - rcpu0)
                                - (own1 - own0) - sum(n["cpu_s"] for n in per_node)) / window,
        "nodes": per_node, "acked_taps": acked_total, "stored": stored_total,
        "lost": acked_total - stored_total,
        "exits": [{"status": s, "left_unwritten": left} for s, left in exits],
        "idle_commands": idle, "idle_s": args.idle, "tap_commands": tapping,
    }
    out["commands_per_s"] = tapping.get("total", 0) / window
    out["idle_commands_per_s"] = idle.get("total", 0) / args.idle
    for cmd in ("evalsha", "get", "incrby"):
        out[f"{cmd}_per_s"] = tapping.get(cmd, 0) / window
        out[f"idle_{cmd}_per_s"] = idle.get(cmd, 0) / args.idle
    # At most one add a room a node a flush: in a crash run each room has one node.
    out["bound_adds_per_s"] = sum(len(r) for r in by_node) / args.likes_flush
    if kill:
        for n, node_rooms in zip(per_node, by_node, strict=True):
            n["stored"] = sum(stored[room] for room in node_rooms)
            n["lost"] = n["acked_taps"] - n["stored"]
    if kill:
        assert killed_at is not None
        out["killed"] = killed(per_node[0], killed_at, per_node[0]["lost"], args.likes_flush)
    for n in per_node:
        ticks = n.pop("ticks")
        n["per_second"] = [sum(v for t, v in ticks.items() if int(t * TICK) == second)
                           for second in range(int(window) + 1)]
    say(f"{label}: acknowledged {acked_total:,} taps, stored {stored_total:,}, "
        f"lost {out['lost']:,}; {out['commands_per_s']:.1f} Redis commands/s "
        f"(idle {out['idle_commands_per_s']:.1f})")
    return out


def killed(node: dict[str, Any], at: float, lost: int, flush: float) -> dict[str, Any]:
    """The killed node's figures: its taps a second over the :data:`BEFORE_KILL`
    s before the kill, what it acknowledged in its last flush interval (from
    ``at - flush`` on, answers that arrived just after the kill included), and
    how far back its last ``lost`` acknowledged taps go."""
    ticks: Counter[int] = node["ticks"]
    lo = max(0.0, at - BEFORE_KILL)
    before = sum(n for t, n in ticks.items() if lo <= t * TICK < at)
    rate = before / (at - lo) if at > lo else 0.0
    last = sum(n for t, n in ticks.items() if t * TICK >= at - flush)
    span = 0.0
    left = lost
    for t in sorted(ticks, reverse=True):
        if left <= 0:
            break
        left -= ticks[t]
        span = at - t * TICK
    return {"at_s": at, "acked_taps": node["acked_taps"], "lost": lost, "rate_before": rate,
            "bound": rate * flush, "last_interval_taps": last,
            "lost_span_s": span if lost > 0 else 0.0,
            "in_flight_requests": node["unanswered_requests"],
            "in_flight_taps": node["unanswered_taps"]}


# -- the gift run ------------------------------------------------------------------


async def send_gifts(ports: tuple[int, ...], room: str, gifts: list[tuple[str, int]],
                     concurrency: int) -> dict[str, Any]:
    ledger: Counter[str] = Counter()
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    failed: list[str] = []
    answers_right = 0
    queue = list(enumerate(gifts))
    queue.reverse()
    headers = {"Authorization": f"Bearer {PUBLISHER_TOKEN}"}

    async def giver(session: aiohttp.ClientSession) -> None:
        nonlocal answers_right
        while queue:
            n, (uid, value) = queue.pop()
            port = ports[n % len(ports)]
            t0 = time.perf_counter()
            try:
                async with session.post(f"http://127.0.0.1:{port}/v1/rooms/{room}/gifts",
                                        json={"uid": uid, "value": value, "gift": f"g{value}"},
                                        headers=headers) as resp:
                    doc = await resp.json() if resp.status == 201 else await resp.text()
                    latencies.append((time.perf_counter() - t0) * 1000)
                    statuses[resp.status] += 1
                    if resp.status == 201:
                        ledger[uid] += value
                        answers_right += doc["uid"] == uid and doc["score"] >= value
                    elif len(failed) < 5:
                        failed.append(f"{resp.status} {doc!r:.200}")
            except aiohttp.ClientError as exc:
                statuses[0] += 1
                if len(failed) < 5:
                    failed.append(repr(exc))

    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(giver(session) for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    lat = np.array(latencies)
    return {"ledger": ledger, "elapsed_s": elapsed, "statuses": dict(statuses),
            "failed": failed, "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
            "answers_right": answers_right}


def gift_run(args: argparse.Namespace, tmp: Path, store: Server) -> dict[str, Any]:
    rng = random.Random(args.seed)
    room = "gifts"
    gifts = [(f"giver{rng.randrange(args.givers):05d}", rng.choice(PRICES))
             for _ in range(args.gifts)]
    with contextlib.ExitStack() as stack:
        say(f"gifts: starting {args.nodes} nodes")
        nodes = start_nodes(stack, tmp, f"redis://127.0.0.1:{store.port}/0", args, "gifts")
        ports = tuple(node.port for node in nodes)
        open_rooms(ports[0], (room,))
        say(f"gifts: {args.gifts:,} gifts from {args.givers:,} givers, "
            f"{args.gift_concurrency} at once")
        cpu0 = [node.cpu() for node in nodes]
        sent = asyncio.run(send_gifts(ports, room, gifts, args.gift_concurrency))
        cpu1 = [node.cpu() for node in nodes]
        keep_logs(args, nodes)
        boards = []
        for port in ports:
            status, body = get(port, f"/v1/rooms/{room}/leaderboard?limit={LEADERBOARD}")
            boards.append(json.loads(body) if status == 200 else {"status": status})
    ledger: Counter[str] = sent["ledger"]
    expected = sorted(ledger.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:LEADERBOARD]
    total = sum(ledger.values())
    given = sent["statuses"].get(201, 0)
    checks = []
    for board in boards:
        top = [(row["uid"], row["score"]) for row in board.get("top", [])]
        checks.append({"ranking": top == expected, "total": board.get("total") == total,
                       "count": board.get("count") == given})
    scores = [score for _, score in expected]
    out = {"gifts": args.gifts, "givers": args.givers, "distinct_givers": len(ledger),
           "given": given, "statuses": sent["statuses"], "failed": sent["failed"],
           "elapsed_s": sent["elapsed_s"], "gifts_per_s": given / sent["elapsed_s"],
           "p50_ms": sent["p50_ms"], "p99_ms": sent["p99_ms"], "total": total,
           "ties_in_top": len(scores) - len(set(scores)), "checks": checks,
           "exact": all(all(c.values()) for c in checks) and given == args.gifts,
           "answers_right": sent["answers_right"],
           "nodes_cpu_us_per_gift": 1e6 * sum(b - a for a, b in zip(cpu0, cpu1, strict=True))
           / max(1, given)}
    say(f"gifts: {given:,} given in {sent['elapsed_s']:.1f} s; leaderboard "
        f"{'exact' if out['exact'] else 'WRONG'} on every node")
    return out


# -- the report --------------------------------------------------------------------


def rate_name(rate: float | None) -> str:
    return "max" if rate is None else f"{rate:,.0f}"


def refused(n: dict[str, Any]) -> str:
    """Refused requests: 429s (the uid's windows) and 503s (the node's bounds)."""
    if not n["refused_requests"]:
        return "0"
    return f"{n['limited']:,} / {n['refused_requests'] - n['limited']:,}"


def refused_all(nodes: list[dict[str, Any]]) -> str:
    return refused({"refused_requests": sum(n["refused_requests"] for n in nodes),
                    "limited": sum(n["limited"] for n in nodes)})


def tap_tables(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = ["Taps, per node (acknowledged a second over the window; CPU of the node's "
             "process, and over its idle CPU before the run):", "",
             "| run | target taps/s | node | taps/s | requests/s | refused 429 / 503 | "
             "p50 / p99 | "
             "node CPU | µs CPU / request (over idle) | taps / core-s (over idle) |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        for i, n in enumerate(r["nodes"]):
            name = f"node{i}" + (" (killed)" if "killed" in r and i == 0 else "")
            over = n["acked_taps"] / n["cpu_over_idle_s"] if n["cpu_over_idle_s"] else 0.0
            lines.append(
                f"| {r['label']} | {rate_name(r['rate'])} | {name} | {n['taps_per_s']:,.0f} | "
                f"{n['requests_per_s']:,.0f} | {refused(n)} | "
                f"{n['p50_ms']:.2f} / {n['p99_ms']:.2f} ms | {100 * n['cpu_share']:.0f} % | "
                f"{n['cpu_us_per_request']:.0f} ({n['cpu_us_per_request_over_idle']:.0f}) | "
                f"{n['taps_per_core_s']:,.0f} ({over:,.0f}) |")
        nodes = r["nodes"]
        taps = sum(n["acked_taps"] for n in nodes)
        answered = sum(n["acked_requests"] + n["refused_requests"] for n in nodes)
        cpu = sum(n["cpu_s"] for n in nodes)
        over = sum(n["cpu_over_idle_s"] for n in nodes)
        lines.append(
            f"| {r['label']} | {rate_name(r['rate'])} | **all** | "
            f"**{taps / r['window_s']:,.0f}** | "
            f"{sum(n['acked_requests'] for n in nodes) / r['window_s']:,.0f} | "
            f"{refused_all(nodes)} | | "
            f"{100 * cpu / r['window_s']:.0f} % | "
            f"{1e6 * cpu / max(1, answered):.0f} ({1e6 * over / max(1, answered):.0f}) | "
            f"{taps / cpu if cpu else 0:,.0f} ({taps / over if over else 0:,.0f}) |")
    lines += ["", "The store (Redis) over the window (the idle window's before it, in "
              "brackets); a likes add is one counters_likes.lua call (its INCRBY: no other script "
              "or command of liveroom's sends one), one a room a node a flush at most:", "",
              "| run | target taps/s | likes adds/s (bound) | flushes/s per node | GET/s "
              "(totals read) | EVALSHA/s | commands/s, Lua's included | Redis CPU |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        fl = " / ".join(f"{n['flushes_per_s']:.2f}" for n in r["nodes"])
        lines.append(
            f"| {r['label']} | {rate_name(r['rate'])} | **{r['incrby_per_s']:.1f}** "
            f"(≤ {r['bound_adds_per_s']:g}) | {fl} | {r['get_per_s']:.1f} "
            f"({r['idle_get_per_s']:.1f}) | {r['evalsha_per_s']:.1f} "
            f"({r['idle_evalsha_per_s']:.1f}) | {r['commands_per_s']:.1f} "
            f"({r['idle_commands_per_s']:.1f}) | {100 * r['redis_cpu_share']:.0f} % |")
    lines += ["", "Exactness (nodes stopped with SIGTERM, then the store's total):", "",
              "| run | target taps/s | taps sent | acknowledged | refused | unanswered | "
              "in the store | lost | exit statuses |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        exits = ", ".join(str(e["status"]) + (" (left taps!)" if e["left_unwritten"] else "")
                          for e in r["exits"])
        lines.append(
            f"| {r['label']} | {rate_name(r['rate'])} | {r['sent_taps']:,} | "
            f"{r['acked_taps']:,} | {sum(n['refused_taps'] for n in r['nodes']):,} | "
            f"{sum(n['unanswered_taps'] for n in r['nodes']):,} | {r['stored']:,} | "
            f"**{r['lost']:,}** | {exits} |")
    crashes = [r for r in runs if "killed" in r]
    if crashes:
        lines += ["", f"Crash: node 0 killed with SIGKILL halfway; each node taps rooms of "
                  f"its own, so the store counts each node's taps apart (the others "
                  f"stopped cleanly at the end). Bound: its taps a second over the "
                  f"{BEFORE_KILL:g} s before the kill x --likes-flush ({args.likes_flush:g} "
                  "s), and what it acknowledged in its last flush interval before the kill:",
                  "",
                  "| run | killed at | its taps acknowledged | its taps/s before | rate x flush "
                  "| acknowledged in its last flush interval | lost | lost / (rate x flush) | "
                  "lost = its taps of the last | in flight at the kill | the others' lost "
                  "(clean stop) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in crashes:
            k = r["killed"]
            lines.append(
                f"| {r['label']} | {k['at_s']:.2f} s | {k['acked_taps']:,} | "
                f"{k['rate_before']:,.0f} | {k['bound']:,.0f} | "
                f"{k['last_interval_taps']:,} | **{k['lost']:,}** | "
                f"{k['lost'] / k['bound'] if k['bound'] else 0:.2f} | "
                f"{1000 * k['lost_span_s']:.0f} ms | "
                f"{k['in_flight_requests']} requests, {k['in_flight_taps']:,} taps | "
                f"{', '.join(format(n['lost'], ',') for n in r['nodes'][1:])} |")
    lines += ["", "CPU over each window (shares of one core; this machine has "
              f"{os.cpu_count()}):", ""]
    lines += [f"- {r['label']}: the nodes {100 * sum(n['cpu_share'] for n in r['nodes']):.0f} "
              f"%, the clients {100 * r['clients_cpu_share']:.0f} %, Redis "
              f"{100 * r['redis_cpu_share']:.0f} %, other processes "
              f"{100 * r['others_cpu_share']:.0f} %; the machine busy "
              f"{100 * r['machine_busy_share']:.0f} % of {100 * (os.cpu_count() or 1)} %; the "
              f"pacing at most {r['max_lag_s'] * 1000:.0f} ms behind" for r in runs]
    return "\n".join(lines)


def gift_table(g: dict[str, Any]) -> str:
    checks = "; ".join(f"node{i}: ranking {'=' if c['ranking'] else '≠'}, total "
                       f"{'=' if c['total'] else '≠'}, count {'=' if c['count'] else '≠'}"
                       for i, c in enumerate(g["checks"]))
    return "\n".join([
        "Gifts:", "",
        "| gifts | givers | given (201) | gifts/s | p50 / p99 | nodes' CPU / gift | "
        "leaderboard = ledger | total |",
        "|---:|---:|---:|---:|---:|---:|---|---:|",
        f"| {g['gifts']:,} | {g['distinct_givers']:,} | {g['given']:,} | "
        f"{g['gifts_per_s']:,.0f} | {g['p50_ms']:.2f} / {g['p99_ms']:.2f} ms | "
        f"{g['nodes_cpu_us_per_gift']:.0f} µs | "
        f"{'**exact**' if g['exact'] else '**WRONG**'} (top {LEADERBOARD}, "
        f"{g['ties_in_top']} tied scores in it) | {g['total']:,} |",
        "", f"per node: {checks}"
        + (f"; not given: {g['statuses']} {g['failed']}" if g["given"] != g["gifts"] else "")])


# -- main ----------------------------------------------------------------------------


QUICK = {"uids": 10_000, "taps_per_second": 5_000, "seconds": 5.0, "gifts": 500,
         "givers": 200, "idle": 2.0}
DEFAULTS = {"uids": 1_000_000, "taps_per_second": 100_000, "seconds": 60.0, "gifts": 10_000,
            "givers": 2_000, "idle": 5.0}


def parse_rates(value: str) -> list[float | None]:
    out: list[float | None] = []
    for part in value.split(","):
        part = part.strip()
        if part == "max":
            out.append(None)
        elif part:
            rate = float(part)
            if rate <= 0:
                raise argparse.ArgumentTypeError("a rate is positive (or 'max')")
            out.append(rate)
    if not out:
        raise argparse.ArgumentTypeError("at least one rate")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="10 000 uids, 5 000 taps/s, 5 s, 500 gifts from 200 givers, 2 s idle "
                        "(about a minute); explicit flags still win")
    p.add_argument("--nodes", type=int, default=3, help="liveroom serve processes (default 3)")
    p.add_argument("--client-procs", type=int, default=2,
                   help="tapping client processes (default 2)")
    p.add_argument("--connections", type=int, default=8,
                   help="keep-alive connections of each client process to each node (default 8)")
    p.add_argument("--uids", type=int, help="distinct uids u0 ... (default 1 000 000)")
    p.add_argument("--rooms", type=int, default=1, help="rooms tapped (default 1)")
    p.add_argument("--taps-per-second", type=float,
                   help="the target tap rate, all clients together (default 100 000)")
    p.add_argument("--rates", type=parse_rates,
                   help="the tap runs' rates, comma-separated, 'max' for unpaced (default: "
                        "--taps-per-second and a tenth of it)")
    p.add_argument("--seconds", type=float, help="seconds of tapping a run (default 60)")
    p.add_argument("--idle", type=float, help="idle seconds before each run (default 5)")
    p.add_argument("--likes-flush", type=float, default=0.25,
                   help="the nodes' --likes-flush (default 0.25, the server's)")
    p.add_argument("--no-crash", dest="crash", action="store_false",
                   help="no crash run")
    p.add_argument("--crash-runs", type=int, default=1, help="crash runs (default 1)")
    p.add_argument("--crash-rate", type=parse_rates,
                   help="the crash run's rate (default: the first of --rates)")
    p.add_argument("--gifts", type=int, help="gifts of the gift run (default 10 000; 0: none)")
    p.add_argument("--givers", type=int, help="distinct givers (default 2 000)")
    p.add_argument("--gift-concurrency", type=int, default=16,
                   help="gifts in flight at once (default 16)")
    p.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                   help="one more argument to every liveroom serve (repeat it, with =: --serve-arg="
                        "--likes-taps --serve-arg=off)")
    p.add_argument("--seed", type=int, default=35)
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    p.add_argument("--logs", type=Path, metavar="DIR",
                   help="copy every node's log into DIR (RUN-nodeN.log)")
    args = p.parse_args(argv)
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.rates is None:
        args.rates = [args.taps_per_second, args.taps_per_second / 10]
    args.crash_rate = args.crash_rate[0] if args.crash_rate else args.rates[0]
    if min(args.nodes, args.client_procs, args.connections, args.uids, args.rooms) < 1 \
            or args.seconds <= 0 or args.idle <= 0:
        p.error("--nodes, --client-procs, --connections, --uids, --rooms, --seconds and "
                "--idle must be positive")
    if args.gifts and args.givers < 1:
        p.error("--givers must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    interrupt_on_signals()
    command = invocation("loadtest/bench_likes.py", argv)
    stamp = commit()
    started = datetime.datetime.now().astimezone()
    cores = os.cpu_count() or 1
    say(f"bench_likes: commit {stamp}; {args.nodes} nodes, {args.client_procs} client "
        f"processes and Redis share this machine's {cores} cores")
    runs: list[dict[str, Any]] = []
    gifts: dict[str, Any] | None = None
    try:
        with contextlib.ExitStack() as stack:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-likes-")))
            store = stack.enter_context(redis_server(tmp))
            probe = RedisProbe(store.port)
            redis_version = probe.client.info("server")["redis_version"]
            for i, rate in enumerate(args.rates):
                runs.append(tap_run(args, tmp, store, probe, f"taps{i + 1}", rate, kill=False,
                                    seed=args.seed + len(runs)))
            if args.crash:
                for i in range(args.crash_runs):
                    runs.append(tap_run(args, tmp, store, probe, f"crash{i + 1}",
                                        args.crash_rate, kill=True, seed=args.seed + len(runs)))
            if args.gifts:
                gifts = gift_run(args, tmp, store)
    except KeyboardInterrupt:
        print("interrupted: servers stopped", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    print(f"command: {command}")
    print(f"commit:  {stamp}    date: {started:%Y-%m-%d %H:%M %Z}")
    print(f"machine: {versions()}; Redis {redis_version}")
    print(f"load:    {args.nodes} nodes over one Redis, {args.client_procs} client processes x "
          f"{args.connections} connections per node; {args.uids:,} uids, {args.rooms} "
          f"room(s), 1-{MAX_COUNT} taps a request, {args.seconds:g} s a run after "
          f"{args.idle:g} s idle; --likes-flush {args.likes_flush:g}"
          + (f"; serve {' '.join(args.serve_arg)}" if args.serve_arg else ""))
    print(f"note:    the clients, the {args.nodes} nodes and Redis share these {cores} cores: "
          "the rates are what this machine reached with all of them on it")
    print()
    print(tap_tables(runs, args))
    if gifts is not None:
        print()
        print(gift_table(gifts))
    full = [r["label"] for r in runs
            if any(n["refused_requests"] > n["limited"] for n in r["nodes"])]
    if full:
        print(f"\nnote: 503s in {', '.join(full)}: a node's bounds were reached, most likely "
              "--likes-uids-max (uids seen in the last two minutes, 200 000 by default); "
              "--serve-arg=--likes-uids-max --serve-arg=N raises it")
    wrong = [r["label"] for r in runs if "killed" not in r and r["lost"] != 0]
    wrong += [f"{r['label']} node{i}" for r in runs if "killed" in r
              for i, n in enumerate(r["nodes"]) if i and n["lost"] != 0]
    if wrong:
        print(f"\nNOT EXACT on a clean stop: {', '.join(wrong)} (lost < 0: the store holds "
              "more than was acknowledged, taps written twice)")
    if args.json:
        args.json.write_text(json.dumps({
            "command": command, "commit": stamp, "date": started.isoformat(),
            "machine": versions(), "runs": runs, "gifts": gifts}, indent=1, default=str))
    return 1 if wrong or (gifts is not None and not gifts["exact"]) else 0


if __name__ == "__main__":
    sys.exit(main())
