"""The listener path's own CPU per delivery, in one process, without sockets.

``bench_fanout.py`` measures the whole cycle over loopback, where the kernel
takes about a third of the server's CPU and a machine shared with other work
moves a run by 10-20 %. This measures only what the node's code costs: one
node built as ``liveroom serve`` builds it (its defaults, ``--tiers off``
unless told; the collector tuned and start-up frozen as there),
``--listeners`` front connections whose transports are plain objects, each
polling again (from the next loop turn) with the cursors and
``ctx`` of every answer, and a publisher connection posting one message a
round with the backend's token. A round ends when every listener holds its
next poll; the CPU of the process (``time.process_time``: the node, and the
listeners' few operations: find the ``ctx``, format the next request) over
``--rounds`` rounds, per delivery, is printed for each of ``--repeat`` runs,
and the best one (the least disturbed by the machine's other work).

    python loadtest/bench_cycle.py
    PYTHONPATH=build/compiled PYTHONSAFEPATH=1 python loadtest/bench_cycle.py
    python loadtest/bench_cycle.py --listeners 2000 --rounds 40 --repeat 5

``--send KIND`` measures a send's path instead: one front connection
posting ``--sends`` messages to one room nobody listens to, each answered
before the next is posted (the memory engine appends at once), after a
quarter as many of warm-up: ``normal``, a chat message with the backend's
token; ``crowd``, a viewer's, each by one of 100 000 uids at random, with
the node's default rate limits (their refusals are counted, not measured
apart); ``tickets``, each by one of 20 000 tickets at random, the node run
with ``--auth ticket`` (each ticket verified once before the warm-up, by
one send of each over another connection, as a live room's viewer's first
poll has it verified before it chats). The process's CPU per send, for
each run.

    PYTHONPATH=build/compiled PYTHONSAFEPATH=1 python loadtest/bench_cycle.py --send crowd

Run from the checkout it measures the pure build; with the compiled tree first
on the path, the compiled one (the first line says which). Bounded: rounds x
listeners deliveries, or ``--sends`` sends, per run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import random
import re
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import uvloop
from aiohttp import web

from liveroom import build
from liveroom.node import GC_THRESHOLDS, NODE, build_app, node_runner, node_site
from liveroom.settings import Settings, parse_tiers
from proxy.tickets import mint

ROOM = "bench"
ADMIN = "bench-admin-token-0123456789abcdef"
PUBLISHER = "bench-publisher-token-0123456789ab"
TICKET_KEY = "bench-ticket-key-0123456789abcdef0123"
SENDS = ("normal", "crowd", "tickets")
"""What ``--send`` may measure."""
_ANSWER = re.compile(rb'"epoch":"([^"]*)","seq":(\d+),"iseq":(\d+).*"ctx":"([^"]*)","pseq":(\d+)',
                     re.S)


class Listener(asyncio.Transport):
    """A front connection's transport that answers each poll's answer with
    the next poll, from the next loop turn, as a client would."""

    def __init__(self, bench: Bench, uid: str) -> None:
        super().__init__()
        self.bench = bench
        self.base = b"GET /v1/rooms/%s/poll?uid=%s&timeout=60" % (ROOM.encode(), uid.encode())
        self.tail = b" HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
        self.conn: Any = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.bench.stopping:
            return
        data = bytes(data)
        found = _ANSWER.search(data)
        if found is None:
            raise RuntimeError(f"not an answer: {data[:300]!r}")
        epoch, seq, iseq, ctx, pseq = found.groups()
        bench = self.bench
        bench.answers += 1
        if bench.answers >= bench.due:
            bench.reached.set()
        request = b"%s&epoch=%s&seq=%s&iseq=%s&pseq=%s&ctx=%s%s" % (
            self.base, epoch, seq, iseq, pseq, ctx, self.tail)
        self.bench.loop.call_soon(self.conn.data_received, request)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        if not self.bench.stopping:
            raise RuntimeError("a listener's connection closed")

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return True


class Publisher(Listener):
    """The connection the backend's messages and the operator's calls come over."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.bench.stopping:
            return
        status = bytes(data[9:12])
        if status not in (b"200", b"201", b"202"):
            raise RuntimeError(f"refused: {bytes(data)[:300]!r}")
        self.bench.published.set()


class Sender(Listener):
    """The connection a send benchmark posts over: counts answers, and the
    refused ones (a 429 of the rate limits)."""

    def __init__(self, bench: Bench) -> None:
        super().__init__(bench, "sender")
        self.refused = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.bench.stopping:
            return
        status = bytes(data[9:12])
        if status == b"429":
            self.refused += 1
        elif status not in (b"200", b"201"):
            raise RuntimeError(f"refused: {bytes(data)[:300]!r}")
        self.bench.answers += 1


