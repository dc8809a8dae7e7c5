"""What a ticket costs a poll: verification, cached and uncached, against the
CPU of the poll itself.

In one process, no sockets (the figures are CPU per call, best of ``--rounds``):

- **uncached**: :meth:`Tickets.verify` of a ticket not in the cache (a full
  PyJWT decode: base64, JSON, HMAC-SHA256, the claims);
- **cached**: :meth:`Tickets.verify` of a ticket verified before (a dict
  lookup and the expiry and room checks);
- **admit, cached**: what a poll in ``ticket`` mode adds before its own work
  (:meth:`Tickets.admit_poll`: the header read, the cached verify, the query
  given its uid);
- **poll, open / poll, ticket**: :meth:`Polls.start` of a first poll answered
  at once from a warm snapshot on a node of the memory engine (the poll's own
  work without HTTP: parameters, snapshot, heartbeat, answer bytes), without
  and with a cached ticket.

The share is the cached admit against the in-process poll (the strict
figure: HTTP is left out, so a real poll costs more) and against the ~60 µs
of CPU a delivered plain poll costs end to end on this machine
(``loadtest/bench_fanout.py``). The target is under 5 %.

    python loadtest/bench_tickets.py
    python loadtest/bench_tickets.py --rounds 7 --calls 50000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from liveroom.clock import SystemClock
from liveroom.model import NewMessage
from liveroom.node import NODE, build_app, node_runner
from liveroom.settings import Settings
from proxy.reply import Reply
from proxy.tickets import Tickets, mint

KEY = "bench-ticket-key-0123456789abcdef"
ROOM = "bench"
FANOUT_POLL_US = 60.0
"""CPU of one delivered plain poll, end to end (bench_fanout.py, this machine)."""


def per_call(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Best CPU µs per call of ``fn`` over ``rounds`` rounds of ``calls``."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - start)
    return best / calls * 1e6


def verification(calls: int, rounds: int) -> dict[str, float]:
    clock = SystemClock()
    ticket = mint(KEY, "alice", rooms=[ROOM, "other"], publish=False)
    other = mint(KEY, "bob", rooms=[ROOM])
    # A cache of one, two tickets taking turns: every call a full verification.
    thrashed = Tickets([KEY], clock, cache_max=1)
    turn = [ticket, other]

    def uncached() -> None:
        turn.reverse()
        thrashed.verify(turn[0], ROOM)

    warm = Tickets([KEY], clock)
    warm.verify(ticket, ROOM)
    header = f"Bearer {ticket}".encode()
    query = {"timeout": "25"}
    return {
        "uncached": per_call(uncached, max(calls // 10, 1000), rounds),
        "cached": per_call(lambda: warm.verify(ticket, ROOM), calls, rounds),
        "admit, cached": per_call(lambda: warm.admit_poll(ROOM, query, header), calls, rounds),
    }


async def polls(calls: int, rounds: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for auth in ("open", "ticket"):
        settings = Settings(admin_token="a", publisher_token="p", secret="s", auth=auth,
                            ticket_keys=(KEY,) if auth == "ticket" else ())
        runner = node_runner(build_app(settings))
        await runner.setup()
        try:
            figures[f"poll, {auth}"] = await _poll_cost(runner.app, auth, calls, rounds)
        finally:
            await runner.cleanup()
    return figures


async def _poll_cost(app: web.Application, auth: str, calls: int, rounds: int) -> float:
    node = app[NODE]
    for i in range(20):
        await node.store.log.append(ROOM, NewMessage(uid="s", body=f"message {i}",
                                                     important=False, ts=0), None)
    await node.recvsvr.snapshot(ROOM)
    polls = node.proxy.polls
    answers: list[Reply] = []
    if auth == "open":
        query: dict[str, str] = {"uid": "alice"}
        header = None
    else:
        query = {}
        header = f"Bearer {mint(KEY, 'alice', rooms=[ROOM])}".encode()

    def poll() -> None:
        polls.start(ROOM, query, "", answers.append, header)

    poll()
    assert answers[-1].status == 200, answers[-1]
    answers.clear()
    cost = per_call(poll, calls, rounds)
    assert len(answers) == calls * rounds
    assert {a.status for a in answers} == {200}
    node.proxy.heartbeats.flush()
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    figures = verification(args.calls, args.rounds)
    figures.update(asyncio.run(polls(args.calls // 4, args.rounds)))
    print(f"$ python loadtest/bench_tickets.py --calls {args.calls} --rounds {args.rounds}")
    for name, us in figures.items():
        print(f"{name:>16}: {us:7.2f} µs CPU per call")
    admit = figures["admit, cached"]
    poll = figures["poll, open"]
    print(f"cached admit vs an in-process poll ({poll:.1f} µs): {admit / poll:6.1%}")
    print(f"cached admit vs a delivered poll end to end ({FANOUT_POLL_US:.0f} µs): "
          f"{admit / FANOUT_POLL_US:6.1%}")
    print(f"uncached verify vs a delivered poll end to end: "
          f"{figures['uncached'] / FANOUT_POLL_US:6.1%}")


if __name__ == "__main__":
    main()
