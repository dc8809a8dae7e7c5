"""The hold (``proxy/polls/hold.py``, :class:`proxy.polls.hold.Holds`) on a running node:
how many polls one listener and one uid may keep held (plain and paced), and
that a woken or released poll leaves nothing behind. Its races with the
cache's swaps are in ``test_interleavings``; closing thousands of held polls
at once in ``test_hostile_cache``."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from support import (
    ADMIN_HEADERS,
    Listener,
    advance_until,
    answered,
    counted_online,
    held_polls,
    poll_once,
    running_node,
    send,
)

from liveroom.clock import FakeClock
from liveroom.settings import Tier
from proxy.polls.hold import SWEEP_SLACK


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_one_uid_cannot_pile_up_held_polls(engine_url: str) -> None:
    """260 polls of one listener: the newest 4 are held, each older one is
    answered at once (empty, its own cursors), and /healthz still answers."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session, \
            running_node(engine_url) as node:
        await send(session, node.url, "ghosts", "before")
        first = Listener(session, "ghosts", uid="one")
        await first.poll(node.url)
        cursor = {"epoch": first.epoch, "seq": first.seq, "iseq": first.iseq}
        holds = node.node.proxy.holds

        params = {"uid": "one", "timeout": 20, **cursor}
        polls = [asyncio.create_task(poll_once(session, node.url, "ghosts", params))
                 for _ in range(260)]
        async with asyncio.timeout(20):
            while sum(p.done() for p in polls) < 256:
                await asyncio.sleep(0.01)
        assert holds.count == 4
        early = [p.result() for p in polls if p.done()]
        assert all(a["messages"] == [] and a["seq"] == cursor["seq"] for a in early)
        async with session.get(f"{node.url}/healthz") as resp:
            assert resp.status == 200
        await send(session, node.url, "ghosts", "after")
        last = await asyncio.gather(*(p for p in polls if not p.done()))
        assert [a["messages"][0]["body"] for a in last] == ["after"] * 4
        metrics = await (await session.get(f"{node.url}/metrics",
                                           headers=ADMIN_HEADERS)).text()
        assert "liveroom_polls_superseded_total 256.0" in metrics


@pytest.mark.parametrize("woken_first", [False, True], ids=["fresh", "woken"])
async def test_one_uid_holds_at_most_holds_per_uid_polls_across_rooms(
        engine_url: str, woken_first: bool) -> None:
    """Made-up rooms cannot turn one listener into the node's whole capacity:
    its newest polls are held, each older one answered at once (empty). The
    same once a message has woken the uid: its answered polls do not stand in
    for its oldest held one."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session, \
            running_node(engine_url, holds_per_uid=5, held_max=8) as node:
        holds = node.node.proxy.holds
        spread = [Listener(session, f"r{i}", uid="greedy") for i in range(12)]
        for listener in spread:
            await listener.poll(node.url)
        if woken_first:
            woken = asyncio.create_task(spread[0].poll(node.url, timeout=20))
            await held_polls(holds, 1)
            await send(session, node.url, "r0", "wake up")
            assert (await asyncio.wait_for(woken, 5))["messages"][0]["body"] == "wake up"
        polls = [asyncio.create_task(x.poll(node.url, timeout=20)) for x in spread]
        async with asyncio.timeout(10):
            while sum(p.done() for p in polls) < 7:
                await asyncio.sleep(0.01)
        assert holds.count == 5
        early = [p.result() for p in polls if p.done()]
        assert all(a["messages"] == [] for a in early)
        # Another listener still gets held: the node is not full.
        other = Listener(session, "r0", uid="modest")
        await other.poll(node.url)
        theirs = asyncio.create_task(other.poll(node.url, timeout=20))
        await held_polls(holds, 6)
        await send(session, node.url, "r0", "for both")
        assert (await asyncio.wait_for(theirs, 5))["messages"][0]["body"] == "for both"
        for task in polls:
            task.cancel()


async def test_a_tiered_room_keeps_few_of_the_polls_it_released(clock: FakeClock) -> None:
    """A paced poll released when due leaves its deadline behind (its whole
    timeout later): 40 deliveries to one listener with a 60 s timeout in a
    1 s tier leave the room's heaps holding a bounded few, not a poll per
    delivery of the last minute."""
    async with aiohttp.ClientSession() as session, \
            running_node(clock=clock, tiers=(Tier(1, 1.0),)) as node:
        holds = node.node.proxy.holds
        await send(session, node.url, "paced", "hello")
        listener = Listener(session, "paced", uid="steady")
        await listener.poll(node.url)
        await counted_online(node, clock, "paced")
        most = 0
        for i in range(40):
            waiting = listener.poll(node.url, timeout=60)
            await send(session, node.url, "paced", f"m{i}")
            answer, _ = await answered(clock, waiting)
            assert [m["body"] for m in answer["messages"]] == [f"m{i}"]
            most = max(most, holds.kept("paced"))
        assert most <= 2 + SWEEP_SLACK + 2


async def test_a_listener_woken_many_times_leaves_nothing_behind_in_the_hold(
        engine_url: str) -> None:
    """200 deliveries to one held listener: once it is answered and gone, the
    hold keeps no trace of its polls (per room or per uid), however many
    times a message woke it."""
    async with aiohttp.ClientSession() as session, running_node(engine_url) as node:
        holds = node.node.proxy.holds
        listener = Listener(session, "busy", uid="woken")
        await send(session, node.url, "busy", "first")
        await listener.poll(node.url)
        for i in range(200):
            waiting = asyncio.create_task(listener.poll(node.url, timeout=20))
            await held_polls(holds, 1)
            await send(session, node.url, "busy", f"m{i}")
            assert (await asyncio.wait_for(waiting, 5))["messages"][0]["body"] == f"m{i}"
        assert holds.count == 0
        assert holds.listeners_held == 0


async def test_a_tiered_room_bounds_one_listeners_held_polls_as_a_plain_one(
        clock: FakeClock) -> None:
    """--holds-per-listener holds for paced polls too (not only the wider
    per-uid bound): a listener's older paced polls are answered at once, empty."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session, \
            running_node(clock=clock, tiers=(Tier(1, 5.0),), holds_per_listener=2,
                         holds_per_uid=16) as node:
        await send(session, node.url, "hot", "hello")
        me = Listener(session, "hot", uid="me")
        await me.poll(node.url)
        async with asyncio.timeout(20):  # the room counts it: tiered from now on
            while node.node.proxy.polls.stats.online("hot") < 1:
                await clock.advance(0.5)
                await asyncio.sleep(0.01)
        params = {"uid": "me", "timeout": 60, "epoch": me.epoch, "seq": me.seq,
                  "iseq": me.iseq, "ctx": me.ctx}
        polls = [asyncio.create_task(poll_once(session, node.url, "hot", params))
                 for _ in range(10)]
        async with asyncio.timeout(10):
            while sum(p.done() for p in polls) < 8:
                await asyncio.sleep(0.01)
        holds = node.node.proxy.holds
        assert holds.count == 2
        assert holds.kept("hot") >= 2  # the two are paced ones
        early = [p.result() for p in polls if p.done()]
        assert all(a["messages"] == [] and a["seq"] == me.seq for a in early)
        await send(session, node.url, "hot", "later")
        await advance_until(clock, lambda: all(p.done() for p in polls), limit=12)
        assert [p.result()["messages"][0]["body"] for p in polls if p.result()["messages"]] \
            == ["later"] * 2
