"""The store's load: Redis commands per second per room, on a Redis Cluster, as
listeners, rooms and nodes grow.

The seed's architecture makes the KV store's load a matter of rooms and nodes,
never of listeners: a poll is answered from the node's snapshot, a node pulls
each room it reads (on a notify, and at least once a second), and statsvr
merges each room's shard keys once a second. This benchmark counts what Redis
itself executes (``INFO commandstats`` of every cluster node, masters and
replicas, the difference over a measured window) while real listeners
long-poll over sockets and a publisher chats at a fixed rate.

It starts a local Redis Cluster (3 masters + 3 replicas, ``tests/redis_cluster.py``)
once, then runs phases; each phase empties the cluster (``FLUSHALL``), starts
fresh ``python -m liveroom serve --store redis+cluster://...`` processes from
this checkout (and nginx in front of them for the nodes scenario), opens its
rooms with one message each, connects the listeners (``kit/clients.py``:
uvloop + httptools, one keep-alive connection each, polling again at once after
every answer), starts the publisher, warms up, and measures:

1. **listeners**: one room, one node, 1 000 then 10 000 listeners, the same
   publish rate. The ratio of the two figures is the target (at most 1.1: the
   store's load must not grow with listeners).
2. **rooms**: 100 / 1 000 / 10 000 rooms of one listener each, one node, a fixed
   rate *per room* (so each row is the same room, more times over, and the
   per-room figures compare; a fixed per-room rate of 0.01 msg/s is 100 msg/s at
   10 000 rooms, what one publisher thread and one node on 2 cores keep up).
3. **nodes**: 1, 2 and 4 ``serve`` processes behind nginx
   (``loadtest/nginx_rooms.conf``), every request routed by room name
   (``hash $room consistent``), then the same with plain round-robin, where
   each room's listeners poll every node in turn and every node reads every
   room: the per-room load grows with the nodes.

Counted: every command Redis executed, commands run by Lua scripts included
(an ``EVALSHA`` of the append shows as one ``evalsha`` plus the ``hincrby``,
``xadd``, ... it ran), except the cluster's own housekeeping (``replconf``,
the masters' replication ``ping`` to their replicas) and this benchmark's
``info``. The headline is the **masters' sum**: everything liveroom sends goes
to a master (no ``--durable-replicas`` here, so pulls read masters too); the
replicas only replay the masters' writes, a count the replication layout
sets, not liveroom. The whole sum, replicas included, is printed beside it.

    python loadtest/bench_kv.py                 # every scenario, 9-13 minutes on 2 cores
    python loadtest/bench_kv.py --quick         # a smoke run with small sizes, 2-3 minutes
    python loadtest/bench_kv.py --rooms 100,1000   # without the 10 000-room phase (3-4 min of it)
    python loadtest/bench_kv.py --scenarios nodes --window 30
    python loadtest/bench_kv.py --json /tmp/kv.json

Everything it writes goes to a temporary folder (and ``--json FILE``); every
child (the cluster's redis-servers by PID, the servers, nginx, the client
processes) is stopped at the end, on failure and on Ctrl-C; every wait is
bounded.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime
import http.client
import json
import math
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import redis
from kit.clients import Clients
from kit.machine import raise_nofile
from kit.provenance import commit, versions
from kit.servers import (
    ADMIN_TOKEN,
    FD_RESERVE,
    PUBLISHER_TOKEN,
    Server,
    free_port,
    interrupt_on_signals,
    liveroom_server,
    nginx_server,
)
from redis_cluster import LocalCluster

HERE = Path(__file__).resolve().parent
HOUSEKEEPING = {"replconf", "info"}
"""Commands left out everywhere: replication's own acks and this benchmark's reads."""
REPLICA_HOUSEKEEPING = {"ping"}
"""Left out on replicas: their master's replication ping (liveroom pings masters only)."""
FALLBACK_SHORT = 0.9
"""Pulls a second per cached room under which a node is said not to keep up
(the fallback pulls every room with held polls once a second)."""
SATURATED = 90.0
"""A node's CPU, % of one core, from which it is said to be saturated."""
ENOUGH_HOLDING = 0.95
"""Share of a phase's listeners that must hold a poll before it measures (all
of them, or this share once the connect time is up)."""
SAMPLE_EVERY = 10.0
"""statsvr's sampling period (``statsvr.series.SAMPLE_EVERY``): windows are
whole multiples of it."""
SAMPLE_PHASE = 5.0
"""Windows start this long after a sample (midway to the next one)."""


