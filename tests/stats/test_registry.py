"""What a node announces of its rooms (``statsvr.registry.ranked_rooms``) and
its announcement loop against a store that is down."""

from __future__ import annotations

import asyncio
import logging

import pytest
from conftest import RedisServer, opened

from liveroom.clock import FakeClock
from liveroom.store import LogPolicy
from liveroom.store.base import NodeLoad, RankedRoom
from statsvr.registry import NodeRegistry, ranked_rooms
from statsvr.sampler import writer_of


def test_a_node_lists_the_biggest_rooms_it_samples_and_rates_only_those() -> None:
    nodes = ("n1", "n2", "n3")
    rooms = [(f"r{i}", i, nodes) for i in range(200)]
    asked: list[str] = []

    def rate(room: str) -> float | None:
        asked.append(room)
        return 1.5

    listed = {node: ranked_rooms(node, rooms, rate, keep=10) for node in nodes}
    for node, ranked in listed.items():
        mine = sorted((online for room, online, _ in rooms
                       if writer_of(room, nodes) == node), reverse=True)
        assert [r.online for r in ranked] == mine[:10]
        assert all(r.per_minute == 1.5 for r in ranked)
    # Disjoint across nodes, and rated only once kept.
    names = [r.room for ranked in listed.values() for r in ranked]
    assert len(set(names)) == len(names) == 30
    assert sorted(asked) == sorted(names)


def test_rooms_nobody_holds_and_empty_rooms_are_not_listed() -> None:
    rooms = [("gone", 0, ()), ("empty", 0, ("n1",)), ("tie-b", 4, ("n1",)),
             ("tie-a", 4, ("n1",))]
    assert ranked_rooms("n1", rooms, lambda room: None) == (
        RankedRoom("tie-a", 4, None), RankedRoom("tie-b", 4, None))


async def test_the_loop_says_once_that_the_store_is_down_and_carries_on(
        redis_server: RedisServer, redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    async with opened(redis_url, LogPolicy(), clock) as store:
        registry = NodeRegistry(store.stats, clock, "n1", rooms=lambda: [("r", 2, ("n1",))],
                                load=NodeLoad, rate=lambda room: None, every=5)
        redis_server.stop()
        try:
            with caplog.at_level(logging.INFO, "liveroom.statsvr.registry"):
                await registry.start()
                for _ in range(3):
                    await asyncio.sleep(0.05)
                    await clock.advance(5)
                redis_server.start()
                async with asyncio.timeout(10):
                    while not await store.stats.nodes(int(clock.time() * 1000)):
                        await clock.advance(5)
                        await asyncio.sleep(0.05)
            assert await registry.biggest_rooms(5) == [RankedRoom("r", 2, None)]
            await registry.stop()
            # Stopped: out of the registry at once.
            assert await registry.nodes() == []
        finally:
            await registry.stop()
            redis_server.start()
        messages = [r.getMessage() for r in caplog.records]
        assert sum("cannot announce" in m for m in messages) == 1
        assert sum("announcing this node again" in m for m in messages) == 1
