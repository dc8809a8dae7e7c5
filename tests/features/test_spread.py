"""A room that grows moves to the vip sect by itself and spreads over the nodes
behind the deployment's own nginx config (deploy/nginx.conf hashes room and
routing hint), then gathers on one node again once it shrinks and is demoted;
no listener loses a message on the way.

Three ``liveroom serve`` processes over one Redis, real nginx in front, real
sockets throughout. Which node served a poll is read from the ``X-Upstream``
header the test's copy of the config adds to every answer (nginx's
``$upstream_addr``): exact per poll, unlike a node's counters, which count
heartbeats when they are flushed.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support import (
    ADMIN_HEADERS,
    Listener,
    PollRefused,
    deployed_nginx,
    send,
    serve,
)

pytestmark = pytest.mark.timeout(150)

UPSTREAM_HEADER = "        add_header X-Upstream $upstream_addr always;\n"
"""What the test's copy of the config adds to ``location /``."""
LISTENERS = 40
STAYING = 3
PROMOTE = 30
DEMOTE = 5
NODE_FLAGS = (
    "--poll-timeout", "2", "--poll-timeout-max", "2", "--hold-interval-max", "1",
    "--tiers", "off", "--online-ttl", "4", "--vip-refresh", "0.2",
    "--vip-promote", str(PROMOTE), "--vip-promote-after", "0",
    "--vip-demote", str(DEMOTE), "--vip-demote-after", "0", "--vip-settle", "0",
    "--vip-spread", "64")


async def metrics(session: aiohttp.ClientSession, node: str) -> str:
    async with session.get(f"{node}/metrics", headers=ADMIN_HEADERS) as resp:
        return await resp.text()


async def moves(session: aiohttp.ClientSession, node: str) -> dict[str, float]:
    text = await metrics(session, node)
    return {f"{d} {r}": float(v) for d, r, v in re.findall(
        r'^liveroom_vip_moves_total\{direction="(\w+)",reason="(\w+)"\} (\S+)$', text, re.M)}


def hops(listeners: list[Listener], since: list[int]) -> list[tuple[str | None, str | None]]:
    """For each answer of ``listeners`` after their ``since`` (one index each):
    the hint its poll echoed (the one of the answer before) and the node that
    served it."""
    return [(x.answers[i - 1].get("spread") if i else None, x.via[i])
            for x, start in zip(listeners, since, strict=True)
            for i in range(start, len(x.answers))]


def trail(listener: Listener) -> str:
    """A listener's answers, one line each, for a failure's message."""
    return "\n".join([listener.uid] + [
        f"{a['epoch']} seq={a['seq']} iseq={a['iseq']} reset={a['reset']} gap={a['gap']} "
        f"spread={a.get('spread')} via={via} "
        f"{[m['body'] for m in a['important'] + a['messages']]}"
        for a, via in zip(listener.answers, listener.via, strict=True)])


class Audience:
    """Listeners polling one room through the load balancer until told to leave."""

    def __init__(self, session: aiohttp.ClientSession, front: str) -> None:
        self.session = session
        self.front = front
        self.listeners: list[Listener] = []
        self.leaving: list[asyncio.Event] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.refused: list[PollRefused] = []

    def join(self, count: int) -> None:
        for _ in range(count):
            listener = Listener(self.session, "stage", uid=f"l{len(self.listeners)}")
            leave = asyncio.Event()
            self.listeners.append(listener)
            self.leaving.append(leave)
            self.tasks.append(asyncio.create_task(self._listen(listener, leave)))

    async def _listen(self, listener: Listener, leave: asyncio.Event) -> None:
        while not leave.is_set():
            try:
                await listener.poll(self.front, timeout=2)
            except PollRefused as refused:
                # A busy node's 503 is waited out and polled again with the same
                # cursors, as every client does; anything else fails the test.
                if refused.status != 503:
                    raise
                self.refused.append(refused)
                await asyncio.sleep(0.2)

    async def leave(self, indexes: range) -> None:
        for i in indexes:
            self.leaving[i].set()
        await asyncio.gather(*(self.tasks[i] for i in indexes))

    async def until(self, check: Any, within: float) -> None:
        async with asyncio.timeout(within):
            while not check():
                for task in self.tasks:
                    if task.done():
                        task.result()  # a listener that failed fails the test
                await asyncio.sleep(0.05)


