"""What crowds of clients that never read leave behind, in the node and in the
host's kernel, round after round (issue 44).

Starts ``python -m liveroom serve`` (memory engine) on a free 127.0.0.1 port
with a short ``--write-timeout`` (so that a round lasts seconds) and the
node's ``--send-buffer`` (its default unless told: ``--send-buffer off``
measures the kernel's own sizing), fills one room with ``--messages``
messages of ``--size`` bytes (a poll's answer: about 60 KiB), then runs
``--rounds`` rounds, one after the other. In each, ``--clients`` connections,
each with a 4 KiB receive buffer, write ``--polls`` pipelined polls for the
room's recent messages and read nothing, until the node has cut them all at
its write deadline. Per round it prints:

- **TCP memory at the peak**: the host's, in pages, from /proc/net/sockstat
  ("TCP: ... mem"), its highest while the round's clients wait, less what it
  was before the round; against the kernel's pressure mark (the middle value
  of ``net.ipv4.tcp_mem``), past which every socket on the host is squeezed.
  It is the whole host's (other processes' sockets, and these clients' own
  receive buffers: a page or two each);
- **RSS after**: the node's, settled, once it holds none of the round's
  connections, and the round's clients it reset.

Target: the three figures of RSS after within 2 % of one another (what stays
is a high-water mark the next crowd reuses, not growth), and the peak of TCP
memory far below the pressure mark.

    python loadtest/bench_stalled.py
    python loadtest/bench_stalled.py --send-buffer off --clients 100
    python loadtest/bench_stalled.py --compiled-tree build/compiled

With ``--send-buffer off`` each of these clients can take about 4 MB of the
host's TCP memory: 1 000 of them reach the kernel's hard limit
(``tcp_mem``'s last value), where every TCP socket on the host, other
programs' too, is refused memory; measure it with a few clients. Loopback
only; bounded loops: each round lasts at most ``--write-timeout`` plus 45
seconds.
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
from kit.progress import say
from kit.provenance import commit, invocation, versions
from kit.servers import ADMIN_TOKEN, PUBLISHER_TOKEN, Server, liveroom_server

ROOM = "stalled"
RCVBUF = 4096
"""Each client's receive buffer: small, so the node's writes back up at once."""
SOCKSTAT = Path("/proc/net/sockstat")
TCP_MEM = Path("/proc/sys/net/ipv4/tcp_mem")
SAMPLE = 0.1
"""Seconds between two looks at the host's TCP memory during a round."""
WITHIN = 0.02
"""The RSS figures after each round must be within this of one another."""


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


def tcp_pages() -> int:
    """The pages of memory the host's TCP sockets hold now (/proc/net/sockstat)."""
    found = re.search(r"^TCP:.* mem (\d+)", SOCKSTAT.read_text(), re.M)
    assert found, "no TCP memory in /proc/net/sockstat"
    return int(found.group(1))


def pressure_mark() -> int:
    """Pages of TCP memory past which the kernel squeezes every socket
    (``net.ipv4.tcp_mem``'s middle value)."""
    return int(TCP_MEM.read_text().split()[1])


def round_of(server: Server, args: argparse.Namespace, number: int) -> tuple[int, int]:
    """One round: the crowd, its peak of TCP memory, and the node once the
    deadline cut them all. Returns the peak (pages above the round's start)
    and the node's RSS after."""
    name = f"round {number}"
    before = tcp_pages()
    started = time.monotonic()
    clients: list[socket.socket] = []
    for i in range(args.clients):
        clients.append(stalled_client(server.port, args.polls))
        if (i + 1) % 250 == 0:
            say("liveroom", name, f"{i + 1}/{args.clients} clients written")
    # The node answers as it reads; the kernel takes what the socket's buffer
    # allows, and each connection's deadline runs once its own buffer backs
    # up. The peak comes before the first deadline; the round ends when the
    # node holds none of the crowd (at most 30 s past the deadline).
    peak = before
    end = started + args.write_timeout + 30
    while time.monotonic() < end:
        peak = max(peak, tcp_pages())
        if (time.monotonic() > started + args.write_timeout
                and open_connections(server.port) <= 1):  # /metrics' own
            break
        time.sleep(SAMPLE)
    gone = time.monotonic() - started
    time.sleep(1.1)  # a sweep: it hands freed memory back
    after = rss_settled(server.rss)
    cut = reset(clients)
    for sock in clients:
        sock.close()
    left = open_connections(server.port) - 1
    say("liveroom", name,
        f"TCP memory at the peak +{peak - before} pages ({(peak - before) * 4096 / 2**20:.0f} "
        f"MiB, {(peak - before) / args.clients:.1f} pages a client; host {peak} of the "
        f"{pressure_mark()} pressure mark); RSS after {after / 2**20:.1f} MiB; "
        f"{cut} of {args.clients} clients reset, {left} connections left, "
        f"all cut {gone:.1f} s after the first wrote")
    return peak - before, after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000,
                        help="connections that never read, each round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="crowds, one after the other (default 3)")
    parser.add_argument("--polls", type=int, default=100,
                        help="pipelined polls each client writes (default 100: about 6 MB "
                             "of answers, more than any send buffer takes)")
    parser.add_argument("--messages", type=int, default=20,
                        help="messages in the room (default 20)")
    parser.add_argument("--size", type=int, default=3000,
                        help="bytes of each message (default 3000: a poll's answer is "
                             "about 60 KiB)")
    parser.add_argument("--write-timeout", type=float, default=5.0,
                        help="the server's --write-timeout in seconds (default 5)")
    parser.add_argument("--send-buffer", default=None, metavar="BYTES|off",
                        help="the server's --send-buffer (default: not passed, the "
                             "node's own default)")
    add_compiled_tree(parser)
    args = parser.parse_args(argv)
    env = server_env(args.compiled_tree)
    nofile = raise_nofile(args.clients + 200)
    command = invocation("loadtest/bench_stalled.py", argv)
    extra = ["--write-timeout", f"{args.write_timeout:g}"]
    if args.send_buffer is not None:
        extra += ["--send-buffer", args.send_buffer]
    # (Loopback clients sending no X-Forwarded-For are not capped per address:
    # loopback is a trusted proxy by default.)
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
        say("liveroom", "idle", f"{'compiled' if env else 'pure'} build, send buffer "
            f"{args.send_buffer or 'default'}: RSS {idle / 2**20:.1f} MiB, host TCP memory "
            f"{tcp_pages()} pages (pressure mark {pressure_mark()})")
        rounds = [round_of(server, args, number) for number in range(1, args.rounds + 1)]

    rss = [after for _, after in rounds]
    spread = (max(rss) - min(rss)) / min(rss)
    print("\n| round | TCP memory at the peak | RSS after |\n| --- | --- | --- |")
    for number, (peak, after) in enumerate(rounds, 1):
        print(f"| {number} | +{peak} pages ({peak * 4096 / 2**20:.0f} MiB) | "
              f"{after / 2**20:.1f} MiB ({(after - idle) / idle * 100:+.1f} % of idle) |")
    met = spread <= WITHIN
    print(f"\nRSS after the rounds: {spread * 100:.2f} % apart: "
          f"{'within' if met else 'NOT within'} {WITHIN * 100:g} % (idle "
          f"{idle / 2**20:.1f} MiB); the highest peak of TCP memory "
          f"{max(peak for peak, _ in rounds) / pressure_mark() * 100:.0f} % of the pressure "
          f"mark")
    print(f"command: {command}\ncommit: {commit()}, {versions()}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
