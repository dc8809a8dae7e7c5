"""The operators' API end to end, over real sockets, on both engines: the vip
whitelist (and a room moving between sects on every node without dropping a
listener), the end of a broadcast, and the list of ended broadcasts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from conftest import RedisServer
from support import ADMIN, PUBLISHER, Listener, read_response, running_node, send, until

from liveroom.clock import FakeClock
from liveroom.node import Node

AUTH = {"Authorization": f"Bearer {ADMIN}"}

ADMIN_ROUTES = [("PUT", "/v1/admin/vip/stage"), ("DELETE", "/v1/admin/vip/stage"),
                ("GET", "/v1/admin/vip"), ("GET", "/v1/admin/vip/stage"),
                ("PUT", "/v1/admin/vip/stage/pin?sect=vip"),
                ("DELETE", "/v1/admin/vip/stage/pin"), ("POST", "/v1/admin/rooms/stage/end"),
                ("POST", "/v1/admin/rooms/stage/start"),
                ("GET", "/v1/admin/rooms"), ("GET", "/v1/admin/nodes")]


async def call(session: aiohttp.ClientSession, method: str, url: str, *,
               status: int = 200, headers: dict[str, str] | None = None) -> dict[str, Any]:
    async with session.request(method, url, headers=AUTH if headers is None else headers) \
            as resp:
        assert resp.status == status, await resp.text()
        doc: dict[str, Any] = await resp.json()
        return doc


async def held(node: Node, count: int = 1) -> None:
    """Wait until ``count`` polls are held by the node."""
    async with asyncio.timeout(5):
        while node.proxy.held_polls() < count:
            await asyncio.sleep(0.01)


# -- the token, the names, the store -----------------------------------------------


@pytest.mark.parametrize(("method", "path"), ADMIN_ROUTES)
async def test_the_admin_api_needs_the_admin_token(method: str, path: str,
                                                   session: aiohttp.ClientSession) -> None:
    async with running_node() as node:
        for headers, status in [({}, 401), ({"Authorization": "Bearer nope"}, 401),
                                ({"Authorization": "Basic " + ADMIN}, 401),
                                ({"Authorization": f"Bearer {PUBLISHER}"}, 403)]:
            doc = await call(session, method, f"{node.url}{path}", status=status,
                             headers=headers)
            assert set(doc) == {"error", "message"}
        # Nothing changed by the refused calls.
        assert (await call(session, "GET", f"{node.url}/v1/admin/vip"))["sects"] == []
        assert not node.node.vip_list.is_vip("stage")


@pytest.mark.parametrize(("method", "path"), [
    ("PUT", "/v1/admin/vip/no%20spaces"), ("DELETE", "/v1/admin/vip/bad*name"),
    ("POST", "/v1/admin/rooms/" + "x" * 65 + "/end"), ("GET", "/v1/rooms/a%2Fb/broadcasts"),
])
async def test_bad_room_names_are_400(method: str, path: str,
                                      session: aiohttp.ClientSession) -> None:
    async with running_node() as node:
        doc = await call(session, method, f"{node.url}{path}", status=400)
        assert doc["error"] == "bad_request"
        assert "room must match" in doc["message"]


@pytest.mark.parametrize("room", [".", "..", "..."])
async def test_rooms_made_only_of_dots_are_400_on_every_path(room: str) -> None:
    """No link can address them (``.`` and ``..`` are path segments), so no
    request may create or read one: the front and aiohttp refuse alike."""
    escaped = room.replace(".", "%2E")
    async with running_node() as node:
        host, port = node.url.removeprefix("http://").split(":")
        for raw in (f"GET /v1/rooms/{room}/poll?uid=u HTTP/1.1\r\nHost: t\r\n\r\n",
                    f"POST /v1/rooms/{room}/messages HTTP/1.1\r\nHost: t\r\n"
                    "Content-Type: application/json\r\nContent-Length: 25\r\n\r\n"
                    '{"uid": "u", "body": "x"}'):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(raw.encode())
            status, _, body = await read_response(reader)
            writer.close()
            assert (status, json.loads(body)["error"]) == (400, "bad_request"), raw
            assert "dots" in json.loads(body)["message"]
        # aiohttp's routes, escaped (a client would resolve the dots away).
        for method, path in [("GET", f"/v1/rooms/{escaped}/stats"),
                             ("GET", f"/v1/rooms/{escaped}/online"),
                             ("PUT", f"/v1/admin/vip/{escaped}")]:
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(f"{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
                         f"{ADMIN}\r\nContent-Length: 0\r\n\r\n".encode())
            status, _, body = await read_response(reader)
            writer.close()
            assert status == 400, (method, path, body)
            assert "dots" in json.loads(body)["message"], (method, path)


async def test_the_store_down_is_503_with_retry_after(redis_server: RedisServer, redis_url: str,
                                                      session: aiohttp.ClientSession) -> None:
    async with running_node(redis_url) as node:
        redis_server.stop()
        for method, path in [*ADMIN_ROUTES, ("GET", "/v1/rooms/stage/broadcasts")]:
            async with session.request(method, f"{node.url}{path}", headers=AUTH) as resp:
                assert resp.status == 503, (method, path, await resp.text())
                assert int(resp.headers["Retry-After"]) >= 1
                assert (await resp.json())["error"] == "store_unavailable"
        redis_server.start()


# -- the sects ---------------------------------------------------------------


async def test_pin_unpin_release_and_list_the_sects(engine_url: str,
                                                   session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url) as node:
        url = node.url
        stats = f"{url}/v1/rooms/stage/stats"
        assert (await call(session, "GET", stats))["vip"] is False
        doc = await call(session, "PUT", f"{url}/v1/admin/vip/stage")
        assert {k: doc[k] for k in ("room", "vip", "changed", "pinned", "mode", "reason")} \
            == {"room": "stage", "vip": True, "changed": True, "pinned": "vip",
                "mode": "pinned", "reason": "pin"}
        assert doc["since"] > 0
        assert doc["moves"] == [{"at": doc["since"], "to": "vip", "reason": "pin"}]
        # This node sees its own change at once.
        assert (await call(session, "GET", stats))["vip"] is True
        assert (await call(session, "PUT", f"{url}/v1/admin/vip/stage"))["changed"] is False
        await call(session, "PUT", f"{url}/v1/admin/vip/arena")
        doc = await call(session, "PUT", f"{url}/v1/admin/vip/quiet/pin?sect=normal")
        assert (doc["vip"], doc["pinned"], doc["changed"], doc["moves"]) == \
            (False, "normal", False, [])
        for query in ("?sect=maybe", ""):
            doc = await call(session, "PUT", f"{url}/v1/admin/vip/x/pin{query}", status=400)
            assert doc == {"error": "bad_request", "message": "sect must be vip or normal"}
        listed = await call(session, "GET", f"{url}/v1/admin/vip")
        assert listed["rooms"] == ["arena", "stage"]
        assert [(s["room"], s["vip"], s["mode"]) for s in listed["sects"]] == [
            ("arena", True, "pinned"), ("quiet", False, "pinned"), ("stage", True, "pinned")]
        assert listed["rule"] == {"promote": 50_000, "promote_after": 60.0,
                                  "demote": 20_000, "demote_after": 600.0,
                                  "settle": 600.0}
        # Unpinned, a room stays where it is and the rule decides from now on.
        doc = await call(session, "DELETE", f"{url}/v1/admin/vip/arena/pin")
        assert (doc["vip"], doc["pinned"], doc["mode"], doc["changed"]) == \
            (True, None, "auto", False)
        assert await call(session, "GET", f"{url}/v1/admin/vip/arena") == \
            {k: v for k, v in doc.items() if k != "changed"}
        doc = await call(session, "DELETE", f"{url}/v1/admin/vip/stage")
        assert (doc["vip"], doc["changed"], doc["pinned"], doc["reason"]) == \
            (False, True, None, "operator")
        assert (await call(session, "DELETE", f"{url}/v1/admin/vip/stage"))["changed"] is False
        assert (await call(session, "GET", stats))["vip"] is False
        assert (await call(session, "GET", f"{url}/v1/admin/vip"))["rooms"] == ["arena"]
        assert await call(session, "GET", f"{url}/v1/admin/vip/never") == {
            "room": "never", "vip": False, "pinned": None, "mode": "auto", "since": None,
            "reason": None, "candidate_since": None, "moves": []}


async def test_the_whitelist_outlives_a_node_restart(redis_url: str,
                                                     session: aiohttp.ClientSession) -> None:
    async with running_node(redis_url, node_id="a") as first:
        await call(session, "PUT", f"{first.url}/v1/admin/vip/stage")
    # Read at start-up, before the node listens.
    async with running_node(redis_url, node_id="a") as again:
        assert again.node.vip_list.is_vip("stage")
        assert (await call(session, "GET", f"{again.url}/v1/rooms/stage/stats"))["vip"] is True


async def test_a_room_moves_to_the_vip_sect_on_every_node_without_dropping_a_listener(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(redis_url, clock, node_id="a") as a, \
            running_node(redis_url, clock, node_id="b") as b:
        await send(session, a.url, "stage", "before")
        on_a = Listener(session, "stage", uid="on-a")
        on_b = Listener(session, "stage", uid="on-b")
        await on_a.poll(a.url)
        await on_b.poll(b.url)
        polls = [asyncio.create_task(on_a.poll(a.url, timeout=30)),
                 asyncio.create_task(on_b.poll(b.url, timeout=30))]
        await held(a.node)
        await held(b.node)

        await call(session, "PUT", f"{a.url}/v1/admin/vip/stage")
        assert a.node.vip_list.is_vip("stage")  # at once where it was made
        assert not b.node.vip_list.is_vip("stage")
        async def b_knows() -> bool:
            return b.node.vip_list.is_vip("stage")

        await until(clock, b_knows, limit=b.node.settings.vip_refresh + 1)
        await asyncio.sleep(0.2)
        assert not any(p.done() for p in polls)  # a move alone answers nobody

        sent = await send(session, b.url, "stage", "after", important=True)
        async with asyncio.timeout(5):
            answers = await asyncio.gather(*polls)
        for answer in answers:
            assert answer["reset"] is False
            assert answer["epoch"] == sent["epoch"]
            assert [m["body"] for m in answer["important"]] == ["after"]
        for node in (a.node, b.node):
            assert node.recvsvr.vip.peek("stage") is not None
            assert node.recvsvr.sect_of("stage") is node.recvsvr.vip
        # And listeners carry on in the vip sect.
        await send(session, a.url, "stage", "later")
        await on_b.poll(b.url, timeout=5)
        assert on_b.bodies() == ["before", "after", "later"]
        assert not any(x["reset"] for x in on_a.answers + on_b.answers)


async def test_statsvr_splits_a_room_over_vip_shards_once_it_is_vip(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(engine_url, clock, vip_shards=4) as node:
        stats = node.node.store.stats
        uids = [f"u{i}" for i in range(64)]

        async def shards() -> set[int]:
            [entries] = await stats.shard_index(["stage"], int(clock.time() * 1000))
            return {e.count for e in entries}

        node.node.statsvr.tables.beat("stage", uids)
        await until(clock, lambda: shards_are(shards, {1}))
        await call(session, "PUT", f"{node.url}/v1/admin/vip/stage")
        node.node.statsvr.tables.beat("stage", uids)
        await until(clock, lambda: shards_are(shards, {4}))

        async def online() -> bool:
            doc = await call(session, "GET", f"{node.url}/v1/rooms/stage/online", headers={})
            return bool(doc["online"] == 64)
        # A merge may read the shard index between the drop of the old shard
        # and the write of the new ones (one pipeline, not one transaction):
        # the next merge, a second later, has them all.
        await until(clock, online, limit=2)


async def shards_are(read: Callable[[], Awaitable[set[int]]], counts: set[int]) -> bool:
    return await read() == counts


# -- the end of a broadcast -------------------------------------------------------------


async def test_ending_a_broadcast_resets_listeners_and_starts_viewers_over(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(engine_url, clock) as node:
        url = node.url
        # The room exists from its first send; polls before it count no one.
        await send(session, url, "show", "one")
        viewers = [Listener(session, "show", uid=f"v{i}") for i in range(3)]
        for listener in viewers:
            await listener.poll(url)

        async def watched(n: int) -> bool:
            doc = await call(session, "GET", f"{url}/v1/rooms/show/stats", headers={})
            return bool(doc["viewers"] == n)

        async def online(n: int) -> bool:
            doc = await call(session, "GET", f"{url}/v1/rooms/show/stats", headers={})
            return bool(doc["online"] == n)

        await until(clock, lambda: watched(3))
        # Two of them leave; the third keeps polling.
        stayer = viewers[0]
        for _ in range(25):
            await clock.advance(5)
            # A first poll answers at once and is a heartbeat all the same.
            await Listener(session, "show", uid=stayer.uid).poll(url)
            await asyncio.sleep(0.01)
            if await online(1):
                break
        assert await online(1)
        assert await watched(3)

        old_epoch = stayer.epoch
        poll = asyncio.create_task(stayer.poll(url, timeout=30))
        await held(node.node)
        ended_at = int(clock.time() * 1000)
        ended = await call(session, "POST", f"{url}/v1/admin/rooms/show/end")
        assert set(ended) == {"room", "epoch", "broadcast"}
        assert ended["room"] == "show"
        assert ended["broadcast"] == 2
        assert ended["epoch"] != old_epoch
        # The held listener resets into the new epoch promptly (no fake time passes).
        async with asyncio.timeout(3):
            answer = await poll
        assert answer["reset"] is True
        assert answer["epoch"] == ended["epoch"]
        # The ended broadcast's chat is gone, for this listener and a new one.
        assert (answer["messages"], answer["important"]) == ([], [])
        fresh = await Listener(session, "show", uid="late").poll(url)
        assert (fresh["epoch"], fresh["messages"]) == (ended["epoch"], [])
        # Seqs go on; what is sent next arrives in the new epoch.
        sent = await send(session, url, "show", "two")
        assert sent["epoch"] == ended["epoch"]
        await stayer.poll(url, timeout=5)
        assert stayer.bodies()[-1] == "two"

        # The viewers count starts over: the listener still here, and the late one.
        await until(clock, lambda: watched(2), limit=20)
        doc = await call(session, "GET", f"{url}/v1/rooms/show/broadcasts", headers={})
        assert doc == {"room": "show", "broadcasts": [
            {"broadcast": 1, "ended_at": ended_at, "viewers": 3, "viewers_exact": True,
             "likes": 0, "gifts": 0, "ranking": []}]}


async def test_starting_a_room_counts_its_listeners_before_the_first_message(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(engine_url, clock) as node:
        url = node.url
        early = Listener(session, "soon", uid="early")
        first = await early.poll(url)
        assert first["epoch"] == "0"  # no room yet: nobody is counted
        poll = asyncio.create_task(early.poll(url, timeout=30))
        await held(node.node)
        started = await call(session, "POST", f"{url}/v1/admin/rooms/soon/start", status=201)
        assert set(started) == {"room", "epoch", "broadcast", "created"}
        assert (started["room"], started["broadcast"], started["created"]) == (
            "soon", 1, True)

        async def online(n: int) -> bool:
            doc = await call(session, "GET", f"{url}/v1/rooms/soon/stats", headers={})
            return bool(doc["online"] == n and doc["viewers"] == n)

        # The listener held since before the room existed counts now, and so
        # does one who comes next.
        await until(clock, lambda: online(1))
        second = await Listener(session, "soon", uid="second").poll(url)
        assert (second["epoch"], second["messages"]) == (started["epoch"], [])
        await until(clock, lambda: online(2))
        # Starting an open room changes nothing.
        again = await call(session, "POST", f"{url}/v1/admin/rooms/soon/start")
        assert again == {**started, "created": False}
        # The held listener reads the room from its start: no reset, nothing lost.
        await send(session, url, "soon", "hello")
        async with asyncio.timeout(3):
            answer = await poll
        assert (answer["reset"], answer["epoch"]) == (False, started["epoch"])
        assert early.bodies() == ["hello"]


async def test_a_room_never_ended_has_no_past_broadcasts(engine_url: str,
                                                        session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url) as node:
        doc = await call(session, "GET", f"{node.url}/v1/rooms/fresh/broadcasts", headers={})
        assert doc == {"room": "fresh", "broadcasts": []}
