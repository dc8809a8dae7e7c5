"""The benchmarks' listeners: long polls that cost the client as little as possible.

On 2 cores the client shares the machine with the server it measures, so every
microsecond it spends is one the server does not get. Each listener is an
``asyncio.Protocol`` on uvloop with one keep-alive connection, parsing answers
with ``httptools.HttpResponseParser`` (llhttp) and writing the next poll from
prebuilt bytes at once after every answer: no aiohttp, no task per poll, no
per-request objects beyond the parser's callbacks.

Two kinds of listener, speaking only each server's public HTTP contract:

- ``liveroom``: ``GET /v1/rooms/ROOM/poll?uid=U&timeout=60``, then the same
  with ``epoch``, ``seq``, ``iseq``, ``ctx`` and ``pseq`` from the last
  answer. Every message in ``important``, ``messages`` and ``personal`` is
  one delivery; ``gap``, ``igap`` and ``pgap`` are counted apart (messages
  the server skipped), and so is a personal message for another uid; each
  seq in ``recalled`` is noted with the time it arrived (bench_recall.py).
- ``nchan``: ``GET /sub/ROOM``, then the same with ``If-Modified-Since`` and
  ``If-None-Match`` set from the last answer's ``Last-Modified`` and ``Etag``.
  A 200 carries one message (or several in a multipart/mixed answer); a 408 is
  an idle poll that timed out.

The publisher puts its send time in every message (``"sent_ns":
time.time_ns()``); a listener records ``arrival - sent`` for every message it
finds in an answer (one clock: the same host).

One client process runs ``count`` listeners and obeys its parent over a pipe:
``status`` (answer the counts), ``report`` (answer the counts, every latency
sample and the per-message reach) and ``stop``. It also stops by itself when
the pipe closes or its time budget runs out, so it never outlives the run.
``Clients`` is the parent's side: it forks the client processes, splits the
listeners over them and sums their answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import re
import signal
import time
import urllib.request
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import quote

import httptools
import orjson
import uvloop

from kit.machine import cpu_seconds, die_with_parent, raise_nofile
from kit.servers import ADMIN_TOKEN

SENT = re.compile(rb'"sent_ns": ?(\d+)')
"""The publisher's send time inside a message body, in any answer's bytes."""

RETRY = 1.0
"""Seconds before a listener polls again after an error answer."""

ROOM = "bench"
"""The room the listeners poll unless told another."""


@dataclass(frozen=True)
class ClientConfig:
    kind: str
    """``liveroom`` or ``nchan``."""
    port: int
    room: str
    first: int
    """Index of this process's first listener (uids ``u<first>`` ...)."""
    count: int
    poll_timeout: int = 60
    budget: float = 600.0
    """Seconds after which the process stops whatever happens."""
    connect_parallel: int = 256
    """Connections being opened at once (the server's accept backlog is finite)."""
    rooms: int = 1
    """Rooms the listeners are spread over: with more than one, listener ``i``
    polls room ``f"{room}-{i % rooms}"`` (liveroom listeners only)."""
    ports: tuple[int, ...] = ()
    """Several servers: listener ``i`` connects to ``ports[i % len(ports)]``
    (``port`` is then ignored), so one client process spreads its connections
    over several destinations (each address pair has ~28 000 ephemeral ports)."""


def listener_port(cfg: ClientConfig, index: int) -> int:
    """The port listener ``index`` connects to."""
    return cfg.ports[index % len(cfg.ports)] if cfg.ports else cfg.port


def listener_room(cfg: ClientConfig, index: int) -> str:
    """The room listener ``index`` polls."""
    return cfg.room if cfg.rooms <= 1 else f"{cfg.room}-{index % cfg.rooms}"


