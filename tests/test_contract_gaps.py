"""Behaviours of the contract (DESIGN.md) that no other test pinned down.

Each test here was seen failing against a one-line bug planted in the product
(the recvsvr's retention, the ``client_msg_id`` window on each engine, the
adaptive hold's interval, the context's binding, the jitter's hash, the
``recent`` bounds). Time is a fake clock wherever the engine lets it be; the
one exception, a Redis TTL, says so.
"""

from __future__ import annotations

import asyncio

import aiohttp
import redis.asyncio
from support import Listener, Running, running_node, send

from liveroom.clock import FakeClock
from liveroom.model import NewMessage
from liveroom.store import keys

# -- the recvsvr's important list ---------------------------------------------------

MINUTE_MS = 60_000


async def important_seqs(node: Running, room: str) -> list[int]:
    """The seqs of the important list in the recvsvr's snapshot after a fresh pull."""
    snap = await node.node.cache.wait_pulled(room)
    return [item.seq for item in snap.important]


async def test_the_important_list_keeps_all_of_the_last_ten_minutes_beyond_its_count() -> None:
    """The window on its own: 1 200 important messages, one every 0.5 s over
    ten minutes. Fifteen minutes after the first, the ones sent in the last
    ten minutes are 601 (more than the 500 the count keeps): all of them stay,
    and none older."""
    clock = FakeClock()
    t0 = int(clock.time() * 1000)
    async with running_node(clock=clock) as node:
        log_ = node.node.store.log
        for i in range(1, 1201):
            await log_.append("imp", NewMessage("publisher", i, True, ts=t0 + i * 500))
        await clock.advance(900)  # now = t0 + 15 min: the window starts at t0 + 5 min
        seqs = await important_seqs(node, "imp")
        # ts >= now - 10 min  <=>  i * 500 >= 300_000  <=>  i >= 600
        assert seqs == list(range(600, 1201))


async def test_the_important_list_keeps_its_count_once_the_window_has_passed() -> None:
    """The count on its own: once every important message is older than the
    window, exactly the newest 500 stay (not 499, not 501)."""
    clock = FakeClock()
    t0 = int(clock.time() * 1000)
    async with running_node(clock=clock) as node:
        log_ = node.node.store.log
        for i in range(1, 601):
            await log_.append("imp", NewMessage("publisher", i, True, ts=t0))
        # All inside the window: all 600 kept, the count is no cap there.
        assert await important_seqs(node, "imp") == list(range(1, 601))
        await clock.advance(11 * 60)
        assert await important_seqs(node, "imp") == list(range(101, 601))
        # A new important message keeps the count where it is.
        await log_.append("imp", NewMessage("publisher", 601, True,
                                            ts=int(clock.time() * 1000)))
        assert await important_seqs(node, "imp") == list(range(102, 602))


# -- the client_msg_id window ---------------------------------------------------------


async def test_a_client_msg_id_is_remembered_ten_minutes_on_the_memory_engine(
        session: aiohttp.ClientSession) -> None:
    """The memory engine's window runs on the fake clock: the default ten minutes."""
    clock = FakeClock()
    async with running_node(clock=clock) as node:
        first = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        await clock.advance(599.5)
        # Within the window: the first send's seq, and nothing stored.
        assert await send(session, node.url, "dd", "hello", client_msg_id="m-1") == first
        await clock.advance(1)
        # After it: a new message.
        later = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        assert later == {"seq": first["seq"] + 1, "epoch": first["epoch"]}
        await node.node.cache.wait_pulled("dd")
        answer = await Listener(session, "dd").poll(node.url)
        assert [m["seq"] for m in answer["messages"]] == [1, 2]


async def test_a_client_msg_id_key_lives_ten_minutes_in_redis(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    """Redis expires the key on its own (real) clock, so the default window is
    read off the key's ``PTTL`` rather than waited for."""
    async with running_node(redis_url) as node:
        first = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            ttl_ms = await client.pttl(keys.client_msg_id("dd", "m-1"))
        finally:
            await client.aclose()
        assert 590_000 < ttl_ms <= 600_000
        assert await send(session, node.url, "dd", "hello", client_msg_id="m-1") == first
        other = await send(session, node.url, "dd", "hello", client_msg_id="m-2")
        assert other["seq"] == first["seq"] + 1  # the retry stored nothing


async def test_after_its_window_a_client_msg_id_stores_a_new_message(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    """A short window on both engines: on the fake clock for memory; for Redis a
    real wait of about 0.3 s, until the key has expired."""
    clock = FakeClock()
    async with running_node(engine_url, clock=clock, dedup_ttl=0.3) as node:
        first = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        assert await send(session, node.url, "dd", "hello", client_msg_id="m-1") == first
        if engine_url == "memory":
            await clock.advance(0.31)
        else:
            client = redis.asyncio.Redis.from_url(engine_url)
            try:
                async with asyncio.timeout(5):
                    while await client.exists(keys.client_msg_id("dd", "m-1")):
                        await asyncio.sleep(0.02)
            finally:
                await client.aclose()
        later = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        assert later == {"seq": first["seq"] + 1, "epoch": first["epoch"]}
        # Remembered again from this send on.
        assert await send(session, node.url, "dd", "hello", client_msg_id="m-1") == later
