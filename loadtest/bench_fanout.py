"""Fan-out benchmark: the whole long-poll cycle in one room, liveroom against nginx + Nchan.

For each server asked (``--against liveroom``, ``compiled``, ``nchan``,
``floor``, ``floor-compiled``, ``floor-c``, several separated by commas,
``both`` for liveroom,nchan, or ``all`` for liveroom, compiled, nchan, floor,
floor-compiled, leaving out with a note compiled without a compiled tree, Nchan
when not installed and floor-compiled without mypyc) it

1. starts the server as a child process on a free 127.0.0.1 port:
   ``python -m liveroom serve ... --tiers T [--store URL] [--workers N]``;
   for ``compiled`` the same command with ``PYTHONPATH=DIR PYTHONSAFEPATH=1``,
   DIR the compiled tree (``--compiled-tree``, default build/compiled, made by
   scripts/build-compiled: ``pip install --no-deps --target DIR .``), checked
   first to import ``proxy.front.server`` as an extension module there; for
   ``liveroom-defaults`` and ``compiled-defaults`` the same two with the node's
   own settings (the others run with ``--log-level warning``: the node's
   default is ``info``; the publisher's token keeps rate limits out either
   way); nginx with
   the nchan module, one worker, from ``loadtest/nchan.conf`` filled into a
   temporary directory; or ``floor_server.py``, the Python floor: the
   smallest uvloop + httptools long-poll server speaking just enough of
   liveroom's poll contract for these listeners, no validation, context,
   statistics or store, to show what a bare asyncio protocol costs per
   delivery here; for ``floor-compiled`` the floor compiled by ``python -m
   mypyc floor_server.py`` in a temporary directory before the first server,
   started from there the same way; for ``floor-c`` ``floor_c.pyx``, the
   same plain path with the server's own code at C level (Cython) and no
   hold timeout, built by pip in a temporary directory (Cython fetched for
   the build): the least a protocol on uvloop costs (Nchan and the floors
   have no tiers: always a plain hold);
2. measures the server's RSS (its process and all descendants), then connects
   ``--listeners`` long polls to one room from ``--client-procs`` client
   processes (``kit/clients.py``: uvloop + httptools, one keep-alive
   connection per listener, polling again at once after every answer; the
   floors get liveroom's listeners and publisher);
3. warms up until every listener holds a poll (and, for a tiered liveroom,
   until the room's online count has reached the listeners, so the room is in
   its tier), waits for the server to go quiet, and measures the RSS again:
   **RSS per held poll** = (RSS now - RSS before the listeners) / listeners;
4. publishes ``--rate`` messages a second for ``--seconds`` seconds, evenly
   spaced, each carrying its send time (``time.time_ns()``); liveroom sends
   carry the publisher token, so rate limits stay out;
5. waits until every listener has every message (or ``--drain`` seconds) and
   closes the measured window.

Measured over the window (first send to last delivery), per server:

- deliveries: messages received, over all listeners (a liveroom answer may
  carry several: each counts); deliveries per second;
- server CPU: utime + stime from /proc of the server process and all its
  descendants (nginx master + worker; liveroom and any workers), receiving and
  parsing included, and **µs of server CPU per delivery**;
- **delivery latency** p50 / p99 / max: arrival at the listener minus the send
  time in the message (one host, one clock), and the time each message took to
  reach every listener (the slowest listener's latency; median and max over
  the messages);
- **requests per delivery**: poll answers received / deliveries (below 1 when
  answers batch);
- the client processes' CPU: a client near 100 % of a core sets the pace
  itself, and then the latencies are the client's, not the server's; the
  report says so.

Below the table, the ratios of each of these pairs of rows present:
liveroom / nchan, liveroom / floor, floor / nchan, compiled / nchan,
compiled / liveroom, compiled / floor-compiled, floor-compiled / nchan,
floor-c / nchan and compiled / floor-c.

Presets (``--scenario``) match the fan-out targets in docs/performance.md
("Benchmarks"); any free flag overrides the preset's value:

- ``plain``: 2 000 listeners x 2 msg/s for 30 s, ``--tiers off``;
- ``tiers``: 5 000 listeners x 10 msg/s for 30 s, liveroom's default tiers;
- ``held``: 20 000 held polls (2 client processes), one message every 5 s for
  25 s: the time a message takes to reach all of them, and RSS per held poll.
  Where the open-files limit cannot be raised (``ulimit -Hn``), a single
  server process cannot hold more polls than that: the run says so and holds
  as many as it can.

    python loadtest/bench_fanout.py --scenario plain
    python loadtest/bench_fanout.py --scenario tiers --against liveroom
    python loadtest/bench_fanout.py --scenario plain --against all
    python loadtest/bench_fanout.py --scenario plain --against liveroom,compiled,nchan
    python loadtest/bench_fanout.py --listeners 500 --rate 5 --seconds 10
    python loadtest/bench_fanout.py --scenario plain --workers 2 --store redis-server

Every run stops by itself; Ctrl-C or SIGTERM stop the servers and the client
processes. Loopback only. The table at the end is stamped with the command,
the commit and the date.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import importlib.util
import json
import math
import os
import shlex
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kit import REPO
from kit.builds import BUILD_COMPILED, build_floors, check_compiled_tree, compiled_env
from kit.clients import ROOM, Clients, open_room
from kit.machine import machine_busy, own_cpu, raise_nofile
from kit.progress import say
from kit.provenance import commit, versions
from kit.servers import (
    FD_RESERVE,
    NCHAN_MODULE,
    PUBLISHER_TOKEN,
    Server,
    built_floor_server,
    floor_server,
    interrupt_on_signals,
    liveroom_server,
    nchan_available,
    nchan_server,
    redis_server,
    wait_quiet,
    wait_until,
)

SPEAKS = {"liveroom": "liveroom", "compiled": "liveroom",
          "liveroom-defaults": "liveroom", "compiled-defaults": "liveroom", "nchan": "nchan",
          "floor": "liveroom", "floor-compiled": "liveroom", "floor-c": "liveroom"}
"""The servers --against names, each with the HTTP contract it speaks (the
listeners' and the publisher's kind)."""
LIVEROOMS = ("liveroom", "compiled", "liveroom-defaults", "compiled-defaults")
"""The servers run by ``liveroom serve``: --tiers, --store and --workers are theirs."""
COMPILED = ("compiled", "compiled-defaults")
"""The servers run from the compiled tree."""
DEFAULTS = ("liveroom-defaults", "compiled-defaults")
"""The servers run with the node's own settings: not the bench's ``--log-level
warning`` (the node's default is ``info``)."""
GROUPS = {"both": ["liveroom", "nchan"],
          "all": ["liveroom", "compiled", "nchan", "floor", "floor-compiled"]}
"""--against's names for several servers; those ``all`` brings are left out,
with a note, where they cannot run (no compiled tree, Nchan or mypyc)."""


@dataclass(frozen=True)
class Scenario:
    listeners: int
    rate: float
    seconds: float
    tiers: str | None
    """liveroom's --tiers; None: the server's default table."""
    client_procs: int = 1


SCENARIOS = {
    "plain": Scenario(listeners=2000, rate=2, seconds=30, tiers="off"),
    "tiers": Scenario(listeners=5000, rate=10, seconds=30, tiers=None),
    "held": Scenario(listeners=20000, rate=0.2, seconds=25, tiers="off", client_procs=2),
}


# -- the publisher ---------------------------------------------------------------


class Publisher:
    """Sends messages carrying their send time over one keep-alive connection."""

    def __init__(self, kind: str, port: int) -> None:
        self.kind = kind
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.pad = "x" * 64
        self.sent = 0
        self.failed = 0

    def send(self) -> None:
        sent_ns = time.time_ns()
        if self.kind == "liveroom":
            body = json.dumps({"uid": "publisher",
                               "body": {"sent_ns": sent_ns, "text": self.pad}},
                              separators=(",", ":")).encode()
            path = f"/v1/rooms/{ROOM}/messages"
            headers = {"Content-Type": "application/json",
                       "Authorization": f"Bearer {PUBLISHER_TOKEN}"}
        else:
            body = json.dumps({"sent_ns": sent_ns, "text": self.pad},
                              separators=(",", ":")).encode()
            path = f"/pub/{ROOM}"
            headers = {"Content-Type": "application/json"}
        try:
            self.conn.request("POST", path, body=body, headers=headers)
            resp = self.conn.getresponse()
            resp.read()
            ok = resp.status in (200, 201, 202)
        except (OSError, http.client.HTTPException):
            self.conn.close()
            ok = False
        if ok:
            self.sent += 1
        else:
            self.failed += 1

    def close(self) -> None:
        self.conn.close()


def room_online(port: int) -> int:
    url = f"http://127.0.0.1:{port}/v1/rooms/{ROOM}/stats"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(json.load(resp)["online"])
    except (OSError, ValueError, KeyError):
        return -1


# -- one run ---------------------------------------------------------------------


def run_one(kind: str, args: argparse.Namespace, listeners: int, client_procs: int,
            nofile: int, floor_builds: dict[str, Path] | None = None) -> dict[str, Any]:
    """One server measured; ``floor_builds``: the directory each built floor
    (floor-compiled, floor-c) was built in, by name (``build_floors``)."""
    tiers = args.tiers if kind in LIVEROOMS else "off"
    messages = max(1, round(args.rate * args.seconds))
    connect_timeout = 30 + listeners / 200
    budget = connect_timeout + 90 + 30 + args.seconds + args.drain + 120  # every wait, and some
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"fanout-{kind}-")))
        store: Server | None = None
        store_url = args.store
        if kind in LIVEROOMS and args.store == "redis-server":
            store = stack.enter_context(redis_server(tmp))
            store_url = f"redis://127.0.0.1:{store.port}/0"
            say(kind, "start", f"a throw-away redis-server at {store_url}")
        say(kind, "start", "starting the server")
        if kind in LIVEROOMS:
            compiled = kind in COMPILED
            server = stack.enter_context(
                liveroom_server(tmp, nofile, args.tiers, store_url, args.workers,
                                name=f"liveroom-{kind}",
                                env=compiled_env(args.compiled_tree) if compiled else None,
                                quiet=kind not in DEFAULTS))
        elif kind == "nchan":
            server = stack.enter_context(nchan_server(tmp, nofile, args.nchan_multipart))
        elif floor_builds and kind in floor_builds:
            server = stack.enter_context(
                built_floor_server(kind, tmp, nofile, floor_builds[kind]))
        else:
            server = stack.enter_context(floor_server(tmp, nofile))
        time.sleep(1.0)
        wait_quiet(server)
        rss_before = server.rss()
        say(kind, "start", f"port {server.port}, pids {server.pids()}, "
                           f"RSS {rss_before / 2**20:.1f} MiB")

        if kind in LIVEROOMS:
            open_room(server.port)
        clients = Clients(SPEAKS[kind], server.port, listeners, client_procs, budget)
        stack.callback(clients.stop)
        say(kind, "connect", f"{listeners} listeners from {client_procs} client process(es)")
        deadline = time.monotonic() + connect_timeout
        last_print = 0.0
        while True:
            server.check_alive()
            st = clients.status()
            if st["holding"] >= listeners:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: only {st['holding']} of {listeners} polls held "
                                   f"after {connect_timeout:.0f} s ({st}); the server's log:\n"
                                   f"{server.log_tail()}")
            if time.monotonic() - last_print >= 2:
                last_print = time.monotonic()
                say(kind, "connect", f"connected {st['connected']}, holding {st['holding']}, "
                                     f"connect errors {st['connect_errors']}")
            time.sleep(0.2)
        say(kind, "warm-up", f"all {listeners} polls held")
        if kind in LIVEROOMS and tiers != "off":
            say(kind, "warm-up", "waiting for the room's online count (the tier follows it)")
            wait_until(f"online count {listeners}",
                       lambda: room_online(server.port) >= listeners, 90, server, step=0.5)
        wait_quiet(server)
        rss_held = server.rss()
        say(kind, "warm-up", f"RSS {rss_held / 2**20:.1f} MiB with {listeners} polls held")

        publisher = Publisher(SPEAKS[kind], server.port)
        stack.callback(publisher.close)
        start = clients.status()
        cpu0, ccpu0, t0 = server.cpu(), clients.cpu(), time.monotonic()
        busy0, own0 = machine_busy(), own_cpu()
        store0 = store.cpu() if store else 0.0
        say(kind, "measure", f"{messages} messages at {args.rate:g}/s")
        last_print = t0
        for k in range(messages):
            due = t0 + k / args.rate
            while (pause := due - time.monotonic()) > 0:
                time.sleep(min(pause, 0.5))
                if time.monotonic() - last_print >= 2:
                    last_print = time.monotonic()
                    st = clients.status()
                    say(kind, "measure", f"sent {publisher.sent}, deliveries "
                                         f"{st['deliveries'] - start['deliveries']}")
            publisher.send()
        expected = listeners * publisher.sent
        drain_end = time.monotonic() + args.drain
        while True:
            st = clients.status()
            got = st["deliveries"] + st["gaps"] - start["deliveries"] - start["gaps"]
            if got >= expected or time.monotonic() > drain_end:
                break
            time.sleep(0.05)
        cpu1, ccpu1, t1 = server.cpu(), clients.cpu(), time.monotonic()
        busy1, own1 = machine_busy(), own_cpu()
        store1 = store.cpu() if store else 0.0
        server.check_alive()
        say(kind, "drain", f"deliveries {got} of {expected}")
        reports = clients.ask("report", timeout=120)

    window = t1 - t0
    lat = np.concatenate([np.frombuffer(r["latencies_us"], dtype=np.int64) for r in reports]) \
        / 1000.0
    reach: dict[int, list[int]] = {}
    for r in reports:
        for sent_ns, (n, worst) in r["reach"].items():
            mine = reach.setdefault(sent_ns, [0, 0])
            mine[0] += n
            mine[1] = max(mine[1], worst)
    reach_all = np.array([worst / 1000.0 for n, worst in reach.values() if n >= listeners])
    deliveries = sum(r["deliveries"] for r in reports) - start["deliveries"]
    answers = sum(r["answers"] for r in reports) - start["answers"]
    cpu = cpu1 - cpu0
    client_cpu = [(b - a) / window for a, b in zip(ccpu0, ccpu1, strict=True)]

    def q(values: np.ndarray, p: float) -> float:
        return float(np.percentile(values, p)) if len(values) else math.nan

    return {
        "server": kind, "tiers": tiers, "listeners": listeners, "messages": publisher.sent,
        "send_failures": publisher.failed, "window_s": window,
        "deliveries": deliveries, "expected": expected,
        "gaps": sum(r["gaps"] for r in reports) - start["gaps"],
        "deliveries_per_s": deliveries / window,
        "server_cpu_s": cpu, "server_cpu_pct": 100 * cpu / window,
        "us_per_delivery": cpu / deliveries * 1e6 if deliveries else math.nan,
        "p50_ms": q(lat, 50), "p99_ms": q(lat, 99), "max_ms": q(lat, 100),
        "reach_all_p50_ms": q(reach_all, 50), "reach_all_max_ms": q(reach_all, 100),
        "messages_reaching_all": len(reach_all),
        "requests_per_delivery": answers / deliveries if deliveries else math.nan,
        "rss_before_mib": rss_before / 2**20, "rss_held_mib": rss_held / 2**20,
        "rss_per_held_poll_b": (rss_held - rss_before) / listeners,
        "client_cpu_pct": [100 * c for c in client_cpu],
        "client_us_per_delivery": (sum(ccpu1) - sum(ccpu0)) / deliveries * 1e6
        if deliveries else math.nan,
        "client_procs": client_procs,
        "machine_busy_pct": 100 * (busy1 - busy0) / window,
        "own_cpu_pct": 100 * (own1 - own0) / window,
        "store_cpu_pct": 100 * (store1 - store0) / window,
        "others_cpu_pct": 100 * ((busy1 - busy0) - cpu - sum(ccpu1) + sum(ccpu0)
                                 - (own1 - own0) - (store1 - store0)) / window,
        "errors": sum(r["errors"] for r in reports),
        "resets": sum(r["resets"] for r in reports),
        "reconnects": sum(r["reconnects"] for r in reports),
        "connect_errors": sum(r["connect_errors"] for r in reports),
        "last_error": next((r["last_error"] for r in reports if r["last_error"]), ""),
    }