class Tally:
    """What one client process saw: counts, latency samples, each message's reach."""

    def __init__(self) -> None:
        self.connected = 0
        self.holding = 0
        """Listeners whose poll carrying a position waits for an answer."""
        self.answers = 0
        self.deliveries = 0
        self.gaps = 0
        self.resets = 0
        self.errors = 0
        self.connect_errors = 0
        self.reconnects = 0
        self.last_error = ""
        self.latencies_us = array("q")
        self.personal = 0
        """Personal messages received (``"to"``: the listener's uid)."""
        self.misdirected = 0
        """Personal messages a listener got that were for another uid (must stay 0)."""
        self.pgaps = 0
        self.reach: dict[int, list[int]] = {}
        """sent_ns -> [listeners reached, latest arrival latency in µs]."""
        self.recalls: dict[int, array[int]] = {}
        """A recalled seq -> when each listener was told (``recalled``), ns."""
        self.recalled = 0

    def deliver(self, sent_ns: int, now_ns: int) -> None:
        lat = (now_ns - sent_ns) // 1000
        self.deliveries += 1
        self.latencies_us.append(lat)
        r = self.reach.get(sent_ns)
        if r is None:
            self.reach[sent_ns] = [1, lat]
        else:
            r[0] += 1
            if lat > r[1]:
                r[1] = lat

    def recall(self, seq: int, now_ns: int) -> None:
        self.recalled += 1
        seen = self.recalls.get(seq)
        if seen is None:
            seen = self.recalls[seq] = array("q")
        seen.append(now_ns)

    def counts(self) -> dict[str, Any]:
        return {"connected": self.connected, "holding": self.holding,
                "answers": self.answers, "deliveries": self.deliveries, "gaps": self.gaps,
                "resets": self.resets, "errors": self.errors,
                "connect_errors": self.connect_errors, "reconnects": self.reconnects,
                "personal": self.personal, "misdirected": self.misdirected,
                "pgaps": self.pgaps, "recalled": self.recalled,
                "last_error": self.last_error}


