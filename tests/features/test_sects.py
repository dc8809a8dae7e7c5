"""Sects on both engines: each room read from the cache of its sect, a wait that
follows a room across a move, a vip sect whose pull budget is its own, and the
node's copy of the vip whitelist that routes them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest
from conftest import TEST_POLICY, RedisServer, opened
from support import pin, release

from liveroom.clock import FakeClock
from liveroom.metrics import Metrics
from liveroom.model import NewMessage
from liveroom.snapshot import ABSENT_EPOCH, Snapshot
from liveroom.store import MessageLog, Pulled, PullRequest, Store
from liveroom.store.base import Operators
from liveroom.whitelist import VipList
from recvsvr import Recvsvr, RoomCache, SectLimits


class GatedLog:
    """The engine's message log, with every pull that reads one of ``held``
    kept at a gate until the test opens it."""

    def __init__(self, inner: MessageLog, held: set[str]) -> None:
        self.inner = inner
        self.held = held
        self.gate = asyncio.Event()
        self.waiting = 0

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        if any(r.room in self.held for r in requests):
            self.waiting += 1
            try:
                await self.gate.wait()
            finally:
                self.waiting -= 1
        return await self.inner.pull(requests)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Node:
    """Two sects of one node over the test's store, with a whitelist the test sets."""

    def __init__(self, store: Store, clock: FakeClock, *, vip_log: MessageLog | None = None,
                 vip_limits: SectLimits | None = None, notified: bool = True) -> None:
        self.whitelist: set[str] = set()
        metrics = Metrics()
        self.sects = Recvsvr(RoomCache(store.log, clock, metrics),
                           RoomCache(vip_log or store.log, clock, metrics,
                                     limits=vip_limits or SectLimits(), name="vip"),
                           self.whitelist.__contains__, clock, metrics=metrics)
        self.metrics = metrics
        if notified:
            store.notifier.subscribe(self.sects.on_notify, self.sects.on_resync)

    def move(self, room: str, vip: bool) -> None:
        if vip:
            self.whitelist.add(room)
        else:
            self.whitelist.discard(room)
        self.sects.moved([room])


@pytest.fixture
async def node(store: Store, fake_clock: FakeClock) -> AsyncIterator[Node]:
    running = Node(store, fake_clock)
    await running.sects.start()
    try:
        yield running
    finally:
        await running.sects.stop()


async def say(store: Store, room: str, body: str, *, important: bool = False) -> int:
    appended = await store.log.append(room, NewMessage("u", body, important, 1))
    return appended.seq


def shape(snap: Snapshot) -> tuple[object, ...]:
    return (snap.epoch, snap.head, snap.head_ic, [i.seq for i in snap.normal],
            [i.seq for i in snap.important])


async def run_a_little(task: asyncio.Task[Any]) -> None:
    """Let the loop run a little (store round trips are real I/O on Redis)."""
    for _ in range(20):
        if task.done():
            return
        await asyncio.sleep(0.01)


async def test_each_room_is_read_from_the_cache_of_its_sect(store: Store, node: Node) -> None:
    node.whitelist.add("stage")
    await say(store, "stage", "hello")
    await node.sects.snapshot("small")
    stage = await node.sects.snapshot("stage")
    assert stage.head == 1
    assert node.sects.vip.peek("stage") is stage
    assert node.sects.normal.peek("stage") is None
    assert node.sects.normal.peek("small") is not None
    assert node.sects.vip.peek("small") is None
    assert len(node.sects) == 2
    assert "liveroom_cached_rooms 2.0" in node.metrics.render().decode()


async def test_two_sects_agree_on_a_room_after_a_pull(store: Store, node: Node) -> None:
    for i in range(30):
        await say(store, "r", f"m{i}", important=i % 7 == 0)
    in_normal = await node.sects.normal.wait_pulled("r")
    in_vip = await node.sects.vip.wait_pulled("r")
    assert shape(in_normal) == shape(in_vip)
    assert in_normal.head == 30


async def test_a_notify_goes_to_the_sect_of_its_room(store: Store, node: Node) -> None:
    stale_normal = await node.sects.normal.wait_pulled("r")
    node.whitelist.add("r")
    await node.sects.vip.wait_pulled("r")
    waiting = asyncio.create_task(node.sects.wait_changed("r", stale_normal))
    await say(store, "r", "hello")
    async with asyncio.timeout(5):
        got = await waiting
    assert got.head == 1
    assert node.sects.vip.peek("r") is got
    # The old sect was not asked to pull (only its fallback would, later).
    normal = node.sects.normal.peek("r")
    assert normal is not None
    assert normal.head == 0


