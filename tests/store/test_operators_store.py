"""The operators' store contract: the sect records, the start and the end of a
broadcast, alike on every engine.

Each test runs once per engine (the ``store`` fixture). Where an engine
expires keys by itself, the memory engine is driven by the fake clock and
Redis is checked through the TTLs it holds (a real Redis keeps its own time),
or made to expire a key at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio
from conftest import TEST_POLICY, Notified, RedisServer, hearing, opened, raw_client
from support import pin, release, vip_rooms

from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.model import NewMessage
from liveroom.sects import VipRecord, encode
from liveroom.store import LogPolicy, PullRequest, Store
from liveroom.store.base import PastBroadcast, ViewersState, VipSwap
from liveroom.store.redis import keys
from liveroom.whitelist import read_sects

WAIT = 5.0
"""Bound on waits for a notify a real Redis delivers asynchronously."""
TTL_MS = 600_000
"""How long an ended broadcast's history is kept in these tests."""
HISTORY_MS = 60_000
SKETCH_A = bytes([1]) * 16_384
SKETCH_B = bytes([2]) * 16_384


def now_ms(clock: FakeClock) -> int:
    return int(clock.time() * 1000)


async def send(store: Store, clock: FakeClock, room: str = "r") -> int:
    message = NewMessage("u", "hi", False, now_ms(clock))
    return (await store.log.append(room, message)).seq


async def viewers(store: Store, room: str = "r") -> ViewersState:
    (state,) = await store.stats.viewers([room], sketches=[True])
    return state


# --- the sect records --------------------------------------------------------------


async def test_a_sect_record_is_swapped_only_from_what_it_is(store: Store) -> None:
    ops = store.operators
    assert await ops.vip_records() == {}
    assert await ops.vip_swap([VipSwap("stage", b"", b"one", True),
                               VipSwap("arena", b"", b"two", False)]) == [True, True]
    assert await ops.vip_records() == {"stage": b"one", "arena": b"two"}
    # A swap from a record that changed meanwhile does nothing; others in the
    # same call still apply.
    assert await ops.vip_swap([VipSwap("stage", b"", b"three", False),
                               VipSwap("arena", b"two", b"four", True)]) == [False, True]
    assert await ops.vip_records() == {"stage": b"one", "arena": b"four"}
    assert await ops.vip_swap([VipSwap("stage", b"one", b"", False)]) == [True]
    assert await ops.vip_records() == {"arena": b"four"}
    assert await ops.vip_swap([]) == []


async def test_pins_and_releases_are_kept_alike_by_every_engine(store: Store) -> None:
    change = await pin(store, "stage", now_ms=5)
    assert (change.moved, change.after.vip, change.after.pinned) == (True, True, "vip")
    assert (await pin(store, "stage", now_ms=6)).moved is False
    await pin(store, "quiet", "normal", now_ms=7)
    assert await vip_rooms(store) == {"stage"}
    records = await read_sects(store.operators)
    assert records["stage"].since_ms == 5
    assert records["quiet"] == VipRecord(pinned="normal")
    assert (await release(store, "stage", now_ms=9)).moved is True
    assert await vip_rooms(store) == set()
    assert [(m.at_ms, m.vip, m.reason) for m in (await read_sects(store.operators))[
        "stage"].moves] == [(5, True, "pin"), (9, False, "operator")]


async def test_two_nodes_deciding_at_once_make_one_decision(
        store: Store, fake_clock: FakeClock) -> None:
    """Every node may apply the rule: the swap lets one of them win."""
    ops = store.operators
    first = VipSwap("big", b"", encode(VipRecord(candidate_ms=1)), False)
    second = VipSwap("big", b"", encode(VipRecord(candidate_ms=2)), False)
    results = await asyncio.gather(ops.vip_swap([first]), ops.vip_swap([second]))
    assert sorted(r[0] for r in results) == [False, True]
    (record,) = (await read_sects(ops)).values()
    assert record.candidate_ms in (1, 2)


async def test_the_records_are_shared_by_every_node_over_redis(
        redis_store: Store, redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, LogPolicy(), fake_clock) as other:
        await pin(redis_store, "stage")
        assert await vip_rooms(other) == {"stage"}
        assert (await release(other, "stage")).moved is True
        assert await vip_rooms(redis_store) == set()


