"""What a pipelining client that never reads costs the listener front.

Starts ``python -m liveroom serve`` (memory engine) on a free 127.0.0.1 port,
then measures the server's RSS in three states:

1. **base**: no client;
2. **held**: ``--connections`` connections, each holding one long poll (a
   cursor at the room's head, ``timeout=60``): what a listener costs;
3. **pipelined**: the held connections closed, ``--connections`` new ones,
   each writing ``--requests`` pipelined polls at once and reading nothing
   (a write that does not drain within 2 s counts as the server having
   stopped reading).

It prints the RSS of each state and **KiB per pipelining connection above a
held poll** = (pipelined - held) / connections; the target is at most 64 KiB.
It also says how many pipelining connections the server closed (a client
pipelining more than 32 KiB ahead of its answers is refused).

    python loadtest/bench_front.py
    python loadtest/bench_front.py --connections 300 --requests 3000

To measure another checkout's server, run it with ``PYTHONPATH`` naming that
checkout. Loopback only; the run stops by itself (about a minute).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import socket
import tempfile
import time
import urllib.request
from pathlib import Path

from kit.machine import raise_nofile
from kit.provenance import commit, invocation
from kit.servers import liveroom_server

ROOM = "pipe"


def rss_settled(read: object, seconds: float = 3.0) -> int:
    """The server's RSS once it stopped moving (sampled for ``seconds``)."""
    assert callable(read)
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(int(read()))
        time.sleep(0.25)
    return samples[-1]


def head(port: int) -> dict[str, object]:
    with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/v1/rooms/{ROOM}/poll?uid=bench", timeout=10) as resp:
        doc: dict[str, object] = json.load(resp)
    return doc


def held_request(cursor: dict[str, object], uid: str) -> bytes:
    return (f"GET /v1/rooms/{ROOM}/poll?uid={uid}&epoch={cursor['epoch']}&seq={cursor['seq']}"
            f"&iseq={cursor['iseq']}&timeout=60 HTTP/1.1\r\nHost: bench\r\n\r\n").encode()


def open_many(port: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        socks.append(sock)
    return socks


def still_open(socks: list[socket.socket]) -> int:
    """Connections the server has not closed (a closed one reads EOF or errors)."""
    alive = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            alive += sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=300,
                        help="connections in each state (default 300)")
    parser.add_argument("--requests", type=int, default=3000,
                        help="polls each pipelining connection writes (default 3000)")
    args = parser.parse_args(argv)
    nofile = raise_nofile(2 * args.connections + 200)
    command = invocation("loadtest/bench_front.py", argv)
    with tempfile.TemporaryDirectory() as tmp, \
            liveroom_server(Path(tmp), nofile, "off", None, 1) as server:
        cursor = head(server.port)
        base = rss_settled(server.rss)
        print(f"base: RSS {base / 2**20:.1f} MiB", flush=True)

        held = open_many(server.port, args.connections)
        for i, sock in enumerate(held):
            sock.sendall(held_request(cursor, f"h{i}"))
        held_rss = rss_settled(server.rss)
        print(f"held: {args.connections} held polls, RSS {held_rss / 2**20:.1f} MiB "
              f"({(held_rss - base) / args.connections / 1024:.1f} KiB each)", flush=True)
        for sock in held:
            sock.close()
        del held
        gc.collect()
        time.sleep(1)

        piped = open_many(server.port, args.connections)
        blocked = 0
        for i, sock in enumerate(piped):
            stream = held_request(cursor, f"p{i}") * args.requests
            sock.settimeout(2)
            try:
                sock.sendall(stream)
            except TimeoutError:
                blocked += 1  # the server stopped reading this client
            except OSError:
                pass  # refused and closed while still sending
            if (i + 1) % 50 == 0:
                print(f"  {i + 1}/{args.connections} pipelining connections written", flush=True)
        piped_rss = rss_settled(server.rss)
        alive = still_open(piped)
        per = (piped_rss - held_rss) / args.connections / 1024
        print(f"pipelined: {args.connections} connections x {args.requests} polls, "
              f"RSS {piped_rss / 2**20:.1f} MiB; {alive} still open, {blocked} blocked "
              f"the writer", flush=True)
        for sock in piped:
            sock.close()
    verdict = "meets" if per <= 64 else "misses"
    print(f"\n{per:.1f} KiB per pipelining connection above a held poll "
          f"({verdict} the 64 KiB target)")
    print(f"command: {command}\ncommit: {commit()}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
