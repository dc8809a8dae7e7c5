"""What clients that never read their answers cost a node, before and after
its write deadline (``--write-timeout``) lets them go.

Starts ``python -m liveroom serve`` (memory engine) on a free 127.0.0.1 port
with ``--write-timeout``, fills one room with ``--messages`` messages of
``--size`` bytes, then measures the server's RSS and its open connections
(``liveroom_connections`` in /metrics) in three states:

1. **idle**: the room filled and read once, no client;
2. **stalled**: ``--clients`` connections, each with a small receive buffer
   (4 KiB) writing ``--polls`` pipelined polls for the room's recent messages
   and reading nothing
   (the peak RSS while the first deadlines are still to pass);
3. **after**: the node holds none of them any more (each is cut
   ``--write-timeout`` after the node found it not reading), plus a sweep.

Target: after the deadline, the node is back within 5 % of its idle RSS and
holds none of these connections.

    python loadtest/bench_hostile.py
    python loadtest/bench_hostile.py --clients 200 --write-timeout 10
    python loadtest/bench_hostile.py --compiled-tree build/compiled

``--write-timeout 0`` passes no such flag (to measure a checkout without it:
run this script from that checkout; the server is always the one beside the
script). Loopback only; bounded loops; the run stops by itself (each round
at most ``--write-timeout`` plus 40 seconds).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import select
import socket
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench_front import rss_settled
from kit.builds import add_compiled_tree, server_env
from kit.machine import raise_nofile
from kit.provenance import commit, invocation
from kit.servers import ADMIN_TOKEN, PUBLISHER_TOKEN, Server, liveroom_server

ROOM = "stalled"
RCVBUF = 4096
"""Each client's receive buffer: small, so the node's writes back up at once."""


def fill(port: int, messages: int, size: int) -> None:
    """``messages`` messages of ``size`` bytes in the room (as the backend: not rate limited)."""
    for i in range(messages):
        body = json.dumps({"uid": f"s{i}", "body": "x" * size}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/rooms/{ROOM}/messages", data=body, method="POST",
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {PUBLISHER_TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 201


def open_connections(port: int) -> int:
    """The node's open connections, as its /metrics says."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"/metrics answered {exc.code}: {exc.read().decode()}") from None
    found = re.search(r"^liveroom_connections (\S+)$", text, re.M)
    assert found, "no liveroom_connections in /metrics"
    return int(float(found.group(1)))


def reset(socks: list[socket.socket]) -> int:
    """Connections the server reset (or closed both ways), seen without reading them."""
    watch = select.poll()
    for sock in socks:
        watch.register(sock, select.POLLERR | select.POLLHUP)
    return sum(1 for _, events in watch.poll(0) if events & (select.POLLERR | select.POLLHUP))


def stalled_client(port: int, polls: int) -> socket.socket:
    """A connection that asks for ``polls`` answers and will read none."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # before connect: the window
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    sock.sendall((f"GET /v1/rooms/{ROOM}/poll?uid=u&recent=100 HTTP/1.1\r\n"
                  f"Host: bench\r\n\r\n").encode() * polls)
    return sock


def stall(server: Server, args: argparse.Namespace, idle: int, round_: int) -> tuple[int, int]:
    """One round: the stalled clients, their peak, and the node after their
    deadline (its RSS and open connections)."""
    print(f"round {round_}:", flush=True)
    started = time.monotonic()
    clients: list[socket.socket] = []
    for i in range(args.clients):
        clients.append(stalled_client(server.port, args.polls))
        if (i + 1) % 250 == 0:
            print(f"  {i + 1}/{args.clients} clients written", flush=True)
    written = time.monotonic() - started
    # The node answers as it reads: the peak comes while the first
    # deadlines are still to pass.
    peak, stalled_open = 0, 0
    while time.monotonic() < started + (args.write_timeout or 30.0) - 0.5:
        rss = server.rss()
        if rss > peak:
            peak, stalled_open = rss, open_connections(server.port) - 1  # less /metrics'
        time.sleep(0.25)
    print(f"stalled (all written in {written:.1f} s): peak RSS {peak / 2**20:.1f} MiB "
          f"(+{(peak - idle) / 2**20:.1f} MiB, {(peak - idle) / args.clients / 1024:.0f} KiB "
          f"a client), {stalled_open} connections open then", flush=True)

    deadline = args.write_timeout or 30.0
    # Each deadline runs from when the node found its client not reading,
    # which may be seconds after the client wrote on a busy machine: wait
    # until the node holds none of them (at most 30 s more), then for a sweep
    # (1 s, which hands freed memory back).
    time.sleep(max(0.0, started + deadline - time.monotonic()))
    while open_connections(server.port) > 1 and time.monotonic() < started + deadline + 30:
        time.sleep(0.25)
    gone = time.monotonic() - started
    time.sleep(1.1)
    after = rss_settled(server.rss)
    after_open = open_connections(server.port) - 1
    cut = reset(clients)
    print(f"after the deadline ({deadline:g} s; the last client cut {gone:.1f} s after the "
          f"first wrote): RSS {after / 2**20:.1f} MiB "
          f"({(after - idle) / idle * 100:+.1f} % of idle), {after_open} connections "
          f"open on the node, {cut} of {args.clients} clients reset", flush=True)
    for sock in clients:
        sock.close()
    return after, after_open


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000,
                        help="connections that never read (default 1000)")
    parser.add_argument("--polls", type=int, default=100,
                        help="pipelined polls each writes (default 100: about 6 MB of "
                             "answers, more than the kernel buffers take)")
    parser.add_argument("--messages", type=int, default=20,
                        help="messages in the room (default 20)")
    parser.add_argument("--size", type=int, default=3000,
                        help="bytes of each message (default 3000: a poll's answer is "
                             "about 60 KiB)")
    parser.add_argument("--write-timeout", type=float, default=10.0,
                        help="the server's --write-timeout in seconds (default 10; 0: not "
                             "passed)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="crowds of stalled clients, one after the other (default 2: "
                             "the second shows whether what stays after the first is kept "
                             "or reused)")
    add_compiled_tree(parser)
    args = parser.parse_args(argv)
    env = server_env(args.compiled_tree)
    nofile = raise_nofile(args.clients + 200)
    command = invocation("loadtest/bench_hostile.py", argv)
    # (Loopback clients sending no X-Forwarded-For are not capped per address:
    # loopback is a trusted proxy by default.)
    extra = ["--write-timeout", f"{args.write_timeout:g}"] if args.write_timeout else []
    with tempfile.TemporaryDirectory() as tmp, \
            liveroom_server(Path(tmp), nofile, "off", None, 1, extra=extra,
                            env=env) as server:
        fill(server.port, args.messages, args.size)
        # One poll as the clients' first: what it leaves (the room's answer
        # bytes, kept for the next reader) belongs to the idle node.
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/rooms/{ROOM}/poll"
                                    f"?uid=u&recent=100", timeout=10) as resp:
            resp.read()
        idle = rss_settled(server.rss)
        print(f"idle ({'compiled' if env else 'pure'} build): RSS {idle / 2**20:.1f} MiB, "
              f"{open_connections(server.port)} connections", flush=True)

        after, after_open = idle, 0
        for round_ in range(1, args.rounds + 1):
            after, after_open = stall(server, args, idle, round_)
    met = after <= idle * 1.05 and after_open == 0
    print(f"\n{'meets' if met else 'misses'} the target (within 5 % of idle, no connection "
          f"left)")
    print(f"command: {command}\ncommit: {commit()}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
