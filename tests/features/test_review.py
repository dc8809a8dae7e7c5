"""The review queue over HTTP (``liveroom/review.py``, ``proxy/moderation/review.py``):
a held message is nobody's to see until a moderator approves it, then every
listener gets it as its sender's; a denial drops it; one decision each,
audited; a full queue drops its oldest and says so.

Messages are held here through the seam the node wires into its sender
path (``node.review.hold``), as a word filter or the send hook holds them
(the hook's holds over HTTP: tests/features/test_send_hook.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgpack
import orjson
import pytest
from support import (
    ADMIN_HEADERS,
    PUBLISHER,
    SHARED_SECRET,
    Listener,
    Running,
    running_node,
    send,
)

from liveroom.clock import FakeClock
from liveroom.model import NewMessage
from liveroom.ratelimit import RateLimits, parse_windows
from liveroom.store.base import Held
from proxy.sends.send import held_reply

ROOM = "review-room"
PUBLISHER_HEADERS = {"Authorization": f"Bearer {PUBLISHER}"}


def said(uid: str = "bob", body: Any = "darn it", *, important: bool = False,
         to: str | None = None, cmid: str | None = None) -> NewMessage:
    """A message as the sender path makes it (its ts the send's)."""
    return NewMessage(uid, body, important or to is not None, 1_790_000_000_000, cmid, to)


async def call(session: aiohttp.ClientSession, method: str, url: str, *,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with session.request(method, url,
                               headers=ADMIN_HEADERS if headers is None else headers) as resp:
        return resp.status, await resp.json()


def review(url: str, tail: str = "") -> str:
    return f"{url}/v1/admin/rooms/{ROOM}/review{tail}"


async def queue(session: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    status, doc = await call(session, "GET", review(url))
    assert status == 200, doc
    held: list[dict[str, Any]] = doc["held"]
    assert doc["count"] == len(held)
    return held


async def audit(session: aiohttp.ClientSession, url: str) -> list[tuple[str, str, str]]:
    status, doc = await call(session, "GET", f"{url}/v1/admin/rooms/{ROOM}/moderation")
    assert status == 200, doc
    return [(e["action"], e["target"], e["reason"]) for e in doc["audit"]]


@pytest.fixture
async def node(engine_url: str) -> AsyncIterator[Running]:
    async with running_node(engine_url, secret=SHARED_SECRET) as running:
        yield running


async def test_a_held_message_is_seen_by_nobody_until_approved_then_by_everyone(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    await send(session, url, ROOM, "hello", uid="host")
    fan, bob = Listener(session, ROOM, uid="fan"), Listener(session, ROOM, uid="bob")
    await fan.poll(url)
    await bob.poll(url)
    assert await node.node.review.hold(ROOM, said(body={"text": "darn it"}), "word: darn") == "1"
    assert await queue(session, url) == [{"id": "1", "uid": "bob", "kind": "normal",
                                          "body": {"text": "darn it"},
                                          "at_ms": 1_790_000_000_000, "why": "word: darn"}]
    # Nobody reads it: not a first poll, not the moderators' list of messages.
    first = await Listener(session, ROOM, uid="late").poll(url)
    assert [m["body"] for m in first["messages"]] == ["hello"]
    status, doc = await call(session, "GET", f"{url}/v1/admin/rooms/{ROOM}/messages")
    assert [m["body"] for m in doc["messages"]] == ["hello"]
    waiting = asyncio.create_task(fan.poll(url, timeout=10))
    status, doc = await call(session, "POST", review(url, "/1/approve"))
    assert status == 201, doc
    assert doc == {"room": ROOM, "id": "1", "uid": "bob", "approved": True,
                   "epoch": first["epoch"], "seq": 2}
    answer = await asyncio.wait_for(waiting, 10)
    (message,) = answer["messages"]
    assert (message["seq"], message["uid"], message["body"], message["important"]) == (
        2, "bob", {"text": "darn it"}, False)
    await bob.poll(url)
    assert bob.bodies() == ["hello", {"text": "darn it"}]  # its sender sees it as all do
    assert await queue(session, url) == []
    assert await audit(session, url) == [("approve", "bob:1", "word: darn")]


async def test_a_denied_message_is_dropped_and_the_denial_stands(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    await send(session, url, ROOM, "hello", uid="host")
    fan = Listener(session, ROOM, uid="fan")
    await fan.poll(url)
    await node.node.review.hold(ROOM, said("eve", "rude"), "hook: abuse")
    await node.node.review.hold(ROOM, said("eve", "fine"), "hook: abuse")
    status, doc = await call(session, "POST", review(url, "/1/deny"))
    assert (status, doc) == (200, {"room": ROOM, "id": "1", "uid": "eve", "denied": True})
    assert await call(session, "POST", review(url, "/1/deny")) == (200, doc)  # the same
    status, doc = await call(session, "POST", review(url, "/1/approve"))
    assert (status, doc["error"]) == (409, "conflict")
    assert "denied" in doc["message"]
    assert [h["id"] for h in await queue(session, url)] == ["2"]
    await call(session, "POST", review(url, "/2/approve"))
    status, doc = await call(session, "POST", review(url, "/2/deny"))
    assert (status, doc["error"]) == (409, "conflict")
    assert "approved" in doc["message"]
    await fan.poll(url)
    assert fan.bodies() == ["hello", "fine"]  # the denied one never came
    assert await audit(session, url) == [("approve", "eve:2", "hook: abuse"),
                                         ("deny", "eve:1", "hook: abuse")]
    if node.node.store.name == "memory":  # its body left the store at once
        found = await node.node.store.review.decide(ROOM, "1", "deny")
        assert found is not None
        assert found.held.body is None


async def test_approving_twice_answers_the_same_and_stores_it_once(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    await send(session, url, ROOM, "hello", uid="host")
    await node.node.review.hold(ROOM, said(), "w")
    one = await call(session, "POST", review(url, "/1/approve"))
    two = await call(session, "POST", review(url, "/1/approve"))
    assert one == two
    assert one[0] == 201
    listener = Listener(session, ROOM, uid="fan")
    await listener.poll(url, recent=10)
    assert listener.bodies() == ["hello", "darn it"]
    assert await audit(session, url) == [("approve", "bob:1", "w")]


async def test_an_approval_answers_the_same_long_after_its_send_is_forgotten(
        session: aiohttp.ClientSession) -> None:
    """Past ``--dedup-ttl`` the store no longer knows the approval's
    client_msg_id: the queue's record of where the message went answers."""
    clock = FakeClock()
    async with running_node(clock=clock) as running:
        url = running.url
        await send(session, url, ROOM, "hello", uid="host")
        await running.node.review.hold(ROOM, said(), "w")
        first = await call(session, "POST", review(url, "/1/approve"))
        await clock.advance(running.node.settings.dedup_ttl + 1)
        assert await call(session, "POST", review(url, "/1/approve")) == first
        listener = Listener(session, ROOM, uid="fan")
        await listener.poll(url, recent=10)
        assert listener.bodies() == ["hello", "darn it"]


async def test_of_an_approval_and_a_denial_racing_one_wins(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    await send(session, url, ROOM, "hello", uid="host")
    for n in range(10):
        await node.node.review.hold(ROOM, said(body=n), "w")
    for n in range(1, 11):
        (approved, _), (denied, _) = await asyncio.gather(
            call(session, "POST", review(url, f"/{n}/approve")),
            call(session, "POST", review(url, f"/{n}/deny")))
        assert sorted((approved, denied)) in ([200, 409], [201, 409])
    listener = Listener(session, ROOM, uid="fan")
    await listener.poll(url, recent=20)
    stored = listener.bodies()[1:]
    decisions = await audit(session, url)
    assert len(decisions) == 10
    assert sorted(stored) == sorted(int(t.split(":")[1]) - 1
                                    for a, t, _ in decisions if a == "approve")


async def test_important_and_personal_messages_are_approved_in_their_lanes(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    await send(session, url, ROOM, "hello", uid="host")
    al, fan = Listener(session, ROOM, uid="al"), Listener(session, ROOM, uid="fan")
    await al.poll(url)
    await fan.poll(url)
    await node.node.review.hold(ROOM, said("host", {"event": "x"}, important=True), "hook")
    await node.node.review.hold(ROOM, said("host", "for al", to="al"), "hook")
    assert [(h["kind"], h.get("to")) for h in await queue(session, url)] == [
        ("important", None), ("personal", "al")]
    status, doc = await call(session, "POST", review(url, "/1/approve"))
    assert (status, doc["iseq"], "seq" in doc) == (201, 2, False)
    status, doc = await call(session, "POST", review(url, "/2/approve"))
    assert (status, doc["pseq"], doc["to"]) == (201, 1, "al")
    # The two approvals reach the node's copy one after the other: a poll
    # may be answered between them.
    async with asyncio.timeout(20):
        while not al.personal or len(al.bodies()) < 2:
            await al.poll(url)
    assert al.bodies() == ["hello", {"event": "x"}]
    assert [(m["uid"], m["body"]) for m in al.personal] == [("host", "for al")]
    await fan.poll(url)
    assert (fan.bodies(), fan.personal) == (["hello", {"event": "x"}], [])  # not al's


@pytest.mark.parametrize("sanction", ["muted", "banned"])
async def test_a_muted_or_banned_senders_message_stays_held(
        node: Running, session: aiohttp.ClientSession, sanction: str) -> None:
    url = node.url
    await send(session, url, ROOM, "hello", uid="host")
    await node.node.review.hold(ROOM, said("troll"), "w")
    await node.node.review.hold(ROOM, said("troll", "more"), "w")
    admin = f"{url}/v1/admin/rooms/{ROOM}/{sanction}/troll"
    async with session.put(admin, json={"seconds": 600}, headers=ADMIN_HEADERS) as resp:
        assert resp.status == 200
    status, doc = await call(session, "POST", review(url, "/1/approve"))
    assert (status, doc["error"]) == (409, "conflict")
    assert f"is {sanction}" in doc["message"]
    assert "stays held" in doc["message"]
    assert [h["id"] for h in await queue(session, url)] == ["1", "2"]
    assert (await call(session, "POST", review(url, "/2/deny")))[0] == 200  # denying is fine
    await call(session, "DELETE", admin)
    assert (await call(session, "POST", review(url, "/1/approve")))[0] == 201


async def test_an_approval_is_no_send_the_senders_windows_do_not_apply(
        session: aiohttp.ClientSession) -> None:
    async with running_node(rate_limits=RateLimits(per_uid=parse_windows("1/m"))) as running:
        url = running.url
        await send(session, url, ROOM, "first", uid="bob")
        async with session.post(f"{url}/v1/rooms/{ROOM}/messages",
                                json={"uid": "bob", "body": "again"}) as resp:
            assert resp.status == 429
        async with session.put(f"{url}/v1/admin/rooms/{ROOM}/slow", json={"seconds": 60},
                               headers=ADMIN_HEADERS) as resp:
            assert resp.status == 200
        await running.node.review.hold(ROOM, said("bob", "held"), "w")
        assert (await call(session, "POST", review(url, "/1/approve")))[0] == 201
        listener = Listener(session, ROOM, uid="fan")
        await listener.poll(url)
        assert listener.bodies() == ["first", "held"]


async def test_a_held_message_may_make_its_room(node: Running,
                                                session: aiohttp.ClientSession) -> None:
    """A send held on its way to a new room made nothing; approved, it does."""
    await node.node.review.hold("brand-new", said(), "w")
    async with session.post(f"{node.url}/v1/admin/rooms/brand-new/review/1/approve",
                            headers=ADMIN_HEADERS) as resp:
        assert resp.status == 201, await resp.text()
        assert (await resp.json())["seq"] == 1
    listener = Listener(session, "brand-new", uid="fan")
    await listener.poll(node.url)
    assert listener.bodies() == ["darn it"]


async def test_the_review_needs_the_admin_token_and_good_input(
        node: Running, session: aiohttp.ClientSession) -> None:
    url = node.url
    await node.node.review.hold(ROOM, said(), "w")
    for headers, status in [({}, 401), (PUBLISHER_HEADERS, 403)]:
        for method, tail in [("GET", ""), ("POST", "/1/approve"), ("POST", "/1/deny")]:
            got, body = await call(session, method, review(url, tail), headers=headers)
            assert got == status, (method, tail, body)
            assert set(body) == {"error", "message"}
    for method, tail in [("GET", "?limit=0"), ("GET", "?limit=1001"), ("GET", "?limit=x"),
                         ("POST", "/0/approve"), ("POST", "/x/deny"), ("POST", "/-1/deny"),
                         ("POST", "/" + "9" * 17 + "/approve")]:
        got, body = await call(session, method, review(url, tail))
        assert got == 400, (method, tail, body)
    for tail in ("/2/approve", "/2/deny"):
        got, body = await call(session, "POST", review(url, tail))
        assert (got, body["error"]) == (404, "not_found")
    got, body = await call(session, "GET", f"{url}/v1/admin/rooms/bad%20room/review")
    assert got == 400
    assert [h["id"] for h in await queue(session, url)] == ["1"]  # untouched
    async with session.get(review(url, "?limit=1"),
                           headers={**ADMIN_HEADERS, "Accept": "application/msgpack"}) as resp:
        assert msgpack.unpackb(await resp.read())["count"] == 1


async def test_a_full_queue_drops_its_oldest_counts_logs_and_tells_the_hook(
        session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture) -> None:
    async with running_node(review_max=2) as running:
        told: list[tuple[str, Held]] = []
        running.node.review.on_dropped.append(lambda room, held: told.append((room, held)))
        hold = running.node.review.hold
        with caplog.at_level(logging.WARNING, logger="liveroom.review"):
            for n in range(3):
                await hold(ROOM, said(body=n, cmid=f"c{n}"), f"why {n}")
        assert await hold(ROOM, said(body=2, cmid="c2"), "why 2") == "3"  # held before
        assert [h["body"] for h in await queue(session, running.url)] == [1, 2]
        assert [(room, held.id, held.body) for room, held in told] == [(ROOM, "1", 0)]
        assert "queue of room review-room is full: held message 1 of uid bob" in caplog.text
        assert (await call(session, "POST", review(running.url, "/1/approve")))[0] == 404
        await call(session, "POST", review(running.url, "/2/approve"))
        await call(session, "POST", review(running.url, "/3/deny"))
        async with session.get(f"{running.url}/metrics", headers=ADMIN_HEADERS) as resp:
            text = await resp.text()

    def value(pattern: str) -> float:
        found = re.search(rf"^{pattern} (\S+)$", text, re.M)
        assert found, pattern
        return float(found.group(1))

    assert value("liveroom_review_held_total") == 3
    assert value("liveroom_review_dropped_total") == 1
    assert value(r'liveroom_moderation_actions_total\{action="approve"\}') == 1
    assert value(r'liveroom_moderation_actions_total\{action="deny"\}') == 1


def test_a_held_send_is_answered_202_with_its_id() -> None:
    reply = held_reply("17", "application/json")
    assert (reply.status, orjson.loads(reply.body)) == (202, {"held": "17"})
    reply = held_reply("17", "application/msgpack")
    assert (reply.status, msgpack.unpackb(reply.body)) == (202, {"held": "17"})


# --- over Redis: a restart, two nodes -----------------------------------------------------


async def test_held_messages_survive_a_restart_of_the_node(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(redis_url, secret=SHARED_SECRET) as before:
        await send(session, before.url, ROOM, "hello", uid="host")
        await before.node.review.hold(ROOM, said(body="kept"), "word: darn")
    async with running_node(redis_url, secret=SHARED_SECRET) as after:
        assert [(h["id"], h["body"]) for h in await queue(session, after.url)] == [("1", "kept")]
        assert (await call(session, "POST", review(after.url, "/1/approve")))[0] == 201
        listener = Listener(session, ROOM, uid="fan")
        await listener.poll(after.url)
        assert listener.bodies() == ["hello", "kept"]


async def test_an_approval_through_one_node_reaches_listeners_on_another(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(redis_url, secret=SHARED_SECRET) as one, \
            running_node(redis_url, secret=SHARED_SECRET) as two:
        await send(session, one.url, ROOM, "hello", uid="host")
        listener = Listener(session, ROOM, uid="fan")
        await listener.poll(two.url)
        await one.node.review.hold(ROOM, said(body="approved"), "w")
        await one.node.review.hold(ROOM, said(body="denied"), "w")
        waiting = asyncio.create_task(listener.poll(two.url, timeout=10))
        # Held through one, decided through the other and back.
        assert (await call(session, "POST", review(two.url, "/2/deny")))[0] == 200
        assert (await call(session, "POST", review(one.url, "/2/approve")))[0] == 409
        assert (await call(session, "POST", review(two.url, "/1/approve")))[0] == 201
        await asyncio.wait_for(waiting, 10)
        assert listener.bodies() == ["hello", "approved"]
        assert await queue(session, one.url) == []
