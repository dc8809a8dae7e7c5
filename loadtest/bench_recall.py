"""Recalls in a big paced room: every listener told of every recall, how fast,
and for what server CPU beside an important message.

``--nodes`` ``liveroom serve`` (this checkout, the default settings, so the
room is paced by the default tiers) over one throw-away redis-server (one
node on the memory engine with ``--nodes 1``), ``--listeners`` long-polling
one room through the kit's client processes (raw keep-alive
connections, spread over the nodes; one process holds about 20 000),
recalls made through the first node,
``--recalls`` chat messages sent first, then three phases:

1. **idle**: the room held, nothing sent, ``--seconds``: what holding it costs;
2. **recall**: the messages recalled one by one (``DELETE
   /v1/rooms/ROOM/messages/SEQ`` with the admin token), ``--every`` seconds
   apart, then until every listener was told of each (``recalled`` in an
   answer) or ``--settle`` seconds passed;
3. **important**: as many important messages, as far apart, and as long.

Per phase: server CPU over the idle phase's, per recall (or message) per
listener; latency p50/p99 from the call to the listener's read (one clock);
and for the recalls, how many listeners missed one (must be 0).

    python loadtest/bench_recall.py                       # 50 000 listeners, 10 recalls
    python loadtest/bench_recall.py --listeners 2000 --nodes 1 --seconds 5   # a quick look

``--apply N`` measures instead how soon a moderator's action applies on
another node: two nodes over one (throw-away) redis-server; N times, a uid
is muted through the first node and its sends to the second are tried until
refused (403), then it is banned through the first while a poll of it is
held on the second, until that poll is answered 403, then both are lifted.
It prints each delay's p50 and worst (the nodes read the store's journal
every 250 ms).

    python loadtest/bench_recall.py --apply 20
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from array import array
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from kit.clients import ROOM, Clients, open_room
from kit.machine import raise_nofile
from kit.provenance import commit, invocation, versions
from kit.servers import (
    ADMIN_TOKEN,
    FD_RESERVE,
    PUBLISHER_TOKEN,
    interrupt_on_signals,
    liveroom_server,
    redis_server,
    wait_quiet,
)


async def chat(port: int, count: int) -> list[int]:
    """Send ``count`` chat messages; their seqs."""
    url = f"http://127.0.0.1:{port}/v1/rooms/{ROOM}/messages"
    seqs = []
    async with aiohttp.ClientSession() as session:
        for n in range(count):
            async with session.post(url, json={"uid": f"chatter{n}", "body": f"line {n}"}) \
                    as resp:
                assert resp.status == 201, await resp.text()
                seqs.append(int((await resp.json())["seq"]))
    return seqs


async def recalling(port: int, seqs: list[int], every: float) -> dict[int, int]:
    """Recall each of ``seqs``, ``every`` s apart; each seq's call time (ns)."""
    called: dict[int, int] = {}
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with aiohttp.ClientSession() as session:
        start = time.monotonic()
        for k, seq in enumerate(seqs):
            delay = start + k * every - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            called[seq] = time.time_ns()
            async with session.delete(f"http://127.0.0.1:{port}/v1/rooms/{ROOM}/messages/{seq}",
                                      headers=headers) as resp:
                assert resp.status == 200, await resp.text()
    return called


async def signalling(port: int, count: int, every: float) -> dict[int, int]:
    """Send ``count`` important messages, ``every`` s apart, each with its send time."""
    sent: dict[int, int] = {}
    headers = {"Authorization": f"Bearer {PUBLISHER_TOKEN}"}
    url = f"http://127.0.0.1:{port}/v1/rooms/{ROOM}/messages"
    async with aiohttp.ClientSession() as session:
        start = time.monotonic()
        for k in range(count):
            delay = start + k * every - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent_ns = time.time_ns()
            async with session.post(url, headers=headers, json={
                    "uid": "system", "important": True, "body": {"sent_ns": sent_ns}}) as resp:
                assert resp.status == 201, await resp.text()
            sent[sent_ns] = k
    return sent


class Nodes:
    """The nodes measured together: their CPU summed (the store's is not counted)."""

    def __init__(self, nodes: list[Any]) -> None:
        self.nodes = nodes

    def cpu(self) -> float:
        return sum(node.cpu() for node in self.nodes)

    def check_alive(self) -> None:
        for node in self.nodes:
            node.check_alive()


