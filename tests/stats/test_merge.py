"""The merge task over both engines: agreement, expiry, reads only of what changed,
the first merge, the loop on the fake clock, and Redis going down."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any, cast

import msgpack
import pytest
from conftest import TEST_POLICY, RedisServer, opened
from support import in_page_order

from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.store import Store
from liveroom.store.base import ShardEntry, ShardWrite, StatsStore
from statsvr.merge import Merge
from statsvr.table import shard_of
from statsvr.view import OnlineView

TTL_MS = 30_000


def now_ms(clock: FakeClock) -> int:
    return int(clock.time() * 1000)


def shard_writes(room: str, members: Iterable[str], count: int,
                 version: str) -> list[ShardWrite]:
    """Every shard of one node's table of ``room``, written whole (empty ones dropped)."""
    shards: dict[int, list[str]] = {index: [] for index in range(count)}
    for uid in members:
        shards[shard_of(uid, count)].append(uid)
    return [ShardWrite(room, index, count, f"{version}-{index}", len(uids),
                       msgpack.packb(sorted(uids)) if uids else None)
            for index, uids in shards.items()]


async def write(stats: StatsStore, clock: FakeClock, node: str, room: str,
                members: Iterable[str], *, count: int = 16, version: str = "v1",
                ttl_ms: int = TTL_MS) -> None:
    await stats.write_shards(node, shard_writes(room, members, count, f"{node}-{version}"),
                             now_ms(clock), ttl_ms)


async def everyone(view: OnlineView) -> list[str]:
    return await view.page(0, view.online + 1)


class CountingStats:
    """The engine's own stats store, counting the merge's reads."""

    def __init__(self, stats: StatsStore) -> None:
        self._stats = stats
        self.index_calls = 0
        self.reads: list[list[tuple[str, int]]] = []

    async def shard_index(self, rooms: Sequence[str], now_ms: int) -> list[list[ShardEntry]]:
        self.index_calls += 1
        return await self._stats.shard_index(rooms, now_ms)

    async def read_shards(self, room: str, entries: Sequence[ShardEntry],
                          max_bytes: int | None = None) -> list[bytes | None]:
        self.reads.append([(e.node, e.index) for e in entries])
        return await self._stats.read_shards(room, entries, max_bytes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stats, name)


def counting(store: Store) -> tuple[CountingStats, StatsStore]:
    wrapper = CountingStats(store.stats)
    return wrapper, cast(StatsStore, wrapper)


A = [f"alice-{i:04d}" for i in range(300)]
B = [f"bob-{i:04d}" for i in range(200)] + A[:100]  # 100 listeners on both nodes