async def test_a_wait_follows_its_room_into_the_vip_sect_and_back(
        store: Store, node: Node) -> None:
    await say(store, "r", "first")
    snap = await node.sects.snapshot("r")
    waiting = asyncio.create_task(node.sects.wait_changed("r", snap))
    await run_a_little(waiting)

    # Nothing new: the move alone does not answer the wait ...
    pulls = node.metrics.pulls._value.get()
    node.move("r", vip=True)
    await run_a_little(waiting)
    assert not waiting.done()
    assert node.sects.vip.peek("r") is not None  # pulled into its new sect at once
    assert node.metrics.pulls._value.get() == pulls + 1  # and only once
    # ... and the next message arrives through the vip sect.
    await say(store, "r", "second")
    async with asyncio.timeout(5):
        got = await waiting
    assert (got.epoch, got.head) == (snap.epoch, 2)
    assert node.sects.vip.peek("r") is got

    # Back to the normal sect, where the room's copy is out of date: still
    # nothing missed, nothing answered twice.
    waiting = asyncio.create_task(node.sects.wait_changed("r", got))
    await run_a_little(waiting)
    node.move("r", vip=False)
    await run_a_little(waiting)
    assert not waiting.done()
    await say(store, "r", "third")
    async with asyncio.timeout(5):
        again = await waiting
    assert (again.epoch, again.head) == (snap.epoch, 3)


async def test_a_room_that_moved_on_meanwhile_answers_at_once(
        store: Store, fake_clock: FakeClock) -> None:
    # A node that hears no notifies: only a pull shows what happened.
    deaf = Node(store, fake_clock, notified=False)
    await deaf.sects.start()
    try:
        snap = await deaf.sects.snapshot("r")
        waiting = asyncio.create_task(deaf.sects.wait_changed("r", snap))
        await say(store, "r", "unheard")
        await run_a_little(waiting)
        assert not waiting.done()
        deaf.move("r", vip=True)
        async with asyncio.timeout(5):
            got = await waiting
        # The room did not exist when the wait began; "unheard" created it.
        assert (snap.epoch, got.head) == (ABSENT_EPOCH, 1)
    finally:
        await deaf.sects.stop()


async def test_a_cancelled_wait_leaves_no_task_behind(store: Store, node: Node) -> None:
    snap = await node.sects.snapshot("r")
    before = len(asyncio.all_tasks())
    waiting = asyncio.create_task(node.sects.wait_changed("r", snap))
    await run_a_little(waiting)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == before
    node.move("r", vip=True)  # nobody waits: nothing to wake


async def test_a_storm_in_a_vip_room_does_not_delay_normal_pulls(
        store: Store, fake_clock: FakeClock) -> None:
    gated = GatedLog(store.log, held={"stage", "stage2"})
    node = Node(store, fake_clock, vip_log=cast(MessageLog, gated),
                vip_limits=SectLimits(pull_batch=1, pull_concurrency=1))
    node.whitelist.update({"stage", "stage2"})
    await node.sects.start()
    try:
        stage = asyncio.create_task(node.sects.snapshot("stage"))
        async with asyncio.timeout(5):
            while not gated.waiting:
                await asyncio.sleep(0.01)
        # A storm of sends (and notifies) in the vip room while its only
        # worker is stuck in a pull.
        for i in range(300):
            await say(store, "stage", f"storm {i}")
        second = asyncio.create_task(node.sects.snapshot("stage2"))
        # Normal rooms are pulled by their own workers, at once.
        async with asyncio.timeout(2):
            for i in range(20):
                await say(store, f"small{i}", "hi")
                snap = await node.sects.snapshot(f"small{i}")
                assert snap.head == 1
        # The vip sect's budget really is spent meanwhile.
        assert gated.waiting == 1
        assert not stage.done()
        assert not second.done()
        gated.gate.set()
        async with asyncio.timeout(5):
            # The held pull reads the store as it is once the gate opens.
            assert (await stage).head == 300
            assert (await second).epoch == ABSENT_EPOCH  # nothing was said there
    finally:
        gated.gate.set()
        await node.sects.stop()


# -- the whitelist cache ----------------------------------------------------------


class GatedOperators:
    """The engine's operators, with whitelist reads kept at a gate when closed."""

    def __init__(self, inner: Operators) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.gate.set()
        self.reads = 0

    async def vip_records(self) -> dict[str, bytes]:
        self.reads += 1
        records = await self.inner.vip_records()
        await self.gate.wait()
        return records

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_the_whitelist_is_read_at_start_and_every_refresh(
        engine_url: str, fake_clock: FakeClock) -> None:
    async with opened(engine_url, TEST_POLICY, fake_clock) as store:
        await pin(store, "stage")
        vips = VipList(store.operators, fake_clock, vip_refresh=2.0)
        changes: list[frozenset[str]] = []
        vips.on_change(changes.append)
        await vips.start()
        try:
            assert vips.is_vip("stage")
            assert not vips.is_vip("small")
            assert changes == [frozenset({"stage"})]
            # Another node changes the store: seen within one refresh, not before.
            await pin(store, "arena")
            await release(store, "stage")
            await fake_clock.advance(1.9)
            assert vips.rooms == {"stage"}
            version = vips.version
            async with asyncio.timeout(5):
                while vips.rooms != {"arena"}:
                    await fake_clock.advance(0.1)
                    await asyncio.sleep(0.01)
            assert changes[-1] == {"arena", "stage"}
            assert vips.version == version + 1
            # A refresh that finds nothing new changes nothing.
            await fake_clock.advance(2.0)
            await asyncio.sleep(0.05)
            assert vips.version == version + 1
        finally:
            await vips.stop()


