"""Attacks on the room cache (recvsvr) that the node withstands. Each test is an
attack and the answer a user relies on:

- thousands of held polls closed in one turn of the loop (clients gone at
  once) cost the loop work linear in the polls, and the cache ends within
  ``rooms_max``, instead of every disconnect rescanning the rooms still busy;
- polls arriving together for more new rooms than ``rooms_max`` leaves
  room for cannot keep past the bound: the extra ones get ``Overloaded``;
- held polls on made-up names (rooms that do not exist), however many, never
  make a real room's first poll fail: they are kept outside ``rooms_max``,
  and count in it once their room comes to exist.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from support import Listener, held_polls, running_node, send

from liveroom.clock import FakeClock
from liveroom.errors import Overloaded
from liveroom.metrics import Metrics
from liveroom.model import NewMessage
from liveroom.snapshot import ABSENT_EPOCH, Snapshot
from liveroom.store.base import Store
from recvsvr import Recvsvr
from recvsvr.cache import RoomCache, SectLimits


async def exist(store: Store, *rooms: str) -> None:
    for room in rooms:
        await store.log.append(room, NewMessage("u", "hi", False, 1))


async def held_by_the_hold(cache: RoomCache, rooms: list[str], *,
                           together: bool = False) -> list[asyncio.Task[Snapshot]]:
    """Read, keep and watch each of ``rooms`` as the proxy's hold does for a room
    with held polls (each kept as soon as read; ``together``: all read at
    once, then kept, which a cache with room for them all allows); returns
    the watchers (running once this returns)."""
    if together:
        snaps = await asyncio.gather(*(cache.snapshot(room) for room in rooms))
        for room in rooms:
            cache.keep(room)
    else:
        snaps = []
        for room in rooms:
            snaps.append(await cache.snapshot(room))
            cache.keep(room)
    watchers = [asyncio.create_task(cache.wait_changed(room, snap))
                for room, snap in zip(rooms, snaps, strict=True)]
    await asyncio.sleep(0)  # each watcher runs up to its wait
    return watchers


async def gone(watchers: list[asyncio.Task[Snapshot]]) -> None:
    for task in watchers:
        task.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)


# -- closing many held polls at once ------------------------------------------------


async def test_thousands_of_held_polls_closed_in_one_turn_cost_linear_work(
        memory_store: Store, fake_clock: FakeClock) -> None:
    """6 000 rooms kept with watchers, one more room than the bound cached, and
    every room let go in one synchronous loop (the clients left together;
    their watchers are cancelled only at the next turn): letting them go takes
    milliseconds, not the seconds of a rescan of the busy rooms at each one
    (5 s before), and once the watchers are gone the cache is within its
    bound again (it stayed one room past it before)."""
    n = 6000
    rooms = [f"r{i}" for i in range(n - 1)]
    await exist(memory_store, *rooms, "watched", "late")
    cache = RoomCache(memory_store.log, fake_clock, Metrics(), limits=SectLimits(rooms_max=n))
    await cache.start()
    try:
        watchers = await held_by_the_hold(cache, rooms, together=True)
        # A watcher on a room nobody keeps (a hold that just let it go) ...
        watched = await cache.snapshot("watched")
        watchers.append(asyncio.create_task(cache.wait_changed("watched", watched)))
        await asyncio.sleep(0)
        # ... and one more room read and held: one past the bound, as rooms
        # still waiting for their first pull leave a cache.
        watchers += await held_by_the_hold(cache, ["late"])
        assert len(cache) == n + 1
        assert cache.kept == n

        started = time.perf_counter()
        for room in [*rooms, "late"]:
            cache.let_go(room)
        took = time.perf_counter() - started

        assert took < 0.5, f"letting {n} rooms go took {took:.2f} s"
        assert cache.kept == 0
        await gone(watchers)
        assert len(cache) <= n
    finally:
        await cache.stop()


# -- keeping past the bound -----------------------------------------------------------


async def test_keep_never_admits_past_rooms_max(memory_store: Store,
                                               fake_clock: FakeClock) -> None:
    """Eight first polls of eight new rooms arrive while nothing is kept, so
    every read is let in, and each room is held once its first pull came (some
    were evicted meanwhile): four are kept, the four others are refused with
    Overloaded (a 503 for their polls), never kept past ``rooms_max`` (all
    eight were before). A room moving into a full sect stays kept as often: its
    polls are held already."""
    rooms = [f"new-{i}" for i in range(8)]
    await exist(memory_store, *rooms, "stage")
    whitelist: set[str] = set()
    normal = RoomCache(memory_store.log, fake_clock, Metrics(), limits=SectLimits(rooms_max=4))
    vip = RoomCache(memory_store.log, fake_clock, Metrics(), limits=SectLimits(rooms_max=1),
                    name="vip")
    sects = Recvsvr(normal, vip, whitelist.__contains__, fake_clock)
    await sects.start()
    try:
        await asyncio.gather(*(sects.snapshot(room) for room in rooms))
        refused: list[Overloaded] = []
        for room in rooms:
            try:
                sects.keep(room)
            except Overloaded as exc:
                refused.append(exc)
        assert all(exc.retry_after for exc in refused)  # a 503 with Retry-After
        kept = [room for room in rooms if normal.keeps_of(room)]
        assert normal.kept == len(kept) == 4
        assert len(refused) == 4
        assert len(normal) <= 4
        # Another keep of a kept room is never refused.
        sects.keep(kept[0])
        assert normal.keeps_of(kept[0]) == 2

        whitelist.add("stage")
        await sects.snapshot("stage")
        sects.keep("stage")  # the vip sect's one place
        whitelist.add(kept[0])
        sects.moved([kept[0]])
        assert (vip.keeps_of(kept[0]), vip.kept) == (2, 2)
        assert normal.kept == 3
        # The place it left is a refused room's now.
        late = next(room for room in rooms if room not in kept)
        sects.keep(late)
        assert (normal.keeps_of(late), normal.kept) == (1, 4)
    finally:
        await sects.stop()


# -- made-up names ------------------------------------------------------------------------


async def test_kept_made_up_names_never_take_a_real_rooms_place(
        memory_store: Store, fake_clock: FakeClock) -> None:
    """With ``rooms_max`` 2, 50 made-up names kept and watched: rooms that
    exist are still read and kept up to the bound (and refused past it).
    A made-up name that comes to exist while kept counts among the rooms
    that exist from then on, past the bound if it must (its polls are held),
    so new rooms wait until kept rooms are let go."""
    cache = RoomCache(memory_store.log, fake_clock, Metrics(), limits=SectLimits(rooms_max=2))
    memory_store.notifier.subscribe(cache.on_notify, cache.on_resync)
    await cache.start()
    junk = [f"junk-{i}" for i in range(50)]
    watchers: list[asyncio.Task[Snapshot]] = []
    try:
        watchers += await held_by_the_hold(cache, junk)
        assert (cache.kept, cache.kept_absent) == (50, 50)
        await exist(memory_store, "a", "b", "c")
        assert (await cache.snapshot("a")).head == 1  # a real room's first read
        watchers += await held_by_the_hold(cache, ["a", "b"])
        with pytest.raises(Overloaded):
            await cache.snapshot("c")  # two rooms that exist are kept: the bound

        await exist(memory_store, "junk-0")
        async with asyncio.timeout(5):
            opened = await watchers[0]
        assert opened.epoch != ABSENT_EPOCH
        assert (cache.kept, cache.kept_absent) == (52, 49)
        cache.let_go("a")
        with pytest.raises(Overloaded):
            await cache.snapshot("c")  # junk-0 and b are kept and exist
        cache.let_go("junk-0")
        assert (await cache.snapshot("c")).head == 1
    finally:
        await gone(watchers)
        await cache.stop()


async def test_held_polls_on_made_up_names_never_refuse_a_real_rooms_first_poll(
        engine_url: str) -> None:
    """A node with ``rooms_max`` 3 holds polls on 3, then 15, made-up names
    (one listener each): a room that exists still answers its first poll with
    its messages (503 ``overloaded`` before), holds its listener's next poll
    and wakes it."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session, \
            running_node(engine_url, rooms_max=3, held_max=100) as node:
        holds = node.node.proxy.holds
        await send(session, node.url, "real", "hello")
        waiting: list[asyncio.Task[dict[str, object]]] = []

        async def hold_junk(names: range) -> None:
            for i in names:
                listener = Listener(session, f"junk-{i}", uid=f"j{i}")
                assert (await listener.poll(node.url))["epoch"] == ABSENT_EPOCH
                waiting.append(asyncio.create_task(listener.poll(node.url, timeout=20)))
            await held_polls(holds, len(waiting))

        try:
            await hold_junk(range(3))
            first = await Listener(session, "real", uid="early").poll(node.url)
            assert [m["body"] for m in first["messages"]] == ["hello"]
            await hold_junk(range(3, 15))
            assert node.node.recvsvr.normal.kept_absent == 15
            listener = Listener(session, "real", uid="late")
            first = await listener.poll(node.url)
            assert [m["body"] for m in first["messages"]] == ["hello"]
            next_one = asyncio.create_task(listener.poll(node.url, timeout=20))
            await held_polls(holds, 16)
            await send(session, node.url, "real", "again")
            answer = await asyncio.wait_for(next_one, 5)
            assert [m["body"] for m in answer["messages"]] == ["again"]
        finally:
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
