"""Issue 44's findings, each reproduced as the hostile round found it and
held fixed: likes in made-up rooms, a reset that slipped a send past the
new-room window, a likes total that went down, banned and muted taps.

Where an order of events matters, the test forces it (a log whose append
reaches the store and then waits for the test), never a sleep.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from support import ADMIN_HEADERS, PUBLISHER, Running, running_node, send

from liveroom.clock import FakeClock
from liveroom.model import NewMessage
from liveroom.ratelimit import RateLimits, parse_windows
from liveroom.store.base import Appended, MessageLog
from liveroom.store.redis import keys
from proxy.recent_rooms import KEPT_FOR
from proxy.tickets import mint

KEY = "ticket-key-0123456789abcdef-0044"


async def _like(session: aiohttp.ClientSession, url: str, room: str, doc: dict[str, Any],
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with session.post(f"{url}/v1/rooms/{room}/likes", json=doc,
                            headers=headers or {}) as resp:
        return resp.status, await resp.json()


@pytest.fixture(params=["front", "aiohttp"])
def face(request: pytest.FixtureRequest) -> str:
    """Which reader serves the requests: the front, or aiohttp on a
    connection handed over (asked /healthz first)."""
    return str(request.param)


async def _session(node: Running, face: str) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(force_close=face == "front", limit=0 if face == "front"
                                     else 1)
    session = aiohttp.ClientSession(connector=connector)
    if face == "aiohttp":
        async with session.get(f"{node.url}/healthz") as resp:
            assert resp.status == 200
    return session


# -- likes create nothing for a room that does not exist ------------------------

async def test_likes_in_made_up_rooms_are_404_and_create_nothing_open_mode(face: str) -> None:
    """The finding: any room name got the room's likes keys for 90 days and
    1.8 KiB of node memory, outside every new-room limit."""
    async with running_node() as node:
        session = await _session(node, face)
        async with session:
            for n in range(50):
                status, body = await _like(session, node.url, f"made-up-{n}",
                                           {"uid": f"u{n}", "count": 5})
                assert status == 404, body
                assert body["error"] == "no_such_room"
            likes = node.node.proxy.likes
            assert likes.pending == 0
            await likes.flush()
            counters = node.node.store.counters
            assert await counters.likes([f"made-up-{n}" for n in range(50)]) == {
                f"made-up-{n}": 0 for n in range(50)}
            # A room that exists takes taps, at once where the node holds it.
            await send(session, node.url, "real", "hello")
            assert await _like(session, node.url, "real", {"uid": "u", "count": 5}) == (
                202, {"likes": 5})


async def test_likes_in_made_up_rooms_write_nothing_to_redis_ticket_mode(
        redis_url: str, face: str) -> None:
    """An any-room ticket made 600 such rooms a minute per node, each with
    four Redis keys for --history-ttl."""
    clock = FakeClock()
    async with running_node(redis_url, clock, auth="ticket", ticket_keys=(KEY,)) as node:
        redis = aioredis.from_url(redis_url)
        session = await _session(node, face)
        async with session, redis:
            before = set(await redis.keys("*"))
            anywhere = {"Authorization": f"Bearer {mint(KEY, 'mallory', now=clock.time())}"}
            for n in range(30):
                status, body = await _like(session, node.url, f"made-up-{n}", {"count": 9},
                                           anywhere)
                assert status == 404, body
            await node.node.proxy.likes.flush()
            after = set(await redis.keys("*"))
            assert {k for k in after - before if b"made-up" in k} == set()


# -- a reset while the append is in flight does not slip past the window ---------

class AppendSentThenHeld:
    """The node's message log, each append sent to the store at once (as
    the node's batched Redis call is) and its caller then held until the
    test lets go: the client resets in between, whatever the timing."""

    def __init__(self, log_: MessageLog) -> None:
        self._log = log_
        self.sent = asyncio.Event()
        self.go_on = asyncio.Event()
        self.calls: list[asyncio.Task[Appended]] = []

    async def append(self, room: str, message: NewMessage, limits: RateLimits | None = None,
                     *, may_create: bool = True, provisional: bool = False) -> Appended:
        call = asyncio.ensure_future(self._log.append(
            room, message, limits, may_create=may_create, provisional=provisional))
        self.calls.append(call)
        self.sent.set()
        await self.go_on.wait()
        return await asyncio.shield(call)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def _raw_send(room: str, uid: str) -> bytes:
    body = json.dumps({"uid": uid, "body": "hi"}).encode()
    return (f"POST /v1/rooms/{room}/messages HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


async def test_a_reset_while_the_append_is_in_flight_keeps_the_new_room_window(
        redis_url: str) -> None:
    """The finding: the reset cancelled the send, which freed its place as
    "nothing created" while Redis still ran the append: one uid limited to
    10 rooms a minute created 500 of 500. A send read whole now runs to its
    end whatever its client does."""
    async with running_node(redis_url, rooms_per_uid=parse_windows("3/m")) as node:
        sends = node.node.proxy.sends
        held = AppendSentThenHeld(sends._log)
        sends._log = held  # type: ignore[assignment]
        front = node.node.proxy.front
        port = int(node.url.rpartition(":")[2])
        rooms = [f"reset-{n}" for n in range(8)]
        for room in rooms:
            held.sent.clear()
            held.go_on.clear()
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_raw_send(room, "one"))
            await held.sent.wait()  # the append is at the store
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()  # a reset
            async with asyncio.timeout(5):
                while front.connections:  # the node saw it go
                    await asyncio.sleep(0.005)
            held.go_on.set()
            await asyncio.wait([held.calls[-1]], timeout=5)  # created, or refused
            async with asyncio.timeout(5):
                while front.finishing:  # the send settled its place
                    await asyncio.sleep(0.005)
        redis = aioredis.from_url(redis_url)
        async with redis:
            created = [room for room in rooms if await redis.exists(keys.meta(room))]
        assert len(created) == 3, created


# -- a room's likes total never goes down within a broadcast ---------------------

async def test_the_likes_total_does_not_go_down_after_the_node_forgot_the_room() -> None:
    """The finding: a node forgets a room's stored total a minute (and the
    longest poll) after it was last asked, and the next tap answered its own
    taps alone (50, then 1)."""
    clock = FakeClock()
    async with running_node(clock=clock) as node, aiohttp.ClientSession() as session:
        likes = node.node.proxy.likes
        await send(session, node.url, "quiet", "hello")
        assert await _like(session, node.url, "quiet", {"uid": "a", "count": 50}) == (
            202, {"likes": 50})
        await likes.flush()
        # A minute and the longest poll of refreshes nobody asks about the room.
        for _ in range(KEPT_FOR + node.node.settings.poll_timeout_max + 2):
            await likes.refresh()
        assert not likes.knows("quiet")
        assert await _like(session, node.url, "quiet", {"uid": "b", "count": 1}) == (
            202, {"likes": 51})


# -- a uid that may not speak may not tap; slow mode paces its taps ---------------

async def test_banned_and_muted_uids_likes_are_refused_and_slow_mode_paces_them() -> None:
    clock = FakeClock()
    async with running_node(clock=clock) as node, aiohttp.ClientSession() as session:
        await send(session, node.url, "moderated", "hello")
        admin = f"{node.url}/v1/admin/rooms/moderated"
        for kind, uid in (("banned", "bad"), ("muted", "loud")):
            async with session.put(f"{admin}/{kind}/{uid}", json={"seconds": 600},
                                   headers=ADMIN_HEADERS) as resp:
                assert resp.status == 200, await resp.text()
        for uid, code in (("bad", "banned"), ("loud", "muted")):
            status, body = await _like(session, node.url, "moderated", {"uid": uid})
            assert (status, body["error"]) == (403, code)
        assert node.node.proxy.likes.pending == 0
        async with session.put(f"{admin}/slow", json={"seconds": 10},
                               headers=ADMIN_HEADERS) as resp:
            assert resp.status == 200, await resp.text()
        assert (await _like(session, node.url, "moderated", {"uid": "fan", "count": 3}))[0] \
            == 202
        async with session.post(f"{node.url}/v1/rooms/moderated/likes",
                                json={"uid": "fan", "count": 3}) as resp:
            assert resp.status == 429
            assert (await resp.json())["error"] == "rate_limited"
            assert resp.headers["Retry-After"] == "10"
        await clock.advance(10)
        assert (await _like(session, node.url, "moderated", {"uid": "fan", "count": 3}))[0] \
            == 202


# -- recalls: a sender cannot wipe the audit, nor recall while it may not speak -----

async def _recall(session: aiohttp.ClientSession, url: str, room: str, seq: int,
                  uid: str) -> tuple[int, Any]:
    async with session.delete(f"{url}/v1/rooms/{room}/messages/{seq}",
                              params={"uid": uid}) as resp:
        return resp.status, await resp.json()


async def test_a_senders_recalls_never_push_the_moderators_entries_out_of_the_audit() -> None:
    """The finding: one sender recalled its own message 2 500 to 8 400 times in
    3 s, each an audit entry, and the moderators' ban fell off the 1 000 kept."""
    async with running_node(rate_limits=RateLimits()) as node, \
            aiohttp.ClientSession() as session:
        admin = f"{node.url}/v1/admin/rooms/audited"
        await send(session, node.url, "audited", "hello", uid="host")
        async with session.put(f"{admin}/banned/troll", json={"seconds": 600},
                               headers=ADMIN_HEADERS) as resp:
            assert resp.status == 200
        mine = (await send(session, node.url, "audited", "oops", uid="mallory"))["seq"]
        statuses = [(await _recall(session, node.url, "audited", mine, "mallory"))[0]
                    for _ in range(40)]
        assert statuses[0] == 200
        assert set(statuses) <= {200, 429}
        assert 429 in statuses  # the sender's windows: 5 a second by default
        async with session.get(f"{admin}/moderation", headers=ADMIN_HEADERS) as resp:
            audit = (await resp.json())["audit"]
        assert [(e["action"], e["by"]) for e in audit] == [("ban", "admin")]