def measured(name: str, server: Any, run: Any, until: Any, settle: float) -> dict[str, Any]:
    """Server CPU and time over ``run()`` and then until ``until()`` holds
    (at most ``settle`` s more)."""
    cpu0, t0 = server.cpu(), time.monotonic()
    result = asyncio.run(run()) if run is not None else None
    deadline = time.monotonic() + settle
    while not until() and time.monotonic() < deadline:
        time.sleep(0.1)
    cpu1, t1 = server.cpu(), time.monotonic()
    print(f"  {name:9} {t1 - t0:5.1f} s, server {100 * (cpu1 - cpu0) / (t1 - t0):.0f} % "
          f"of a core", flush=True)
    return {"name": name, "seconds": t1 - t0, "cpu": cpu1 - cpu0, "result": result}


async def applying(one: int, two: int, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds from each mute through node ``one`` to the first refused send
    on node ``two``, and from each ban to the held poll's 403 there."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    muted: list[float] = []
    banned: list[float] = []
    async with aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{one}/v1/admin/rooms/{ROOM}"
        send = f"http://127.0.0.1:{two}/v1/rooms/{ROOM}/messages"
        poll = f"http://127.0.0.1:{two}/v1/rooms/{ROOM}/poll"
        async with session.post(send, json={"uid": "host", "body": "on air"}) as resp:
            assert resp.status == 201, await resp.text()
        for k in range(rounds):
            uid = f"troll{k}"
            # At a random point of the nodes' 250 ms reading cycle: the test's
            # own steps would otherwise fall in step with it.
            await asyncio.sleep(random.random() * 0.25)
            async with session.put(f"{base}/muted/{uid}", json={"seconds": 600},
                                   headers=admin) as resp:
                assert resp.status == 200, await resp.text()
            t0 = time.monotonic()
            while True:
                async with session.post(send, json={"uid": uid, "body": "x"}) as resp:
                    if resp.status == 403:
                        break
                await asyncio.sleep(0.005)
            muted.append(time.monotonic() - t0)
            async with session.get(poll, params={"uid": uid}) as resp:
                first = await resp.json()
            held = asyncio.create_task(session.get(poll, params={
                "uid": uid, "epoch": first["epoch"], "seq": str(first["seq"]),
                "iseq": str(first["iseq"]), "ctx": first["ctx"], "timeout": "30"}))
            await asyncio.sleep(0.2 + random.random() * 0.25)  # the poll is held on node two
            async with session.put(f"{base}/banned/{uid}", headers=admin) as resp:
                assert resp.status == 200, await resp.text()
            t0 = time.monotonic()
            async with await held as resp:
                assert resp.status == 403, await resp.text()
            banned.append(time.monotonic() - t0)
            for kind in ("muted", "banned"):
                async with session.delete(f"{base}/{kind}/{uid}", headers=admin) as resp:
                    assert resp.status == 200
    return muted, banned


def apply_report(rounds: int, argv: list[str] | None) -> int:
    nofile = raise_nofile(4096)
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as redis:
        store = f"redis://127.0.0.1:{redis.port}/0"
        with liveroom_server(Path(tmp), nofile, None, store, 1, name="one") as one, \
                liveroom_server(Path(tmp), nofile, None, store, 1, name="two") as two:
            muted, banned = asyncio.run(applying(one.port, two.port, rounds))
    print(f"    {invocation('loadtest/bench_recall.py', argv)}")
    print(f"    commit {commit()}; {versions()}")
    print()
    print("| through node one, applied on node two | rounds | p50 | worst |")
    print("|---|---:|---:|---:|")
    for name, delays in (("mute: a send refused", muted),
                         ("ban: a held poll answered 403", banned)):
        print(f"| {name} | {len(delays)} | {1000 * float(np.median(delays)):.0f} ms | "
              f"{1000 * max(delays):.0f} ms |")
    return 0 if max(muted + banned) <= 1.0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listeners", type=int, default=50_000)
    parser.add_argument("--recalls", type=int, default=10)
    parser.add_argument("--every", type=float, default=1.0,
                        help="seconds between two recalls (and two important messages)")
    parser.add_argument("--seconds", type=float, default=10.0, help="the idle phase (default 10)")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="most seconds to wait for the last listener after a phase")
    parser.add_argument("--nodes", type=int, default=3,
                        help="nodes over one throw-away redis-server (1: one node on the "
                             "memory engine); one process holds about 20 000 connections")
    parser.add_argument("--client-procs", type=int, default=3,
                        help="client processes (one holds about 20 000 connections)")
    parser.add_argument("--apply", type=int, default=0, metavar="N",
                        help="measure how soon N mutes and bans apply on a second node instead")
    args = parser.parse_args(argv)
    if args.apply:
        return apply_report(args.apply, argv)
    interrupt_on_signals()
    n = args.listeners
    nofile = raise_nofile(n // args.nodes + FD_RESERVE + 2_000)
    if -(-n // args.nodes) + 100 > nofile:
        raise SystemExit(f"{n:,} listeners over {args.nodes} nodes exceed the open-files "
                         f"limit ({nofile:,}) of one: add --nodes")
    print(f"bench_recall: {n} listeners on {args.nodes} nodes, {args.recalls} recalls, "
          f"commit {commit()}, {versions()}", flush=True)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-recall-")))
        store = None
        if args.nodes > 1:
            redis = stack.enter_context(redis_server(tmp))
            store = f"redis://127.0.0.1:{redis.port}/0"
        nodes = [stack.enter_context(liveroom_server(
            tmp, nofile, None, store, 1, name=f"node{i}",
            extra=["--node-id", f"node{i}", "--rate-limits", "off"]))
            for i in range(args.nodes)]
        ports = tuple(node.port for node in nodes)
        server = Nodes(nodes)
        open_room(ports[0])
        clients = Clients("liveroom", ports[0], n, args.client_procs,
                          budget=args.seconds + 2 * (args.settle + args.recalls * args.every)
                          + 600, ports=ports)
        stack.callback(clients.stop)
        deadline = time.monotonic() + 300
        while (status := clients.status())["holding"] < n:
            server.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"listeners not all held: {status}")
            print(f"  connected {status['connected']:,}, held {status['holding']:,}",
                  file=sys.stderr, flush=True)
            time.sleep(2)
        print(f"  {n} listeners held", flush=True)
        seqs = asyncio.run(chat(ports[0], args.recalls))
        wait_quiet(server)  # the chat went out to everyone
        idle = measured("idle", server, None, lambda: False, args.seconds)
        told = clients.status()["recalled"]
        want = told + n * len(seqs)
        recall = measured("recall", server,
                          lambda: recalling(ports[0], seqs, args.every),
                          lambda: clients.status()["recalled"] >= want, args.settle)
        wait_quiet(server)
        base = clients.status()["deliveries"]
        important = measured("important", server,
                             lambda: signalling(ports[0], args.recalls, args.every),
                             lambda: clients.status()["deliveries"]
                             >= base + n * args.recalls, args.settle)
        reports = clients.ask("report", timeout=120)
    called: dict[int, int] = recall["result"]
    seen: dict[int, array[int]] = {}
    for r in reports:
        for seq, raw in r["recalls"].items():
            arrivals = array("q")
            arrivals.frombytes(raw)
            seen.setdefault(seq, array("q")).extend(arrivals)
    missed = sum(max(0, n - len(seen.get(seq, ()))) for seq in called)
    twice = sum(max(0, len(seen.get(seq, ())) - n) for seq in called)
    lat = np.concatenate([(np.frombuffer(seen[seq], dtype=np.int64) - called[seq]) / 1e6
                          for seq in called if seq in seen]) if seen else np.array([])
    sent: dict[int, int] = important["result"]
    # Only the important messages carry a send time: every latency sample is theirs.
    ilat = np.concatenate([np.frombuffer(r["latencies_us"], dtype=np.int64)
                           for r in reports]) / 1000
    itold = sum(c for r in reports for s, (c, _) in r["reach"].items() if s in sent)
    idle_rate = idle["cpu"] / idle["seconds"]

    def per_listener(ph: dict[str, Any], events: int) -> str:
        extra = ph["cpu"] - idle_rate * ph["seconds"]
        return f"{1e6 * extra / (events * n):.2f} µs"

    def pct(values: Any) -> str:
        if not len(values):
            return "-"
        p50, p99 = np.percentile(values, [50, 99])
        return f"{p50:.0f} / {p99:.0f} ms"

    print()
    print(f"    {invocation('loadtest/bench_recall.py', argv)}")
    print(f"    commit {commit()}; {versions()}")
    print()
    print("| phase | events | listeners told | missed | server CPU | CPU per event per "
          "listener (over idle) | latency p50 / p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| idle | - | - | - | {100 * idle_rate:.0f} % | - | - |")
    print(f"| recall | {len(called)} | {sum(len(v) for v in seen.values())} | {missed} | "
          f"{100 * recall['cpu'] / recall['seconds']:.0f} % | "
          f"{per_listener(recall, len(called))} | {pct(lat)} |")
    print(f"| important | {len(sent)} | {itold} | {max(0, n * len(sent) - itold)} | "
          f"{100 * important['cpu'] / important['seconds']:.0f} % | "
          f"{per_listener(important, len(sent))} | {pct(ilat)} |")
    print()
    print(f"recalls: {len(called)} to {n} listeners, {missed} missed, {twice} told twice")
    return 0 if missed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
