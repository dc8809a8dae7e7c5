"""The attacks on room creation the node withstands.

Each test is an attack by a sender who may create rooms (an any-room
ticket, or ``open`` mode) and the answer expected: sends in flight together
create no more rooms than the new-room windows allow; one client address
cannot use up the node's window for everybody; the business backend's
rooms are rooms like any other, never provisional ones.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from conftest import TEST_POLICY
from support import ADMIN, BASE, PUBLISHER, Listener, running_node, send, settle

from liveroom.clock import FakeClock
from liveroom.errors import RateLimited
from liveroom.metrics import Metrics
from liveroom.model import NewMessage
from liveroom.ratelimit import RateLimits, parse_windows
from liveroom.store.base import Appended, MessageLog, OnlineSample, Pulled, PullRequest, Store
from liveroom.store.redis import keys
from proxy.auth import Tokens
from proxy.sends.new_rooms import NewRooms, Place
from proxy.sends.send import Sends


class AppendsInFlight:
    """A message log whose appends all wait until ``count`` of them are in
    flight, then go to the store together: ``count`` sends that reach a node
    at once, whose round trips to the store overlap. Every send has been
    admitted (or refused) before any append returns, whatever the engine."""

    def __init__(self, log_: MessageLog, count: int) -> None:
        self._log = log_
        self._count = count
        self._started = 0
        self._all_in = asyncio.Event()
        self.reads_replicas = log_.reads_replicas

    async def append(self, room: str, message: NewMessage, limits: RateLimits | None = None,
                     *, may_create: bool = True, provisional: bool = False) -> Appended:
        self._started += 1
        if self._started >= self._count:
            self._all_in.set()
        await self._all_in.wait()
        return await self._log.append(room, message, limits, may_create=may_create,
                                      provisional=provisional)

    async def open_room(self, room: str) -> str:
        return await self._log.open_room(room)

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        return await self._log.pull(requests)

    async def renew_epoch(self, room: str, stale: str) -> str:
        return await self._log.renew_epoch(room, stale)

    async def touch(self, rooms: Sequence[str],
                    readers: Mapping[str, Collection[str]] | None = None) -> None:
        await self._log.touch(rooms, readers)


def sends_of(log_: MessageLog, clock: FakeClock, **settings: Any) -> Sends:
    """A node's sender path over ``log_`` (``open`` mode, BASE's tokens)."""
    return Sends(replace(BASE, **settings), log_, Tokens(admin=ADMIN, publisher=PUBLISHER),
                 clock, Metrics())


def body(uid: str, text: str = "hi") -> bytes:
    return json.dumps({"uid": uid, "body": text}).encode()


async def existing(store: Store, rooms: Sequence[str]) -> list[str]:
    pulled = await store.log.pull([PullRequest(room, 0, 1) for room in rooms])
    return [p.room for p in pulled if p.epoch is not None]


# -- sends in flight together ---------------------------------------------------------


async def test_sends_in_flight_together_create_exactly_the_uids_new_room_limit(
        store: Store, fake_clock: FakeClock) -> None:
    """2 000 sends of one uid to 2 000 new rooms, every one admitted before any
    append returns: exactly 10 rooms (its ``10/m``) are created, every other
    send is a 429, and the rooms that failed hold no place: once they are
    answered the uid's window is full by its 10 rooms alone. (Counted after
    the append's await, all 2 000 passed the check and created 2 000 rooms.)"""
    count = 2000
    sends = sends_of(AppendsInFlight(store.log, count), fake_clock,
                     rooms_per_uid=parse_windows("10/m"), rooms_per_node=parse_windows("600/m"),
                     rooms_per_address=parse_windows("100/m"))
    rooms = [f"burst-{i}" for i in range(count)]
    replies = await asyncio.gather(*(
        sends.send(room, "application/json", body("maker"), None, "", "203.0.113.7")
        for room in rooms))
    assert Counter(r.status for r in replies) == {201: 10, 429: count - 10}
    assert len(await existing(store, rooms)) == 10
    # The node and the address counted the same 10 rooms, nothing more.
    other = sends_of(store.log, fake_clock)
    other.new_rooms = sends.new_rooms
    refused = await other.send("late", "application/json", body("maker"), None, "",
                               "203.0.113.7")
    assert refused.status == 429
    for i in range(90):
        reply = await other.send(f"others-{i}", "application/json", body(f"u{i}"), None, "",
                                 "203.0.113.7")
        assert reply.status == 201, i
    assert (await other.send("one-more", "application/json", body("u0"), None, "",
                             "203.0.113.7")).status == 429  # the address's 100th


