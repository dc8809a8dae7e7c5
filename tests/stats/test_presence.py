"""Presence of a room served by several statsvr nodes, on every engine (memory,
one Redis, a Redis Cluster): counts, pages in order, viewers that never go
down, and what a node holds of a room it was or was not asked about."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from support import in_page_order

from liveroom.clock import FakeClock
from liveroom.store import Store
from statsvr import StatsLimits, Statsvr

VIP = "stage"
SHARDS = 16


@asynccontextmanager
async def statsvr_nodes(store: Store, clock: FakeClock, *names: str,
                        exact_up_to: int = 20_000) -> AsyncIterator[list[Statsvr]]:
    """Statsvr nodes over one store: their merges run (a first merge is
    waited for), the tests step the rest."""
    limits = StatsLimits(vip_shards=SHARDS, exact_up_to=exact_up_to, viewers_threshold=50)
    nodes = [Statsvr(store.stats, clock, name, limits=limits, is_vip=lambda room: room == VIP)
             for name in names]
    for node in nodes:
        await node.merge.start()
    try:
        yield nodes
    finally:
        for node in nodes:
            await node.merge.stop()


def listeners(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:05d}" for i in range(n)]


async def beat_and_write(node: Statsvr, room: str, uids: Sequence[str]) -> None:
    node.tables.beat(room, uids)
    await node.write_once()


async def merged(nodes: Sequence[Statsvr], *rooms: str) -> None:
    """A merge pass of ``rooms`` on every node now (their loops' passes may
    have read the store before the last write)."""
    for node in nodes:
        await node.merge.merge_now(rooms)


async def test_every_node_counts_and_pages_a_room_alike(store: Store,
                                                       fake_clock: FakeClock) -> None:
    async with statsvr_nodes(store, fake_clock, "a", "b", "reader") as (a, b, reader):
        for room in (VIP, "chat"):
            await beat_and_write(a, room, listeners("a", 300))
            await beat_and_write(b, room, listeners("b", 200) + listeners("a", 50))
        await merged((a, b, reader), VIP, "chat")
        for room, count in ((VIP, SHARDS), ("chat", 1)):
            everyone = in_page_order(set(listeners("a", 300)) | set(listeners("b", 200)), count)
            for node in (a, b, reader):
                online, page = await node.members(room, 0, 1000)
                assert (online, page) == (500, everyone)
                assert node.merge.view(room).exact
                assert (await node.members(room, 120, 70))[1] == everyone[120:190]
                assert (await node.stats(room)).online == 500


async def test_a_big_room_is_counted_from_the_index_and_paged_on_demand(
        store: Store, fake_clock: FakeClock) -> None:
    async with statsvr_nodes(store, fake_clock, "a", "b", "reader",
                             exact_up_to=100) as (a, b, reader):
        await beat_and_write(a, VIP, listeners("a", 3000))
        await beat_and_write(b, VIP, listeners("b", 2000))
        everyone = in_page_order(listeners("a", 3000) + listeners("b", 2000), SHARDS)
        await merged((reader,), VIP)
        view = reader.merge.view(VIP)
        # Summed: right while each listener beats through one node; the
        # view cannot tell, so it does not claim it.
        assert (view.online, view.exact, view.kept_uids) == (5000, False, 0)
        assert reader.merge.pages.kept_uids == 0
        assert await reader.members(VIP, 0, 100) == (5000, everyone[:100])
        first = reader.merge.pages.kept_uids
        assert 0 < first < 1000  # heads of one shard's blobs, not the room
        assert (await reader.members(VIP, 4000, 100))[1] == everyone[4000:4100]
        # A listener who moved from a to b counts twice until a drops it;
        # pages list it once.
        await beat_and_write(b, VIP, ["a00007"])
        await reader.merge.merge_now([VIP])
        moved = reader.merge.view(VIP)
        assert (moved.online, moved.exact) == (5001, False)
        assert (await reader.members(VIP, 0, 5001))[1] == everyone


async def test_a_node_holds_nothing_of_a_room_nobody_asked_it_about(
        store: Store, fake_clock: FakeClock) -> None:
    async with statsvr_nodes(store, fake_clock, "a", "idle") as (a, idle):
        await beat_and_write(a, VIP, listeners("a", 1000))
        await idle.write_once()
        assert idle.merge.rooms() == []
        assert idle.merge.pages.kept_uids == 0
        # Asked for the count only: the index, no member.
        await merged((idle,), VIP)
        assert (await idle.stats(VIP)).online == 1000
        assert idle.merge.view(VIP).kept_uids == 0
        assert idle.merge.pages.kept_uids == 0


async def test_viewers_never_go_down_as_listeners_leave(store: Store,
                                                       fake_clock: FakeClock) -> None:
    async with statsvr_nodes(store, fake_clock, "a", "b", "reader") as (a, b, reader):
        seen: list[int] = []
        for step in range(4):
            # Each step 40 new listeners on each node; the old ones fall quiet.
            await beat_and_write(a, VIP, listeners(f"a{step}-", 40))
            await beat_and_write(b, VIP, listeners(f"b{step}-", 40))
            await merged((reader,), VIP)
            await reader.refresh_viewers()
            figures = await reader.stats(VIP)
            seen.append(figures.viewers)
            assert figures.viewers >= figures.online
            await fake_clock.advance(a.limits.online_ttl + a.limits.sweep_every + 1)
        assert seen == sorted(seen)
        assert seen[-1] >= 4 * 80 * 0.95  # past the exact threshold: a sketch
