"""The outbox store contract (``liveroom/store/outbox.py``): events wait in
order until done, one holder at a time reads them, a new holder takes over
what the last one read and did not finish, and given-up events wait in the
failed list until replayed.

Each test runs once per engine (``memory``, ``redis`` and ``cluster``);
what only a shared store has (a lease another process can lose) runs on
the redis engines.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import TEST_POLICY, opened

from liveroom.clock import FakeClock
from liveroom.store import Store
from liveroom.store.base import FAILED_LIST_MAX, Outgoing


def event(n: int) -> tuple[str, bytes]:
    return f"ev_{n:04d}", b'{"id":"ev_%04d","room":"r","n":%d}' % (n, n)


async def add(store: Store, *numbers: int) -> None:
    for n in numbers:
        await store.outbox.add(*event(n))


def ids(events: list[Outgoing]) -> list[str]:
    return [e.event_id for e in events]


async def test_events_are_read_in_order_once_and_leave_when_done(store: Store) -> None:
    outbox = store.outbox
    assert await outbox.lease("a", 5_000)
    assert await outbox.take_over("a", 100) == []
    await add(store, 1, 2, 3)
    assert await outbox.waiting() == 3
    first = await outbox.next("a", 2)
    assert ids(first) == ["ev_0001", "ev_0002"]
    assert first[0].data == event(1)[1]
    assert ids(await outbox.next("a", 10)) == ["ev_0003"]
    assert await outbox.next("a", 10) == []
    await outbox.done([first[0].entry, first[1].entry])
    assert await outbox.waiting() == 1


async def test_a_new_holder_takes_over_what_was_read_and_not_done(store: Store) -> None:
    outbox = store.outbox
    assert await outbox.lease("a", 5_000)
    await outbox.take_over("a", 100)
    await add(store, 1, 2, 3)
    read = await outbox.next("a", 10)
    await outbox.done([read[1].entry])
    await outbox.release("a")
    assert await outbox.lease("b", 5_000)
    assert ids(await outbox.take_over("b", 100)) == ["ev_0001", "ev_0003"]
    await add(store, 4)
    assert ids(await outbox.next("b", 10)) == ["ev_0004"]


async def test_given_up_events_are_listed_and_replayed_under_their_ids(store: Store) -> None:
    outbox = store.outbox
    assert await outbox.lease("a", 5_000)
    await outbox.take_over("a", 100)
    await add(store, 1, 2, 3)
    read = await outbox.next("a", 10)
    await outbox.give_up(read[0], "503", 1_000)
    await outbox.give_up(read[2], "timeout", 2_000)
    failed, count = await outbox.failed(10)
    assert count == 2
    assert [(f.event_id, f.why, f.failed_ms, f.data) for f in failed] == [
        ("ev_0001", "503", 1_000, event(1)[1]), ("ev_0003", "timeout", 2_000, event(3)[1])]
    assert (await outbox.failed(1))[0][0].event_id == "ev_0001"
    assert await outbox.waiting() == 1
    assert await outbox.replay(["ev_0003", "ev_9999"]) == ["ev_0003"]
    assert ids(await outbox.next("a", 10)) == ["ev_0003"]
    assert await outbox.replay(None) == ["ev_0001"]
    assert (await outbox.failed(10)) == ([], 0)
    assert ids(await outbox.next("a", 10)) == ["ev_0001"]


async def test_bad_input_is_refused(store: Store) -> None:
    outbox = store.outbox
    for bad in ("", "a b", "x" * 65, "é"):
        with pytest.raises(ValueError, match="event id"):
            await outbox.add(bad, b"{}")
        with pytest.raises(ValueError, match="event id"):
            await outbox.replay([bad])
    for limit in (0, FAILED_LIST_MAX + 1):
        with pytest.raises(ValueError, match="limit"):
            await outbox.failed(limit)


@pytest.mark.redis_engines
async def test_one_holder_at_a_time_and_a_lost_lease_goes_to_the_next(
        engine_url: str, fake_clock: FakeClock, raw_redis: Any) -> None:
    async with opened(engine_url, TEST_POLICY, fake_clock) as one, \
            opened(engine_url, TEST_POLICY, fake_clock) as other:
        assert await one.outbox.lease("a", 200)
        assert await one.outbox.lease("a", 200)  # renewed
        assert not await other.outbox.lease("b", 200)
        await other.outbox.release("b")  # not its lease: nothing happens
        assert not await other.outbox.lease("b", 200)
        await add(one, 1)
        await one.outbox.take_over("a", 10)
        assert ids(await one.outbox.next("a", 10)) == ["ev_0001"]
        await asyncio.sleep(0.3)  # "a" died: its lease runs out in the store
        assert await other.outbox.lease("b", 5_000)
        assert not await one.outbox.lease("a", 200)
        assert ids(await other.outbox.take_over("b", 10)) == ["ev_0001"]
        if raw_redis is not None:  # the dead consumer is forgotten
            consumers = await raw_redis.xinfo_consumers("lr:{lr}:wh", "deliver")
            assert [c["name"] for c in consumers] == [b"b"]


@pytest.mark.redis_engines
async def test_the_outbox_survives_a_flushed_group(engine_url: str, fake_clock: FakeClock,
                                                   raw_redis: Any) -> None:
    async with opened(engine_url, TEST_POLICY, fake_clock) as store:
        assert await store.outbox.lease("a", 5_000)
        await store.outbox.take_over("a", 10)
        await raw_redis.flushall()
        await add(store, 1)
        assert ids(await store.outbox.next("a", 10)) == ["ev_0001"]