async def test_sends_to_rooms_that_exist_free_the_places_they_held(
        store: Store, fake_clock: FakeClock) -> None:
    """A uid with ``3/m`` sends 200 messages at once to rooms that exist (all
    but 3 of them to a room that exists while its places are held: still
    201), and again with a client_msg_id seen: none of them created a room,
    so none of them is left counted, and the uid may still create its 3
    rooms."""
    count = 200
    for i in range(count):
        await store.log.append(f"old-{i}", NewMessage("backend", "first", False, 1))
    sends = sends_of(AppendsInFlight(store.log, count), fake_clock,
                     rooms_per_uid=parse_windows("3/m"))
    replies = await asyncio.gather(*(
        sends.send(f"old-{i}", "application/json", body("chatty"), None, "", "198.51.100.1")
        for i in range(count)))
    assert {r.status for r in replies} == {201}
    plain = sends_of(store.log, fake_clock, rooms_per_uid=parse_windows("3/m"))
    plain.new_rooms = sends.new_rooms
    seen = json.dumps({"uid": "chatty", "body": "again", "client_msg_id": "c1"}).encode()
    for _ in range(2):
        assert (await plain.send("old-0", "application/json", seen, None, "", "")).status == 201
    created = [await plain.send(f"fresh-{i}", "application/json", body("chatty"), None, "", "")
               for i in range(4)]
    assert [r.status for r in created] == [201, 201, 201, 429]


# -- one client against everybody -----------------------------------------------------


def test_an_ipv6_client_counts_by_its_slash_64() -> None:
    """A host rotating through the addresses of its /64 (or sending from
    IPv4-mapped ones) stays in one window; another /64 is another client."""
    rooms = NewRooms(per_uid=(), per_node=(), per_address=parse_windows("2/m"))
    now = 1_700_000_000_000
    for address in ("2001:db8:1:2::a", "2001:db8:1:2:ffff::b"):
        place = rooms.reserve(f"u-{address}", address, now)
        assert isinstance(place, Place)
        rooms.settled(place, now)
    refused = rooms.reserve("u3", "2001:db8:1:2::c", now)
    assert isinstance(refused, RateLimited)
    assert "address 2001:db8:1:2::/64 over 2 new rooms per 1 min" in refused.message
    assert isinstance(rooms.reserve("u4", "2001:db8:1:3::a", now), Place)
    for address in ("192.0.2.1", "::ffff:192.0.2.1"):
        place = rooms.reserve("v", address, now)
        assert isinstance(place, Place)
        rooms.settled(place, now)
    assert isinstance(rooms.reserve("w", "192.0.2.1", now), RateLimited)



async def test_one_client_address_cannot_use_up_the_nodes_new_rooms(engine_url: str) -> None:
    """From one address, 100 made-up uids create rooms until the address's
    window (``20/m``) refuses them; a sender from another address still
    creates a room in the node's window (``30/m``). Without a window per
    address the first client filled the node's window, and every other
    sender's first message to a new room got 429 for the rest of the minute."""
    async with running_node(engine_url, rooms_per_uid=parse_windows("10/m"),
                            rooms_per_address=parse_windows("20/m"),
                            rooms_per_node=parse_windows("30/m")) as node:
        async def post(session: aiohttp.ClientSession, room: str, uid: str) -> int:
            async with session.post(f"{node.url}/v1/rooms/{room}/messages",
                                    json={"uid": uid, "body": "hi"}) as r:
                await r.read()
                return r.status

        hostile = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        innocent = aiohttp.TCPConnector(local_addr=("127.0.0.3", 0))
        async with aiohttp.ClientSession(connector=hostile) as attacker, \
                aiohttp.ClientSession(connector=innocent) as user:
            statuses = [await post(attacker, f"junk-{i}", f"made-up-{i}") for i in range(100)]
            assert Counter(statuses) == {201: 20, 429: 80}
            assert await post(user, "my-new-room", "innocent") == 201
            # Its own sends to rooms that exist still go.
            assert await post(attacker, "junk-0", "made-up-0") == 201


