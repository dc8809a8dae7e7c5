"""One big room for real: tens of thousands of long-polling listeners over Redis.

The biggest honest run one machine allows. This driver

1. starts a throw-away ``redis-server`` and ``--nodes`` ``liveroom serve``
   processes over it (default tiers, sender rate limits off), each on its own
   loopback port with its open-files limit raised to the hard limit: one
   process holds at most that many connections (20 000 here), so 50 000
   listeners need three; several ports also lift the ~28 000 ephemeral ports
   of one address pair;
2. starts the room (``POST /v1/admin/rooms/ROOM/start``) and connects
   ``--listeners`` listeners from ``--client-procs`` processes
   (``kit/clients.py``: one keep-alive connection each, ``asyncio.Protocol``
   on uvloop, polling again at once after every answer), spread over the
   nodes;
3. publishes ``--rate`` normal messages a second and one important message
   every ``--important-every`` seconds for ``--duration`` seconds (to the
   nodes in turn, with the publisher token), then waits for every listener to
   catch up with the last message;
4. reports, over the publishing window: **important lost** (for every
   listener, every important message sent after its first answer, not
   received: must be 0), **normal delivered + gap = sent** checked for every
   listener (from its first answer's cursors to its last), **requests per
   listener per minute** against ``sim_hold.py``'s figure for the same room,
   tiers and rate, **server CPU per listener**, **RSS per held poll**, and
   **Redis commands per second**.

    python loadtest/bench_room.py                       # 50 000 listeners, 5 minutes
    python loadtest/bench_room.py --listeners 5000 --duration 60 --nodes 1

Everything it starts is stopped at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import redis
from kit.clients import Clients
from kit.machine import raise_nofile
from kit.provenance import commit, invocation, versions
from kit.servers import (
    ADMIN_TOKEN,
    PUBLISHER_TOKEN,
    Server,
    interrupt_on_signals,
    liveroom_server,
    redis_server,
)
from sim_hold import DEFAULT_TIERS, Scenario, simulate

ROOM = "bigroom"


def start_room(port: int) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/admin/rooms/{ROOM}/start", method="POST",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    urllib.request.urlopen(request, timeout=10).close()


async def publish(ports: list[int], rate: float, important_every: float,
                  duration: float) -> list[tuple[int, bool]]:
    """Send for ``duration`` s; return ``(seq, important)`` of every accepted send."""
    sent: list[tuple[int, bool]] = []
    headers = {"Authorization": f"Bearer {PUBLISHER_TOKEN}"}
    start = time.monotonic()
    normal_at = important_at = start
    n = 0
    async with aiohttp.ClientSession(headers=headers) as session:
        while (now := time.monotonic()) < start + duration:
            important = important_every > 0 and important_at <= normal_at
            at = important_at if important else normal_at
            if at > now:
                await asyncio.sleep(at - now)
            body = {"uid": "publisher", "important": important,
                    "body": {"sent_ns": time.time_ns(), "n": n}}
            port = ports[n % len(ports)]
            n += 1
            try:
                async with session.post(f"http://127.0.0.1:{port}/v1/rooms/{ROOM}/messages",
                                        json=body) as answer:
                    if answer.status == 201:
                        sent.append((int((await answer.json())["seq"]), important))
                    else:
                        print(f"  a send answered {answer.status}: {await answer.text()}",
                              file=sys.stderr)
            except aiohttp.ClientError as exc:
                print(f"  a send failed: {exc!r}", file=sys.stderr)
            if important:
                important_at += important_every
            else:
                normal_at += 1 / rate
    return sent


def account(figures: list[tuple[int, ...]], sent: list[tuple[int, bool]]) -> dict[str, int]:
    """Every listener's account: normal delivered + gap against the normal
    messages between its first and last cursors, and important messages lost."""
    normal = sorted(seq for seq, important in sent if not important)
    important = sorted(seq for seq, important in sent if important)
    out = {"listeners": 0, "never_answered": 0, "normal_mismatch": 0, "normal_delivered": 0,
           "normal_gap": 0, "important_delivered": 0, "important_lost": 0, "igap": 0,
           "behind": 0}
    last_normal = normal[-1] if normal else 0
    for first_seq, first_iseq, seq, _, got, gap, imp, igap, _ in figures:
        out["listeners"] += 1
        if first_seq < 0:
            out["never_answered"] += 1
            continue
        expected = bisect.bisect_right(normal, seq) - bisect.bisect_right(normal, first_seq)
        if got + gap != expected:
            out["normal_mismatch"] += 1
        if seq < last_normal:
            out["behind"] += 1
        out["normal_delivered"] += got
        out["normal_gap"] += gap
        owed = len(important) - bisect.bisect_right(important, first_iseq)
        out["important_delivered"] += imp
        out["igap"] += igap
        out["important_lost"] += max(0, owed - imp)
    return out


def redis_commands(port: int) -> int:
    return int(redis.Redis(port=port).info("stats")["total_commands_processed"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listeners", type=int, default=50_000)
    parser.add_argument("--nodes", type=int, default=3,
                        help="serve processes over one Redis (each ≤ its open-files limit)")
    parser.add_argument("--client-procs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=10.0, help="normal messages a second")
    parser.add_argument("--important-every", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of publishing")
    parser.add_argument("--tiers", default=None, help="the servers' --tiers (default: theirs)")
    parser.add_argument("--sim-sample", type=int, default=5_000,
                        help="listeners sim_hold follows (figures scaled to the room)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    interrupt_on_signals()
    nofile = raise_nofile(args.listeners // args.nodes + 2_000)
    per_node = -(-args.listeners // args.nodes)
    if per_node + 100 > nofile:
        raise SystemExit(f"{per_node:,} listeners per node exceed the open-files limit "
                         f"({nofile:,}): add --nodes")
    print(f"command: {invocation('loadtest/bench_room.py', argv)}")
    print(f"commit {commit()}, {versions()}, {time.strftime('%Y-%m-%d')}", flush=True)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-room-")))
        store = stack.enter_context(redis_server(tmp))
        url = f"redis://127.0.0.1:{store.port}/0"
        nodes: list[Server] = [
            stack.enter_context(liveroom_server(
                tmp, nofile, args.tiers, url, 1, name=f"node{i}",
                extra=["--node-id", f"node{i}", "--rate-limits", "off"]))
            for i in range(args.nodes)]
        ports = [node.port for node in nodes]
        start_room(ports[0])
        rss_before = sum(node.rss() for node in nodes)
        budget = args.duration + 600
        # Every client process spreads its listeners over every node.
        clients = Clients("liveroom", ports[0], args.listeners, args.client_procs, budget,
                          room=ROOM, ports=tuple(ports))
        stack.callback(clients.stop)
        print(f"connecting {args.listeners:,} listeners to {args.nodes} nodes...",
              file=sys.stderr, flush=True)
        deadline = time.monotonic() + 300
        while (status := clients.status())["holding"] < args.listeners * 0.999:
            for node in nodes:
                node.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(f"only {status['holding']:,} listeners held after 300 s: "
                                 f"{status}")
            print(f"  connected {status['connected']:,}, held {status['holding']:,}",
                  file=sys.stderr, flush=True)
            time.sleep(2)
        time.sleep(5)  # every node counts its listeners: the room is in its tier
        rss_held = sum(node.rss() for node in nodes)
        before = clients.status()
        cpu0 = [node.cpu() for node in nodes] + [store.cpu()]
        clients_cpu0 = sum(clients.cpu())
        commands0 = redis_commands(store.port)
        t0 = time.monotonic()
        print(f"publishing for {args.duration:g} s...", file=sys.stderr, flush=True)
        sent = asyncio.run(publish(ports, args.rate, args.important_every, args.duration))
        window = time.monotonic() - t0
        rss_publishing = sum(node.rss() for node in nodes)
        cpu1 = [node.cpu() for node in nodes] + [store.cpu()]
        clients_cpu1 = sum(clients.cpu())
        commands1 = redis_commands(store.port)
        after = clients.status()
        # Catch up: every listener's next answer carries the last messages.
        last = max((seq for seq, important in sent if not important), default=0)
        catch_up = time.monotonic() + 30
        while True:
            figures = [row for part in clients.ask("figures", timeout=120) for row in part]
            behind = sum(1 for row in figures if row[2] < last)
            if not behind or time.monotonic() > catch_up:
                break
            time.sleep(1)
        result = account(figures, sent)
        for node in nodes:
            node.check_alive()
    minutes = window / 60
    requests = (after["answers"] - before["answers"]) / args.listeners / minutes
    server_cpu = [(b - a) / window for a, b in zip(cpu0, cpu1, strict=True)]
    figures_out = {
        "listeners": args.listeners, "nodes": args.nodes, "window_s": round(window, 1),
        "sent_normal": sum(1 for _, imp in sent if not imp),
        "sent_important": sum(1 for _, imp in sent if imp),
        **result,
        "requests_per_listener_min": round(requests, 2),
        "server_cpu_per_node": [round(c, 3) for c in server_cpu[:-1]],
        "redis_cpu": round(server_cpu[-1], 3),
        "clients_cpu": round((clients_cpu1 - clients_cpu0) / window, 3),
        "server_us_cpu_per_listener_s": round(sum(server_cpu[:-1]) / args.listeners * 1e6, 2),
        "rss_per_held_poll_kib": round((rss_held - rss_before) / args.listeners / 1024, 2),
        "rss_per_listener_publishing_kib": round(
            (rss_publishing - rss_before) / args.listeners / 1024, 2),
        "redis_commands_per_s": round((commands1 - commands0) / window),
        "errors": after["errors"], "reconnects": after["reconnects"],
        "resets": after["resets"],
    }
    # The run's figures first: the simulation below takes a while.
    print(json.dumps(figures_out, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures_out, indent=1))
    sim = simulate(Scenario(room=args.listeners, rate=args.rate, policy=args.tiers != "off",
                            tiers=args.tiers or DEFAULT_TIERS, arrivals="fixed",
                            important_every=args.important_every, sample=args.sim_sample,
                            window=min(args.duration, 300.0)))
    figures_out["sim_requests_per_listener_min"] = round(sim.requests_per_listener_min, 2)
    print("\n| listeners | nodes | important lost | normal delivered + gap = sent | "
          "requests/listener/min real / sim | server CPU per listener | RSS per held poll | "
          "Redis commands/s |")
    print("| ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |")
    ok = result["listeners"] - result["normal_mismatch"] - result["never_answered"]
    print(f"| {args.listeners:,} | {args.nodes} | {result['important_lost']} | "
          f"{ok:,} of {result['listeners']:,} listeners | "
          f"{requests:.1f} / {sim.requests_per_listener_min:.1f} | "
          f"{figures_out['server_us_cpu_per_listener_s']:.1f} µs/s "
          f"({sum(server_cpu[:-1]):.0%} of a core in all) | "
          f"{figures_out['rss_per_held_poll_kib']:.1f} KiB | "
          f"{figures_out['redis_commands_per_s']:,} |")
    if args.json:
        args.json.write_text(json.dumps(figures_out, indent=1))


if __name__ == "__main__":
    main()
