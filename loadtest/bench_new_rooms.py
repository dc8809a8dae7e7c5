"""How many rooms one ticket creates with sends all in flight at once.

Starts a Redis of its own and ``python -m liveroom serve`` over it in
``ticket`` mode (its defaults otherwise: ``--rooms-per-uid 10/m,100/h``,
``--rooms-per-address 100/m``, ``--rooms-per-node 600/m``), mints one
any-room ticket, and sends ``--sends`` messages with it to as many new rooms,
every one on a connection of its own and all at once (each send's request
goes out before any answer is read). Then it counts the rooms Redis holds
(``lr:{ROOM}:meta`` keys) and the answers by status.

Target: exactly the per-uid limit (10) of rooms, every other send a 429.
(Before the new rooms were counted at admission, 1 995-1 997 of 2 000 were
created.)

    python loadtest/bench_new_rooms.py
    python loadtest/bench_new_rooms.py --sends 5000

Loopback only; the run takes a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import redis.asyncio as aioredis
from kit.machine import raise_nofile
from kit.provenance import commit, invocation
from kit.servers import liveroom_server, redis_server

from proxy.tickets import mint

KEY = "bench-ticket-key-0123456789abcdef-new-rooms"


async def burst(port: int, ticket: str, sends: int) -> Counter[int]:
    """``sends`` sends with ``ticket`` to ``sends`` new rooms, all in flight
    together; the answers' statuses."""
    started = asyncio.Event()
    ready = 0

    async def one(session: aiohttp.ClientSession, i: int) -> int:
        nonlocal ready
        ready += 1
        if ready == sends:
            started.set()
        await started.wait()
        async with session.post(f"http://127.0.0.1:{port}/v1/rooms/burst-{i}/messages",
                                data=json.dumps({"body": "hi"}),
                                headers={"Authorization": f"Bearer {ticket}",
                                         "Content-Type": "application/json"}) as resp:
            await resp.read()
            return resp.status

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        return Counter(await asyncio.gather(*(one(session, i) for i in range(sends))))


async def rooms_in(port: int) -> int:
    client = aioredis.Redis(port=port)
    try:
        return len([key async for key in client.scan_iter(match="lr:{burst-*}:meta",
                                                          count=1000)])
    finally:
        await client.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sends", type=int, default=2000,
                        help="sends from one ticket, each to a new room (default 2000)")
    args = parser.parse_args(argv)
    nofile = raise_nofile(2 * args.sends + 300)  # this client's, and the server's
    if nofile < args.sends + 300:
        print(f"open-files limit {nofile}: cannot hold {args.sends} connections here",
              file=sys.stderr)
        return 2
    command = invocation("loadtest/bench_new_rooms.py", argv)
    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as redis:
        store = f"redis://127.0.0.1:{redis.port}/0"
        extra = ["--auth", "ticket", "--ticket-key", KEY]
        with liveroom_server(Path(tmp), nofile, "off", store, 1, extra=extra) as server:
            ticket = mint(KEY, "maker", ttl=600)
            start = time.perf_counter()
            statuses = asyncio.run(burst(server.port, ticket, args.sends))
            took = time.perf_counter() - start
            rooms = asyncio.run(rooms_in(redis.port))
    print(f"\n{args.sends} sends from one any-room ticket to {args.sends} new rooms, all in "
          f"flight together, in {took:.2f} s; store redis")
    print("answers: " + ", ".join(f"{n} x {status}" for status, n in sorted(statuses.items())))
    print(f"rooms created: {rooms} (target: the per-uid limit, 10)")
    print(f"command: {command}\ncommit: {commit()}, "
          f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