async def test_behind_a_trusted_proxy_each_client_has_its_own_new_room_window() -> None:
    """Through a trusted proxy (loopback, by default) every client's sends
    arrive from the proxy's address: the window counts the client
    ``X-Forwarded-For`` names, as the connection cap does, so one client
    reaching its window does not refuse the proxy's other clients. (They all
    shared the proxy's window before: behind the kit's nginx, 100 new rooms a
    minute for everybody.)"""
    async with running_node(rooms_per_uid=parse_windows("10/m"),
                            rooms_per_address=parse_windows("3/m"),
                            rooms_per_node=parse_windows("100/m")) as node, \
            aiohttp.ClientSession() as session:
        async def post(room: str, uid: str, client: str) -> int:
            async with session.post(f"{node.url}/v1/rooms/{room}/messages",
                                    json={"uid": uid, "body": "hi"},
                                    headers={"X-Forwarded-For": client}) as r:
                await r.read()
                return r.status

        statuses = [await post(f"a-{i}", f"a{i}", "203.0.113.5") for i in range(5)]
        assert statuses == [201, 201, 201, 429, 429]
        assert await post("b-0", "b0", "203.0.113.6") == 201


# -- the backend's rooms ----------------------------------------------------------------


@pytest.mark.parametrize("token", [PUBLISHER, ADMIN], ids=["publisher", "admin"])
async def test_a_room_the_backends_send_created_lives_room_ttl_never_provisional(
        engine_url: str, token: str) -> None:
    """A room created by the backend's send (publisher or admin token) is a
    normal room: nobody reads it, nobody else sends, and it still outlives
    ``--empty-room-ttl`` (``--room-ttl``, like any room); a room a user's send
    created beside it, unread, does not."""
    clock = FakeClock()
    async with running_node(engine_url, clock, room_ttl=TEST_POLICY.room_ttl_ms / 1000) as node, \
            aiohttp.ClientSession() as session:
        settings = node.node.settings
        for room, headers in (("official", {"Authorization": f"Bearer {token}"}),
                              ("lonely", {})):
            async with session.post(f"{node.url}/v1/rooms/{room}/messages", headers=headers,
                                    json={"uid": "system", "body": "hello"}) as r:
                assert r.status == 201, await r.text()
        if engine_url == "memory":
            await clock.advance(settings.empty_room_ttl + 1)
            await settle()
            pulled = await node.node.store.log.pull([PullRequest("official", 0, 10),
                                                     PullRequest("lonely", 0, 10)])
            assert [p.epoch is not None for p in pulled] == [True, False]
            await clock.advance(settings.room_ttl)
            (gone,) = await node.node.store.log.pull([PullRequest("official", 0, 10)])
            assert gone.epoch is None  # room_ttl after its last send: it expires too
        else:  # Redis expires on its own clock: read the TTLs
            client = aioredis.from_url(engine_url)
            try:
                official = await client.pttl(keys.meta("official"))
                assert settings.empty_room_ttl * 1000 < official <= settings.room_ttl * 1000
                assert await client.pttl(keys.meta("lonely")) <= settings.empty_room_ttl * 1000
            finally:
                await client.aclose()


# -- a room its creator alone reads -----------------------------------------------------


async def test_a_room_of_one_sender_read_by_that_sender_alone_keeps_its_short_expiry(
        store: Store, fake_clock: FakeClock, raw_redis: aioredis.Redis | None) -> None:
    """The store is told who read a room: reads by its only sender leave a
    provisional room expiring ``empty_room_ttl`` after its last send; a read
    by another uid makes it a room like any other (so does a read whose
    readers are not known, an operator's)."""
    ttl_ms = TEST_POLICY.empty_room_ttl_ms

    async def lives(room: str) -> bool:
        """Whether ``room`` still has its log past ``empty_room_ttl`` from now."""
        if raw_redis is not None:
            return bool(await raw_redis.pttl(keys.meta(room)) > ttl_ms)
        await fake_clock.advance(ttl_ms / 1000 + 1)
        (pulled,) = await store.log.pull([PullRequest(room, 0, 10)])
        return pulled.epoch is not None

    for room, readers, lasts in (("mine", ("maker",), False), ("unknown", (), False),
                                 ("ours", ("maker", "friend"), True),
                                 ("operator's", None, True)):
        now = int(fake_clock.time() * 1000)
        await store.log.append(room, NewMessage("maker", "hi", False, now), provisional=True)
        await store.log.touch([room], None if readers is None else {room: readers})
        assert await lives(room) == lasts, room


