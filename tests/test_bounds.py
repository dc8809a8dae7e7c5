"""Bounded state per node, tried as a hostile client would. Each test is an
attack and the answer a user relies on:

- one uid holding hundreds of polls keeps a few of them, and the node still
  answers everybody else;
- beyond the node's capacity a poll is answered 503 with ``Retry-After``,
  never left to take the node's last file descriptors;
- an answer has a byte bound: a far-behind listener gets its backlog in
  several answers, nothing counted as lost;
- first polls and made-up epochs in a tiered room wait for their pace.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from support import (
    ADMIN,
    ADMIN_HEADERS,
    PUBLISHER,
    Listener,
    answered,
    poll_once,
    running_node,
    send,
)

from liveroom.clock import FakeClock
from liveroom.ratelimit import parse_windows
from liveroom.settings import Tier
from proxy.hold import SWEEP_SLACK

LARGE = "x" * 4000
"""A message body close to the 4 KiB limit."""


async def held(node_holds: Any, count: int) -> None:
    """Wait (real time, bounded) until the node holds ``count`` polls."""
    async with asyncio.timeout(10):
        while node_holds.count != count:
            await asyncio.sleep(0.01)


async def counted_online(node: Any, clock: FakeClock, room: str) -> None:
    """Walk the fake clock (real time bounded) until ``room`` counts one
    listener online: the room is then in its tier."""
    async with asyncio.timeout(20):
        while node.node.proxy.polls.stats.online(room) < 1:
            await clock.advance(0.5)
            await asyncio.sleep(0.01)


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


async def test_a_reconnecting_listener_never_waits_on_its_ghost(engine_url: str) -> None:
    """Per listener and room: other listeners and other rooms keep theirs."""
    async with aiohttp.ClientSession() as session, \
            running_node(engine_url, holds_per_listener=1) as node:
        await send(session, node.url, "a", 1)
        await send(session, node.url, "b", 1)
        a1, a2 = Listener(session, "a", uid="me"), Listener(session, "a", uid="other")
        b1 = Listener(session, "b", uid="me")
        for listener in (a1, a2, b1):
            await listener.poll(node.url)
        waiting = [asyncio.create_task(x.poll(node.url)) for x in (a1, a2, b1)]
        await held(node.node.proxy.holds, 3)
        ghost = waiting[0]
        again = asyncio.create_task(Listener(session, "a", uid="me", epoch=a1.epoch,
                                             seq=a1.seq, iseq=a1.iseq).poll(node.url))
        answer = await asyncio.wait_for(ghost, 5)  # the ghost, answered empty
        assert answer["messages"] == []
        assert node.node.proxy.held_polls() == 3
        await send(session, node.url, "a", 2)
        assert (await asyncio.wait_for(again, 5))["messages"][0]["body"] == 2
        assert (await asyncio.wait_for(waiting[1], 5))["messages"][0]["body"] == 2
        await send(session, node.url, "b", 2)
        assert (await asyncio.wait_for(waiting[2], 5))["messages"][0]["body"] == 2


async def test_beyond_the_nodes_capacity_a_poll_gets_503_with_retry_after(
        engine_url: str) -> None:
    async with aiohttp.ClientSession() as session, \
            running_node(engine_url, held_max=3) as node:
        await send(session, node.url, "full", 1)
        listeners = [Listener(session, "full", uid=f"u{i}") for i in range(4)]
        for listener in listeners:
            await listener.poll(node.url)
        waiting = [asyncio.create_task(x.poll(node.url)) for x in listeners[:3]]
        await held(node.node.proxy.holds, 3)
        extra = listeners[3]
        params = {"uid": extra.uid, "epoch": extra.epoch, "seq": extra.seq,
                  "iseq": extra.iseq, "ctx": extra.ctx}
        async with session.get(f"{node.url}/v1/rooms/full/poll", params=params) as resp:
            assert resp.status == 503
            assert int(resp.headers["Retry-After"]) >= 1
            doc = await resp.json()
            assert doc["error"] == "overloaded"
            assert doc["message"]
        # A first poll is not held: it is still answered, and so is /healthz.
        assert (await Listener(session, "full", uid="new").poll(node.url))["seq"] == 1
        async with session.get(f"{node.url}/healthz") as resp:
            assert resp.status == 200
        metrics = await (await session.get(f"{node.url}/metrics",
                                           headers=ADMIN_HEADERS)).text()
        assert 'liveroom_polls_refused_total{reason="node_full"} 1.0' in metrics
        await send(session, node.url, "full", 2)
        for task in waiting:
            assert (await asyncio.wait_for(task, 5))["messages"][0]["body"] == 2


async def test_rooms_with_held_polls_are_kept_and_past_rooms_max_a_new_room_gets_503(
        engine_url: str) -> None:
    """Held rooms are never evicted and never let the cache pass its bound: with
    every cached place held by a room that exists, a poll for a new room is
    refused (503), a poll of a held room is still answered, and once a room's
    polls leave, new rooms come in again. (Rooms that do not exist are held
    outside the bound: tests/test_hostile_cache.py.)"""
    async with aiohttp.ClientSession() as session, \
            running_node(engine_url, rooms_max=3, held_max=100) as node:
        reader = node.node.recvsvr
        for i in range(3):
            await send(session, node.url, f"held-{i}", "opening")
        listeners = [Listener(session, f"held-{i}", uid=f"u{i}") for i in range(3)]
        for listener in listeners:
            await listener.poll(node.url)
        waiting = [asyncio.create_task(x.poll(node.url, timeout=20)) for x in listeners]
        await held(node.node.proxy.holds, 3)
        assert reader.normal.kept == 3
        async with session.get(f"{node.url}/v1/rooms/new-room/poll",
                               params={"uid": "n"}) as resp:
            assert resp.status == 503
            assert int(resp.headers["Retry-After"]) >= 1
            assert (await resp.json())["error"] == "overloaded"
        assert len(reader) == 3
        # A held room still answers, and wakes its listener.
        assert (await Listener(session, "held-0", uid="x").poll(node.url))["room"] == "held-0"
        await send(session, node.url, "held-0", "hello")
        assert (await asyncio.wait_for(waiting[0], 5))["messages"][0]["body"] == "hello"
        async with asyncio.timeout(5):
            while reader.normal.kept != 2:
                await asyncio.sleep(0.01)
        assert (await Listener(session, "new-room", uid="n").poll(node.url))["seq"] == 0
        assert len(reader) <= 3
        for task in waiting[1:]:
            task.cancel()


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
            await held(holds, 1)
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
        await held(holds, 6)
        await send(session, node.url, "r0", "for both")
        assert (await asyncio.wait_for(theirs, 5))["messages"][0]["body"] == "for both"
        for task in polls:
            task.cancel()


async def test_a_far_behind_listener_gets_its_backlog_in_bounded_answers(
        engine_url: str) -> None:
    """60 messages of 4 KB behind, and a signal: no answer carries more than
    the byte bound (+ its small head), the signal comes first, and every
    message comes, none counted as lost."""
    bound = 64 * 1024
    async with aiohttp.ClientSession() as session, \
            running_node(engine_url, answer_bytes_max=bound) as node:
        cursor = await Listener(session, "flood", uid="slow").poll(node.url)
        for i in range(60):
            await send(session, node.url, "flood", f"{i:03d}{LARGE}")
        await send(session, node.url, "flood", "signal", important=True)
        reader = node.node.proxy.polls.reader
        async with asyncio.timeout(10):  # the node pulled the whole backlog
            while (snap := reader.current("flood")) is None or snap.head < 61:
                await asyncio.sleep(0.01)
        answers, sizes = [], []
        async with asyncio.timeout(20):
            while sum(len(a["messages"]) + len(a["important"]) for a in answers) < 61:
                params = {"uid": "slow", "epoch": cursor["epoch"], "seq": cursor["seq"],
                          "iseq": cursor["iseq"], "ctx": cursor["ctx"], "timeout": 1}
                async with session.get(f"{node.url}/v1/rooms/flood/poll",
                                       params=params) as resp:
                    body = await resp.read()
                sizes.append(len(body))
                cursor = orjson.loads(body)
                answers.append(cursor)
        assert all(a["gap"] == 0 and a["igap"] == 0 for a in answers)
        assert answers[0]["important"][0]["body"] == "signal"
        bodies = [m["body"][:3] for a in answers for m in a["messages"]]
        assert bodies == [f"{i:03d}" for i in range(60)]
        assert max(sizes) <= bound + 1024
        assert len(answers) >= 4
        assert (cursor["seq"], cursor["iseq"]) == (61, 61)


async def test_recent_messages_fit_the_byte_bound(engine_url: str) -> None:
    async with aiohttp.ClientSession() as session, running_node(engine_url) as node:
        for i in range(100):
            await send(session, node.url, "big", f"{i}{LARGE}")
        async with session.get(f"{node.url}/v1/rooms/big/poll",
                               params={"uid": "new", "recent": 100}) as resp:
            body = await resp.read()
            doc = await resp.json()
        assert len(body) <= 256 * 1024 + 1024
        assert 50 <= len(doc["messages"]) < 100
        assert doc["messages"][-1]["body"].startswith("99x")
        assert doc["seq"] == 100


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_first_polls_and_made_up_epochs_wait_for_the_pace_of_a_tiered_room(
        clock: FakeClock) -> None:
    """A client that skips the cursor (a first poll each time, or an epoch it
    made up) is paced like any other listener, instead of answered at once."""
    async with aiohttp.ClientSession() as session, \
            running_node(clock=clock, tiers=(Tier(1, 5.0),)) as node:
        await send(session, node.url, "hot", "hello")
        member = Listener(session, "hot", uid="member")
        await member.poll(node.url)
        await counted_online(node, clock, "hot")
        answer, took = await answered(clock, Listener(session, "hot", uid="eager")
                                      .poll(node.url))
        assert answer["messages"][0]["body"] == "hello"
        assert answer["interval_ms"] == 5000
        assert took >= 4.9
        forged = Listener(session, "hot", uid="forger", epoch="madeup", seq=0, iseq=0)
        answer, took = await answered(clock, forged.poll(node.url))
        assert answer["reset"] is True
        assert took >= 4.9
        # A listener reset by an ended broadcast carries its own ctx: its last
        # answer was long ago, so it is not made to wait again.
        await clock.advance(10)
        async with session.post(f"{node.url}/v1/admin/rooms/hot/end",
                                headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
            assert resp.status == 200
        answer, took = await answered(clock, member.poll(node.url))
        assert answer["reset"] is True
        assert took < 1


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


async def test_sends_may_create_only_so_many_rooms_per_uid_and_per_node() -> None:
    """Past its new-room windows a uid still sends to rooms that exist; a new
    room gets 429 with Retry-After (and the node has a window of its own).
    The backend's tokens are not limited."""
    async with running_node(rooms_per_uid=parse_windows("3/m"),
                            rooms_per_node=parse_windows("5/m")) as node, \
            aiohttp.ClientSession() as session:
        async def post(room: str, uid: str, token: str | None = None) -> aiohttp.ClientResponse:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with session.post(f"{node.url}/v1/rooms/{room}/messages",
                                    json={"uid": uid, "body": "hi"}, headers=headers) as r:
                await r.read()
                return r

        for i in range(3):
            assert (await post(f"new-{i}", "maker")).status == 201
        refused = await post("new-3", "maker")
        assert refused.status == 429
        assert 0 < int(refused.headers["Retry-After"]) <= 60
        assert (await post("new-0", "maker")).status == 201  # a room that exists
        assert (await post("new-3", "other")).status == 201  # another uid
        assert (await post("new-4", "third")).status == 201  # the node's 5th
        refused = await post("new-5", "fourth")
        assert refused.status == 429  # the node's window, whoever sends
        assert (await post("new-5", "backend", PUBLISHER)).status == 201
        assert (await post("never", "maker")).status == 429
        async with session.get(f"{node.url}/v1/rooms/never/stats") as r:
            assert (await r.json())["seq"] == 0  # a refused send created nothing


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
            await held(holds, 1)
            await send(session, node.url, "busy", f"m{i}")
            assert (await asyncio.wait_for(waiting, 5))["messages"][0]["body"] == f"m{i}"
        assert holds.count == 0
        assert holds.listeners_held == 0