async def test_a_room_whitelisted_before_records_reads_as_pinned_vip(
        redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, LogPolicy(), fake_clock) as store:
        async with raw_client(redis_url) as raw:
            await raw.sadd(keys.VIP, "old")
        assert await store.operators.vip_records() == {"old": b""}
        records = await read_sects(store.operators)
        assert (records["old"].vip, records["old"].pinned) == (True, "vip")
        change = await pin(store, "old", None)
        assert (change.after.vip, change.after.pinned) == (True, None)
        assert (await release(store, "old")).moved is True
        async with raw_client(redis_url) as raw:
            assert not await raw.sismember(keys.VIP, "old")


# --- ending a broadcast ----------------------------------------------------------------


async def test_ending_gives_a_new_epoch_with_an_empty_log_and_seq_goes_on(
        store: Store, fake_clock: FakeClock) -> None:
    first = await store.log.open_room("r")
    for _ in range(3):
        await send(store, fake_clock)
    await store.log.append("r", NewMessage("sys", "gift", True, now_ms(fake_clock)))
    ended = await store.operators.end_broadcast("r", now_ms(fake_clock), TTL_MS)
    assert ended.broadcast == 2
    assert ended.epoch != first
    (pulled,) = await store.log.pull([PullRequest("r", 0, 10)])
    # The ended broadcast's messages, important ones included, are gone: a
    # listener resets into an empty log.
    assert (pulled.epoch, pulled.head, pulled.entries) == (ended.epoch, 4, ())
    assert await send(store, fake_clock) == 5
    (pulled,) = await store.log.pull([PullRequest("r", 4, 10)])
    assert [e.seq for e in pulled.entries] == [5]
    again = await store.operators.end_broadcast("r", now_ms(fake_clock), TTL_MS)
    assert again.broadcast == 3
    assert again.epoch not in (first, ended.epoch)
    assert await store.log.open_room("r") == again.epoch
    assert await send(store, fake_clock) == 6


async def test_ending_a_room_without_a_log_creates_it(store: Store, fake_clock: FakeClock) -> None:
    ended = await store.operators.end_broadcast("new", now_ms(fake_clock), TTL_MS)
    assert ended.broadcast == 2
    (pulled,) = await store.log.pull([PullRequest("new", 0, 10)])
    assert (pulled.epoch, pulled.head) == (ended.epoch, 0)
    assert await send(store, fake_clock, "new") == 1


# --- starting a broadcast ------------------------------------------------------------


async def test_starting_opens_a_room_once_and_keeps_an_open_one(
        store: Store, fake_clock: FakeClock) -> None:
    started = await store.operators.start_broadcast("new")
    assert (started.broadcast, started.created) == (1, True)
    (pulled,) = await store.log.pull([PullRequest("new", 0, 10)])
    assert (pulled.epoch, pulled.head, pulled.entries) == (started.epoch, 0, ())
    # Idempotent: an open room keeps its epoch and its messages.
    assert await send(store, fake_clock, "new") == 1
    again = await store.operators.start_broadcast("new")
    assert (again.epoch, again.broadcast, again.created) == (started.epoch, 1, False)
    (pulled,) = await store.log.pull([PullRequest("new", 0, 10)])
    assert [e.seq for e in pulled.entries] == [1]
    # After an end, it reports the broadcast the end started.
    ended = await store.operators.end_broadcast("new", now_ms(fake_clock), TTL_MS)
    after = await store.operators.start_broadcast("new")
    assert (after.epoch, after.broadcast, after.created) == (ended.epoch, 2, False)