async def test_a_growing_room_spreads_over_the_nodes_and_gathers_again(
        redis_url: str, tmp_path: Path) -> None:
    with serve("--store", redis_url, "--node-id", "a", *NODE_FLAGS) as (a, _), \
            serve("--store", redis_url, "--node-id", "b", *NODE_FLAGS) as (b, _), \
            serve("--store", redis_url, "--node-id", "c", *NODE_FLAGS) as (c, _), \
            deployed_nginx(tmp_path, [a, b, c], location=UPSTREAM_HEADER) as front:
        nodes = [a, b, c]
        async with aiohttp.ClientSession() as session:
            sent = 0
            sending = True

            async def publish() -> None:
                nonlocal sent
                while sending:
                    await send(session, front, "stage", sent)
                    sent += 1
                    await asyncio.sleep(0.1)

            publisher = asyncio.create_task(publish())
            audience = Audience(session, front)
            listeners = audience.listeners
            # A normal room: every poll on one node, no hint.
            audience.join(PROMOTE - 10)
            await audience.until(lambda: all(len(x.answers) >= 4 for x in listeners), 20)
            served = hops(listeners, [0] * len(listeners))
            home = served[0][1]
            assert home is not None
            assert served == [(None, home)] * len(served)

            # It grows past --vip-promote: vip, hints, spread over all three,
            # a listener's polls on the node its hint picks.
            audience.join(LISTENERS - (PROMOTE - 10))
            await audience.until(lambda: all(x.spread is not None for x in listeners), 30)
            since = [len(x.answers) for x in listeners]
            await audience.until(lambda: all(len(x.answers) >= n + 4
                                             for x, n in zip(listeners, since, strict=True)), 20)
            served = hops(listeners, since)
            assert {via for _, via in served} == {u.removeprefix("http://") for u in nodes}
            node_of: dict[Any, set[str | None]] = {}
            for hint, via in served:
                node_of.setdefault(hint, set()).add(via)
            assert all(len(v) == 1 for v in node_of.values()), node_of

            # It shrinks below --vip-demote: back to the normal sect; once an
            # answer drops the hint, the next polls are all on the first node.
            await audience.leave(range(STAYING, LISTENERS))
            staying = listeners[:STAYING]
            await audience.until(lambda: all(
                len(x.answers) >= 2 and all(a.get("spread") is None for a in x.answers[-2:])
                for x in staying), 40)
            since = [len(x.answers) for x in staying]
            await audience.until(lambda: all(len(x.answers) >= n + 4
                                             for x, n in zip(staying, since, strict=True)), 20)
            assert hops(staying, since) == [(None, home)] * sum(
                len(x.answers) - n for x, n in zip(staying, since, strict=True))

            sending = False
            await publisher
            await audience.until(lambda: all(x.bodies()[-1:] == [sent - 1] for x in staying),
                                 20)
            await audience.leave(range(STAYING))
            # Each move decided once, by one node.
            total: dict[str, float] = {}
            for node in nodes:
                for key, n in (await moves(session, node)).items():
                    total[key] = total.get(key, 0) + n
            assert total == {"to_vip auto": 1, "to_normal auto": 1}

        # Nobody lost or repeated a message, nobody was reset, whatever node
        # served them: each got a contiguous run of what was sent while it listened.
        for listener in audience.listeners:
            bodies = listener.bodies()
            assert bodies == list(range(bodies[0], bodies[0] + len(bodies))), trail(listener)
            assert not any(x["reset"] or x["gap"] or x["igap"] for x in listener.answers[1:])
        for listener in staying:
            assert listener.bodies()[-1] == sent - 1
        print(f"polls refused (503) and polled again: {len(audience.refused)}")