def say(phase: str, text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {phase:14} {text}", flush=True)


# -- what Redis counted ------------------------------------------------------------


class CommandStats:
    """``INFO commandstats`` of every node of the cluster, one connection each."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.clients = {p: redis.Redis(port=p, socket_timeout=10) for p in ports}

    def read(self) -> dict[int, dict[str, int]]:
        out = {}
        for port, client in self.clients.items():
            stats = client.info("commandstats")
            out[port] = {name.removeprefix("cmdstat_"): int(v["calls"])
                         for name, v in stats.items()}
        return out

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def counted(before: dict[int, dict[str, int]], after: dict[int, dict[str, int]],
            masters: set[int]) -> tuple[dict[str, int], dict[str, int]]:
    """Commands executed between two reads, by name: (masters only, every node)."""
    on_masters: dict[str, int] = {}
    on_all: dict[str, int] = {}
    for port, now in after.items():
        skip = HOUSEKEEPING if port in masters else HOUSEKEEPING | REPLICA_HOUSEKEEPING
        for name, calls in now.items():
            n = calls - before.get(port, {}).get(name, 0)
            if n <= 0 or name in skip:
                continue
            on_all[name] = on_all.get(name, 0) + n
            if port in masters:
                on_masters[name] = on_masters.get(name, 0) + n
    return on_masters, on_all


# -- nginx in front of the nodes ---------------------------------------------------


def nginx_rooms_config(tmp: Path, port: int, upstreams: Sequence[int], affinity: bool,
                       nofile: int, listeners: int) -> str:
    """``nginx_rooms.conf`` with its @NAMES@ filled in."""
    text = (HERE / "nginx_rooms.conf").read_text()
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=0;" for p in upstreams)
    for name, value in {
            "DIR": str(tmp), "PORT": str(port), "NOFILE": str(nofile),
            "CONNECTIONS": str(nofile),
            "BALANCE": "hash $room:$arg_spread consistent;" if affinity
            else "# round robin: no affinity (the contrast)",
            "SERVERS": servers, "KEEPALIVE": str(max(64, listeners))}.items():
        text = text.replace(f"@{name}@", value)
    return text


def nginx_rooms(tmp: Path, upstreams: Sequence[int], affinity: bool, nofile: int,
                listeners: int) -> contextlib.AbstractContextManager[Server]:
    """nginx from ``nginx_rooms.conf``, ready once it accepts and its worker runs."""
    port = free_port()
    return nginx_server(tmp, "nginx", port,
                        nginx_rooms_config(tmp, port, upstreams, affinity, nofile, listeners),
                        nofile)


# -- the publisher -----------------------------------------------------------------


def room_names(prefix: str, rooms: int) -> list[str]:
    """The rooms of a phase, named as ``kit.clients.listener_room`` names them."""
    return [prefix] if rooms == 1 else [f"{prefix}-{i}" for i in range(rooms)]


def send(conn: http.client.HTTPConnection, room: str, text: str) -> bool:
    body = json.dumps({"uid": "publisher", "body": {"text": text}}).encode()
    try:
        conn.request("POST", f"/v1/rooms/{room}/messages", body=body,
                     headers={"Content-Type": "application/json",
                              "Authorization": f"Bearer {PUBLISHER_TOKEN}"})
        resp = conn.getresponse()
        resp.read()
        return resp.status == 201
    except (OSError, http.client.HTTPException):
        conn.close()
        return False


def open_rooms(port: int, rooms: list[str], threads: int = 8, within: float = 120) -> None:
    """One message to every room, so each exists before its listeners come."""
    local = threading.local()
    deadline = time.monotonic() + within

    def one(room: str) -> None:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while not send(local.conn, room, "open"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not open room {room} within {within:.0f} s")
            time.sleep(0.2)

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, rooms):
            pass


class Publisher(threading.Thread):
    """Sends chat at ``rate`` messages a second, evenly spaced, to the rooms in
    turn, until stopped (or ``budget`` seconds)."""

    def __init__(self, port: int, rooms: list[str], rate: float, budget: float) -> None:
        super().__init__(name="publisher", daemon=True)
        self.port = port
        self.rooms = rooms
        self.rate = rate
        self.budget = budget
        self.halt = threading.Event()
        self.sent_at: list[float] = []
        self.failed = 0

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        start = time.monotonic()
        k = 0
        try:
            while not self.halt.is_set() and time.monotonic() - start < self.budget:
                pause = start + k / self.rate - time.monotonic()
                if pause > 0 and self.halt.wait(pause):
                    break
                if send(conn, self.rooms[k % len(self.rooms)], f"chat {k}"):
                    self.sent_at.append(time.monotonic())
                else:
                    self.failed += 1
                k += 1
        finally:
            conn.close()

    def sent_between(self, t0: float, t1: float) -> int:
        return sum(t0 <= t < t1 for t in self.sent_at)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


# -- one phase ---------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    scenario: str
    label: str
    rooms: int
    listeners: int
    rate: float
    """Messages a second over all the rooms."""
    nodes: int = 1
    routing: str = "direct"
    """``direct`` (to the one node), ``affinity`` or ``round-robin`` (nginx)."""


@dataclass
class Result:
    phase: Phase
    window_s: float
    messages: int
    holding: tuple[int, int]
    """Listeners holding a poll at the window's start and end."""
    masters: dict[str, int]
    everything: dict[str, int]
    cached_rooms: list[int]
    """Rooms in each node's recvsvr cache at the window's end."""
    node_cpu: list[float]
    """Each node's CPU over the window, % of one core."""
    notes: list[str] = field(default_factory=list)

    def per_s(self, counts: dict[str, int]) -> float:
        return sum(counts.values()) / self.window_s

    @property
    def masters_per_s(self) -> float:
        return self.per_s(self.masters)

    @property
    def all_per_s(self) -> float:
        return self.per_s(self.everything)

    @property
    def per_room(self) -> float:
        return self.masters_per_s / self.phase.rooms

    @property
    def all_per_room(self) -> float:
        return self.all_per_s / self.phase.rooms

    @property
    def pulls_per_room(self) -> float:
        """Pulls of a room a second, over every node: each pull reads the room's
        meta with one ``HMGET`` (at least one a second per node reading it)."""
        return self.masters.get("hmget", 0) / self.window_s / self.phase.rooms

    @property
    def per_pair(self) -> float:
        """Commands a second on the masters per room cached on a node (a
        room-node pair): the unit the load grows by."""
        pairs = sum(self.cached_rooms)
        return self.masters_per_s / pairs if pairs > 0 else math.nan

    @property
    def pulls_per_pair(self) -> float:
        """Pulls a second of a room by one node that has it cached."""
        pairs = sum(self.cached_rooms)
        return self.pulls_per_room * self.phase.rooms / pairs if pairs > 0 else math.nan


def cached_rooms(port: int) -> int:
    """``liveroom_cached_rooms`` from a node's /metrics (-1 if unreadable)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        text = conn.getresponse().read().decode()
        conn.close()
    except (OSError, http.client.HTTPException):
        return -1
    total = 0.0
    for line in text.splitlines():
        if line.startswith("liveroom_cached_rooms"):
            total += float(line.rsplit(" ", 1)[1])
    return round(total)


def run_phase(n: int, phase: Phase, cluster: LocalCluster, stats: CommandStats,
              args: argparse.Namespace, nofile: int) -> Result:
    name = f"{n}:{phase.scenario}"
    prefix = f"kv{n}"
    rooms = room_names(prefix, phase.rooms)
    connect_timeout = 60 + phase.listeners / 100
    budget = connect_timeout + args.warmup + args.window + 180
    cluster.flushall()
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"kv-{n}-")))
        say(name, f"{phase.label}: starting {phase.nodes} node(s)")
        servers = [stack.enter_context(liveroom_server(
            tmp, nofile, None, cluster.url, 1, name=f"node{i}",
            extra=["--node-id", f"kv{n}-node{i}"])) for i in range(phase.nodes)]
        entry = servers[0].port
        watched: list[Server] = list(servers)
        if phase.routing != "direct":
            front = stack.enter_context(nginx_rooms(
                tmp, [s.port for s in servers], phase.routing == "affinity", nofile,
                phase.listeners))
            entry = front.port
            watched.append(front)
        say(name, f"nodes on {[s.port for s in servers]}"
                  + (f", nginx ({phase.routing}) on {entry}" if phase.routing != "direct"
                     else ""))

        t = time.monotonic()
        open_rooms(entry, rooms)
        say(name, f"{len(rooms):,} room(s) opened with one message each "
                  f"in {time.monotonic() - t:.1f} s")

        # Fewer connections opened at once than Clients' default: a node busy
        # with thousands of rooms accepts slowly, and an overflowing accept
        # queue resets connections.
        clients = Clients("liveroom", entry, phase.listeners, 1, budget, room=prefix,
                          rooms=phase.rooms, connect_parallel=64)
        stack.callback(clients.stop)
        deadline = time.monotonic() + connect_timeout
        last_print = 0.0
        while True:
            for s in watched:
                s.check_alive()
            st = clients.status()
            if st["holding"] >= phase.listeners:
                break
            if time.monotonic() > deadline:
                if st["holding"] >= ENOUGH_HOLDING * phase.listeners:
                    notes.append(f"only {st['holding']:,} of {phase.listeners:,} listeners "
                                 f"held a poll after {connect_timeout:.0f} s; measured so")
                    break
                raise RuntimeError(f"{name}: only {st['holding']} of {phase.listeners} polls "
                                   f"held after {connect_timeout:.0f} s ({st})")
            if time.monotonic() - last_print >= 3:
                last_print = time.monotonic()
                say(name, f"connecting: {st['connected']:,} connected, "
                          f"{st['holding']:,} holding")
            time.sleep(0.2)
        say(name, f"{st['holding']:,} of {phase.listeners:,} listeners connected and "
                  "holding a poll")

        publisher = Publisher(entry, rooms, phase.rate, budget)
        publisher.start()
        stack.callback(publisher.stop)
        say(name, f"publishing {phase.rate:g} msg/s over {phase.rooms:,} room(s); "
                  f"warm-up {args.warmup:g} s")
        time.sleep(args.warmup)
        # statsvr samples every room's online count every 10 s of Unix time (at
        # :00, :10, ...): a window starting midway between two samples and
        # lasting whole periods holds the same number of them in every phase.
        time.sleep((SAMPLE_PHASE - time.time()) % SAMPLE_EVERY)
        masters = set(cluster.masters())
        holding0 = clients.status()["holding"]
        cpu0 = [s.cpu() for s in servers]
        before, t0 = stats.read(), time.monotonic()
        say(name, f"measuring {args.window:g} s")
        while (left := t0 + args.window - time.monotonic()) > 0:
            time.sleep(min(left, 5))
            for s in watched:
                s.check_alive()
        after, t1 = stats.read(), time.monotonic()
        cpu = [100 * (s.cpu() - c) / (t1 - t0) for s, c in zip(servers, cpu0, strict=True)]
        st = clients.status()
        caches = [cached_rooms(s.port) for s in servers]
        if set(cluster.masters()) != masters:
            notes.append("the cluster's masters changed during the window")
        messages = publisher.sent_between(t0, t1)
        if publisher.failed:
            notes.append(f"{publisher.failed} send(s) failed")
        for key in ("errors", "resets", "connect_errors"):
            if st[key]:
                notes.append(f"listeners' {key.replace('_', ' ')}: {st[key]:,}")
    on_masters, on_all = counted(before, after, masters)
    result = Result(phase, t1 - t0, messages, (holding0, st["holding"]), on_masters, on_all,
                    caches, cpu, notes)
    if result.pulls_per_pair < FALLBACK_SHORT:
        why = ("the node is saturated" if max(cpu) >= SATURATED else
               "its pull rounds end more than half a second after the fallback's tick, "
               "and a room pulled that recently waits for the next tick")
        result.notes.append(
            f"each node reading a room pulled it {result.pulls_per_pair:.2f} times a second, "
            f"under the fallback's once a second: {why} (node CPU "
            + " / ".join(f"{c:.0f} %" for c in cpu) + " of a core); the figures "
            "are under what a node keeping up would cost")
    say(name, f"window {result.window_s:.1f} s: {messages} messages "
              f"({messages / result.window_s:.2f}/s), holding {holding0:,} -> "
              f"{st['holding']:,}; {result.masters_per_s:,.1f} commands/s on the masters "
              f"({result.per_room:,.2f} per room), {result.all_per_s:,.1f} on every node; "
              f"rooms cached per node {caches}, node CPU "
              + " / ".join(f"{c:.0f} %" for c in cpu))
    say(name, "per room per s, masters: " + top_commands(
        on_masters, result.window_s, phase.rooms, len(on_masters)))
    for note in notes:
        say(name, f"note: {note}")
    return result


# -- the phases of a run -----------------------------------------------------------


def phases(args: argparse.Namespace) -> list[Phase]:
    out: list[Phase] = []
    if "listeners" in args.scenarios:
        for listeners in args.listeners:
            out.append(Phase("listeners", f"1 room, {listeners:,} listeners", 1, listeners,
                             args.room_rate_one))
    if "rooms" in args.scenarios:
        for rooms in args.rooms:
            out.append(Phase("rooms", f"{rooms:,} rooms x 1 listener", rooms, rooms,
                             rooms * args.room_rate))
    if "nodes" in args.scenarios:
        r, per = args.node_rooms, args.node_listeners
        for nodes in args.nodes:
            for routing in (["affinity"] if nodes == 1 else ["affinity", "round-robin"]):
                out.append(Phase("nodes", f"{nodes} node(s), {routing}", r, r * per,
                                 r * args.node_room_rate, nodes=nodes, routing=routing))
    return out


# -- the report --------------------------------------------------------------------


def top_commands(counts: dict[str, int], window: float, rooms: int, top: int) -> str:
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    shown = [f"{name.upper()} {n / window / rooms:.3g}" for name, n in ranked[:top]]
    rest = sum(n for _, n in ranked[top:])
    if rest:
        shown.append(f"other {rest / window / rooms:.3g}")
    return ", ".join(shown)


def table(results: list[Result], top: int) -> str:
    head = ["scenario", "phase", "nodes", "rooms", "listeners", "msg/s",
            "cmd/s masters", "**cmd/s/room masters**", "cmd/s all nodes", "cmd/s/room all",
            "pulls/room/s", "rooms cached per node", "cmd/s per room-node", "node CPU",
            f"per room per s, masters (top {top})"]
    rows = [head, ["---"] * 2 + ["---:"] * 12 + ["---"]]
    for r in results:
        p = r.phase
        rows.append([p.scenario, p.label, str(p.nodes), f"{p.rooms:,}", f"{p.listeners:,}",
                     f"{r.messages / r.window_s:.2f}", f"{r.masters_per_s:,.1f}",
                     f"**{r.per_room:,.2f}**", f"{r.all_per_s:,.1f}",
                     f"{r.all_per_room:,.2f}", f"{r.pulls_per_room:.2f}",
                     " / ".join(map(str, r.cached_rooms)), f"{r.per_pair:.2f}",
                     " / ".join(f"{c:.0f}" for c in r.node_cpu) + " %",
                     top_commands(r.masters, r.window_s, p.rooms, top)])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def summary(results: list[Result]) -> list[str]:
    lines = []
    listeners = [r for r in results if r.phase.scenario == "listeners"]
    if len(listeners) >= 2:
        lo, hi = listeners[0], listeners[-1]
        ratio = hi.per_room / lo.per_room if lo.per_room else math.nan
        verdict = "ok" if ratio <= 1.1 else "ABOVE THE TARGET"
        lines.append(f"listeners: {hi.phase.listeners:,} vs {lo.phase.listeners:,} listeners "
                     f"in one room: commands/s per room {hi.per_room:.2f} / "
                     f"{lo.per_room:.2f} = {ratio:.3f} (target <= 1.1: {verdict})")
        for name in sorted(set(lo.masters) | set(hi.masters)):
            a = lo.masters.get(name, 0) / lo.window_s
            b = hi.masters.get(name, 0) / hi.window_s
            if b > 1.1 * a + 1.0:  # a new connection's HELLO is not a trend
                lines.append(f"listeners: {name.upper()} grows with listeners: "
                             f"{a:.2f} -> {b:.2f} /s")
    rooms = [r for r in results if r.phase.scenario == "rooms"]
    if len(rooms) >= 2:
        lines.append("rooms: commands/s per room " + ", ".join(
            f"{r.phase.rooms:,} rooms {r.per_room:.2f}" for r in rooms)
            + f" (ratio last / first {rooms[-1].per_room / rooms[0].per_room:.2f})")
    nodes = [r for r in results if r.phase.scenario == "nodes"]
    base = next((r for r in nodes if r.phase.nodes == 1), None)
    if base is not None:
        for routing in ("affinity", "round-robin"):
            row = [r for r in nodes if r.phase.routing == routing or r.phase.nodes == 1]
            lines.append(f"nodes, {routing}: commands/s per room " + ", ".join(
                f"{r.phase.nodes} node(s) {r.per_room:.2f} "
                f"({r.per_room / base.per_room:.2f}x)" for r in row)
                + "; per room-node " + ", ".join(f"{r.per_pair:.2f}" for r in row))
        for r in nodes:
            twin = next((a for a in nodes if a.phase.routing == "affinity"
                         and a.phase.nodes == r.phase.nodes), None)
            if r.phase.routing == "round-robin" and twin is not None:
                lines.append(f"nodes: {r.phase.nodes} nodes, round-robin / affinity: "
                             f"{r.per_room / twin.per_room:.2f}x the commands per room "
                             f"({sum(r.cached_rooms) / r.phase.rooms:.2f} vs "
                             f"{sum(twin.cached_rooms) / twin.phase.rooms:.2f} nodes "
                             "reading each room)")
    return lines


# -- command line ------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", default="listeners,rooms,nodes",
                   help="which scenarios to run, comma-separated, in this order "
                        "(default: listeners,rooms,nodes)")
    p.add_argument("--quick", action="store_true",
                   help="a short smoke run: 100 vs 1 000 listeners, 100 / 1 000 rooms, "
                        "1 and 2 nodes over 60 rooms, 4 s warm-up, 10 s windows "
                        "(any flag given overrides these)")
    p.add_argument("--warmup", type=float,
                   help="seconds of publishing before each window (default 10)")
    p.add_argument("--window", type=float,
                   help="seconds of each measured window, a multiple of statsvr's 10 s "
                        "sampling period (default 20; windows start 5 s after a sample)")
    p.add_argument("--listeners", type=int_list,
                   help="listeners scenario: listeners in the one room, per phase "
                        "(default 1000,10000)")
    p.add_argument("--room-rate-one", type=float, default=2.0,
                   help="listeners scenario: messages a second in the room (default 2)")
    p.add_argument("--rooms", type=int_list,
                   help="rooms scenario: rooms (one listener each), per phase "
                        "(default 100,1000,10000)")
    p.add_argument("--room-rate", type=float, default=0.01,
                   help="rooms scenario: messages a second per room, the same in every "
                        "phase (default 0.01: 100 msg/s at 10 000 rooms)")
    p.add_argument("--nodes", type=int_list,
                   help="nodes scenario: serve processes behind nginx, per phase "
                        "(default 1,2,4; each count above 1 runs with room affinity, "
                        "then round-robin)")
    p.add_argument("--node-rooms", type=int,
                   help="nodes scenario: rooms (default 300)")
    p.add_argument("--node-listeners", type=int, default=10,
                   help="nodes scenario: listeners per room (default 10: enough that "
                        "round-robin puts a room's held polls on every node)")
    p.add_argument("--node-room-rate", type=float, default=0.05,
                   help="nodes scenario: messages a second per room (default 0.05)")
    p.add_argument("--top", type=int, default=6,
                   help="commands named in the table's breakdown (default 6)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(args.scenarios) - {"listeners", "rooms", "nodes"}
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    defaults: dict[str, Any] = (
        {"warmup": 4.0, "window": 10.0, "listeners": [100, 1000], "rooms": [100, 1000],
         "nodes": [1, 2], "node_rooms": 60} if args.quick else
        {"warmup": 10.0, "window": 20.0, "listeners": [1000, 10000],
         "rooms": [100, 1000, 10000], "nodes": [1, 2, 4], "node_rooms": 300})
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.window <= 0 or args.warmup < 0:
        p.error("--window must be positive and --warmup not negative")
    if args.window % SAMPLE_EVERY:
        p.error(f"--window must be a multiple of {SAMPLE_EVERY:g} s (statsvr's sampling "
                "period), or windows would hold different numbers of samples")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    interrupt_on_signals()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    todo = phases(args)
    biggest = max(max(p.listeners for p in todo), 1)
    need = 2 * biggest + FD_RESERVE if "nodes" in args.scenarios else biggest + FD_RESERVE
    nofile = raise_nofile(need)
    for p in todo:
        fds = p.listeners * (2 if p.routing != "direct" else 1) + FD_RESERVE
        if fds > nofile:
            print(f"error: {p.label} needs {fds:,} open files, the limit is {nofile:,} "
                  "(ulimit -Hn)", file=sys.stderr)
            return 2
    started = datetime.datetime.now().astimezone()
    stamp = commit()
    results: list[Result] = []
    failed: list[str] = []
    with contextlib.ExitStack() as stack:
        try:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-kv-")))
            cluster = LocalCluster(tmp / "cluster")
            stack.callback(cluster.stop)
            say("cluster", "starting 3 masters + 3 replicas")
            cluster.start()
            say("cluster", f"up on {cluster.ports}, masters {cluster.masters()}")
            stats = CommandStats(cluster.ports)
            stack.callback(stats.close)
            before = stats.read()
            masters = set(cluster.masters())
            time.sleep(5)
            idle = counted(before, stats.read(), masters)[0]
            say("cluster", f"idle, no liveroom: {sum(idle.values()) / 5:.1f} commands/s "
                           f"counted on the masters {idle or ''}")
            for n, phase in enumerate(todo, 1):
                try:
                    results.append(run_phase(n, phase, cluster, stats, args, nofile))
                except (RuntimeError, OSError, redis.RedisError) as e:
                    say(f"{n}:{phase.scenario}", f"FAILED: {e}")
                    failed.append(f"{phase.label}: {str(e).splitlines()[0]}")
        except KeyboardInterrupt:
            print("interrupted: the cluster, servers, nginx and clients are stopped",
                  file=sys.stderr)
            return 130
        except (RuntimeError, redis.RedisError, subprocess.SubprocessError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1

    print()
    print(f"command: {command}")
    print(f"commit:  {stamp}    date: {started:%Y-%m-%d %H:%M %Z}")
    print(f"machine: {versions()}, {redis_version()}")
    print(f"window:  {args.window:g} s after {args.warmup:g} s of warm-up per phase; "
          "commands counted by INFO commandstats, script-run commands included, "
          "replconf / replication ping / info left out; headline: the masters' sum")
    if "rooms" in args.scenarios:
        print("rooms:   a fixed rate per room in the rooms scenario "
              f"({args.room_rate:g} msg/s per room), so the rows compare room for room")
    print()
    print(table(results, args.top))
    print()
    for line in summary(results):
        print(line)
    notes = [f"{r.phase.label}: {n}" for r in results for n in r.notes]
    for note in notes:
        print(f"note: {note}")
    for f in failed:
        print(f"FAILED: {f}")
    if args.json:
        args.json.write_text(json.dumps({
            "command": command, "commit": stamp, "date": started.isoformat(),
            "machine": versions(), "args": {k: (str(v) if isinstance(v, Path) else v)
                                            for k, v in vars(args).items()},
            "failed": failed,
            "results": [{**asdict(r), "masters_per_s": r.masters_per_s,
                         "pulls_per_room": r.pulls_per_room, "per_pair": r.per_pair,
                         "all_per_s": r.all_per_s, "per_room": r.per_room,
                         "all_per_room": r.all_per_room} for r in results]}, indent=2))
    return 1 if failed else 0


def redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                         check=False).stdout.split()
    v = next((w.removeprefix("v=") for w in out if w.startswith("v=")), "?")
    return f"Redis {v}"


if __name__ == "__main__":
    sys.exit(main())