async def test_a_started_room_lives_room_ttl_and_reads_keep_it(
        store: Store, engine_url: str, fake_clock: FakeClock) -> None:
    """Unlike a room a vip add made (which lives ``empty_room_ttl`` whatever
    reads it), a started or ended room is a room like one with messages."""
    room_ttl = TEST_POLICY.room_ttl_ms
    empty_ttl = TEST_POLICY.empty_room_ttl_ms
    await store.operators.start_broadcast("started")
    await store.operators.end_broadcast("ended", now_ms(fake_clock), TTL_MS)
    await pin(store, "whitelisted")
    rooms = ["started", "ended", "whitelisted"]
    if engine_url == "memory":
        await fake_clock.advance(empty_ttl / 1000 + 1)
        await store.log.touch(rooms)
        await fake_clock.advance(room_ttl / 1000 - 2)
        await store.log.touch(rooms)  # a read pushes a live room's expiry back
        await fake_clock.advance(2)
        pulled = await store.log.pull([PullRequest(r, 0, 10) for r in rooms])
        assert [p.epoch is not None for p in pulled] == [True, True, False]
    else:
        client = raw_client(engine_url)
        try:
            for room in rooms:
                await client.pexpire(keys.meta(room), 1_000_000)
            await store.log.touch(rooms)
            ttls = [await client.pttl(keys.meta(r)) for r in rooms]
        finally:
            await client.aclose()
        assert ttls[0] > 1_000_000
        assert ttls[1] > 1_000_000
        assert ttls[2] <= 1_000_000


async def test_starting_notifies_the_listeners_of_a_new_room_only(
        store: Store, fake_clock: FakeClock) -> None:
    notified = Notified(store)
    await hearing(store, "s")
    await store.operators.start_broadcast("s")
    await notified.until(1, WAIT)
    await store.operators.start_broadcast("s")  # open already: nothing to wake
    await send(store, fake_clock, "s")
    await notified.until(2, WAIT)
    assert notified.got == [("s", 0), ("s", 1)]


async def test_rooms_have_their_own_broadcasts(store: Store, fake_clock: FakeClock) -> None:
    await store.operators.end_broadcast("a", now_ms(fake_clock), TTL_MS)
    await store.operators.end_broadcast("a", now_ms(fake_clock), TTL_MS)
    assert (await store.operators.end_broadcast("b", now_ms(fake_clock), TTL_MS)).broadcast == 2
    states = await store.stats.viewers(["a", "b", "c"], sketches=[False, False, False])
    assert [s.broadcast for s in states] == [3, 2, 1]
    assert await store.operators.broadcasts("c") == []