async def test_banned_and_muted_senders_cannot_recall() -> None:
    async with running_node() as node, aiohttp.ClientSession() as session:
        admin = f"{node.url}/v1/admin/rooms/strict"
        seqs = {uid: (await send(session, node.url, "strict", "mine", uid=uid))["seq"]
                for uid in ("bad", "loud")}
        for kind, uid in (("banned", "bad"), ("muted", "loud")):
            async with session.put(f"{admin}/{kind}/{uid}", json={"seconds": 600},
                                   headers=ADMIN_HEADERS) as resp:
                assert resp.status == 200
            status, body = await _recall(session, node.url, "strict", seqs[uid], uid)
            assert (status, body["error"]) == (403, kind)


async def test_in_ticket_mode_the_backends_tokens_tap_for_the_uid_they_name() -> None:
    """Issue 46: the admin or publisher token could not tap for a uid in ticket
    mode, and the refusal said "the ticket is malformed"."""
    clock = FakeClock()
    async with running_node(clock=clock, auth="ticket", ticket_keys=(KEY,)) as node, \
            aiohttp.ClientSession() as session:
        async with session.post(f"{node.url}/v1/admin/rooms/backed/start",
                                headers=ADMIN_HEADERS) as resp:
            assert resp.status == 201
        publisher = {"Authorization": f"Bearer {PUBLISHER}"}
        assert await _like(session, node.url, "backed", {"uid": "fan", "count": 4},
                           publisher) == (202, {"likes": 4})
        assert await _like(session, node.url, "backed", {"uid": "fan", "count": 1},
                           ADMIN_HEADERS) == (202, {"likes": 5})
        status, body = await _like(session, node.url, "backed", {"count": 1}, publisher)
        assert (status, body["error"]) == (400, "bad_body")  # whose taps?
