"""What held polls on made-up rooms cost a node that nobody sends to.

Starts ``python -m liveroom serve`` on a free 127.0.0.1 port (the memory
engine, or ``--store redis-server`` for a Redis this run starts), opens
``--polls`` connections each holding one poll on a room of its own that does
not exist (cursor ``("0", 0, 0)``, ``timeout=60``, a uid each), then for
``--seconds`` measures:

- the server's CPU, in % of one core (target: at most 5 % at 12 000 polls);
- for Redis, the commands the store served a second;
- a real listener's first-poll latency (median and worst of 50 polls of a
  room that exists), beside the held junk.

Past ``--rooms-max`` rooms with held polls a poll for a new room is refused
(503): the run counts those refusals; pass ``--rooms-max`` above ``--polls``
to hold them all.

    python loadtest/bench_junk_rooms.py
    python loadtest/bench_junk_rooms.py --polls 12000 --rooms-max 20000
    python loadtest/bench_junk_rooms.py --store redis-server --rooms-max 20000

Loopback only; the run stops by itself (about a minute).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from kit.machine import raise_nofile
from kit.provenance import commit, invocation
from kit.servers import Server, liveroom_server, redis_server


def held_request(i: int, epochs: dict[str, str] | None = None) -> bytes:
    """The ``i``-th held poll: on ``junk-i``, a room that does not exist, or
    with ``epochs`` (room: epoch) on the ``i``-th room there, caught up at seq 1."""
    if epochs is None:
        room, cursor = f"junk-{i}", "epoch=0&seq=0&iseq=0"
    else:
        room = f"live-{i}"
        cursor = f"epoch={epochs[room]}&seq=1&iseq=1"
    return (f"GET /v1/rooms/{room}/poll?uid=u{i}&{cursor}&timeout=60 "
            f"HTTP/1.1\r\nHost: bench\r\n\r\n").encode()


def open_polls(port: int, count: int, epochs: dict[str, str] | None = None,
               ) -> tuple[list[socket.socket], int]:
    """``count`` held polls (see :func:`held_request`); returns the sockets
    and how many were refused."""
    socks: list[socket.socket] = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(held_request(i, epochs))
        socks.append(sock)
        if (i + 1) % 2000 == 0:
            print(f"  {i + 1}/{count} polls sent", flush=True)
    # A refused poll is answered at once; a held one says nothing for 60 s.
    time.sleep(2)
    refused = 0
    sel = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
    for key, _ in sel.select(timeout=1):
        sock = key.fileobj
        assert isinstance(sock, socket.socket)
        with contextlib.suppress(OSError):
            refused += b" 503 " in sock.recv(4096)
    sel.close()
    return socks, refused


def first_poll_ms(port: int, rounds: int = 50) -> list[float]:
    took = []
    for i in range(rounds):
        start = time.perf_counter()
        with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/v1/rooms/real/poll?uid=r{i}", timeout=30) as resp:
            resp.read()
        took.append((time.perf_counter() - start) * 1000)
    return took


def redis_commands(port: int) -> int:
    out = subprocess.run(["redis-cli", "-p", str(port), "info", "stats"], capture_output=True,
                         text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":")[1])
    return 0


@contextlib.contextmanager
def maybe_redis(tmp: Path, wanted: bool) -> Iterator[Server | None]:
    if not wanted:
        yield None
        return
    with redis_server(tmp) as redis:
        yield redis


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, default=12000,
                        help="held polls on made-up rooms (default 12000)")
    parser.add_argument("--seconds", type=float, default=20, help="measured window (20)")
    parser.add_argument("--rooms-max", type=int, default=None,
                        help="the server's --rooms-max (default: the server's own)")
    parser.add_argument("--store", choices=["memory", "redis-server"], default="memory")
    args = parser.parse_args(argv)
    nofile = raise_nofile(args.polls + 300)  # this client's, and the server's
    if nofile < args.polls + 300:
        print(f"open-files limit {nofile}: a process cannot hold {args.polls} sockets here",
              file=sys.stderr)
        return 2
    command = invocation("loadtest/bench_junk_rooms.py", argv)
    extra = ["--rooms-max", str(args.rooms_max)] if args.rooms_max else []
    with tempfile.TemporaryDirectory() as tmp, \
            maybe_redis(Path(tmp), args.store == "redis-server") as redis:
        store = f"redis://127.0.0.1:{redis.port}/0" if redis is not None else None
        with liveroom_server(Path(tmp), nofile, "off", store, 1, extra=extra) as server:
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{server.port}/v1/rooms/real/messages",
                data=b'{"uid": "s", "body": "hi"}',
                headers={"Content-Type": "application/json"}), timeout=10).read()
            # A listener of the real room holds a poll through the run (the room
            # is kept like any room with listeners).
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/rooms/real/poll"
                                        "?uid=keeper", timeout=10) as resp:
                at = json.load(resp)
            keeper = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            keeper.sendall(f"GET /v1/rooms/real/poll?uid=keeper&epoch={at['epoch']}"
                           f"&seq={at['seq']}&iseq={at['iseq']}&timeout=60 HTTP/1.1\r\n"
                           "Host: bench\r\n\r\n".encode())
            socks, refused = open_polls(server.port, args.polls)
            socks.append(keeper)
            time.sleep(3)  # let the first pulls and holds settle
            cpu0, t0 = server.cpu(), time.monotonic()
            cmd0 = redis_commands(redis.port) if redis is not None else 0
            time.sleep(args.seconds)
            cpu = (server.cpu() - cpu0) / (time.monotonic() - t0) * 100
            rate = ((redis_commands(redis.port) - cmd0) / args.seconds
                    if redis is not None else None)
            latency = first_poll_ms(server.port)
            for sock in socks:
                sock.close()
    print(f"\n{args.polls} polls on made-up rooms, {refused} refused (503), "
          f"{args.polls - refused} held; store {args.store}")
    print(f"server CPU at rest: {cpu:.1f} % of a core (target <= 5 %)")
    if rate is not None:
        print(f"Redis commands: {rate:.0f}/s")
    print(f"a real listener's first poll: median {statistics.median(latency):.1f} ms, "
          f"worst {max(latency):.1f} ms")
    print(f"command: {command}\ncommit: {commit()}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