async def test_two_merges_over_one_store_agree(store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    await write(stats, fake_clock, "a", "vip", A)
    await write(stats, fake_clock, "b", "vip", B)
    # A room being re-sharded: a already splits it in 16, b still in one.
    await write(stats, fake_clock, "a", "mixed", A, count=16)
    await write(stats, fake_clock, "b", "mixed", B, count=1)
    await write(stats, fake_clock, "a", "small", ["zed", "amy"], count=1)
    first, second = Merge(stats, fake_clock), Merge(stats, fake_clock)
    rooms = ["vip", "mixed", "small", "nobody"]
    await first.merge_now(rooms)
    await second.merge_now(rooms)
    union = in_page_order(set(A) | set(B), 16)
    for merge in (first, second):
        assert merge.view("vip").online == len(union) == 500
        assert await everyone(merge.view("vip")) == union
        assert await merge.view("mixed").page(0, 1000) == union
        assert await merge.view("small").page(0, 10) == ["amy", "zed"]
        assert merge.view("nobody").online == 0
        assert merge.view("vip").nodes == {"a", "b"}
    assert await first.view("vip").page(150, 30) == await second.view("vip").page(150, 30)
    assert first.view("vip").versions == second.view("vip").versions


async def test_an_expired_shard_leaves_the_view(store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    await write(stats, fake_clock, "a", "room", A, ttl_ms=10 * TTL_MS)
    await write(stats, fake_clock, "b", "room", B, ttl_ms=TTL_MS)
    merge = Merge(stats, fake_clock)
    await merge.merge_now(["room"])
    assert merge.view("room").online == 500
    # b stalled: its index entries outlive their TTL; a's do not.
    await fake_clock.advance(TTL_MS / 1000 + 1)
    await merge.merge_now(["room"])
    assert merge.view("room").nodes == {"a"}
    assert await everyone(merge.view("room")) == in_page_order(A, 16)


async def test_only_what_changed_is_read(store: Store, fake_clock: FakeClock) -> None:
    reads, stats = counting(store)
    await write(stats, fake_clock, "a", "room", A)
    await write(stats, fake_clock, "b", "room", B)
    merged: list[OnlineView] = []
    merge = Merge(stats, fake_clock, on_merged=merged.append)
    await merge.merge_now(["room"])
    live = await store.stats.shard_index(["room"], now_ms(fake_clock))
    assert len(reads.reads) == 1
    assert sorted(reads.reads[0]) == sorted((e.node, e.index) for e in live[0])
    assert len(merged) == 1
    # Nothing changed: the index is read, no shard is.
    await merge.merge_now(["room"])
    assert len(reads.reads) == 1
    assert len(merged) == 1
    # b's table gains one listener: only that shard of b is read again.
    newcomer = "carol"
    index = shard_of(newcomer, 16)
    writes = [w for w in shard_writes("room", [*B, newcomer], 16, "b-v2") if w.index == index]
    await stats.write_shards("b", writes, now_ms(fake_clock), TTL_MS)
    await merge.merge_now(["room"])
    assert reads.reads[1:] == [[("b", index)]]
    assert merge.view("room").online == 501
    assert await everyone(merge.view("room")) == in_page_order({*A, *B, newcomer}, 16)
    assert merged[-1] is merge.view("room")
    assert len(merged) == 2


async def test_the_trusted_count_follows_the_index_without_a_read(
        store: Store, fake_clock: FakeClock) -> None:
    reads, stats = counting(store)
    t0 = now_ms(fake_clock)
    # Two nodes' shards of a room of 300 listeners (100 on both: 400 summed).
    a_writes = [ShardWrite(w.room, w.index, w.count, w.version, w.size, w.members,
                           w.size // 2) for w in shard_writes("room", A, 16, "a-v1")]
    b_writes = [ShardWrite(w.room, w.index, w.count, w.version, w.size, w.members, w.size)
                for w in shard_writes("room", A[:100], 16, "b-v1")]
    await stats.write_shards("a", a_writes, t0, TTL_MS)
    await stats.write_shards("b", b_writes, t0, TTL_MS)
    merged: list[OnlineView] = []
    merge = Merge(stats, fake_clock, on_merged=merged.append)
    assert merge.trusted("room") is None  # not merged yet; now wanted
    await merge.merge_now(None)
    view = merge.view("room")
    assert (view.online, view.trusted) == (300, sum(w.size // 2 for w in a_writes) + 100)
    assert list(merge.trusted_counts()) == [("room", view.trusted)]
    read = len(reads.reads)
    # Every member of a becomes trusted: refreshes (same versions, no members)
    # carry it; the view changes with no shard read, and never counts more
    # trusted members than online ones.
    refreshed = [ShardWrite(w.room, w.index, w.count, w.version, w.size, None, w.size)
                 for w in a_writes if w.size]
    await stats.write_shards("a", refreshed, t0, TTL_MS)
    await merge.merge_now(["room"])
    assert len(reads.reads) == read
    assert (merge.view("room").online, merge.view("room").trusted) == (300, 300)
    assert merge.trusted("room") == 300
    assert merged[-1] is merge.view("room")
    assert merge.view("room").versions == view.versions


async def test_rooms_are_read_in_batches(store: Store, fake_clock: FakeClock) -> None:
    reads, stats = counting(store)
    rooms = [f"room-{i}" for i in range(300)]
    for room in rooms[:5]:
        await write(stats, fake_clock, "a", room, [room], count=1)
    merge = Merge(stats, fake_clock, batch=128)
    await merge.merge_now(rooms)
    assert reads.index_calls == 3
    assert reads.reads == []  # one contributor each: counted from the index
    assert [merge.view(room).online for room in rooms[:6]] == [1, 1, 1, 1, 1, 0]


async def tick(clock: FakeClock, seconds: float) -> None:
    """Move the clock and wait until the merge task rests again (bounded)."""
    await clock.advance(seconds)
    async with asyncio.timeout(5):
        while clock.sleepers() == 0:
            await asyncio.sleep(0)


async def test_the_loop_merges_wanted_rooms_and_forgets_the_others(
        store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    await write(stats, fake_clock, "a", "live", A[:10], count=1)
    changed = asyncio.Event()
    merge = Merge(stats, fake_clock, merge_every=1.0, read_window=5.0,
                  on_merged=lambda view: changed.set())
    await merge.start()
    try:
        assert merge.want("live").online == 0  # nothing merged yet
        # The first merge does not wait for the next tick: no clock moves here.
        view = await asyncio.wait_for(merge.ready("live"), 5)
        assert view.online == 10
        assert merge.want("live") is view
        assert await merge.ready("live") is view
        # A change shows after the next tick.
        changed.clear()
        await write(stats, fake_clock, "a", "live", A[:20], count=1, version="v2")
        await tick(fake_clock, 1.0)
        await asyncio.wait_for(changed.wait(), 5)
        assert merge.view("live").online == 20
        # Nobody wants it for read_window: it leaves memory.
        for _ in range(6):
            await tick(fake_clock, 1.0)
        assert merge.rooms() == []
        assert merge.view("live").online == 0
    finally:
        await merge.stop()


async def test_ready_waits_for_a_merge_now(store: Store, fake_clock: FakeClock) -> None:
    await write(store.stats, fake_clock, "a", "room", ["u1", "u2"], count=1)
    merge = Merge(store.stats, fake_clock)
    waiters = [asyncio.create_task(merge.ready("room")) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    await merge.merge_now()
    views = await asyncio.gather(*waiters)
    assert all(v is views[0] for v in views)
    assert views[0].online == 2
    assert merge.rooms() == ["room"]


async def test_stop_fails_the_waiters(store: Store, fake_clock: FakeClock) -> None:
    merge = Merge(store.stats, fake_clock)
    waiter = asyncio.create_task(merge.ready("room"))
    await asyncio.sleep(0)
    await merge.stop()
    with pytest.raises(StoreUnavailable):
        await waiter


async def test_redis_down_keeps_the_views_and_fails_first_merges(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock,
        caplog: pytest.LogCaptureFixture) -> None:
    async with opened(redis_url, TEST_POLICY, fake_clock) as store:
        await write(store.stats, fake_clock, "a", "kept", A)
        merge = Merge(store.stats, fake_clock)
        await merge.merge_now(["kept"])
        view = merge.view("kept")
        redis_server.stop()
        try:
            with caplog.at_level(logging.INFO, "liveroom.statsvr"):
                waiter = asyncio.create_task(merge.ready("new"))
                await asyncio.sleep(0)
                for _ in range(3):
                    await merge.merge_now()
                with pytest.raises(StoreUnavailable):
                    await waiter
                # The view held is kept as it was.
                assert merge.view("kept") is view
                assert merge.want("kept").online == 300
                downs = [r for r in caplog.records if "cannot read online shards" in r.message]
                assert len(downs) == 1
        finally:
            redis_server.start()
        with caplog.at_level(logging.INFO, "liveroom.statsvr"):
            # The restarted Redis is empty: the shards are gone until rewritten.
            await merge.merge_now()
            assert merge.view("kept").online == 0
            assert (await merge.ready("new")).online == 0
        assert any("readable again" in r.message for r in caplog.records)