# -- the report ------------------------------------------------------------------


def label(r: dict[str, Any]) -> str:
    if r["server"] == "nchan":
        return "nchan"
    if r["server"] == "floor":
        return "floor (uvloop + httptools, no contract)"
    if r["server"] == "floor-compiled":
        return "floor compiled (uvloop + httptools, no contract)"
    if r["server"] == "floor-c":
        return "floor at C level (uvloop + Cython, no contract)"
    return (("liveroom compiled" if r["server"] in COMPILED else "liveroom")
            + (" defaults" if r["server"] in DEFAULTS else "")
            + f" (tiers {r['tiers'] or 'default'}"
            + (f", {r['workers']} workers" if r["workers"] > 1 else "") + ")")


COLUMNS = [
    ("server", label),
    ("listeners", lambda r: f"{r['listeners']:,}"),
    ("msgs", lambda r: f"{r['messages']}"),
    ("deliveries", lambda r: f"{r['deliveries']:,}"),
    ("deliv/s", lambda r: f"{r['deliveries_per_s']:,.0f}"),
    ("server CPU", lambda r: f"{r['server_cpu_pct']:.0f} %"),
    ("µs CPU/deliv", lambda r: f"{r['us_per_delivery']:.1f}"),
    ("p50 ms", lambda r: f"{r['p50_ms']:.1f}"),
    ("p99 ms", lambda r: f"{r['p99_ms']:.1f}"),
    ("reach all p50/max ms", lambda r: f"{r['reach_all_p50_ms']:.0f} / "
                                       f"{r['reach_all_max_ms']:.0f}"),
    ("req/deliv", lambda r: f"{r['requests_per_delivery']:.2f}"),
    ("RSS/held poll", lambda r: f"{r['rss_per_held_poll_b'] / 1024:.1f} KiB"),
    ("client CPU", lambda r: " + ".join(f"{c:.0f}" for c in r["client_cpu_pct"]) + " %"),
]


