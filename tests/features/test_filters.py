"""The word filter over HTTP (``proxy/filters/``, the send path in
``proxy/sends/send.py``): lists put, read and deleted by operators; a
``block`` list's word refused (403 ``filtered``, nothing stored), a
``mask`` list's masked for every listener, a ``hold`` list's handed to the
review queue (503 ``review_unavailable`` without one); every untrusted send
screened, the backend's tokens' not; a list of some rooms only there; a
change through one node applied on another over Redis, a store that lost
its lists followed; bad input a 4xx; the metrics."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgpack
import pytest
import redis.asyncio as aioredis
from support import ADMIN_HEADERS, PUBLISHER, SHARED_SECRET, Listener, Running, running_node

from proxy.tickets import mint

ROOM = "filter-room"
KEY = "filters-ticket-key-0123456789abcdef-47"
PUBLISHER_HEADERS = {"Authorization": f"Bearer {PUBLISHER}"}


async def call(session: aiohttp.ClientSession, method: str, url: str, *, json: Any = None,
               headers: dict[str, str] | None = None, data: bytes | None = None
               ) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
    async with session.request(method, url, json=json, data=data,
                               headers=ADMIN_HEADERS if headers is None else headers) as resp:
        doc = await resp.json() if resp.content_type == "application/json" else None
        return resp.status, doc, resp.headers


async def put_list(session: aiohttp.ClientSession, url: str, name: str, words: list[str],
                   action: str, rooms: list[str] | None = None) -> Any:
    doc: dict[str, Any] = {"words": words, "action": action}
    if rooms is not None:
        doc["rooms"] = rooms
    status, answer, _ = await call(session, "PUT", f"{url}/v1/admin/filters/{name}", json=doc)
    assert status == 200, answer
    return answer


async def post(session: aiohttp.ClientSession, url: str, body: Any, *, uid: str | None = "fan",
               room: str = ROOM, headers: dict[str, str] | None = None,
               **fields: Any) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
    doc = {"body": body, **fields}
    if uid is not None:
        doc["uid"] = uid
    return await call(session, "POST", f"{url}/v1/rooms/{room}/messages", json=doc,
                      headers=headers or {})


async def head_of(session: aiohttp.ClientSession, url: str, room: str = ROOM) -> int:
    """The room's seq: what its log holds."""
    async with session.get(f"{url}/v1/rooms/{room}/stats") as resp:
        seq: int = (await resp.json())["seq"]
        return seq


@pytest.fixture
async def node(engine_url: str) -> AsyncIterator[Running]:
    async with running_node(engine_url) as running:
        yield running


