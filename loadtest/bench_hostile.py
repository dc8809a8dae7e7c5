"""The regression guard of issue 44: every route of the cost table
(``proxy/route_costs.py``) under its worst case, one line each.

Starts ``python -m liveroom serve`` (the memory engine in ``open`` mode by
default; ``--store redis://...`` runs it on Redis in ``ticket`` mode) on a
free 127.0.0.1 port, then for each row of the table, one after the other:

1. a flood of ``--requests`` requests, each naming a new made-up room and a
   new uid (in ``ticket`` mode the one any-room ticket's), ``--clients`` at a
   time, a connection each (a hostile client does not keep its connections
   alive for us), made from the row's sample request as the hostile suite
   makes them (``tests/route_attacks.py``): with the row's credential where
   anybody may call it, without where it is the backend's or the operators';
2. the node's CPU time and its RSS (settled) before and after;
3. a probe: a real listener's poll in a real room brings its message, and its
   like is counted.

Per route it prints the bound (the row's ``cpu_us`` and ``keeps``, and
whether the flood may create rooms), what the flood cost (µs of the node's
CPU and bytes of its RSS per request, rooms it left in the store on Redis),
and PASS or FAIL: FAIL when the CPU per request passes ``cpu_us``, the RSS
per request ``keeps`` plus 2 KiB (the allocator's and the URL caches' share,
as in the suite), when a row whose room must exist takes a request for a
made-up one (a 2xx), when the store keeps a made-up room the row may not
create, or when the probe fails.

    python loadtest/bench_hostile.py
    python loadtest/bench_hostile.py --compiled-tree build/compiled
    python loadtest/bench_hostile.py --store redis://127.0.0.1:6379/0 --routes likes,messages

Loopback only; each route's flood is bounded by ``--requests``; the run
stops by itself. The stalled clients of the last round (clients that never
read) are ``bench_stalled.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
import tempfile
import time
from pathlib import Path

from bench_front import rss_settled
from kit import REPO
from kit.builds import add_compiled_tree, server_env
from kit.provenance import commit, invocation
from kit.servers import ADMIN_TOKEN, PUBLISHER_TOKEN, Server, liveroom_server

sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
from route_attacks import (
    TICKET_KEY,
    Credentials,
    exchange,
    is_public,
    request_bytes,
)

from proxy.route_costs import COSTS, CREATES, EXISTS, RouteCost

NOISE = 2048
"""Bytes of RSS a request may seem to keep beyond its row's ``keeps``."""


async def flood(port: int, row: RouteCost, creds: Credentials, requests: int, clients: int,
                tag: str) -> dict[int, int]:
    """The flood of one row; how many answers of each status."""
    given = creds if is_public(row) else None
    statuses: dict[int, int] = {}
    queue = iter(range(requests))

    async def client() -> None:
        for n in queue:
            uid = "mallory" if creds.ticket_mode else f"mallory{n}"
            try:
                status, _, _ = await exchange(port, request_bytes(
                    row, f"{tag}-{n}", uid, given), timeout=30)
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                status = 0
            statuses[status] = statuses.get(status, 0) + 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return statuses


async def probe(port: int, creds: Credentials) -> bool:
    """A real listener is served: its poll brings the room's message, its like counts."""
    room = "probe-room"
    publisher = f"Authorization: Bearer {PUBLISHER_TOKEN}\r\n"
    body = b'{"uid": "host", "body": "still here"}'
    status, _, _ = await exchange(port, (
        f"POST /v1/rooms/{room}/messages HTTP/1.1\r\nHost: x\r\n{publisher}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n").encode() + body)
    if status != 201:
        return False
    auth = "".join(f"{k}: {v}\r\n" for k, v in creds.header("listener", "prober").items())
    uid = "" if creds.ticket_mode else "uid=prober&"
    for _ in range(20):  # a node that cached the room as absent learns it exists
        status, _, answer = await exchange(port, (
            f"GET /v1/rooms/{room}/poll?{uid}recent=5 HTTP/1.1\r\nHost: x\r\n{auth}"
            "Connection: close\r\n\r\n").encode())
        if status == 200 and b"still here" in answer:
            break
        await asyncio.sleep(0.1)
    else:
        return False
    like = b'{"count": 1}' if creds.ticket_mode else b'{"uid": "prober", "count": 1}'
    status, _, _ = await exchange(port, (
        f"POST /v1/rooms/{room}/likes HTTP/1.1\r\nHost: x\r\n{auth}"
        f"Content-Type: application/json\r\nContent-Length: {len(like)}\r\n"
        "Connection: close\r\n\r\n").encode() + like)
    return status == 202