def table(results: list[dict[str, Any]]) -> str:
    rows = [[name for name, _ in COLUMNS], ["---"] * len(COLUMNS)]
    rows += [[cell(r) for _, cell in COLUMNS] for r in results]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


RATIOS = [("liveroom", "nchan"), ("liveroom", "floor"), ("floor", "nchan"),
          ("compiled", "nchan"), ("compiled", "liveroom"), ("compiled", "floor-compiled"),
          ("liveroom-defaults", "nchan"), ("compiled-defaults", "nchan"),
          ("compiled-defaults", "compiled"), ("liveroom-defaults", "liveroom"),
          ("floor-compiled", "nchan"), ("floor-c", "nchan"), ("compiled", "floor-c"),
          ("compiled-defaults", "floor-c")]
"""The pairs of rows compared below the table, when both rows are there."""


def ratios(a: dict[str, Any], b: dict[str, Any]) -> str:
    def ratio(key: str) -> str:
        return f"{a[key] / b[key]:.2f}" if b[key] else "-"

    return (f"{a['server']} / {b['server']}: µs CPU per delivery {ratio('us_per_delivery')}, "
            f"p50 {ratio('p50_ms')}, p99 {ratio('p99_ms')}, "
            f"reach-all max {ratio('reach_all_max_ms')}, "
            f"requests per delivery {ratio('requests_per_delivery')}, "
            f"RSS per held poll {ratio('rss_per_held_poll_b')}, "
            f"deliveries/s {ratio('deliveries_per_s')}")


