"""Bounded state per node, tried as a hostile client would. Each test is an
attack and the answer a user relies on:

- a reconnecting listener never waits on its ghost poll;
- beyond the node's capacity a poll is answered 503 with ``Retry-After``,
  never left to take the node's last file descriptors;
- an answer has a byte bound: a far-behind listener gets its backlog in
  several answers, nothing counted as lost;
- first polls and made-up epochs in a tiered room wait for their pace.

How many polls one listener or one uid keeps held is ``test_hold``'s.
"""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest
from support import (
    ADMIN,
    ADMIN_HEADERS,
    PUBLISHER,
    Listener,
    answered,
    counted_online,
    held_polls,
    running_node,
    send,
)

from liveroom.clock import FakeClock
from liveroom.ratelimit import parse_windows
from liveroom.settings import Tier

LARGE = "x" * 4000
"""A message body close to the 4 KiB limit."""






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
        await held_polls(node.node.proxy.holds, 3)
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
        await held_polls(node.node.proxy.holds, 3)
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
    outside the bound: tests/hostile/test_hostile_cache.py.)"""
    async with aiohttp.ClientSession() as session, \
            running_node(engine_url, rooms_max=3, held_max=100) as node:
        reader = node.node.recvsvr
        for i in range(3):
            await send(session, node.url, f"held-{i}", "opening")
        listeners = [Listener(session, f"held-{i}", uid=f"u{i}") for i in range(3)]
        for listener in listeners:
            await listener.poll(node.url)
        waiting = [asyncio.create_task(x.poll(node.url, timeout=20)) for x in listeners]
        await held_polls(node.node.proxy.holds, 3)
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