async def test_the_viewers_history_moves_aside_and_starts_empty(
        store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    assert await stats.add_viewers("r", "n1", ["u1", "u2"], SKETCH_A, 10, HISTORY_MS) == (
        2, True, 1)
    await stats.add_viewers("r", "n2", ["u3"], SKETCH_B, 10, HISTORY_MS)
    t1 = now_ms(fake_clock)
    await store.operators.end_broadcast("r", t1, TTL_MS)
    assert await viewers(store) == ViewersState(0, True, (), 2)
    assert await stats.load_sketch("r", "n1") is None
    # The new broadcast counts from nothing, and says which one it is.
    assert await stats.add_viewers("r", "n1", ["u2"], SKETCH_B, 10, HISTORY_MS) == (1, True, 2)
    await fake_clock.advance(5)
    t2 = now_ms(fake_clock)
    await store.operators.end_broadcast("r", t2, TTL_MS)
    # An ended broadcast with no viewers at all is kept too.
    await store.operators.end_broadcast("r", t2 + 1, TTL_MS)
    assert await store.operators.broadcasts("r") == [
        PastBroadcast(3, t2 + 1, ViewersState(0, True, (), 3)),
        # Below the threshold no sketch is stored (the exact set is the truth).
        PastBroadcast(2, t2, ViewersState(1, True, (), 2)),
        PastBroadcast(1, t1, ViewersState(3, True, (), 1)),
    ]
    assert (await viewers(store)).broadcast == 4


async def test_an_incomplete_history_stays_incomplete_aside(
        store: Store, fake_clock: FakeClock) -> None:
    await store.stats.add_viewers("r", "n1", ["u1", "u2", "u3"], SKETCH_A, 2, HISTORY_MS)
    await store.operators.end_broadcast("r", now_ms(fake_clock), TTL_MS)
    (past,) = await store.operators.broadcasts("r")
    assert past.viewers == ViewersState(2, False, (SKETCH_A,), 1)
    # The new broadcast's exact set is complete again.
    assert await store.stats.add_viewers("r", "n1", ["u4"], None, 2, HISTORY_MS) == (1, True, 2)


async def test_ended_histories_expire_after_their_ttl(
        store: Store, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    await store.stats.add_viewers("r", "n1", ["u1"], SKETCH_A, 10, HISTORY_MS)
    await store.operators.end_broadcast("r", now_ms(fake_clock), TTL_MS)
    await store.stats.add_viewers("r", "n1", ["u2"], SKETCH_A, 10, HISTORY_MS)
    if raw_redis is None:
        await fake_clock.advance(TTL_MS / 1000 / 2)
        await store.operators.end_broadcast("r", now_ms(fake_clock), TTL_MS)
        assert [p.broadcast for p in await store.operators.broadcasts("r")] == [2, 1]
        await fake_clock.advance(TTL_MS / 1000 / 2 + 1)
        assert [p.broadcast for p in await store.operators.broadcasts("r")] == [2]
        assert (await viewers(store)).broadcast == 3
        await fake_clock.advance(TTL_MS / 1000 / 2)
        assert await store.operators.broadcasts("r") == []
        # Nothing of the room's viewers is left: the numbers start over.
        assert (await viewers(store)).broadcast == 1
        return
    await store.operators.end_broadcast("r", now_ms(fake_clock), TTL_MS)
    for n in (1, 2):
        # (No sketch key: the exact sets never filled up.)
        for key in (keys.viewers_exact("r", n), keys.viewers_meta("r", n)):
            assert TTL_MS - 5_000 < await raw_redis.pttl(key) <= TTL_MS
    assert TTL_MS - 5_000 < await raw_redis.pttl(keys.broadcasts("r")) <= TTL_MS
    # Broadcast 1's history expires (made to at once): it is no longer listed.
    await raw_redis.delete(keys.viewers_meta("r", 1), keys.viewers_exact("r", 1))
    assert [p.broadcast for p in await store.operators.broadcasts("r")] == [2]


async def test_the_broadcast_number_outlives_the_viewers_history(
        store: Store, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    await store.operators.end_broadcast("r", now_ms(fake_clock), 1_000)
    long_ms = 10 * TTL_MS
    await store.stats.add_viewers("r", "n1", ["u1"], None, 10, long_ms)
    if raw_redis is None:
        await fake_clock.advance(TTL_MS / 1000)
        assert (await viewers(store)).broadcast == 2
        await fake_clock.advance(long_ms / 1000)
        assert await viewers(store) == ViewersState(0, True, (), 1)
        return
    assert long_ms - 5_000 < await raw_redis.pttl(keys.broadcasts("r")) <= long_ms
    # A room never ended keeps no broadcast record at all.
    await store.stats.add_viewers("q", "n1", ["u1"], None, 10, long_ms)
    assert await raw_redis.exists(keys.broadcasts("q")) == 0


async def test_ending_notifies_every_recvsvr_with_the_head(
        store: Store, fake_clock: FakeClock) -> None:
    notified = Notified(store)
    await hearing(store, "r")
    await send(store, fake_clock)
    await send(store, fake_clock)
    await store.operators.end_broadcast("r", now_ms(fake_clock), TTL_MS)
    await notified.until(3, WAIT)
    assert notified.got == [("r", 1), ("r", 2), ("r", 2)]


async def test_concurrent_ends_each_end_one_broadcast(
        store: Store, fake_clock: FakeClock) -> None:
    await store.stats.add_viewers("r", "n1", ["u1"], None, 10, HISTORY_MS)
    ended = await asyncio.gather(*(
        store.operators.end_broadcast("r", now_ms(fake_clock), TTL_MS) for _ in range(4)))
    assert sorted(e.broadcast for e in ended) == [2, 3, 4, 5]
    assert len({e.epoch for e in ended}) == 4
    past = await store.operators.broadcasts("r")
    assert [p.broadcast for p in past] == [4, 3, 2, 1]
    assert [p.viewers.exact for p in past] == [0, 0, 0, 1]


async def test_operators_report_redis_down_as_unavailable(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, LogPolicy(), fake_clock) as store:
        ops = store.operators
        redis_server.stop()
        try:
            calls: list[Callable[[], Awaitable[object]]] = [
                ops.vip_records, lambda: ops.vip_swap([VipSwap("r", b"", b"x", True)]),
                lambda: ops.end_broadcast("r", 0, TTL_MS), lambda: ops.broadcasts("r"),
                lambda: ops.start_broadcast("r")]
            for call in calls:
                with pytest.raises(StoreUnavailable):
                    await call()
        finally:
            redis_server.start()
