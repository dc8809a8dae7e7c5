"""What a room costs: each test is an attack and the expected answer.

A room exists from its first accepted send or an operator action; polls of
made-up names write nothing and keep (almost) nothing; recvsvr's state is
bounded; a cached message holds about its own bytes; a corrupt entry or a
stalled store stays local to its room.
"""

from __future__ import annotations

import asyncio
import gc
import re
import signal
import time
import tracemalloc

import aiohttp
import pytest
import redis.asyncio as aioredis
from conftest import TEST_POLICY, RedisServer
from support import Listener, pin, running_node, send, settle

from liveroom.clock import FakeClock
from liveroom.errors import NewRoomRefused, StoreUnavailable
from liveroom.metrics import Metrics
from liveroom.model import Entry, NewMessage
from liveroom.settings import ROOMS_MAX
from liveroom.snapshot import ABSENT_EPOCH
from liveroom.store.base import Pulled, PullRequest, Store
from liveroom.store.memory import MemoryStore
from liveroom.store.redis import keys
from recvsvr.cache import ABSENT_RECHECK, RoomCache, SectLimits
from recvsvr.next_snapshot import Retention, advance


def count(metrics: Metrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


async def redis_keys(url: str) -> set[bytes]:
    client = aioredis.from_url(url)
    try:
        return {key async for key in client.scan_iter(count=1000)}
    finally:
        await client.aclose()


# -- a room costs nothing until it exists -----------------------------------------------


async def test_polls_of_made_up_names_write_nothing_and_count_nobody(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url, heartbeat_flush=0.05, stats_write_every=0.05,
                            merge_every=0.05) as node:
        await send(session, node.url, "real", "here")
        listeners = [Listener(session, f"junk-{i}", uid=f"u{i}") for i in range(50)]
        firsts = await asyncio.gather(*(lst.poll(node.url) for lst in listeners))
        assert {(a["epoch"], a["seq"], a["iseq"], a["reset"]) for a in firsts} == {
            (ABSENT_EPOCH, 0, 0, False)}
        # Later polls in the absent epoch are held like any (and end empty).
        again = await asyncio.gather(*(lst.poll(node.url, timeout=1) for lst in listeners[:5]))
        assert all(a["epoch"] == ABSENT_EPOCH and not a["messages"] for a in again)
        # Evidence that the background jobs ran after those polls: a listener of
        # a room that exists, polling after them, is flushed, written and merged
        # (any heartbeat of the junk polls would have gone in a batch no later).
        await Listener(session, "real", uid="witness").poll(node.url)
        async with asyncio.timeout(10):
            while (await (await session.get(f"{node.url}/v1/rooms/real/stats")).json()
                   )["online"] != 1:
                await asyncio.sleep(0.02)
        if engine_url == "memory":
            store = node.node.store
            assert isinstance(store, MemoryStore)
            stats = store.stats
            kept = [*store.log._rooms, *(k for t in (
                stats._shard_index, stats._shards, stats._viewers, stats._series,
                stats._series_last, stats._broadcasts) for k in t._items)]
            assert kept  # the witness's room is there
            assert not [k for k in kept if "junk-" in repr(k)]
        else:
            keys_now = await redis_keys(engine_url)
            assert any(b"real" in k for k in keys_now)
            assert not [k for k in keys_now if b"junk-" in k]
        async with session.get(f"{node.url}/v1/rooms/junk-1/stats") as resp:
            stats = await resp.json()
        assert (stats["online"], stats["viewers"], stats["seq"]) == (0, 0, 0)


async def test_a_room_created_by_an_important_send_delivers_it_to_waiting_listeners(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url) as node:
        listener = Listener(session, "new")
        first = await listener.poll(node.url)
        assert first["epoch"] == ABSENT_EPOCH
        held = asyncio.create_task(listener.poll(node.url, timeout=20))
        async with asyncio.timeout(5):
            while node.node.proxy.held_polls() < 1:
                await asyncio.sleep(0.01)
        # A burst: the important message first, then more normal ones than the
        # cache keeps (recent would drop the important one; gap counts the rest).
        sent = await send(session, node.url, "new", "co-host joined", important=True)
        answer = await asyncio.wait_for(held, 10)
        assert answer["reset"] is False
        assert answer["epoch"] == sent["epoch"] != ABSENT_EPOCH
        assert [m["body"] for m in answer["important"]] == ["co-host joined"]
        assert (answer["seq"], answer["iseq"], answer["gap"], answer["igap"]) == (1, 1, 0, 0)


async def test_a_listener_at_the_start_of_the_absent_epoch_reads_a_new_room_from_0(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(engine_url, normal_keep=3) as node:
        listener = Listener(session, "later")
        await listener.poll(node.url)
        await send(session, node.url, "later", "alert", important=True)
        for i in range(5):
            await send(session, node.url, "later", i)
        answer = await listener.poll(node.url, timeout=5)
        assert [m["body"] for m in answer["important"]] == ["alert"]
        assert answer["reset"] is False
        async with asyncio.timeout(10):
            while listener.seq != 6:  # this node's snapshot may lag a send or two
                await listener.poll(node.url, timeout=2)
        # Every normal message was delivered or counted in gap, none twice.
        normal = [b for b in listener.bodies() if b != "alert"]
        gaps = sum(a["gap"] for a in listener.answers)
        assert normal == sorted(set(normal))
        assert normal[-1] == 4
        assert len(normal) + gaps == 5
        assert not any(a["reset"] for a in listener.answers)


async def test_a_room_whose_log_is_lost_resets_listeners_into_the_absent_epoch(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(redis_url) as node:
        await send(session, node.url, "gone", "hello")
        listener = Listener(session, "gone")
        await listener.poll(node.url)
        held = asyncio.create_task(listener.poll(node.url, timeout=20))
        async with asyncio.timeout(5):
            while node.node.proxy.held_polls() < 1:
                await asyncio.sleep(0.01)
        client = aioredis.from_url(redis_url)
        await client.delete(keys.meta("gone"), keys.log("gone"))
        await client.aclose()
        answer = await asyncio.wait_for(held, 10)
        assert (answer["reset"], answer["epoch"], answer["seq"]) == (True, ABSENT_EPOCH, 0)
        # Nothing is lost across the next creation.
        await send(session, node.url, "gone", "again")
        answer = await listener.poll(node.url, timeout=5)
        assert [m["body"] for m in answer["messages"]] == ["again"]


async def test_an_operator_created_empty_room_expires_within_empty_room_ttl(
        store: Store, fake_clock: FakeClock, raw_redis: aioredis.Redis | None) -> None:
    ttl_ms = TEST_POLICY.empty_room_ttl_ms
    await pin(store, "made")
    await store.log.touch(["made"])  # a read never keeps an empty room alive
    await store.log.open_room("made")
    if raw_redis is not None:
        assert 0 < await raw_redis.pttl(keys.meta("made")) <= ttl_ms
    else:
        await fake_clock.advance(ttl_ms / 1000 - 1)
        await store.log.touch(["made"])
        await fake_clock.advance(2)
        (pulled,) = await store.log.pull([PullRequest("made", 0, 10)])
        assert pulled.epoch is None
    # The first message in a room an operator opened makes it a room like any.
    await store.log.open_room("opened")
    await store.log.append("opened", NewMessage("u", "hi", False, 1))
    if raw_redis is not None:
        assert await raw_redis.pttl(keys.meta("opened")) > ttl_ms


async def test_a_room_one_send_created_lives_empty_room_ttl_until_a_second_sender_or_a_read(
        store: Store, fake_clock: FakeClock, raw_redis: aioredis.Redis | None) -> None:
    """Sends may create rooms, but a room nobody else spoke in or read costs
    the store empty_room_ttl, not room_ttl."""
    ttl_ms = TEST_POLICY.empty_room_ttl_ms

    async def lives(room: str, seconds: float) -> bool:
        """Whether ``room`` still has its log ``seconds`` from now (memory: the
        fake clock; Redis: its keys' TTL)."""
        if raw_redis is not None:
            return bool(await raw_redis.pttl(keys.meta(room)) > seconds * 1000)
        await fake_clock.advance(seconds)
        (pulled,) = await store.log.pull([PullRequest(room, 0, 10)])
        return pulled.epoch is not None

    now = int(fake_clock.time() * 1000)
    created = await store.log.append("lonely", NewMessage("u", "hi", False, now),
                                     provisional=True)
    assert created.created
    again = await store.log.append("lonely", NewMessage("u", "me again", False, now),
                                   provisional=True)
    assert not again.created
    assert not await lives("lonely", ttl_ms / 1000 + 1)

    await store.log.append("chat", NewMessage("u", "hi", False, now), provisional=True)
    await store.log.append("chat", NewMessage("v", "hello", False, now))  # a second sender
    assert await lives("chat", ttl_ms / 1000 + 1)

    now = int(fake_clock.time() * 1000)
    await store.log.append("watched", NewMessage("u", "hi", False, now), provisional=True)
    await store.log.touch(["watched"])  # somebody reads it
    assert await lives("watched", ttl_ms / 1000 + 1)


async def test_a_listener_makes_a_room_of_one_sender_a_room_like_any(engine_url: str) -> None:
    """The first read of a room by a node's cache reaches the store at the next
    fallback pass (not at the ten-minute touch): a room somebody listens to
    keeps its log past empty_room_ttl."""
    clock = FakeClock()
    async with running_node(engine_url, clock) as node, aiohttp.ClientSession() as session:
        ttl = node.node.settings.empty_room_ttl
        await send(session, node.url, "heard", "hi", uid="u")
        await send(session, node.url, "unheard", "hi", uid="u")
        await Listener(session, "heard").poll(node.url)
        await clock.advance(1.0)  # the fallback pass pushes the read to the store
        await settle()
        await clock.advance(ttl + 1)
        pulled = await node.node.store.log.pull([PullRequest("heard", 0, 10),
                                                 PullRequest("unheard", 0, 10)])
        if engine_url == "memory":
            assert [p.epoch is not None for p in pulled] == [True, False]
        else:  # Redis expires on its own clock: read the TTLs
            client = aioredis.from_url(engine_url)
            try:
                assert await client.pttl(keys.meta("heard")) > ttl * 1000
                assert await client.pttl(keys.meta("unheard")) <= ttl * 1000
            finally:
                await client.aclose()


async def test_a_send_that_may_not_create_a_room_stores_nothing(store: Store) -> None:
    with pytest.raises(NewRoomRefused):
        await store.log.append("nope", NewMessage("u", "hi", False, 1), may_create=False)
    (pulled,) = await store.log.pull([PullRequest("nope", 0, 10)])
    assert pulled.epoch is None
    await store.log.append("exists", NewMessage("u", "hi", False, 1))
    appended = await store.log.append("exists", NewMessage("v", "hi", False, 1),
                                      may_create=False)
    assert (appended.seq, appended.created) == (2, False)


# -- bounded recvsvr state ------------------------------------------------------------


async def test_the_cache_evicts_the_least_recently_read_never_a_room_with_held_polls(
        store: Store, fake_clock: FakeClock) -> None:
    metrics = Metrics()
    cache = RoomCache(store.log, fake_clock, metrics, limits=SectLimits(rooms_max=3))
    store.notifier.subscribe(cache.on_notify, cache.on_resync)
    await cache.start()
    try:
        watched = await cache.snapshot("watched")
        waiting = asyncio.create_task(cache.wait_changed("watched", watched))
        await asyncio.sleep(0)
        for i in range(20):
            await cache.snapshot(f"junk-{i}")
        assert len(cache) == 3
        assert cache.peek("watched") is not None  # held: never evicted
        assert cache.peek("junk-19") is not None
        assert cache.peek("junk-0") is None
        assert count(metrics, "liveroom_cache_evictions_total") == 18
        await store.log.append("watched", NewMessage("u", "now", False, 1))
        async with asyncio.timeout(5):
            changed = await waiting
        assert changed.head == 1
    finally:
        await cache.stop()


async def pulls_over(clock: FakeClock, metrics: Metrics, seconds: int) -> float:
    """Pulls made while ``clock`` advances ``seconds``, one second at a time."""
    start = count(metrics, "liveroom_pulls_total")
    for _ in range(seconds):
        await clock.advance(1.0)
        for _ in range(5):
            await asyncio.sleep(0.01)  # let the pull workers run
    return count(metrics, "liveroom_pulls_total") - start


async def test_fallback_pulls_skip_rooms_nobody_reads(store: Store,
                                                      fake_clock: FakeClock) -> None:
    metrics = Metrics()
    cache = RoomCache(store.log, fake_clock, metrics,
                      limits=SectLimits(fallback_pull_interval=1.0, read_window=60.0))
    await cache.start()
    try:
        for i in range(100):
            await cache.snapshot(f"idle-{i}")
        await store.log.append("watched", NewMessage("u", "here", False, 1))
        watched = await cache.snapshot("watched")
        waiting = asyncio.create_task(cache.wait_changed("watched", watched))

        await pulls_over(fake_clock, metrics, 3)  # read 3 s ago: no longer recent
        at_rest = await pulls_over(fake_clock, metrics, 10)
        assert 5 <= at_rest <= 12  # the held room only, about once a second
        waiting.cancel()
        assert len(cache) == 101  # kept for read_window, but not pulled
    finally:
        await cache.stop()


async def test_rooms_that_do_not_exist_are_rechecked_every_few_seconds_not_every_second(
        store: Store, fake_clock: FakeClock) -> None:
    """Held polls on made-up names cost the store one batched pull per room
    every ABSENT_RECHECK seconds, not every fallback interval; a send still
    reaches them at once through its notify."""
    metrics = Metrics()
    cache = RoomCache(store.log, fake_clock, metrics,
                      limits=SectLimits(fallback_pull_interval=1.0, read_window=60.0))
    await cache.start()
    try:
        waits = []
        for i in range(50):
            snap = await cache.snapshot(f"junk-{i}")
            cache.keep(f"junk-{i}")
            waits.append(asyncio.create_task(cache.wait_changed(f"junk-{i}", snap)))

        await pulls_over(fake_clock, metrics, 5)
        pulls = await pulls_over(fake_clock, metrics, 20)
        assert pulls <= 50 * (20 / ABSENT_RECHECK + 1)  # not 50 a second (1000)
        assert pulls >= 50 * (20 / ABSENT_RECHECK - 1)  # but rechecked
        for task in waits:
            task.cancel()
    finally:
        await cache.stop()


async def test_the_cache_forgets_rooms_nobody_read_for_its_read_window(
        memory_store: Store, fake_clock: FakeClock) -> None:
    """A room nobody read for ``read_window`` leaves memory at the next fallback
    pass, not before; a room read meanwhile or with a held poll stays."""
    cache = RoomCache(memory_store.log, fake_clock, Metrics(),
                      limits=SectLimits(fallback_pull_interval=1.0, read_window=10.0))
    await cache.start()
    try:
        for name in ("idle", "read", "held"):
            await memory_store.log.append(name, NewMessage("u", "hi", False, 1))
            await cache.snapshot(name)
        held = await cache.snapshot("held")
        waiting = asyncio.create_task(cache.wait_changed("held", held))

        async def seconds(n: int) -> None:
            for _ in range(n):
                await fake_clock.advance(1.0)
                await asyncio.sleep(0.01)  # the fallback pass and its pulls
                cache.current("read")  # read every second

        await seconds(9)
        assert cache.peek("idle") is not None  # read 9 s ago: kept
        await seconds(3)
        assert cache.peek("idle") is None  # read 12 s ago: forgotten
        assert cache.peek("read") is not None
        assert cache.peek("held") is not None  # a held poll keeps it
        assert len(cache) == 2
        waiting.cancel()
        await seconds(12)  # the watcher went 12 s ago
        assert cache.peek("held") is None
        assert len(cache) == 1
        # A forgotten room is read again from the store, like a new one.
        assert (await cache.snapshot("idle")).head == 1
    finally:
        await cache.stop()


# -- memory that matches the data ---------------------------------------------------------


def test_a_cached_message_holds_its_encoded_size_and_fixed_objects() -> None:
    """2 500 short chat lines (JSON about 100 bytes each): before the copy each
    held about 1 KiB (orjson's buffer). A message also costs fixed objects: its
    tuple, seq and ts, and the headers of its two encodings, about 200 bytes
    (measured 378 bytes a message of 159 encoded, in either build)."""
    keep = Retention(normal_keep=2500)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        entries = tuple(Entry(seq=i, ic=0, uid=f"viewer-{i % 10}", important=False,
                              ts=1_700_000_000_000 + i, body="great stream, hi!")
                        for i in range(1, 2501))
        pulled = Pulled("tiny", "epoch", 2500, 0, entries, complete=True)
        snap = advance(None, pulled, 0, keep, 1_700_000_000_000)
        # What the cache keeps once the pull is dropped (the compiled build
        # boxes an Entry's ints anew when read, so only this compares builds).
        del entries, pulled
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    encoded = sum(len(item.json) + len(item.mp) for item in snap.normal)
    assert len(snap.normal) == 2500
    assert held <= encoded + 240 * 2500, (held / 2500, encoded / 2500)


# -- faults stay local ------------------------------------------------------------------


async def test_a_corrupt_entry_is_skipped_counted_in_gap_and_logged_once(
        redis_url: str, session: aiohttp.ClientSession,
        caplog: pytest.LogCaptureFixture) -> None:
    # The memory engine keeps entries as objects, never decoded: nothing can be
    # corrupt there, so this attack is on Redis only.
    async with running_node(redis_url) as node:
        first = await send(session, node.url, "bad", "one")
        listener = Listener(session, "bad")
        await listener.poll(node.url)
        client = aioredis.from_url(redis_url)
        await client.xadd(keys.log("bad"), {"m": b"\xc1garbage", "c": "x"}, id="2-0")
        await client.hset(keys.meta("bad"), "seq", 2)
        await client.aclose()
        last = await send(session, node.url, "bad", "three")
        assert (first["seq"], last["seq"]) == (1, 3)
        answer = await listener.poll(node.url, timeout=5)
        assert [m["body"] for m in answer["messages"]] == ["three"]
        assert (answer["gap"], answer["seq"]) == (1, 3)
        # A listener arriving now gets its first poll at once.
        fresh = await Listener(session, "bad", uid="late").poll(node.url)
        assert [m["body"] for m in fresh["messages"]] == ["one", "three"]
        for _ in range(3):
            await node.node.recvsvr.normal.wait_pulled("bad")
    warnings = [r for r in caplog.records if "could not decode" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_first_pull_has_a_deadline_then_503_with_retry_after(
        redis_server: RedisServer, redis_url: str, session: aiohttp.ClientSession) -> None:
    async with running_node(redis_url, first_pull_timeout=0.5) as node:
        process = redis_server._process
        assert process is not None
        process.send_signal(signal.SIGSTOP)  # Redis hangs: no answer, no error
        try:
            started = time.monotonic()
            async with session.get(f"{node.url}/v1/rooms/stalled/poll",
                                   params={"uid": "u"}) as resp:
                assert resp.status == 503
                assert resp.headers["Retry-After"]
            assert time.monotonic() - started < 4.0  # the default would be 5 s
            with pytest.raises(StoreUnavailable):
                await node.node.recvsvr.normal.wait_pulled("stalled-too")
        finally:
            process.send_signal(signal.SIGCONT)


# -- the bounded-memory test ---------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        match = re.search(r"^VmRSS:\s+(\d+) kB", status.read(), re.M)
    assert match is not None
    return int(match.group(1)) * 1024


async def poll_names(port: int, names: range, prefix: str, *, connections: int = 50,
                     depth: int = 16) -> int:
    """First polls of ``prefix<i>`` for every i, pipelined on keep-alive
    connections; returns how many answered 200."""
    ok = 0

    async def one(indexes: range) -> None:
        nonlocal ok
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for start in range(0, len(indexes), depth):
                batch = indexes[start:start + depth]
                writer.write(b"".join(
                    b"GET /v1/rooms/%s%d/poll?uid=u HTTP/1.1\r\nHost: t\r\n\r\n"
                    % (prefix.encode(), i) for i in batch))
                for _ in batch:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = int(re.search(rb"content-length: (\d+)", head, re.I)[1])  # type: ignore[index]
                    await reader.readexactly(length)
                    ok += head.startswith(b"HTTP/1.1 200")
        finally:
            writer.close()

    step = len(names) // connections
    await asyncio.gather(*(one(names[k * step:(k + 1) * step]) for k in range(connections)))
    return ok


# Three times the room cache's cap of made-up names: the cache, the known-
# absent names and their timers fill to their bounds with the first third
# (RSS +11-12 MB with 30 000 names as with 100 000, the store +0.4 MB), and
# the rest must add nothing. 30 000 polls take 6-7 s on this 2-core machine,
# more late in a full run.
@pytest.mark.timeout(120)
async def test_made_up_rooms_past_the_cache_cap_leave_store_and_process_memory_bounded(
        redis_url: str) -> None:
    names = 3 * ROOMS_MAX
    client = aioredis.from_url(redis_url)
    try:
        async with running_node(redis_url) as node:
            assert node.node.settings.rooms_max == ROOMS_MAX
            port = int(node.url.rsplit(":", 1)[1])
            assert await poll_names(port, range(2_000), "warm-") == 2_000
            gc.collect()
            store_before = (await client.info("memory"))["used_memory"]
            rss_before = rss_bytes()
            started = time.monotonic()
            assert await poll_names(port, range(names), "junk-") == names
            took = time.monotonic() - started
            # Wait for the heartbeat flush and the merge to have run since (a
            # witness of a room that exists is counted online), not for a time.
            async with aiohttp.ClientSession() as session:
                await send(session, node.url, "witnessed", "here")
                await Listener(session, "witnessed", uid="witness").poll(node.url)
                async with asyncio.timeout(20):
                    while (await (await session.get(
                            f"{node.url}/v1/rooms/witnessed/stats")).json())["online"] != 1:
                        await asyncio.sleep(0.05)
            gc.collect()
            store_after = (await client.info("memory"))["used_memory"]
            rss_after = rss_bytes()
            assert len(node.node.recvsvr) <= node.node.settings.rooms_max
        print(f"{names} first polls of made-up rooms in {took:.1f} s; store "
              f"{(store_after - store_before) / 1e6:+.2f} MB, RSS "
              f"{(rss_after - rss_before) / 1e6:+.1f} MB")
        # A leak of 600 bytes a name past the bounds would pass 30 MB.
        assert abs(store_after - store_before) < 1_000_000
        assert rss_after - rss_before < 30_000_000
    finally:
        await client.aclose()



