"""How long the node stalls when thousands of held polls close at once.

Starts ``python -m liveroom serve`` from this checkout (memory engine) on a
free 127.0.0.1 port, opens ``--polls`` connections each holding one poll on
a room of its own (made-up names, cursor ``("0", 0, 0)``; ``--real``: rooms
that exist, created by a send each beforehand), then closes them all at once
(clients gone together: a load balancer restarting, a network partition) and
right away polls a room that exists, a first poll, ``--probes`` times in a
row. Prints the first probe's latency (it waits for whatever work the closes
left on the node's loop; target at most 100 ms) and the worst.

Each closed poll lets go of its room in the node's cache (recvsvr); past
``--rooms-max`` rooms letting go evicts. Before issue 31, each of those
rescanned the rooms still busy, quadratically: 12 000 polls closed at once
stalled the loop for about two minutes.

    python loadtest/bench_close.py
    python loadtest/bench_close.py --polls 3100 --rooms-max 3000 --real
    python loadtest/bench_close.py --reset
    python loadtest/bench_close.py --compiled-tree build/compiled

Loopback only; the run stops by itself (about half a minute).
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import socket
import struct
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench_junk_rooms import open_polls
from kit.builds import add_compiled_tree, server_env
from kit.machine import raise_nofile
from kit.provenance import commit, invocation
from kit.servers import PUBLISHER_TOKEN, liveroom_server


def create_rooms(port: int, count: int) -> dict[str, str]:
    """Rooms ``live-0`` … by a send each (the publisher's token: no new-room
    limit); their epochs."""
    epochs = {}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for i in range(count):
        conn.request("POST", f"/v1/rooms/live-{i}/messages", body=b'{"uid": "s", "body": "hi"}',
                     headers={"Content-Type": "application/json",
                              "Authorization": f"Bearer {PUBLISHER_TOKEN}"})
        resp = conn.getresponse()
        epochs[f"live-{i}"] = json.loads(resp.read())["epoch"]
    conn.close()
    return epochs


def first_poll_ms(port: int, rounds: int) -> tuple[list[float], list[int]]:
    """``rounds`` first polls of the room ``real`` in a row: each one's latency
    and status (503 while the node's cache is full of rooms that exist)."""
    took, statuses = [], []
    for i in range(rounds):
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/rooms/real/poll"
                                        f"?uid=probe{i}", timeout=600) as resp:
                resp.read()
                statuses.append(resp.status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
        took.append((time.perf_counter() - start) * 1000)
    return took, statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, default=12000,
                        help="held polls closed at once (default 12000)")
    parser.add_argument("--rooms-max", type=int, default=None,
                        help="the server's --rooms-max (default: the server's own)")
    parser.add_argument("--real", action="store_true",
                        help="hold the polls in rooms that exist (one send each first)")
    parser.add_argument("--probes", type=int, default=20, help="probe polls after (20)")
    parser.add_argument("--reset", action="store_true",
                        help="close with a TCP reset (the node reads no end of stream, "
                        "so answers nothing) instead of a FIN")
    add_compiled_tree(parser)
    args = parser.parse_args(argv)
    env = server_env(args.compiled_tree)
    nofile = raise_nofile(args.polls + 300)
    if nofile < args.polls + 300:
        print(f"open-files limit {nofile}: a process cannot hold {args.polls} sockets here",
              file=sys.stderr)
        return 2
    command = invocation("loadtest/bench_close.py", argv)
    extra = ["--rooms-max", str(args.rooms_max)] if args.rooms_max else []
    with tempfile.TemporaryDirectory() as tmp, \
            liveroom_server(Path(tmp), nofile, "off", None, 1, extra=extra,
                            env=env) as server:
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{server.port}/v1/rooms/real/messages",
            data=b'{"uid": "s", "body": "hi"}',
            headers={"Content-Type": "application/json"}), timeout=10).read()
        epochs = create_rooms(server.port, args.polls) if args.real else None
        socks, refused = open_polls(server.port, args.polls, epochs)
        time.sleep(3)  # the holds settle (pulls, watchers)
        before = first_poll_ms(server.port, 3)
        started = time.perf_counter()
        for sock in socks:
            if args.reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        closing = (time.perf_counter() - started) * 1000
        after = first_poll_ms(server.port, args.probes)
    kind = "rooms that exist" if args.real else "made-up rooms"
    print(f"\n{args.polls} polls on {kind}: {args.polls - refused} held, {refused} refused "
          f"(503); {'compiled' if env else 'pure'} build; --rooms-max "
          f"{args.rooms_max or 'default'}; closed with "
          f"{'a reset' if args.reset else 'a FIN'}")
    print(f"a first poll before: worst of 3 {max(before[0]):.1f} ms, status {before[1]}")
    print(f"all closed in {closing:.0f} ms (client side); the first poll right after: "
          f"{after[0][0]:.1f} ms (target <= 100 ms), worst of {args.probes} "
          f"{max(after[0]):.1f} ms, statuses {sorted(set(after[1]))}")
    print(f"command: {command}\ncommit: {commit()}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