async def test_its_creators_polls_do_not_make_a_room_last(engine_url: str) -> None:
    """A uid creates two rooms and polls both; a friend polls one of them.
    Past ``--empty-room-ttl`` the room only its creator read is gone, the one
    the friend read lives on (``--room-ttl``). Before, the creator's own
    first poll made its room last a day."""
    clock = FakeClock()
    async with running_node(engine_url, clock) as node, aiohttp.ClientSession() as session:
        ttl = node.node.settings.empty_room_ttl
        for room in ("mine", "ours"):
            await send(session, node.url, room, "hi", uid="maker")
            await Listener(session, room, uid="maker").poll(node.url)
        await clock.advance(1.0)  # the fallback pass pushes the reads to the store
        await settle()
        await Listener(session, "ours", uid="friend").poll(node.url)
        await clock.advance(1.0)
        await settle()
        await clock.advance(ttl + 1)
        await settle()
        if engine_url == "memory":
            pulled = await node.node.store.log.pull([PullRequest("mine", 0, 10),
                                                     PullRequest("ours", 0, 10)])
            assert [p.epoch is not None for p in pulled] == [False, True]
        else:  # Redis expires on its own clock: read the TTLs
            client = aioredis.from_url(engine_url)
            try:
                # The friend's read reaches Redis with a pass of the cache's
                # loop: on a loaded machine a pass still under way when the
                # clock jumped sleeps past it, so time goes on for the node
                # until the reads are in the store (bounded).
                async with asyncio.timeout(5):
                    while await client.pttl(keys.meta("ours")) <= ttl * 1000:
                        await clock.advance(1.0)
                        await asyncio.sleep(0.01)
                assert await client.pttl(keys.meta("mine")) <= ttl * 1000
            finally:
                await client.aclose()


async def test_a_readers_visit_counts_though_its_room_is_let_go_before_the_next_pass(
        redis_url: str) -> None:
    """A friend reads a room of one sender, then nobody reads it for longer
    than the cache keeps it: the pass that lets the room go still tells the
    store who read it (before, the readers went with the room, and the store
    took the room for its sender's alone)."""
    clock = FakeClock()
    async with running_node(redis_url, clock) as node, aiohttp.ClientSession() as session:
        ttl = node.node.settings.empty_room_ttl
        await send(session, node.url, "ours", "hi", uid="maker")
        await Listener(session, "ours", uid="maker").poll(node.url)
        await clock.advance(1.0)
        await settle()
        await Listener(session, "ours", uid="friend").poll(node.url)
        await clock.advance(ttl + 1)  # one pass: the room let go, then the reads pushed
        await settle()
        client = aioredis.from_url(redis_url)
        try:
            # A pass still under way at the jump sleeps past it: time goes on
            # for the node until the reads reach the store (bounded).
            async with asyncio.timeout(5):
                while await client.hget(keys.meta("ours"), "by") is not None:
                    await clock.advance(1.0)
                    await asyncio.sleep(0.01)
            assert await client.pttl(keys.meta("ours")) > ttl * 1000
        finally:
            await client.aclose()


async def test_a_room_its_sender_alone_read_keeps_no_stats_past_its_log(
        store: Store, fake_clock: FakeClock, raw_redis: aioredis.Redis | None) -> None:
    """The viewers history and the online series of a room of one sender,
    polled by that sender alone, live no longer than its log (not
    ``--history-ttl``, 90 days); another uid's join keeps them as any room's,
    and so do the samples once the room lasts."""
    ttl_ms = TEST_POLICY.empty_room_ttl_ms
    history_ms = 90 * 86_400_000
    tiers = [(60, 90 * 86_400)]
    now = int(fake_clock.time() * 1000)
    for room in ("mine", "ours"):
        await store.log.append(room, NewMessage("maker", "hi", False, now), provisional=True)
    await store.stats.add_viewers("mine", "n1", ["maker"], None, 100, history_ms)
    await store.stats.add_viewers("ours", "n1", ["maker", "friend"], None, 100, history_ms)
    await store.stats.record_online([OnlineSample("mine", now, 1), OnlineSample("ours", now, 2)],
                                    tiers, 0)
    await store.log.touch(["ours"], {"ours": ("maker", "friend")})  # the friend's read
    await store.stats.record_online([OnlineSample("ours", now + 60_000, 2)], tiers, 0)
    if raw_redis is not None:
        for room, short in (("mine", True), ("ours", False)):
            for key in (keys.viewers_exact(room), keys.series_last(room),
                        keys.series(room, 60)):
                assert (0 < await raw_redis.pttl(key) <= ttl_ms) == short, (room, key)
    else:
        await fake_clock.advance(ttl_ms / 1000 + 1)
        mine, ours = await store.stats.viewers(["mine", "ours"], sketches=[False, False])
        assert (mine.exact, ours.exact) == (0, 2)
        assert await store.stats.read_online("mine", 60, 0, 2 * now) == []
        assert len(await store.stats.read_online("ours", 60, 0, 2 * now)) == 2