def cpu_line(r: dict[str, Any]) -> str:
    cores = 100 * (os.cpu_count() or 1)
    return (f"{r['server']}: CPU over the window, % of one core: machine "
            f"{r['machine_busy_pct']:.0f} (of {cores}) = server {r['server_cpu_pct']:.0f}"
            + (f" + redis-server {r['store_cpu_pct']:.0f}" if r["store_cpu_pct"] else "")
            + f" + clients {sum(r['client_cpu_pct']):.0f} + publisher {r['own_cpu_pct']:.0f}"
            f" + everything else {r['others_cpu_pct']:.0f} (other processes, the kernel); "
            f"clients {r['client_us_per_delivery']:.1f} µs per delivery, so reading one "
            f"message's answers takes each client process at least "
            f"{r['client_us_per_delivery'] * r['listeners'] / r['client_procs'] / 1000:.0f} ms")


def notes(r: dict[str, Any]) -> list[str]:
    out = []
    busy = [c for c in r["client_cpu_pct"] if c >= 90]
    if busy:
        out.append(f"{r['server']}: a client process used {max(busy):.0f} % of a core: "
                   "the client is saturated, so the latencies (and deliveries/s) are "
                   "partly the client's")
    if r["server_cpu_pct"] >= 90 * max(1, r["workers"]):
        out.append(f"{r['server']}: the server used {r['server_cpu_pct']:.0f} % of a core: "
                   "saturated")
    cores = os.cpu_count() or 1
    if r["machine_busy_pct"] >= 90 * cores:
        out.append(f"{r['server']}: the machine was {r['machine_busy_pct'] / cores:.0f} % busy: "
                   "server and clients waited for a core, and the latencies include that wait")
    missing = r["expected"] - r["deliveries"] - r["gaps"]
    if missing > 0:
        out.append(f"{r['server']}: {missing:,} deliveries missing at the end of the drain "
                   f"({r['expected']:,} expected)")
    if r["messages_reaching_all"] < r["messages"]:
        out.append(f"{r['server']}: only {r['messages_reaching_all']} of {r['messages']} "
                   "messages reached every listener (the reach-all figures are theirs)")
    if r["gaps"]:
        out.append(f"{r['server']}: {r['gaps']:,} messages skipped by the server (gap)")
    for key in ("send_failures", "errors", "resets", "reconnects", "connect_errors"):
        if r[key]:
            out.append(f"{r['server']}: {key.replace('_', ' ')}: {r[key]:,}")
    if r["last_error"]:
        out.append(f"{r['server']}: a client's last connection error: {r['last_error']}")
    return out


