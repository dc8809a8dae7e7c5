"""The stats endpoints end to end, over real sockets, on both engines.

Time is a fake clock shared by the node(s): the heartbeat flush, the statsvr
write loop, the merge and the sampler all sleep on it, so a test moves time
and then waits (bounded) for the store round trips that follow.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from conftest import RedisServer
from support import ADMIN, ADMIN_HEADERS, Listener, in_page_order, running_node, send, until

from liveroom.clock import FakeClock


async def get(session: aiohttp.ClientSession, url: str, path: str,
              status: int = 200, **params: Any) -> dict[str, Any]:
    async with session.get(f"{url}{path}", params=params) as resp:
        assert resp.status == status, await resp.text()
        doc: dict[str, Any] = await resp.json()
        return doc


async def whitelist(session: aiohttp.ClientSession, url: str, room: str) -> None:
    """Make ``room`` vip through the admin API (this node sees it at once)."""
    async with session.put(f"{url}/v1/admin/vip/{room}",
                           headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
        assert resp.status == 200, await resp.text()


async def online_is(session: aiohttp.ClientSession, url: str, room: str, n: int) -> bool:
    return bool((await get(session, url, f"/v1/rooms/{room}/online"))["online"] == n)


async def test_members_appear_within_5_s_and_leave_after_the_ttl(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(engine_url, clock) as node:
        await node.node.store.log.open_room("r")  # polls count only in a room that exists
        listeners = {uid: Listener(session, "r", uid=uid) for uid in ["carol", "alice", "bob"]}
        for listener in listeners.values():
            await listener.poll(node.url)
        took = await until(clock, lambda: online_is(session, node.url, "r", 3))
        assert took <= 5.0
        doc = await get(session, node.url, "/v1/rooms/r/online")
        assert doc == {"room": "r", "online": 3, "members": ["alice", "bob", "carol"]}
        async with session.get(f"{node.url}/metrics", headers=ADMIN_HEADERS) as resp:
            metrics = await resp.text()
        assert "liveroom_heartbeats_total 3.0" in metrics
        assert "liveroom_statsvr_members 3.0" in metrics

        # alice keeps polling; bob and carol went away. Nobody leaves before 90 s.
        quiet = 0.0
        while quiet < 85:
            await clock.advance(5)
            quiet += 5
            # A first poll answers at once (no hold) and is a heartbeat all the same.
            await Listener(session, "r", uid="alice").poll(node.url)
            await asyncio.sleep(0.01)
        assert await online_is(session, node.url, "r", 3)
        took = await until(clock, lambda: online_is(session, node.url, "r", 1), limit=20)
        # Left at 90 s of silence, give or take the sweep period and one merge.
        assert 85 + took >= 90
        assert 85 + took <= 90 + 5 + 2
        doc = await get(session, node.url, "/v1/rooms/r/online")
        assert doc["members"] == ["alice"]
        answer = await Listener(session, "r", uid="alice").poll(node.url)
        assert answer["online"] == 1
        stats = await get(session, node.url, "/v1/rooms/r/stats")
        assert stats == {"room": "r", "online": 1, "viewers": 3, "viewers_exact": True,
                         "vip": False, "seq": 0, "likes": 0}


async def test_a_room_nobody_used_answers_zeros(engine_url: str,
                                                session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url) as node:
        await whitelist(session, node.url, "stage")
        for room, vip in [("empty", False), ("stage", True)]:
            assert await get(session, node.url, f"/v1/rooms/{room}/stats") == {
                "room": room, "online": 0, "viewers": 0, "viewers_exact": True,
                "vip": vip, "seq": 0, "likes": 0}
            assert await get(session, node.url, f"/v1/rooms/{room}/online") == {
                "room": room, "online": 0, "members": []}
            doc = await get(session, node.url, f"/v1/rooms/{room}/stats/online")
            assert doc == {"room": room, "step": 60, "points": []}


async def test_pages_of_a_vip_room_are_sorted_and_bounded(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(engine_url, clock) as node:
        await whitelist(session, node.url, "stage")
        listed = [f"u{i:04d}" for i in range(1500)]
        # Heartbeats as the proxy hands them over: straight into the node's table.
        node.node.statsvr.tables.beat("stage", list(reversed(listed)))
        # Pages list a vip room shard by shard, each sorted.
        uids = in_page_order(listed, node.node.settings.vip_shards)
        await until(clock, lambda: online_is(session, node.url, "stage", 1500))
        first = await get(session, node.url, "/v1/rooms/stage/online", limit=1000)
        assert first["members"] == uids[:1000]
        rest = await get(session, node.url, "/v1/rooms/stage/online", offset=1000, limit=1000)
        assert rest["members"] == uids[1000:]
        default = await get(session, node.url, "/v1/rooms/stage/online", offset=1450)
        assert default["members"] == uids[1450:]
        past = await get(session, node.url, "/v1/rooms/stage/online", offset=5000)
        assert past == {"room": "stage", "online": 1500, "members": []}
        stats = await get(session, node.url, "/v1/rooms/stage/stats")
        assert stats["vip"] is True
        assert stats["viewers"] == 1500
        assert stats["viewers_exact"] is True


async def test_the_online_series_has_one_step_per_answer(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock(start=1_700_000_000.0)  # 13:33:20 UTC: buckets are not aligned to it
    async with running_node(engine_url, clock) as node:
        await send(session, node.url, "r", "hello")  # a room that exists has listeners
        node.node.statsvr.tables.beat("r", ["a", "b"])
        start = clock.time()
        await until(clock, lambda: online_is(session, node.url, "r", 2))
        # Two more listeners for two minutes, sampled every 10 s.
        for _ in range(24):
            node.node.statsvr.tables.beat("r", ["a", "b", "c", "d"])
            await clock.advance(5)
            await asyncio.sleep(0.01)
        end = clock.time()
        doc = await get(session, node.url, "/v1/rooms/r/stats/online",
                        since=int(start), until=int(end))
        assert doc["room"] == "r"
        assert doc["step"] == 60
        points = doc["points"]
        assert [t % 60 for t, _, _ in points] == [0] * len(points)
        assert 2 <= len(points) <= 4
        assert all(2 <= avg <= 4 and peak in (2, 4) for _, avg, peak in points)
        assert max(peak for _, _, peak in points) == 4
        # An old range is answered from coarser buckets.
        week = await get(session, node.url, "/v1/rooms/r/stats/online",
                         since=int(end) - 3 * 86_400, until=int(end))
        assert week["step"] == 300


@pytest.mark.parametrize(("path", "params"), [
    ("/v1/rooms/r/online", {"limit": "0"}),
    ("/v1/rooms/r/online", {"limit": "1001"}),
    ("/v1/rooms/r/online", {"offset": "-1"}),
    ("/v1/rooms/r/online", {"offset": "1e3"}),
    ("/v1/rooms/bad%20room/online", {}),
    ("/v1/rooms/bad%20room/stats", {}),
    ("/v1/rooms/r/stats/online", {"since": "20", "until": "10"}),
    ("/v1/rooms/r/stats/online", {"since": "yesterday"}),
    ("/v1/rooms/r/stats/online", {"until": str(2**53)}),
])
async def test_bad_stats_queries_answer_400(session: aiohttp.ClientSession, path: str,
                                            params: dict[str, str]) -> None:
    async with running_node("memory") as node, \
            session.get(f"{node.url}{path}", params=params) as resp:
        assert resp.status == 400
        doc = await resp.json()
        assert doc["error"] == "bad_request"
        assert doc["message"]


async def test_two_nodes_over_one_redis_report_the_same_members(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(redis_url, clock, node_id="a") as a, \
            running_node(redis_url, clock, node_id="b") as b:
        await a.node.store.log.open_room("r")  # polls count only in a room that exists
        for i in range(20):
            # Listeners spread over both nodes; u0..u4 poll through both.
            await Listener(session, "r", uid=f"u{i}").poll(a.url if i % 2 else b.url)
            if i < 5:
                await Listener(session, "r", uid=f"u{i}").poll(a.url if i % 2 == 0 else b.url)

        async def both_see_20() -> bool:
            return (await online_is(session, a.url, "r", 20)
                    and await online_is(session, b.url, "r", 20))

        await until(clock, both_see_20)
        on_a = await get(session, a.url, "/v1/rooms/r/online")
        on_b = await get(session, b.url, "/v1/rooms/r/online")
        assert on_a == on_b
        assert on_a["members"] == sorted(f"u{i}" for i in range(20))
        stats_a = await get(session, a.url, "/v1/rooms/r/stats")
        stats_b = await get(session, b.url, "/v1/rooms/r/stats")
        assert stats_a == stats_b
        assert stats_a["viewers"] == 20
        assert stats_a["viewers_exact"] is True


async def test_a_node_killed_loses_its_members_only_after_the_ttl(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(redis_url, clock, node_id="survivor") as survivor:
        doomed = running_node(redis_url, clock, node_id="doomed")
        victim = await doomed.__aenter__()
        await survivor.node.store.log.open_room("r")  # polls count only in a room that exists
        try:
            for i in range(10):
                await Listener(session, "r", uid=f"u{i}").poll(victim.url)
            await until(clock, lambda: online_is(session, survivor.url, "r", 10))
        finally:
            # Killed without warning: its tasks stop, nothing is cleaned up in Redis.
            await victim.node.statsvr.stop()
            await doomed.__aexit__(None, None, None)
        # The last heartbeats were at most a few fake seconds ago.
        silent = 0.0
        while silent < 88:
            await clock.advance(4)
            silent += 4
            await asyncio.sleep(0.01)
        await until(clock, lambda: online_is(session, survivor.url, "r", 10), limit=1)
        took = await until(clock, lambda: online_is(session, survivor.url, "r", 0), limit=40)
        assert 88 + took <= 90 + 15 + 2 + 2 + 5  # the TTL, a refresh period, write and merge
        stats = await get(session, survivor.url, "/v1/rooms/r/stats")
        assert stats["online"] == 0
        assert stats["viewers"] == 10  # viewers already counted stay counted
        assert stats["viewers_exact"] is True


async def test_viewers_never_go_down_after_the_stored_history_is_lost(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    """Redis loses every key (a restart without persistence, a FLUSHALL) while
    the node shows 5 viewers, none of them online any more: the figure it
    shows stays at 5 or more, through its refreshes and the joins after."""
    clock = FakeClock()
    async with running_node(redis_url, clock) as node:
        await node.node.store.log.open_room("r")  # polls count only in a room that exists
        for i in range(5):
            await Listener(session, "r", uid=f"u{i}").poll(node.url)

        async def viewers() -> int:
            return int((await get(session, node.url, "/v1/rooms/r/stats"))["viewers"])

        async def five() -> bool:
            return await viewers() == 5

        await until(clock, five)
        # They leave: from now on only the history holds the figure up.
        await until(clock, lambda: online_is(session, node.url, "r", 0), step=5, limit=150)
        assert await five()
        client = aioredis.from_url(redis_url)
        try:
            await client.flushall()
        finally:
            await client.aclose()
        await node.node.store.log.open_room("r")
        shown = []
        for i in range(12):  # a dozen refreshes, a newcomer at every other
            if i % 2:
                await Listener(session, "r", uid=f"late{i}").poll(node.url)
            await clock.advance(1)
            await asyncio.sleep(0.05)
            shown.append(await viewers())
        assert min(shown) >= 5, shown
        assert shown == sorted(shown), shown


async def test_with_redis_down_stats_degrade_and_recover(
        redis_server: RedisServer, redis_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(redis_url, clock) as node:
        await node.node.store.log.open_room("r")  # polls count only in a room that exists
        for uid in ["a", "b"]:
            await Listener(session, "r", uid=uid).poll(node.url)
        await until(clock, lambda: online_is(session, node.url, "r", 2))
        redis_server.stop()
        # A room already merged keeps its last view; the poll path never waits.
        for _ in range(4):
            await clock.advance(1)
            await asyncio.sleep(0.05)
        assert await online_is(session, node.url, "r", 2)
        # A room this node never merged: 503 with Retry-After, not a hang.
        for path in ["/v1/rooms/new/online", "/v1/rooms/new/stats"]:
            async with session.get(f"{node.url}{path}") as resp:
                assert resp.status == 503
                assert resp.headers["Retry-After"]
                assert (await resp.json())["error"] == "store_unavailable"
        redis_server.start()  # empty: every shard key is gone
        # The listeners keep polling; the node writes its shards again by itself
        # (at the latest when their refresh finds the keys missing).

        async def back() -> bool:
            for uid in ["a", "b"]:
                await Listener(session, "r", uid=uid).poll(node.url)
            return await online_is(session, node.url, "r", 2)

        await until(clock, back, step=1, limit=20)
        assert (await get(session, node.url, "/v1/rooms/new/stats"))["online"] == 0