async def test_a_read_in_flight_does_not_undo_a_local_change(
        engine_url: str, fake_clock: FakeClock) -> None:
    async with opened(engine_url, TEST_POLICY, fake_clock) as store:
        gated = GatedOperators(store.operators)
        vips = VipList(cast(Operators, gated), fake_clock, vip_refresh=2.0)
        await vips.start()
        try:
            gated.gate.clear()
            await asyncio.sleep(0.01)  # the refresh task reaches its sleep
            await fake_clock.advance(2.0)
            async with asyncio.timeout(5):
                while gated.reads < 2:
                    await asyncio.sleep(0.01)
            # The read saw the list before this node whitelisted the room.
            vips.note(await pin(store, "stage"))
            gated.gate.set()
            await asyncio.sleep(0.05)
            assert vips.is_vip("stage")
            await fake_clock.advance(2.0)
            await asyncio.sleep(0.05)
            assert vips.is_vip("stage")
        finally:
            gated.gate.set()
            await vips.stop()


async def test_a_store_outage_keeps_the_last_list_and_logs_once(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock,
        caplog: pytest.LogCaptureFixture) -> None:
    async with opened(redis_url, TEST_POLICY, fake_clock) as store:
        await pin(store, "stage")
        vips = VipList(store.operators, fake_clock, vip_refresh=1.0)
        await vips.start()
        try:
            redis_server.stop()
            with caplog.at_level(logging.INFO, logger="liveroom.whitelist"):
                for _ in range(3):
                    assert not await vips.refresh()
                assert vips.is_vip("stage")
                redis_server.start()
                async with asyncio.timeout(10):
                    while not await vips.refresh():
                        await asyncio.sleep(0.1)
            # The restarted Redis is empty: the whitelist is too.
            assert not vips.is_vip("stage")
            messages = [r.getMessage() for r in caplog.records]
            assert sum("cannot read the vip records" in m for m in messages) == 1
            assert sum("read again" in m for m in messages) == 1
        finally:
            redis_server.start()
            await vips.stop()


async def test_start_with_the_store_down_gives_up_in_time(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, TEST_POLICY, fake_clock) as store:
        await pin(store, "stage")
        redis_server.stop()
        vips = VipList(store.operators, fake_clock, vip_refresh=1.0, start_wait=0.5)
        try:
            async with asyncio.timeout(5):
                await vips.start()
            assert vips.rooms == frozenset()  # every room normal meanwhile
            redis_server.start()
            await pin(store, "stage")
            async with asyncio.timeout(10):
                while not vips.is_vip("stage"):
                    await fake_clock.advance(1.0)
                    await asyncio.sleep(0.05)
        finally:
            redis_server.start()
            await vips.stop()


class SwallowingLog:
    """The engine's message log, whose pulls finish even when cancelled and
    swallow the cancel: what redis-py does to a command in flight."""

    def __init__(self, inner: MessageLog) -> None:
        self.inner = inner
        self.pulls = 0
        self.pulling = asyncio.Event()

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        self.pulls += 1
        self.pulling.set()
        with contextlib.suppress(asyncio.CancelledError):  # lost: the pull goes on
            await asyncio.sleep(0.01)
        return await self.inner.pull(requests)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_cache_stops_when_its_store_swallows_the_cancel(
        store: Store, fake_clock: FakeClock) -> None:
    """A swallowed cancel must not keep a pull worker taking batch after batch
    (a node with many rooms to pull took minutes to stop)."""
    log = SwallowingLog(store.log)
    cache = RoomCache(cast(MessageLog, log), fake_clock, Metrics(),
                      limits=SectLimits(pull_batch=1, pull_concurrency=1))
    await cache.start()
    for i in range(200):
        cache.request_pull(f"room-{i}")
        cache.current(f"room-{i}")  # held by the cache, so pulls are due
    await asyncio.wait_for(log.pulling.wait(), 5)
    await asyncio.wait_for(cache.stop(), 5)
    assert log.pulls < 200  # it stopped, not pulled everything first