async def test_a_mask_list_masks_each_word_for_every_listener_until_deleted(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    listener = Listener(session, ROOM)
    assert (await post(session, url, "hello"))[0] == 201
    await listener.poll(url)
    stored = await put_list(session, url, "insults", ["bad", "坏人", "bad"], "mask")
    assert {k: v for k, v in stored.items() if k not in ("version", "at_ms")} == {
        "name": "insults", "action": "mask", "rooms": [], "words": ["bad", "坏人"],
        "count": 2}
    sent = [
        {"text": "so Ｂ.a\u200bD!! 好坏 人 ok"},
        {"text": "BAD", "more": ["fine", {"deep": "bAd news"}], "bad": 1},
        "a b a d dude",
        "nothing wrong here",
    ]
    for body in sent:
        status, doc, _ = await post(session, url, body)
        assert status == 201, doc
    await listener.poll_until(url, 5)
    assert listener.bodies()[1:] == [
        {"text": "so *****!! 好*** ok"},
        {"text": "***", "more": ["fine", {"deep": "*** news"}], "bad": 1},
        "a ***** dude",  # the stretch the word spans, the spaces slipped in with it
        "nothing wrong here",
    ]
    status, doc, _ = await call(session, "GET", f"{url}/v1/admin/filters")
    assert status == 200
    assert [(d["name"], d["words"]) for d in doc["lists"]] == [("insults", ["bad", "坏人"])]
    assert doc["limits"] == {"lists": 16, "words": 10_000, "word_chars": 32, "rooms": 1000}
    status, doc, _ = await call(session, "DELETE", f"{url}/v1/admin/filters/insults")
    assert (status, doc["name"], doc["deleted"]) == (200, "insults", True)
    assert (await post(session, url, "bad"))[0] == 201
    await listener.poll_until(url, 6)
    assert listener.bodies()[-1] == "bad"
    assert (await call(session, "GET", f"{url}/v1/admin/filters"))[1]["lists"] == []


async def test_a_block_list_refuses_the_send_and_stores_nothing(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    assert (await post(session, url, "hello"))[0] == 201
    await put_list(session, url, "scams", ["free money", "赌博"], "block")
    before = await head_of(session, url)
    for body in ("FREE  Money!!", {"text": "来赌 博吧"}, ["x", "ｆｒｅｅ\u200bｍｏｎｅｙ"]):
        status, doc, headers = await post(session, url, body)
        assert (status, doc["error"]) == (403, "filtered"), body
        assert "Retry-After" not in headers
        assert "free" not in doc["message"]  # which word is not told
    # A msgpack body alike.
    packed = msgpack.packb({"uid": "fan", "body": "free money"})
    status, doc, _ = await call(session, "POST", f"{url}/v1/rooms/{ROOM}/messages",
                                data=packed, headers={"Content-Type": "application/msgpack"})
    assert (status, doc["error"]) == (403, "filtered")
    assert await head_of(session, url) == before
    status, doc, _ = await post(session, url, "money is free")  # not the word, in order
    assert (status, doc["seq"]) == (201, before + 1)


async def test_a_hold_list_hands_the_message_to_the_review_queue_or_refuses_it(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    assert (await post(session, url, "hello"))[0] == 201
    await put_list(session, url, "doubtful", ["links"], "hold")
    await put_list(session, url, "rude", ["bad"], "mask")
    before = await head_of(session, url)
    status, doc, _ = await post(session, url, "bad LINKS here", client_msg_id="c-1")
    assert (status, doc) == (202, {"held": "1"})
    (held,) = (await node.node.review.store.held(ROOM, 10))[0]
    assert (held.uid, held.body, held.why) == (
        "fan", "bad LINKS here", "word lists: doubtful")  # kept as sent, unmasked
    async with session.post(f"{url}/v1/rooms/{ROOM}/messages",
                            data=msgpack.packb({"uid": "fan", "body": "links"}),
                            headers={"Content-Type": "application/msgpack",
                                     "Accept": "application/msgpack"}) as resp:
        assert (resp.status, msgpack.unpackb(await resp.read())) == (202, {"held": "2"})
    assert await head_of(session, url) == before  # nothing in the room
    review, node.node.proxy.sends.review = node.node.proxy.sends.review, None
    status, doc, headers = await post(session, url, "bad LINKS here")
    assert (status, doc["error"]) == (503, "review_unavailable")
    assert "Retry-After" not in headers  # no queue: retrying will not help
    node.node.proxy.sends.review = review


async def test_the_backends_tokens_are_not_filtered_and_every_other_send_is(
        session: aiohttp.ClientSession) -> None:
    async with running_node() as running:
        url = running.url
        await put_list(session, url, "scams", ["free money"], "block")
        for fields in ({}, {"important": True}, {"to": "fan"}):
            status, doc, _ = await post(session, url, "free money", uid="system",
                                        headers=PUBLISHER_HEADERS, **fields)
            assert status == 201, (fields, doc)
            status, doc, _ = await post(session, url, "free money", uid="system",
                                        headers=ADMIN_HEADERS, **fields)
            assert status == 201, (fields, doc)
        assert (await post(session, url, "free money"))[0] == 403
    async with running_node(auth="ticket", ticket_keys=(KEY,)) as running:
        url = running.url
        await put_list(session, url, "scams", ["free money"], "block")
        ticket = {"Authorization": "Bearer " + mint(KEY, "host", rooms=[ROOM], publish=True)}
        for fields in ({}, {"important": True}, {"to": "fan"}):
            status, doc, _ = await post(session, url, "free money", uid=None, headers=ticket,
                                        **fields)
            assert (status, doc["error"]) == (403, "filtered"), fields
        status, _, _ = await post(session, url, "free money", uid="system",
                                  headers=PUBLISHER_HEADERS)
        assert status == 201


async def test_a_list_of_some_rooms_applies_to_those_alone(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    await put_list(session, url, "kids", ["beer"], "block", rooms=[ROOM, "other"])
    await put_list(session, url, "everywhere", ["spam"], "block", rooms=[])
    assert (await post(session, url, "beer"))[0] == 403
    assert (await post(session, url, "beer", room="other"))[0] == 403
    assert (await post(session, url, "beer", room="adults"))[0] == 201
    assert (await post(session, url, "spam", room="adults"))[0] == 403
    lists = (await call(session, "GET", f"{url}/v1/admin/filters"))[1]["lists"]
    assert [(d["name"], d["rooms"]) for d in lists] == [
        ("everywhere", []), ("kids", ["filter-room", "other"])]


async def test_a_list_put_through_one_node_applies_on_the_other_and_a_lost_one_goes(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(redis_url, secret=SHARED_SECRET) as one, \
            running_node(redis_url, secret=SHARED_SECRET) as two:

        async def refused(node: Running) -> bool:
            return (await post(session, node.url, "spam"))[0] == 403

        assert not await refused(two)
        await put_list(session, one.url, "spam", ["spam"], "block")
        assert await refused(one)  # at once where it was put
        async with asyncio.timeout(2):  # within a refresh on the other
            while not await refused(two):
                await asyncio.sleep(0.05)
        status, _, _ = await call(session, "DELETE", f"{one.url}/v1/admin/filters/spam")
        assert status == 200
        async with asyncio.timeout(2):
            while await refused(two):
                await asyncio.sleep(0.05)
        await put_list(session, two.url, "spam", ["spam"], "block")
        await put_list(session, two.url, "more", ["ham"], "block")
        async with asyncio.timeout(2):
            while not await refused(one):
                await asyncio.sleep(0.05)
        async with aioredis.from_url(redis_url) as raw:
            await raw.flushall()  # a Redis restarted empty: its version went back
        async with asyncio.timeout(2):
            while await refused(one) or await refused(two):
                await asyncio.sleep(0.05)
        assert one.node.proxy.filters.screens.lists == {}
        assert two.node.proxy.filters.version == 0


BAD: list[tuple[str, str, Any, dict[str, str] | None, int, str]] = [
    ("PUT", "spam", {"words": ["x"], "action": "mask"}, {}, 401, "unauthorized"),
    ("PUT", "spam", {"words": ["x"], "action": "mask"}, PUBLISHER_HEADERS, 403, "forbidden"),
    ("GET", "", None, {}, 401, "unauthorized"),
    ("DELETE", "spam", None, PUBLISHER_HEADERS, 403, "forbidden"),
    ("PUT", "x" * 65, {"words": ["x"], "action": "mask"}, None, 400, "bad_request"),
    ("PUT", "spam", ["x"], None, 400, "bad_body"),
    ("PUT", "spam", {"words": ["x"], "action": "mask", "why": 1}, None, 400, "bad_body"),
    ("PUT", "spam", {"words": [], "action": "mask"}, None, 400, "bad_body"),
    ("PUT", "spam", {"words": "x", "action": "mask"}, None, 400, "bad_body"),
    ("PUT", "spam", {"words": [1], "action": "mask"}, None, 400, "bad_body"),
    ("PUT", "spam", {"words": ["x"]}, None, 400, "bad_body"),
    ("PUT", "spam", {"words": ["x"], "action": "drop"}, None, 400, "bad_body"),
    ("PUT", "spam", {"words": ["x"], "action": "mask", "rooms": "r"}, None, 400, "bad_body"),
    ("PUT", "spam", {"words": ["x"], "action": "mask", "rooms": ["a room"]}, None, 400,
     "bad_body"),
    ("PUT", "spam", {"words": ["!!! 😀"], "action": "mask"}, None, 400, "bad_body"),
    ("PUT", "spam", {"words": ["fiver"], "action": "mask"}, None, 400, "bad_body"),
    ("DELETE", "never", None, None, 404, "not_found"),
]


@pytest.mark.parametrize(("method", "name", "body", "headers", "status", "code"), BAD)
async def test_bad_calls_are_refused(session: aiohttp.ClientSession, method: str, name: str,
                                     body: Any, headers: dict[str, str] | None, status: int,
                                     code: str) -> None:
    async with running_node(filter_word_chars=4) as running:
        path = f"{running.url}/v1/admin/filters" + (f"/{name}" if name else "")
        got, doc, _ = await call(session, method, path, json=body, headers=headers)
        assert (got, doc["error"]) == (status, code), doc
        assert (await call(session, "GET", f"{running.url}/v1/admin/filters"))[1]["version"] == 0


async def test_the_lists_and_the_body_are_bounded(session: aiohttp.ClientSession) -> None:
    async with running_node(filter_lists_max=2, filter_word_chars=1) as running:
        url = f"{running.url}/v1/admin/filters"
        for name in ("a", "b"):
            assert (await call(session, "PUT", f"{url}/{name}",
                               json={"words": ["x"], "action": "mask"}))[0] == 200
        status, doc, _ = await call(session, "PUT", f"{url}/c",
                                    json={"words": ["x"], "action": "mask"})
        assert (status, doc["error"]) == (409, "conflict")
        assert (await call(session, "PUT", f"{url}/a",
                           json={"words": ["y"], "action": "block"}))[0] == 200
        # 10 000 words of one character, each as escaped as JSON allows: 221 096 bytes.
        big = b'{"action": "mask", "words": [' + b" " * 221_100 + b'"x"]}'
        status, doc, _ = await call(session, "PUT", f"{url}/b", data=big,
                                    headers={**ADMIN_HEADERS,
                                             "Content-Type": "application/json"})
        assert (status, doc["error"]) == (413, "too_large")
        words = [chr(0x4E00 + n) for n in range(10_000)]
        status, doc, _ = await call(session, "PUT", f"{url}/b",
                                    json={"words": words, "action": "mask"})
        assert (status, doc["count"]) == (200, 10_000)
        status, doc, _ = await call(session, "PUT", f"{url}/b",
                                    json={"words": [*words, "x"], "action": "mask"})
        assert (status, doc["error"]) == (400, "bad_body")


async def test_filtered_masked_and_held_sends_are_counted_in_the_metrics(
        session: aiohttp.ClientSession) -> None:
    async with running_node() as running:
        url = running.url
        await put_list(session, url, "b", ["spam"], "block")
        await put_list(session, url, "h", ["links"], "hold")
        await put_list(session, url, "m", ["bad"], "mask")
        for body, status in (("spam", 403), ("spam", 403), ("links", 202), ("bad", 201),
                             ("fine", 201)):
            assert (await post(session, url, body))[0] == status
        async with session.get(f"{url}/metrics", headers=ADMIN_HEADERS) as resp:
            text = await resp.text()

    def value(pattern: str) -> float:
        found = re.search(rf"^{pattern} (\S+)$", text, re.M)
        assert found, pattern
        return float(found.group(1))

    assert value(r'liveroom_sends_total\{outcome="filtered"\}') == 2
    assert value(r'liveroom_sends_total\{outcome="held"\}') == 1
    assert value(r'liveroom_sends_total\{outcome="stored"\}') == 2
    assert value("liveroom_masked_sends_total") == 1
