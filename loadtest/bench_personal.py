"""Personal messages in a big room: each delivered once, to its addressee only,
at what latency, and for what server CPU beside the same room without them.

One ``liveroom serve`` (memory engine, this checkout, the default settings),
``--listeners`` long-polling one room through the kit's client processes
(raw keep-alive connections that echo ``pseq``), and three phases of
``--seconds`` each:

1. **idle**: the room held, nothing sent: what holding it costs;
2. **personal**: ``--rate`` personal messages a second (``"to"``: a random
   listener; the default 1 000/s), each carrying its send time and a number;
3. **room**: ``--room-rate`` room messages a second (important, to everybody),
   the same room's ordinary work, for comparison.

Per phase: deliveries, server CPU (all its processes) as a share of a core and
per delivery over the idle phase's, delivery latency p50/p99 (send to the
listener's read, one clock). The personal phase also checks each message
reached exactly one listener, its addressee (``misdirected`` counts personal
messages a listener got for another uid, ``pgap`` ones the server skipped).

    python loadtest/bench_personal.py                 # 5 000 listeners, 1 000/s
    python loadtest/bench_personal.py --listeners 1000 --seconds 10   # a quick look

``--memory N`` measures instead what a held personal message costs, in this
process (no server): N personal messages with a small body appended to the
memory engine, then pulled into a node's cache the way recvsvr does, each
step under tracemalloc; once with every addressee holding many (N/20 uids)
and once with one message per uid. It also times a pull at the head of the
room then (what every pull of a room with N held costs the memory engine).

    python loadtest/bench_personal.py --memory 100000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
from kit.clients import ROOM, Clients, open_room
from kit.machine import raise_nofile
from kit.provenance import commit, invocation, versions
from kit.servers import (
    FD_RESERVE,
    PUBLISHER_TOKEN,
    interrupt_on_signals,
    liveroom_server,
    wait_quiet,
)

SENDERS = 8
"""Connections the sender keeps busy at once."""


async def sending(port: int, rate: float, seconds: float, uids: list[str] | None,
                  ) -> dict[int, str]:
    """Send ``rate`` messages a second for ``seconds`` (personal ones to a
    random uid of ``uids``; ``None``: important room messages); each one's
    send time (its id) -> its addressee ("" for a room message)."""
    sent: dict[int, str] = {}
    url = f"http://127.0.0.1:{port}/v1/rooms/{ROOM}/messages"
    headers = {"Authorization": f"Bearer {PUBLISHER_TOKEN}"}
    start = time.monotonic()
    total = int(rate * seconds)
    queue: asyncio.Queue[int] = asyncio.Queue()

    async def sender(session: aiohttp.ClientSession) -> None:
        while True:
            await queue.get()
            to = random.choice(uids) if uids is not None else ""
            sent_ns = time.time_ns()
            doc: dict[str, Any] = {"uid": "backend", "body": {"sent_ns": sent_ns}}
            if to:
                doc["to"] = to
            else:
                doc["important"] = True
            async with session.post(url, json=doc, headers=headers) as resp:
                await resp.read()
                if resp.status == 201:
                    sent[sent_ns] = to
            queue.task_done()

    connector = aiohttp.TCPConnector(limit=SENDERS)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.create_task(sender(session)) for _ in range(SENDERS)]
        for k in range(total):
            # Paced on the clock: late sends catch up, none run ahead.
            delay = start + k / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            queue.put_nowait(k)
        await queue.join()
        for task in tasks:
            task.cancel()
    return sent


def phase(name: str, server: Any, clients: Clients, seconds: float,
          send: Any = None) -> dict[str, Any]:
    before = clients.status()
    cpu0, t0 = server.cpu(), time.monotonic()
    sent = asyncio.run(send()) if send is not None else {}
    if send is None:
        time.sleep(seconds)
    else:
        time.sleep(1.0)  # the last answers arrive
    cpu1, t1 = server.cpu(), time.monotonic()
    after = clients.status()
    deliveries = after["deliveries"] - before["deliveries"]
    print(f"  {name:9} {t1 - t0:5.1f} s, sent {len(sent)}, deliveries {deliveries}, "
          f"server {100 * (cpu1 - cpu0) / (t1 - t0):.0f} % of a core", flush=True)
    return {"name": name, "seconds": t1 - t0, "cpu": cpu1 - cpu0, "sent": sent,
            "deliveries": deliveries, "before": before, "after": after}


def latencies(reports: list[dict[str, Any]], ids: dict[int, str]) -> tuple[float, float]:
    """p50 and p99 in ms of the deliveries of messages in ``ids``."""
    lat = [lat_us for r in reports for sent_ns, (_, lat_us) in r["reach"].items()
           if sent_ns in ids]
    if not lat:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(np.array(lat) / 1000, [50, 99])
    return float(p50), float(p99)


async def held_cost(n: int, uids: int) -> tuple[float, float, float]:
    """Bytes per held personal message in the memory engine's store and in a
    node's cache, and the ms a pull at the room's head takes then."""
    from liveroom.clock import FakeClock
    from liveroom.model import NewMessage
    from liveroom.store.base import LogPolicy, PullRequest
    from liveroom.store.memory import MemoryStore
    from recvsvr.next_snapshot import Retention, advance

    clock = FakeClock()
    log = MemoryStore(LogPolicy(), clock).log
    await log.append("stage", NewMessage("a", "open", False, 0))
    ts = int(clock.time() * 1000)
    raw = b'{"event": "you_won", "prize": "a rocket"}'
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            # Decoded per message, as a send's body is.
            body = orjson.loads(raw)
            await log.append("stage", NewMessage("system", body, True, ts, to=f"u{i % uids}"))
        gc.collect()
        stored = tracemalloc.get_traced_memory()[0]
        snap, after, pafter = None, 0, 0
        while True:
            [pulled] = await log.pull([PullRequest("stage", after, 2000, pafter)])
            snap = advance(snap, pulled, after, Retention(), ts)
            after, pafter = pulled.head, pulled.phead
            if not pulled.personal:
                break
        gc.collect()
        cached = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    t0 = time.perf_counter()
    for _ in range(50):
        await log.pull([PullRequest("stage", after, 2000, pafter)])
    pull_ms = (time.perf_counter() - t0) / 50 * 1000
    assert snap is not None
    return (stored - start) / n, (cached - stored) / n, pull_ms


def memory_report(n: int, argv: list[str] | None) -> int:
    print(f"    {invocation('loadtest/bench_personal.py', argv)}")
    print(f"    commit {commit()}; {versions()}")
    print()
    print("| addressees | store (memory engine) | node cache | both | pull at head |")
    print("|---|---:|---:|---:|---:|")
    for uids in (max(1, n // 20), n):
        store, cache, pull_ms = asyncio.run(held_cost(n, uids))
        print(f"| {n} messages to {uids} uids | {store:.0f} B | {cache:.0f} B | "
              f"{store + cache:.0f} B | {pull_ms:.2f} ms |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listeners", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=1000.0,
                        help="personal messages a second (default 1000)")
    parser.add_argument("--room-rate", type=float, default=2.0,
                        help="room messages a second in the comparison phase (default 2)")
    parser.add_argument("--seconds", type=float, default=20.0, help="each phase (default 20)")
    parser.add_argument("--client-procs", type=int, default=1)
    parser.add_argument("--memory", type=int, default=0, metavar="N",
                        help="measure what N held personal messages cost instead (no server)")
    args = parser.parse_args(argv)
    if args.memory:
        return memory_report(args.memory, argv)
    interrupt_on_signals()
    nofile = raise_nofile(args.listeners + FD_RESERVE + 1024)
    print(f"bench_personal: {args.listeners} listeners, {args.rate:g} personal/s, "
          f"commit {commit()}, {versions()}", flush=True)
    uids = [f"u{i}" for i in range(args.listeners)]
    with tempfile.TemporaryDirectory() as tmp, \
            liveroom_server(Path(tmp), nofile, None, None, 1) as server:
        open_room(server.port)
        clients = Clients("liveroom", server.port, args.listeners, args.client_procs,
                          budget=args.seconds * 3 + 300)
        try:
            deadline = time.monotonic() + 120
            while clients.status()["holding"] < args.listeners:
                server.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"listeners not all held: {clients.status()}")
                time.sleep(0.5)
            wait_quiet(server)
            idle = phase("idle", server, clients, args.seconds)
            personal = phase("personal", server, clients, args.seconds,
                             lambda: sending(server.port, args.rate, args.seconds, uids))
            wait_quiet(server)
            room = phase("room", server, clients, args.seconds,
                         lambda: sending(server.port, args.room_rate, args.seconds, None))
            reports = clients.ask("report", timeout=120)
        finally:
            clients.stop()
    reach: dict[int, int] = {}
    for r in reports:
        for sent_ns, (count, _) in r["reach"].items():
            reach[sent_ns] = reach.get(sent_ns, 0) + count
    mine = personal["sent"]
    once = sum(1 for s in mine if reach.get(s) == 1)
    lost = sum(1 for s in mine if s not in reach)
    twice = len(mine) - once - lost
    misdirected = sum(r["misdirected"] for r in reports)
    pgaps = sum(r["pgaps"] for r in reports)
    idle_rate = idle["cpu"] / idle["seconds"]
    print()
    print(f"    {invocation('loadtest/bench_personal.py', argv)}")
    print(f"    commit {commit()}; {versions()}")
    print()
    print("| phase | sent | deliveries | server CPU | CPU per delivery (over idle) "
          "| latency p50 / p99 |")
    print("|---|---:|---:|---:|---:|---:|")
    for ph in (idle, personal, room):
        extra = ph["cpu"] - idle_rate * ph["seconds"]
        per = f"{1e6 * extra / ph['deliveries']:.0f} µs" if ph["deliveries"] else "-"
        p50, p99 = latencies(reports, ph["sent"]) if ph["sent"] else (float("nan"),) * 2
        lat = f"{p50:.1f} / {p99:.1f} ms" if ph["sent"] else "-"
        print(f"| {ph['name']} | {len(ph['sent'])} | {ph['deliveries']} | "
              f"{100 * ph['cpu'] / ph['seconds']:.0f} % | {per} | {lat} |")
    print()
    print(f"personal: {once} of {len(mine)} delivered exactly once, {lost} never, "
          f"{twice} more than once; misdirected {misdirected}; pgap {pgaps}")
    return 0 if once == len(mine) and misdirected == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
