"""The operators' overview end to end, over real sockets: ``GET /v1/admin/rooms``
(the biggest rooms now) and ``GET /v1/admin/nodes`` (the live nodes), on both
engines, and two nodes over one Redis seeing one registry.

Time is a fake clock shared by the node(s): heartbeat flushes, shard writes,
merges and announcements all sleep on it (see tests/stats/test_stats_http.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from support import ADMIN, Listener, running_node, send, until

from liveroom.clock import FakeClock
from liveroom.settings import Tier

AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def admin_get(session: aiohttp.ClientSession, url: str, path: str, *,
                    status: int = 200, **params: Any) -> dict[str, Any]:
    async with session.get(f"{url}{path}", params=params, headers=AUTH) as resp:
        assert resp.status == status, await resp.text()
        assert resp.content_type == "application/json"
        doc: dict[str, Any] = await resp.json()
        return doc


async def rooms_now(session: aiohttp.ClientSession, url: str, **params: Any) -> list[Any]:
    doc = await admin_get(session, url, "/v1/admin/rooms", **params)
    assert set(doc) == {"rooms"}
    rooms: list[Any] = doc["rooms"]
    return rooms


def listed(session: aiohttp.ClientSession, url: str, want: list[tuple[str, int]]) -> Any:
    """A check for :func:`until`: the biggest rooms are ``want`` (room, online)."""
    async def check() -> bool:
        rooms = await rooms_now(session, url)
        return [(r["room"], r["online"]) for r in rooms] == want
    return check


async def test_the_biggest_rooms_with_their_tier_vip_flag_and_messages_a_minute(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(engine_url, clock, tiers=(Tier(3, 1.0), Tier(100, 2.0, 1.0))) \
            as node:
        assert await rooms_now(session, node.url) == []
        for room in ("big", "small", "quiet"):
            await node.node.store.log.open_room(room)
        async with session.put(f"{node.url}/v1/admin/vip/big", headers=AUTH) as resp:
            assert resp.status == 200
        for i in range(6):
            await send(session, node.url, "big", i)
        await send(session, node.url, "small", "hi")
        for uid in ("a", "b", "c"):
            await Listener(session, "big", uid=uid).poll(node.url)
        for uid in ("a", "d"):
            await Listener(session, "small", uid=uid).poll(node.url)
        await Listener(session, "quiet", uid="e").poll(node.url)
        want = [("big", 3), ("small", 2), ("quiet", 1)]
        await until(clock, listed(session, node.url, want), limit=15)
        assert await rooms_now(session, node.url) == [
            {"room": "big", "online": 3, "interval_ms": 1000, "vip": True,
             "messages_per_minute": 6.0},
            {"room": "small", "online": 2, "interval_ms": 0, "vip": False,
             "messages_per_minute": 1.0},
            {"room": "quiet", "online": 1, "interval_ms": 0, "vip": False,
             "messages_per_minute": 0.0},
        ]
        assert [r["room"] for r in await rooms_now(session, node.url, limit=2)] == [
            "big", "small"]

        # A minute later the messages no longer count; the listeners, who
        # keep polling (their heartbeats, straight into the table), still do.
        beat = node.node.statsvr.tables.beat

        async def quiet_now() -> bool:
            beat("big", ["a", "b", "c"])
            rooms = await rooms_now(session, node.url, limit=1)
            return rooms[0]["messages_per_minute"] == 0.0
        took = await until(clock, quiet_now, step=5, limit=80)
        assert took >= 50

        # Listeners that stop polling leave, and so do their rooms.
        async def only_big() -> bool:
            beat("big", ["a", "b", "c"])
            return [r["room"] for r in await rooms_now(session, node.url)] == ["big"]
        await until(clock, only_big, step=5, limit=120)


async def test_the_nodes_and_what_each_holds(engine_url: str,
                                            session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(engine_url, clock, node_id="solo") as node:
        await node.node.store.log.open_room("r")
        listener = Listener(session, "r", uid="u")
        await listener.poll(node.url)
        task = asyncio.ensure_future(listener.poll(node.url, timeout=60))

        async def holding() -> bool:
            doc = await admin_get(session, node.url, "/v1/admin/nodes")
            return bool(doc["nodes"] and doc["nodes"][0]["held_polls"] == 1
                        and doc["nodes"][0]["members"] == 1)
        await until(clock, holding, limit=15)
        doc = await admin_get(session, node.url, "/v1/admin/nodes")
        (state,) = doc["nodes"]
        now_ms = int(clock.time() * 1000)
        assert state["node"] == "solo"
        assert now_ms - 5_000 <= state["announced_at"] <= now_ms
        assert state["expires_at"] == state["announced_at"] + 15_000
        assert (state["rooms_cached"], state["held_polls"], state["members"],
                state["rooms_merged"], state["rooms_listed"]) == (1, 1, 1, 1, 1)
        await send(session, node.url, "r", "bye")
        await task


async def test_two_nodes_over_one_redis_see_one_registry(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(redis_url, clock, node_id="n1") as one, \
            running_node(redis_url, clock, node_id="n2") as two:
        for room in ("both", "only1", "only2"):
            await one.node.store.log.open_room(room)
        # "both" has a listener on each node, the others one node's listeners.
        await Listener(session, "both", uid="x").poll(one.url)
        await Listener(session, "both", uid="y").poll(two.url)
        await Listener(session, "both", uid="z").poll(two.url)
        await Listener(session, "only1", uid="x").poll(one.url)
        for uid in ("p", "q"):
            await Listener(session, "only2", uid=uid).poll(two.url)
        for i in range(4):
            await send(session, one.url, "only2", i)  # sent through n1, read through n2
        want = [("both", 3), ("only2", 2), ("only1", 1)]
        await until(clock, listed(session, one.url, want), limit=15)
        await until(clock, listed(session, two.url, want), limit=15)
        # Messages a minute from the node that lists the room, which serves
        # its listeners (n2 for only2), wherever they were sent.
        async def counted() -> bool:
            rooms = await rooms_now(session, one.url)
            return [r["messages_per_minute"] for r in rooms] == [0.0, 4.0, 0.0]
        await until(clock, counted, limit=10)
        # Every room is listed by exactly one node, the one that samples it.
        states = (await admin_get(session, one.url, "/v1/admin/nodes"))["nodes"]
        assert [s["node"] for s in states] == ["n1", "n2"]
        assert sum(s["rooms_listed"] for s in states) == 3
        assert [(s["members"], s["rooms_merged"]) for s in states] == [(2, 2), (4, 2)]
        assert (await admin_get(session, two.url, "/v1/admin/nodes"))["nodes"] == states
        # A node that dies stops announcing: it leaves 15 s after its last word.
        await two.node.statsvr.registry.stop(withdraw=False)

        async def nodes_are(*names: str) -> bool:
            doc = await admin_get(session, one.url, "/v1/admin/nodes")
            return [s["node"] for s in doc["nodes"]] == list(names)
        took = await until(clock, lambda: nodes_are("n1"), limit=20)
        assert 10 <= took <= 16
    async with running_node(redis_url, clock, node_id="n3") as three:
        # n1 stopped: it took itself out at once.
        doc = await admin_get(session, three.url, "/v1/admin/nodes")
        assert [s["node"] for s in doc["nodes"]] == ["n3"]


@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten", "1.5", ""])
async def test_a_bad_limit_is_400(limit: str, session: aiohttp.ClientSession) -> None:
    async with running_node() as node:
        doc = await admin_get(session, node.url, "/v1/admin/rooms", status=400, limit=limit)
        assert doc == {"error": "bad_request",
                       "message": "limit must be an integer between 1 and 100"}
