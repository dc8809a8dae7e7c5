"""Fan-out benchmark: what one message costs a node holding N polls in one room.

Starts ``liveroom serve`` (memory engine) as a child process, holds N long polls
in one room from this process, sends one message, and waits until every poll
has answered; then polls again at once and repeats. It reports the wall time of
a wake-up round and the server's CPU time per answer (read from /proc, so it
measures the server process alone, not this client).

    python loadtest/bench_fanout.py --listeners 2000 --rounds 10
    python loadtest/bench_fanout.py --listeners 2000 --rounds 10 --tiers 1:1

The first runs plain long polls (``--tiers off``, the default here): every held
poll is woken by the change. The second puts the room in a 1 s tier: the
room's ticker releases the polls once they are due, all in one tick, so the
round's wall time includes the wait for the interval and the CPU figure is the
cost of a paced release. Sends carry the publisher token, so rate limits do not
apply. Loopback only; the run is bounded by ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time

import aiohttp


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def run(listeners: int, rounds: int, tiers: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, before the measured part
        [sys.executable, "-m", "liveroom", "serve", "--port", str(port),
         "--admin-token", "a", "--publisher-token", "p", "--log-level", "warning",
         "--tiers", tiers],
        stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        for line in server.stdout:
            if "listening on" in line:
                break
        connector = aiohttp.TCPConnector(limit=listeners + 10)
        timeout = aiohttp.ClientTimeout(total=90)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            cursors: list[dict[str, object]] = []
            for i in range(listeners):
                async with session.get(f"{url}/v1/rooms/bench/poll",
                                       params={"uid": f"u{i}"}) as resp:
                    a = await resp.json()
                cursors.append({"uid": f"u{i}", "epoch": a["epoch"], "seq": a["seq"],
                                "iseq": a["iseq"], "ctx": a["ctx"], "timeout": 60})

            while tiers != "off":  # wait until the room's online count puts it in its tier
                async with session.get(f"{url}/v1/rooms/bench/stats") as resp:
                    if (await resp.json())["online"] >= listeners:
                        break
                await asyncio.sleep(0.2)

            async def poll(i: int) -> None:
                async with session.get(f"{url}/v1/rooms/bench/poll",
                                       params=cursors[i]) as resp:
                    a = await resp.json()
                assert len(a["messages"]) == 1, a
                cursors[i].update(seq=a["seq"], iseq=a["iseq"], ctx=a["ctx"])

            walls, cpus = [], []
            for n in range(rounds):
                polls = [asyncio.create_task(poll(i)) for i in range(listeners)]
                while True:  # wait until the server holds them all
                    async with session.get(f"{url}/metrics") as resp:
                        text = await resp.text()
                    held = [ln for ln in text.splitlines()
                            if ln.startswith("liveroom_held_polls ")]
                    if held and float(held[0].split()[1]) >= listeners:
                        break
                    await asyncio.sleep(0.05)
                cpu0, t0 = cpu_seconds(server.pid), time.perf_counter()
                async with session.post(f"{url}/v1/rooms/bench/messages",
                                        json={"uid": "s", "body": {"n": n, "text": "x" * 100}},
                                        headers={"Authorization": "Bearer p"}) as resp:
                    assert resp.status == 201, await resp.text()
                await asyncio.gather(*polls)
                walls.append(time.perf_counter() - t0)
                cpus.append(cpu_seconds(server.pid) - cpu0)
        per_answer_us = statistics.median(cpus) / listeners * 1e6
        print(f"listeners={listeners} rounds={rounds} tiers={tiers}")
        print(f"  wake-up round wall time: median {statistics.median(walls) * 1000:.0f} ms, "
              f"max {max(walls) * 1000:.0f} ms (includes this client's parsing)")
        print(f"  server CPU per round: median {statistics.median(cpus) * 1000:.0f} ms "
              f"= {per_answer_us:.0f} µs per answered poll "
              f"(~{1e6 / per_answer_us:,.0f} answers per server CPU-second)")
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listeners", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tiers", default="off",
                        help="the server's tier table (liveroom serve --tiers); "
                             "'off' for plain long polls, '1:1' to pace the room at 1 s")
    args = parser.parse_args()
    asyncio.run(run(args.listeners, args.rounds, args.tiers))


if __name__ == "__main__":
    main()