# -- command line ----------------------------------------------------------------


def against(value: str) -> str:
    """--against's value: names of SPEAKS or GROUPS, separated by commas."""
    names = [name.strip() for name in value.split(",")]
    unknown = [name for name in names if name not in SPEAKS and name not in GROUPS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown server {', '.join(map(repr, unknown))} (choose from "
            f"{', '.join([*SPEAKS, *GROUPS])}, or several separated by commas)")
    return ",".join(names)


def choose(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The servers to measure, in order, and notes on those left out: a server
    ``all`` brings that cannot run here is left out; RuntimeError for one named."""
    if args.against is None:
        if nchan_available():
            return ["liveroom", "nchan"], []
        return ["liveroom"], [f"nginx with the nchan module ({NCHAN_MODULE}) not found: "
                              "liveroom only (apt-get install nginx libnginx-mod-nchan)"]
    kinds: list[str] = []
    named: set[str] = set()
    for name in args.against.split(","):
        group = GROUPS.get(name, [name])
        kinds += [kind for kind in group if kind not in kinds]
        if name != "all":
            named.update(group)
    missing = {}
    for kind in COMPILED:
        if kind in kinds and not args.compiled_tree.is_dir():
            missing[kind] = (f"no compiled tree at {args.compiled_tree} (build one with "
                             f"{BUILD_COMPILED}, or give --compiled-tree DIR)")
    if "nchan" in kinds and not nchan_available():
        missing["nchan"] = (f"nginx with the nchan module ({NCHAN_MODULE}) not found "
                            "(apt-get install nginx libnginx-mod-nchan)")
    if "floor-compiled" in kinds and importlib.util.find_spec("mypyc") is None:
        missing["floor-compiled"] = "mypyc not found (pip install mypy)"
    notes = []
    for kind, why in missing.items():
        if kind in named:
            raise RuntimeError(why)
        kinds.remove(kind)
        notes.append(f"{kind} left out: {why}")
    if any(kind in COMPILED for kind in kinds):
        check_compiled_tree(args.compiled_tree)
    return kinds, notes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="plain",
                   help="a preset of listeners, rate, seconds, tiers and client processes "
                        "(default: plain); the flags below override it")
    p.add_argument("--against", type=against, metavar="SERVER[,SERVER...]",
                   help="the server(s) to measure, with the same load, in this order: "
                        "liveroom; compiled = liveroom from the compiled tree "
                        "(--compiled-tree); liveroom-defaults, compiled-defaults = the same "
                        "with the node's own settings (its log level info, not the bench's "
                        "warning); nchan; floor = floor_server.py, the Python floor "
                        "(uvloop + httptools, just enough of the poll contract, plain hold); "
                        "floor-compiled = the floor compiled by mypyc for the run; "
                        "floor-c = floor_c.pyx, the floor at C level (Cython, built by pip "
                        "for the run); both = "
                        "liveroom,nchan; all = liveroom, compiled, nchan, floor, "
                        "floor-compiled, leaving out (with a note) compiled without a tree, "
                        "nchan when not installed and floor-compiled without mypyc "
                        "(default: both when nginx with the nchan module is installed, else "
                        "liveroom)")
    p.add_argument("--compiled-tree", type=Path, default=REPO / "build" / "compiled",
                   metavar="DIR",
                   help="the compiled tree 'compiled' runs from, made by "
                        f"{BUILD_COMPILED} (pip install --no-deps --target DIR .; default: "
                        "build/compiled in the checkout)")
    p.add_argument("--listeners", type=int,
                   help="long polls held in the room, each polling again at once after "
                        "every answer")
    p.add_argument("--rate", type=float, help="messages sent a second (evenly spaced)")
    p.add_argument("--seconds", type=float,
                   help="how long the publisher sends; the measured window runs from the "
                        "first send until every listener has every message (or --drain)")
    p.add_argument("--tiers",
                   help="liveroom's --tiers ('off' for a plain hold, 'default' for the "
                        "server's own table); Nchan and the floor always run plain")
    p.add_argument("--client-procs", type=int,
                   help="client processes the listeners are split over (each one core at "
                        "most); raised if one process cannot open its share of sockets")
    p.add_argument("--workers", type=int, default=1,
                   help="liveroom serve --workers N (passed only when above 1; needs a redis "
                        "store, e.g. --store redis-server)")
    p.add_argument("--store",
                   help="liveroom serve --store URL (default: the server's, memory); "
                        "'redis-server' starts a throw-away redis-server on a free port for "
                        "the run (its CPU is reported apart, not in the server's)")
    p.add_argument("--drain", type=float, default=10.0,
                   help="seconds to wait after the last send for the last deliveries "
                        "(default 10)")
    p.add_argument("--nchan-multipart", action="store_true",
                   help="Nchan answers every pending message in one multipart answer "
                        "(nchan_longpoll_multipart_response on; default: one message per "
                        "answer, Nchan's default)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    args.compiled_tree = args.compiled_tree.resolve()  # the servers run from the checkout
    preset = SCENARIOS[args.scenario]
    if args.tiers == "default":
        args.tiers = None
    elif args.tiers is None:
        args.tiers = preset.tiers
    for name in ("listeners", "rate", "seconds", "client_procs"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(preset, name))
    if args.listeners < 1 or args.rate <= 0 or args.seconds <= 0 or args.client_procs < 1:
        p.error("--listeners, --rate, --seconds and --client-procs must be positive")
    if args.workers < 1:
        p.error("--workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    interrupt_on_signals()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    try:
        kinds, notes_out = choose(args)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.against = args.against or ",".join(kinds)  # for --json

    # One process holds at most (open-files limit - a reserve) polls, servers and
    # clients alike; root may raise the limit unless the host forbids it.
    nofile = raise_nofile(args.listeners + FD_RESERVE)
    listeners = args.listeners
    liverooms = any(kind in LIVEROOMS for kind in kinds)
    server_procs = args.workers if liverooms else 1
    if listeners > nofile - FD_RESERVE and server_procs == 1:
        listeners = nofile - FD_RESERVE
        notes_out.append(f"the open-files limit is {nofile} and cannot be raised here "
                         f"(ulimit -Hn): one server process holds at most {listeners:,} "
                         f"polls, so {listeners:,} listeners instead of {args.listeners:,}")
    client_procs = max(args.client_procs, math.ceil(listeners / (nofile - FD_RESERVE)))
    if client_procs != args.client_procs:
        notes_out.append(f"{client_procs} client processes instead of {args.client_procs}: "
                         f"one opens at most {nofile - FD_RESERVE:,} sockets here")
    for n in notes_out:
        print(f"note: {n}", flush=True)

    started = datetime.datetime.now().astimezone()
    stamp = commit()  # at the start: others may commit while it runs
    results = []
    try:
        with contextlib.ExitStack() as stack:
            floor_builds = build_floors(kinds, stack, "fanout")
            for kind in kinds:
                r = run_one(kind, args, listeners, client_procs, nofile, floor_builds)
                r["workers"] = args.workers if kind in LIVEROOMS else 1
                results.append(r)
    except KeyboardInterrupt:
        print("interrupted: servers and clients stopped", file=sys.stderr)
        return 130
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    print()
    print(f"command: {command}")
    print(f"commit:  {stamp}    date: {started:%Y-%m-%d %H:%M %Z}")
    print(f"machine: {versions()}")
    print(f"load:    {listeners:,} listeners in one room, {args.rate:g} msg/s for "
          f"{args.seconds:g} s"
          + (f", liveroom tiers {args.tiers or 'default'}" if liverooms else "")
          + (f", {args.workers} workers" if args.workers > 1 else "")
          + (f", store {args.store}" if args.store else "")
          + f", {client_procs} client process(es)"
          + (", nchan multipart" if args.nchan_multipart else ""))
    print()
    print(table(results))
    by = {r["server"]: r for r in results}
    lines = [ratios(by[a], by[b]) for a, b in RATIOS if a in by and b in by]
    if lines:
        print()
        print("\n".join(lines))
    print()
    for r in results:
        print(cpu_line(r))
    extra = notes_out + [n for r in results for n in notes(r)]
    if extra:
        print()
        for n in extra:
            print(f"note: {n}")
    if args.json:
        args.json.write_text(json.dumps({
            "command": command, "commit": stamp, "date": started.isoformat(),
            "machine": versions(), "args": {k: (str(v) if isinstance(v, Path) else v)
                                            for k, v in vars(args).items()},
            "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
