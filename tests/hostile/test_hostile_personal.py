"""Personal messages under a hostile client or sender (issue 31): what open
mode tells the sender, what a pull costs the memory engine when a room holds
many, and the bound on what a node holds of all its rooms together."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import aiohttp
from support import PUBLISHER, Listener, running_node, send

from liveroom.clock import FakeClock
from liveroom.codec import encode_message
from liveroom.model import Entry, NewMessage
from liveroom.personal import NodeCap, Personal
from liveroom.snapshot import Item
from liveroom.store.base import LogPolicy, PullRequest
from liveroom.store.memory import MemoryLog, MemoryNotifier


async def test_open_mode_says_a_personal_message_is_not_private(session: Any) -> None:
    async with running_node() as node:
        room = await send(session, node.url, "stage", "for everybody")
        assert "private" not in room
        # What the answer warns of: any client naming alice reads hers.
        stranger = Listener(session, "stage", uid="alice")
        await stranger.poll(node.url)
        sent = await send(session, node.url, "stage", "for alice", to="alice")
        assert sent["private"] is False
        await asyncio.wait_for(stranger.poll(node.url), 5)
        assert [m["body"] for m in stranger.personal] == ["for alice"]


async def test_ticket_mode_says_a_personal_message_is_private(session: Any) -> None:
    keys = ("ticket-key-0123456789abcdef-0001",)
    async with running_node(auth="ticket", ticket_keys=keys) as node, \
            session.post(f"{node.url}/v1/rooms/stage/messages",
                         json={"uid": "system", "to": "alice", "body": "yours"},
                         headers={"Authorization": f"Bearer {PUBLISHER}"}) as resp:
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["private"] is True


def _opcodes(call: Callable[[], Any]) -> int:
    """Python bytecodes executed by ``call()`` (a deterministic measure of its work)."""
    count = 0

    def each_opcode(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "opcode":
            count += 1
        return each_opcode

    def each_call(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return each_opcode

    sys.settrace(each_call)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


async def test_a_memory_pull_costs_what_it_returns_not_what_the_room_holds() -> None:
    clock = FakeClock()
    log = MemoryLog(LogPolicy(), clock, MemoryNotifier())
    ts = int(clock.time() * 1000)

    async def held(count: int) -> None:
        for i in range(count):
            await log.append("stage", NewMessage("system", i, True, ts, to=f"u{i % 7}"))

    def pull_at_head() -> None:
        pulled = log._pull_one(PullRequest("stage", 0, 10, pafter=log._rooms["stage"].pseq))
        assert pulled.personal == ()

    await held(100)
    few = _opcodes(pull_at_head)
    await held(20_000)
    many = _opcodes(pull_at_head)
    # A rescan runs a few bytecodes per held message (over 20 000 more here);
    # a bisection runs the same handful whatever the room holds.
    assert many < few + 100, (few, many)


async def test_the_memory_engine_holds_at_most_its_node_cap_of_all_rooms() -> None:
    clock = FakeClock()
    log = MemoryLog(LogPolicy(important_keep=1, personal_node_cap=10), clock,
                    MemoryNotifier())
    ts = int(clock.time() * 1000)
    for room in ("a", "b"):
        for i in range(1, 9):
            await log.append(room, NewMessage("system", f"{room}{i}", True, ts, to="me"))
    a, b = await log.pull([PullRequest("a", 0, 10), PullRequest("b", 0, 10)])
    # 16 sent, 10 held: the node's 6 oldest went (a's first six), each room
    # kept within the window and over --important-keep otherwise.
    assert [e.body for e in a.personal] == ["a7", "a8"]
    assert [e.body for e in b.personal] == [f"b{i}" for i in range(1, 9)]
    # A room that goes leaves the count: the other may hold its part now.
    log.start_epoch("a")
    for i in range(9, 11):
        await log.append("b", NewMessage("system", f"b{i}", True, ts, to="me"))
    [b] = await log.pull([PullRequest("b", 0, 10)])
    assert [e.body for e in b.personal] == [f"b{i}" for i in range(1, 11)]


def _item(entry: Entry) -> Item:
    js, mp = encode_message(entry)
    return Item(entry.seq, entry.ts, js, mp)


def _entries(first: int, count: int, to: str) -> list[Entry]:
    return [Entry(seq=p, ic=0, uid="system", important=True, ts=0, body=p, to=to, n=p)
            for p in range(first, first + count)]


def test_a_nodes_cache_holds_at_most_its_node_cap_of_all_rooms() -> None:
    cap = NodeCap(5)
    one = Personal(keep=1, hard_cap=100, window_ms=10**12, node_cap=cap)
    two = Personal(keep=1, hard_cap=100, window_ms=10**12, node_cap=cap)
    one.add(_entries(1, 4, "me"), _item)
    one.trim(0)
    two.add(_entries(1, 4, "you"), _item)
    two.trim(0)
    # The node's oldest three went: one's first three.
    assert cap.held == 5
    assert one.boxes["me"].positions[one.boxes["me"].start:] == [4]
    assert len(two.order) == 4
    # A room's cache that goes (dropped, or a new epoch) leaves the count.
    one.release()
    assert cap.held == 4
    two.add(_entries(5, 1, "you"), _item)
    two.trim(0)
    assert len(two.order) == 5
    assert cap.held == 5


async def test_a_listener_is_told_what_the_node_cap_dropped(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url, personal_node_cap=4, important_keep=1) as node:
        me, other = Listener(session, "a", uid="me"), Listener(session, "b", uid="x")
        for room in ("a", "b"):
            await send(session, node.url, room, "open")
        await me.poll(node.url)
        await other.poll(node.url)
        await send(session, node.url, "a", "first", to="me")
        await asyncio.wait_for(me.poll(node.url), 5)
        for i in range(3):
            await send(session, node.url, "a", f"mine {i}", to="me")
        await node.node.recvsvr.wait_pulled("a")
        for i in range(3):
            await send(session, node.url, "b", f"theirs {i}", to="x")
        await node.node.recvsvr.wait_pulled("b")
        answer = await asyncio.wait_for(me.poll(node.url), 5)
        assert [m["body"] for m in answer["personal"]] == ["mine 2"]
        assert answer["pgap"] == 2  # "first" was delivered, not missed


async def test_a_room_the_cache_forgets_or_renews_leaves_the_nodes_count(
        session: aiohttp.ClientSession) -> None:
    """The node's count of personal messages follows its rooms: a new epoch
    or a room the cache lets go takes its messages out of it (on both builds:
    the compiled one cannot weakly reference the room's messages)."""
    async with running_node(personal_node_cap=100) as node:
        await send(session, node.url, "gone", "open")
        for i in range(3):
            await send(session, node.url, "gone", f"p{i}", to="me")
        cache = node.node.recvsvr.normal
        await cache.wait_pulled("gone")
        cap = cache.retention.node_cap
        assert cap is not None
        assert cap.held == 3
        await node.node.store.operators.end_broadcast("gone", 1, 86_400_000)
        await cache.wait_pulled("gone")
        assert cap.held == 0
