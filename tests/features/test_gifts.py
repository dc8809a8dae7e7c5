"""Gifts over HTTP (``proxy/gifts/gifts.py``): the backend's call, exact scores and
ranks against a ledger, the leaderboard, a big gift as an important message,
and the ranking frozen into an ended broadcast."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgpack
import pytest
from support import ADMIN_HEADERS, PUBLISHER, Listener, running_node, send

from liveroom.clock import FakeClock
from proxy.tickets import mint

ROOM = "gift-room"
PUBLISHER_HEADERS = {"Authorization": f"Bearer {PUBLISHER}"}
KEY = "gift-ticket-key-0123456789abcdef-01"


async def call(session: aiohttp.ClientSession, method: str, url: str, *,
               json: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with session.request(method, url, json=json, headers=headers or {}) as resp:
        return resp.status, await resp.json()


async def open_room(session: aiohttp.ClientSession, url: str, room: str = ROOM) -> None:
    """The room exists (an operator's start): gifts need one that does."""
    status, body = await call(session, "POST", f"{url}/v1/admin/rooms/{room}/start",
                              headers=ADMIN_HEADERS)
    assert status == 201, body


@pytest.fixture
async def node_url(engine_url: str, session: aiohttp.ClientSession) -> AsyncIterator[str]:
    async with running_node(engine_url, gift_important=1000) as node:
        await open_room(session, node.url)
        yield node.url


async def test_a_gift_in_a_room_that_does_not_exist_is_404_and_counts_nothing(
        node_url: str, session: aiohttp.ClientSession) -> None:
    """Issue 44: a ticket with publish for any room made up rooms with gifts."""
    status, body = await call(session, "POST", f"{node_url}/v1/rooms/made-up/gifts",
                              json={"uid": "g", "value": 5, "gift": "rose"},
                              headers=PUBLISHER_HEADERS)
    assert (status, body["error"]) == (404, "no_such_room")
    _, board = await call(session, "GET", f"{node_url}/v1/rooms/made-up/leaderboard")
    assert board == {"room": "made-up", "top": [], "total": 0, "count": 0}


async def test_scores_and_ranks_are_exact_against_a_ledger(
        node_url: str, session: aiohttp.ClientSession) -> None:
    rng = random.Random(35)
    ledger: dict[str, int] = {}
    for _ in range(120):
        giver, value = f"g{rng.randrange(15)}", rng.randrange(1, 500)
        status, given = await call(session, "POST", f"{node_url}/v1/rooms/{ROOM}/gifts",
                                   json={"uid": giver, "value": value, "gift": "rose"},
                                   headers=PUBLISHER_HEADERS)
        assert status == 201, given
        ledger[giver] = ledger.get(giver, 0) + value
        ranked = sorted(ledger.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        assert given == {"room": ROOM, "uid": giver, "score": ledger[giver],
                         "rank": [u for u, _ in ranked].index(giver) + 1,
                         "total": sum(ledger.values())}
    status, board = await call(session, "GET", f"{node_url}/v1/rooms/{ROOM}/leaderboard")
    assert status == 200
    ranked = sorted(ledger.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    assert board == {"room": ROOM, "top": [{"uid": u, "score": s} for u, s in ranked[:10]],
                     "total": sum(ledger.values()), "count": 120}
    status, board = await call(session, "GET", f"{node_url}/v1/rooms/{ROOM}/leaderboard"
                               "?limit=100")
    assert len(board["top"]) == len(ledger)


async def test_a_gift_is_the_backends_call(node_url: str,
                                           session: aiohttp.ClientSession) -> None:
    gift = {"uid": "g", "value": 5, "gift": "rose"}
    url = f"{node_url}/v1/rooms/{ROOM}/gifts"
    assert (await call(session, "POST", url, json=gift))[0] == 401
    assert (await call(session, "POST", url, json=gift,
                       headers={"Authorization": "Bearer wrong"}))[0] == 401
    assert (await call(session, "POST", url, json=gift, headers=ADMIN_HEADERS))[0] == 201


async def test_bad_gifts_and_limits_are_400(node_url: str,
                                            session: aiohttp.ClientSession) -> None:
    url = f"{node_url}/v1/rooms/{ROOM}/gifts"
    for doc in [{"uid": "g", "value": 0, "gift": "r"},
                {"uid": "g", "value": 10**12 + 1, "gift": "r"},
                {"uid": "g", "value": "5", "gift": "r"}, {"uid": "g", "value": True, "gift": "r"},
                {"uid": "g", "value": 5, "gift": ""}, {"uid": "g", "value": 5, "gift": "x" * 65},
                {"value": 5, "gift": "r"}, {"uid": "g", "value": 5, "gift": "r", "x": 1}, [1]]:
        status, body = await call(session, "POST", url, json=doc, headers=PUBLISHER_HEADERS)
        assert status == 400, (doc, body)
        assert set(body) == {"error", "message"}
    for limit in ["0", "101", "x"]:
        status, body = await call(session, "GET", f"{node_url}/v1/rooms/{ROOM}/leaderboard"
                                  f"?limit={limit}")
        assert status == 400, (limit, body)


async def test_a_big_gift_goes_out_as_an_important_message(
        node_url: str, session: aiohttp.ClientSession) -> None:
    await send(session, node_url, ROOM, "hello")
    listener = Listener(session, ROOM)
    seen = await listener.poll(node_url)
    for _ in range(3):  # the node may answer from the room as started, before the hello
        if [m["body"] for m in seen["messages"]] == ["hello"]:
            break
        seen = await listener.poll(node_url)
    for value in (999, 1000):  # --gift-important 1000
        status, _ = await call(session, "POST", f"{node_url}/v1/rooms/{ROOM}/gifts",
                               json={"uid": "whale", "value": value, "gift": "rocket"},
                               headers=PUBLISHER_HEADERS)
        assert status == 201
    answer = await listener.poll(node_url)
    assert [(m["uid"], m["body"]) for m in answer["important"]] == [
        ("whale", {"gift": "rocket", "value": 1000})]


async def test_ending_the_broadcast_freezes_its_ranking(
        node_url: str, session: aiohttp.ClientSession) -> None:
    await send(session, node_url, ROOM, "hello")
    for giver, value in [("a", 30), ("b", 50), ("a", 25)]:
        await call(session, "POST", f"{node_url}/v1/rooms/{ROOM}/gifts",
                   json={"uid": giver, "value": value, "gift": "rose"},
                   headers=PUBLISHER_HEADERS)
    status, _ = await call(session, "POST", f"{node_url}/v1/admin/rooms/{ROOM}/end",
                           headers=ADMIN_HEADERS)
    assert status == 200
    _, past = await call(session, "GET", f"{node_url}/v1/rooms/{ROOM}/broadcasts")
    (ended,) = past["broadcasts"]
    assert (ended["gifts"], ended["ranking"]) == (
        105, [{"uid": "a", "score": 55}, {"uid": "b", "score": 50}])
    _, board = await call(session, "GET", f"{node_url}/v1/rooms/{ROOM}/leaderboard")
    assert board == {"room": ROOM, "top": [], "total": 0, "count": 0}


async def test_in_ticket_mode_a_ticket_needs_publish(session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, auth="ticket", ticket_keys=(KEY,)) as node:
        await open_room(session, node.url)
        url = f"{node.url}/v1/rooms/{ROOM}/gifts"
        gift = {"uid": "g", "value": 5, "gift": "rose"}
        fan = mint(KEY, "fan", rooms=[ROOM], now=clock.time())
        backend = mint(KEY, "backend", rooms=[ROOM], publish=True, now=clock.time())
        elsewhere = mint(KEY, "backend", rooms=["other"], publish=True, now=clock.time())
        assert (await call(session, "POST", url, json=gift,
                           headers={"Authorization": f"Bearer {fan}"}))[0] == 403
        assert (await call(session, "POST", url, json=gift,
                           headers={"Authorization": f"Bearer {elsewhere}"}))[0] == 401
        assert (await call(session, "POST", url, json=gift,
                           headers={"Authorization": f"Bearer {backend}"}))[0] == 201


async def poll_now(session: aiohttp.ClientSession, url: str, listener: Listener,
                   **extra: Any) -> dict[str, Any]:
    """An answer at once: a chat line first, so the poll is not held."""
    await send(session, url, ROOM, "tick")
    return await listener.poll(url, **extra)


async def gift(session: aiohttp.ClientSession, url: str, giver: str, value: int) -> None:
    status, body = await call(session, "POST", f"{url}/v1/rooms/{ROOM}/gifts",
                              json={"uid": giver, "value": value, "gift": "rose"},
                              headers=PUBLISHER_HEADERS)
    assert status == 201, body


async def test_answers_carry_the_top_givers_only_until_the_listener_has_them(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()  # the refresh runs when the test says
    async with running_node(engine_url, clock=clock) as node:
        ranking = node.node.proxy.ranking
        await send(session, node.url, ROOM, "hello")
        fan = Listener(session, ROOM, uid="fan")
        await ranking.refresh()
        assert "ranking" not in await fan.poll(node.url)  # no gifts: nothing added
        for giver, value in [("a", 30), ("b", 50), ("c", 5), ("d", 1), ("a", 25)]:
            await gift(session, node.url, giver, value)
        assert "ranking" not in await poll_now(session, node.url, fan)  # not read yet
        await ranking.refresh()
        first = (await poll_now(session, node.url, fan))["ranking"]
        assert first["top"] == [{"uid": "a", "score": 55}, {"uid": "b", "score": 50},
                                {"uid": "c", "score": 5}]  # the top three
        # Echoed, it is not sent again, while gifts that leave the top alone come in.
        await gift(session, node.url, "d", 1)
        await ranking.refresh()
        assert "ranking" not in await poll_now(session, node.url, fan, ranking=first["version"])
        await gift(session, node.url, "d", 100)
        await ranking.refresh()
        await send(session, node.url, ROOM, "news")  # a delivery, not only an empty answer
        second = (await fan.poll(node.url, ranking=first["version"]))["ranking"]
        assert second["top"][0] == {"uid": "d", "score": 102}
        assert second["version"] != first["version"]
        async with session.get(f"{node.url}/v1/rooms/{ROOM}/poll",
                               params={"uid": "mp", "ranking": str(first["version"])},
                               headers={"Accept": "application/msgpack"}) as resp:
            assert msgpack.unpackb(await resp.read())["ranking"] == second
        # The broadcast ends: a listener that holds a ranking hears it is empty, once.
        status, _ = await call(session, "POST", f"{node.url}/v1/admin/rooms/{ROOM}/end",
                               headers=ADMIN_HEADERS)
        assert status == 200
        await ranking.refresh()
        emptied = (await poll_now(session, node.url, fan, ranking=second["version"]))["ranking"]
        assert emptied["top"] == []
        assert "ranking" not in await poll_now(session, node.url, fan, ranking=emptied["version"])
        assert "ranking" not in await poll_now(session, node.url, fan)


async def test_two_nodes_give_the_same_version_for_the_same_top(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(redis_url, clock=clock) as one, \
            running_node(redis_url, clock=clock) as two:
        await send(session, one.url, ROOM, "hello")
        await gift(session, one.url, "a", 7)
        versions = []
        for node in (one, two):
            fan = Listener(session, ROOM, uid="fan")
            await fan.poll(node.url)  # the room is polled here now
            await node.node.proxy.ranking.refresh()
            versions.append((await poll_now(session, node.url, fan))["ranking"])
        assert versions[0] == versions[1]
        fan = Listener(session, ROOM, uid="moved")
        await fan.poll(one.url)
        seen = versions[0]["version"]
        assert "ranking" not in await poll_now(session, two.url, fan, ranking=seen)


async def test_a_bad_ranking_version_is_400(node_url: str,
                                            session: aiohttp.ClientSession) -> None:
    for bad in ["x", "-1", "1.5", str(2**53)]:
        async with session.get(f"{node_url}/v1/rooms/{ROOM}/poll",
                               params={"uid": "u", "ranking": bad}) as resp:
            assert resp.status == 400, bad
            body = await resp.json()
            assert set(body) == {"error", "message"}
            assert "ranking" in body["message"]