def made_up_rooms(store: str | None, tag: str) -> int:
    """Rooms of the flood the store keeps anything of (Redis only; -1: not known)."""
    if not store or not store.startswith("redis"):
        return -1
    import redis

    client = redis.Redis.from_url(store)
    rooms = {key.decode().split("{")[-1].split("}")[0]
             for key in client.scan_iter(match=f"*{tag}-*", count=1000)}
    client.close()
    return len(rooms)


def measure(server: Server, row: RouteCost, creds: Credentials, args: argparse.Namespace,
            index: int) -> tuple[str, bool]:
    tag = f"made-up-{index}"
    rss_before = rss_settled(server.rss, 1.0)
    cpu_before = server.cpu()
    began = time.monotonic()
    statuses = asyncio.run(flood(server.port, row, creds, args.requests, args.clients, tag))
    took = time.monotonic() - began
    cpu = (server.cpu() - cpu_before) / args.requests * 1e6
    rss = (rss_settled(server.rss, 1.5) - rss_before) / args.requests
    rooms = made_up_rooms(args.store, tag)
    may_create = row.room == CREATES and is_public(row)
    served = asyncio.run(probe(server.port, creds))
    errors = sum(n for status, n in statuses.items() if status >= 500 and status != 503)
    # A row whose room must exist takes none of the made-up ones.
    taken = sum(n for status, n in statuses.items() if 200 <= status < 300)
    ok = (rss <= row.keeps + NOISE and cpu <= row.cpu_us and served and errors == 0
          and (rooms <= 0 or may_create) and not (row.room == EXISTS and taken))
    answers = " ".join(f"{status}x{n}" for status, n in sorted(statuses.items()))
    bound = (f"<= {row.cpu_us} us, keeps <= {row.keeps + NOISE} B"
             + ("" if may_create else ", no room"))
    stored = "" if rooms < 0 else f", {rooms} rooms stored"
    line = (f"{row.route:<44} {bound:<32} {cpu:7.0f} us {rss:7.0f} B{stored}  "
            f"[{answers}, {args.requests / took:,.0f}/s, probe {'ok' if served else 'FAILED'}]"
            f"  {'PASS' if ok else 'FAIL'}")
    return line, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000,
                        help="made-up rooms each route's flood names (default 2000)")
    parser.add_argument("--clients", type=int, default=8,
                        help="requests in flight at once (default 8)")
    parser.add_argument("--store", default=None,
                        help="a redis:// URL: the node runs on it in ticket mode (default: "
                        "the memory engine in open mode)")
    parser.add_argument("--routes", default="",
                        help="only the routes whose text contains one of these "
                        "comma-separated words (default: every route)")
    add_compiled_tree(parser)
    args = parser.parse_args(argv)
    words = [w for w in args.routes.split(",") if w]
    rows = [row for row in COSTS if not words or any(w in row.route for w in words)]
    extra = ["--write-timeout", "5"]
    if args.store:
        extra += ["--auth", "ticket", "--ticket-key", TICKET_KEY]  # after --auth open
    creds = Credentials(ADMIN_TOKEN, PUBLISHER_TOKEN, ticket_mode=bool(args.store),
                        now=time.time())
    print(f"# {invocation('loadtest/bench_hostile.py', argv)}")
    print(f"# commit {commit()}, {datetime.date.today()}, "
          f"{'compiled' if args.compiled_tree else 'pure'} build, "
          f"{'redis, ticket mode' if args.store else 'memory, open mode'}, "
          f"{args.requests} requests a route, {args.clients} at a time")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp, \
            liveroom_server(Path(tmp), 4096, None, args.store, 1, extra=extra,
                            env=server_env(args.compiled_tree)) as server:
        for index, row in enumerate(rows):
            line, ok = measure(server, row, creds, args, index)
            failed += not ok
            print(line, flush=True)
            server.check_alive()
    print(f"# {len(rows) - failed} of {len(rows)} routes within their bounds")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