class Listener(asyncio.Protocol):
    """One keep-alive connection polling again at once after every answer."""

    def __init__(self, client: Client, index: int) -> None:
        self.client = client
        self.tally = client.tally
        self.uid = f"u{index}"
        self.port = listener_port(client.cfg, index)
        # Any rather than Optional: no None checks on the answer's path.
        self.transport: Any = None
        self.parser: Any = None
        self.body: list[bytes] = []
        self.next = b""
        self.in_flight_held = False
        self.fails = 0
        """Connections lost in a row without an answer (backs the reconnects off)."""

    # -- what a kind of listener decides ---------------------------------

    def holds(self) -> bool:
        """Whether the poll about to be sent is one the server should hold."""
        raise NotImplementedError

    def answer(self, status: int, body: bytes, now_ns: int) -> bool:
        """Take an answer in; False when it was an error (poll again later)."""
        raise NotImplementedError

    # -- the connection ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.parser = httptools.HttpResponseParser(self)
        self.tally.connected += 1
        self.send()

    def send(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self.holds():
            self.in_flight_held = True
            self.tally.holding += 1
        self.transport.write(self.next)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.tally.errors += 1
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        now = time.time_ns()
        if self.in_flight_held:
            self.in_flight_held = False
            self.tally.holding -= 1
        self.tally.answers += 1
        self.fails = 0
        body = b"".join(self.body)
        self.body.clear()
        ok = self.answer(self.parser.get_status_code(), body, now)
        if not self.parser.should_keep_alive():
            self.transport.close()  # connection_lost reconnects
        elif ok:
            self.send()
        else:
            self.tally.errors += 1
            asyncio.get_running_loop().call_later(RETRY, self.send)

    def connection_lost(self, exc: Exception | None) -> None:
        self.tally.connected -= 1
        if self.in_flight_held:
            self.in_flight_held = False
            self.tally.holding -= 1
        self.transport = None
        self.body.clear()
        if exc is not None:
            self.tally.last_error = repr(exc)
        if not self.client.stopping:
            self.tally.reconnects += 1
            self.client.reconnect(self, min(2.0, 0.05 * 2 ** self.fails))
            self.fails += 1


class LiveroomListener(Listener):
    """``GET /v1/rooms/ROOM/poll`` with the cursors of the last answer."""

    def __init__(self, client: Client, index: int) -> None:
        super().__init__(client, index)
        cfg = client.cfg
        self.base = (f"GET /v1/rooms/{listener_room(cfg, index)}/poll?uid={self.uid}"
                     f"&timeout={cfg.poll_timeout}").encode()
        self.tail = f" HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n\r\n".encode()
        self.next = self.base + self.tail
        self.epoch = ""
        self.prefix = b""
        # What this listener saw, for a per-listener account (``figures``):
        # its first answer's cursors, its last, and what came in between.
        self.first_seq = self.first_iseq = self.seq = self.iseq = -1
        self.normal = self.gap = self.important = self.igap = self.answers = 0

    def holds(self) -> bool:
        return bool(self.epoch)

    def answer(self, status: int, body: bytes, now_ns: int) -> bool:
        if status != 200:
            return False
        a: dict[str, Any] = orjson.loads(body)
        deliver = self.tally.deliver
        for m in a["important"]:
            b = m["body"]
            if type(b) is dict and "sent_ns" in b:
                deliver(b["sent_ns"], now_ns)
        for m in a["messages"]:
            b = m["body"]
            if type(b) is dict and "sent_ns" in b:
                deliver(b["sent_ns"], now_ns)
        recalled = a.get("recalled")
        if recalled:
            for seq in recalled:
                self.tally.recall(seq, now_ns)
        personal = a.get("personal")
        if personal:
            tally = self.tally
            for m in personal:
                tally.personal += 1
                if m["to"] != self.uid:
                    tally.misdirected += 1
                b = m["body"]
                if type(b) is dict and "sent_ns" in b:
                    deliver(b["sent_ns"], now_ns)
            tally.pgaps += a.get("pgap", 0)
        self.tally.gaps += a["gap"] + a["igap"]
        if a["reset"]:
            self.tally.resets += 1
        self.answers += 1
        if self.first_seq < 0 or a["reset"]:
            # A first answer (or a reset) brings backlog: the account starts after it.
            self.first_seq, self.first_iseq = a["seq"], a["iseq"]
            self.normal = self.gap = self.important = self.igap = 0
        else:
            self.normal += len(a["messages"])
            self.important += len(a["important"])
            self.gap += a["gap"]
            self.igap += a["igap"]
        self.seq, self.iseq = a["seq"], a["iseq"]
        if a["epoch"] != self.epoch:
            self.epoch = a["epoch"]
            self.prefix = self.base + b"&epoch=" + quote(self.epoch, safe="").encode()
        self.next = b"%s&seq=%d&iseq=%d&pseq=%d&ctx=%s%s" % (
            self.prefix, a["seq"], a["iseq"], a.get("pseq", 0),
            quote(a["ctx"], safe="").encode(), self.tail)
        return True


class NchanListener(Listener):
    """``GET /sub/ROOM`` with ``If-Modified-Since`` / ``If-None-Match`` of the last answer."""

    def __init__(self, client: Client, index: int) -> None:
        super().__init__(client, index)
        cfg = client.cfg
        self.head = (f"GET /sub/{cfg.room} HTTP/1.1\r\n"
                     f"Host: 127.0.0.1:{self.port}\r\n").encode()
        self.next = self.head + b"\r\n"
        self.last_modified = b""
        self.etag = b""

    def holds(self) -> bool:
        return True

    def on_header(self, name: bytes, value: bytes) -> None:
        n = name.lower()
        if n == b"last-modified":
            self.last_modified = value
        elif n == b"etag":
            self.etag = value

    def answer(self, status: int, body: bytes, now_ns: int) -> bool:
        if status == 200:
            deliver = self.tally.deliver
            for m in SENT.finditer(body):
                deliver(int(m.group(1)), now_ns)
            self.next = b"%sIf-Modified-Since: %s\r\nIf-None-Match: %s\r\n\r\n" % (
                self.head, self.last_modified, self.etag)
            return True
        return status in (304, 408)  # an idle poll timed out: same position again


KINDS: dict[str, type[Listener]] = {"liveroom": LiveroomListener, "nchan": NchanListener}


class Client:
    """One process's listeners, and its side of the pipe to the parent."""

    def __init__(self, conn: Connection, cfg: ClientConfig) -> None:
        self.conn = conn
        self.cfg = cfg
        self.tally = Tally()
        self.stopping = False
        self.listeners: list[Listener] = []
        self.done: asyncio.Future[None] | None = None

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        self.done = loop.create_future()
        loop.add_reader(self.conn.fileno(), self.on_command)
        loop.call_later(self.cfg.budget, self.stop)
        kind = KINDS[self.cfg.kind]
        self.listeners = [kind(self, self.cfg.first + i) for i in range(self.cfg.count)]
        todo = iter(self.listeners)
        openers = [loop.create_task(self.open_each(todo))
                   for _ in range(min(self.cfg.connect_parallel, self.cfg.count))]
        try:
            await self.done
        finally:
            self.stopping = True
            for t in openers:
                t.cancel()
            for listener in self.listeners:
                if listener.transport is not None:
                    listener.transport.close()
            loop.remove_reader(self.conn.fileno())
            await asyncio.sleep(0.1)  # let the transports close

    async def open_each(self, todo: Iterator[Listener]) -> None:
        for listener in todo:
            await self.open(listener)

    async def open(self, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        for attempt in range(50):
            if self.stopping:
                return
            try:
                await loop.create_connection(lambda: listener, "127.0.0.1", listener.port)
                return
            except OSError as e:
                self.tally.connect_errors += 1
                self.tally.last_error = repr(e)
                await asyncio.sleep(min(0.05 * 2 ** attempt, 2.0))

    def reconnect(self, listener: Listener, delay: float) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(delay, lambda: loop.create_task(self.open(listener)))

    def on_command(self) -> None:
        # The loop made the pipe non-blocking; a report is larger than the
        # pipe's buffer, and the parent is reading it.
        os.set_blocking(self.conn.fileno(), True)
        try:
            while self.conn.poll():
                command = self.conn.recv()
                if command == "status":
                    self.conn.send(self.tally.counts())
                elif command == "report":
                    self.conn.send({**self.tally.counts(),
                                    "latencies_us": self.tally.latencies_us.tobytes(),
                                    "reach": self.tally.reach,
                                    "recalls": {seq: seen.tobytes() for seq, seen
                                                in self.tally.recalls.items()}})
                elif command == "figures":
                    self.conn.send(self.figures())
                elif command == "stop":
                    self.stop()
                    return
        except (EOFError, OSError) as e:  # the parent is gone
            self.tally.last_error = repr(e)
            self.stop()

    def figures(self) -> list[tuple[int, ...]]:
        """Per liveroom listener: ``(first_seq, first_iseq, seq, iseq, normal,
        gap, important, igap, answers)``: the cursors of its first and last
        answers and what the answers after the first carried."""
        return [(x.first_seq, x.first_iseq, x.seq, x.iseq, x.normal, x.gap, x.important,
                 x.igap, x.answers)
                for x in self.listeners if isinstance(x, LiveroomListener)]

    def stop(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


def run_client(conn: Connection, cfg: ClientConfig) -> None:
    """A client process's entry point (multiprocessing target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us, also on Ctrl-C
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()  # even if the parent is killed outright
    raise_nofile(cfg.count + 64)
    uvloop.run(Client(conn, cfg).main())
    conn.close()


# -- the parent's side ---------------------------------------------------------


class Clients:
    """The client processes and their pipes: the listeners' counts and samples."""

    def __init__(self, kind: str, port: int, listeners: int, procs: int, budget: float,
                 room: str = ROOM, rooms: int = 1, connect_parallel: int = 256,
                 ports: tuple[int, ...] = ()):
        ctx = multiprocessing.get_context("fork")
        self.conns: list[Connection] = []
        self.procs: list[multiprocessing.process.BaseProcess] = []
        share, extra = divmod(listeners, procs)
        first = 0
        for i in range(procs):
            count = share + (1 if i < extra else 0)
            parent, child = ctx.Pipe()
            cfg = ClientConfig(kind=kind, port=port, room=room, first=first, count=count,
                               budget=budget, rooms=rooms,
                               connect_parallel=connect_parallel, ports=ports)
            proc = ctx.Process(target=run_client, args=(child, cfg), daemon=True,
                               name=f"fanout-client-{i}")
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
            first += count

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def ask(self, command: str, timeout: float = 30) -> list[dict[str, Any]]:
        for conn in self.conns:
            conn.send(command)
        answers = []
        for conn, proc in zip(self.conns, self.procs, strict=True):
            try:
                if not conn.poll(timeout):
                    raise RuntimeError(f"{proc.name} did not answer {command!r} in {timeout} s")
                answers.append(conn.recv())
            except (EOFError, OSError):
                raise RuntimeError(f"{proc.name} is gone (exit code {proc.exitcode})") from None
        return answers

    def status(self) -> dict[str, Any]:
        total: dict[str, Any] = {"last_error": ""}
        for counts in self.ask("status"):
            for k, v in counts.items():
                if k == "last_error":
                    total[k] = v or total[k]
                else:
                    total[k] = total.get(k, 0) + v
        return total

    def cpu(self) -> list[float]:
        return [cpu_seconds([pid]) for pid in self.pids()]

    def stop(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send("stop")
        for proc in self.procs:
            proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns:
            conn.close()


def open_room(port: int) -> None:
    """Make the room exist before its listeners come, as a broadcast does (a
    room that does not exist counts nobody online, so it never gets a tier):
    an operator's "end broadcast" opens it empty, with nothing to deliver."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/admin/rooms/{ROOM}/end",
                                     method="POST",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        resp.read()