def send_requests(kind: str) -> list[bytes]:
    """Every sender's request of ``kind``, formatted once."""
    text = b'{"text":"%s"}' % (b"x" * 90)
    head = b"POST /v1/rooms/%s/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
        % ROOM.encode()
    if kind == "tickets":
        out = []
        for i in range(20_000):
            body = b'{"body":%s}' % text
            out.append(b"%sAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (
                head, mint(TICKET_KEY, f"t{i}").encode(), len(body), body))
        return out
    auth = b"Authorization: Bearer %s\r\n" % PUBLISHER.encode() if kind == "normal" else b""
    out = []
    for i in range(1 if kind == "normal" else 100_000):
        body = b'{"uid":"v%d","body":%s}' % (i, text)
        out.append(b"%s%sContent-Length: %d\r\n\r\n%s" % (head, auth, len(body), body))
    return out


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.loop = asyncio.get_event_loop()
        self.answers = 0
        self.due = 0
        self.reached = asyncio.Event()
        self.stopping = False
        self.published = asyncio.Event()

    async def call(self, publisher: Publisher, request: bytes) -> None:
        self.published.clear()
        publisher.conn.data_received(request)
        await self.published.wait()

    async def until(self, answers: int) -> None:
        self.due = answers
        self.reached.clear()
        if self.answers < answers:
            await self.reached.wait()

    async def run(self) -> list[float]:
        args = self.args
        if args.send:
            return await self.run_sends()
        settings = Settings(admin_token=ADMIN, publisher_token=PUBLISHER,
                            tiers=parse_tiers(args.tiers), log_level="warning")
        async with self.serving(settings) as (app, port):
            async with aiohttp.ClientSession() as session, session.post(
                    f"http://127.0.0.1:{port}/v1/admin/rooms/{ROOM}/end",
                    headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
                resp.raise_for_status()
            # The collector as a node's process runs it (liveroom.node.run).
            gc.collect()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLDS)
            front = app[NODE].proxy.front
            publisher = Publisher(self, "publisher")
            publisher.conn = front.connection()
            publisher.conn.connection_made(publisher)
            listeners = []
            for i in range(args.listeners):
                listener = Listener(self, f"u{i}")
                listener.conn = front.connection()
                listener.conn.connection_made(listener)
                listeners.append(listener)
                listener.conn.data_received(listener.base + listener.tail)
            await self.until(args.listeners)  # every first poll answered...
            for _ in range(3):
                await asyncio.sleep(0)  # ... and its next one held
            body = b'{"uid":"publisher","body":{"text":"%s"}}' % (b"x" * 64)
            send = (b"POST /v1/rooms/%s/messages HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nAuthorization: Bearer %s\r\n"
                    b"Content-Length: %d\r\n\r\n%s") % (ROOM.encode(), PUBLISHER.encode(),
                                                       len(body), body)
            results = []
            for _ in range(args.repeat):
                start, cpu = self.answers, time.process_time()
                for _ in range(args.rounds):
                    due = self.answers + args.listeners
                    await self.call(publisher, send)
                    await self.until(due)
                    for _ in range(3):
                        await asyncio.sleep(0)
                cpu = time.process_time() - cpu
                results.append(cpu / (self.answers - start) * 1e6)
            return results

    async def run_sends(self) -> list[float]:
        args = self.args
        ticket_mode = args.send == "tickets"
        settings = Settings(admin_token=ADMIN, publisher_token=PUBLISHER, log_level="warning",
                            auth="ticket" if ticket_mode else "open",
                            ticket_keys=(TICKET_KEY,) if ticket_mode else ())
        async with self.serving(settings) as (app, _):
            front = app[NODE].proxy.front
            requests = send_requests(args.send)
            picks = random.Random(1)
            if ticket_mode:  # each ticket verified once (a viewer's first poll has it)
                verifier = Sender(self)
                verifier.conn = front.connection()
                verifier.conn.connection_made(verifier)
                for request in requests:
                    verifier.conn.data_received(request)
                    await asyncio.sleep(0)
            gc.collect()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLDS)
            sender = Sender(self)
            sender.conn = front.connection()
            sender.conn.connection_made(sender)
            results = []
            for _ in range(args.repeat):
                for measured in (False, True):
                    count = args.sends if measured else args.sends // 4
                    chosen = [requests[picks.randrange(len(requests))] for _ in range(count)]
                    start, cpu = self.answers, time.process_time()
                    for request in chosen:
                        sender.conn.data_received(request)
                        if self.answers & 63 == 0:
                            await asyncio.sleep(0)  # the loop's own work between reads
                    await asyncio.sleep(0)
                    cpu = time.process_time() - cpu
                    if self.answers - start != count:
                        raise RuntimeError(f"{self.answers - start} answers to {count} sends")
                    if measured:
                        results.append(cpu / count * 1e6)
            print(f"refused (429): {sender.refused} of {self.answers} answers", flush=True)
            return results

    @contextlib.asynccontextmanager
    async def serving(self, settings: Settings) -> AsyncIterator[tuple[web.Application, int]]:
        """A node as ``liveroom serve`` builds it, serving on a free port
        (its app and port); stopped on exit, the transports told first."""
        app = build_app(settings)
        runner = node_runner(app)
        await runner.setup()
        try:
            site = node_site(runner, "127.0.0.1", 0)
            await site.start()
            yield app, site.port
        finally:
            self.stopping = True
            await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listeners", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=30, help="messages a run")
    p.add_argument("--repeat", type=int, default=5, help="runs")
    p.add_argument("--tiers", default="off", help="the node's --tiers (default off)")
    p.add_argument("--send", choices=SENDS, default=None,
                   help="measure a send's path instead of the listeners' (see above)")
    p.add_argument("--sends", type=int, default=100_000,
                   help="sends a run with --send (default 100000)")
    args = p.parse_args(argv)
    print(f"build: {build.describe()}", flush=True)
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        results = loop.run_until_complete(Bench(args).run())
    finally:
        loop.close()
    what = f"{args.send} send" if args.send else "delivery"
    print(f"µs CPU per {what}, each run: " + ", ".join(f"{r:.2f}" for r in results))
    load = (f"{args.sends} sends" if args.send
            else f"{args.listeners} listeners x {args.rounds} messages")
    print(f"best {min(results):.2f} µs ({load})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
