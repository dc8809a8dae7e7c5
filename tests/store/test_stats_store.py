"""The stats store contract: statsvr's shard tables, viewers history, online series
and node list behave alike on every engine.

Each test runs once per engine (the ``store`` fixture is parametrized with
``memory`` and ``redis``). Times passed as ``now_ms`` / ``t_ms`` come from the
fake clock; where an engine expires keys by itself, the memory engine is driven
by the fake clock and Redis is checked through the TTLs it holds (a real Redis
keeps its own time).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio
from conftest import ENGINES, RedisServer, fresh_engine_url, opened
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import plan_exact_update

from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.store import LogPolicy, Store
from liveroom.store.base import (
    Announcement,
    NodeLoad,
    OnlineSample,
    RankedRoom,
    ShardEntry,
    ShardWrite,
    ViewersState,
)
from liveroom.store.redis import keys

TTL_MS = 30_000
SKETCH_A = bytes([1]) * 16_384
SKETCH_B = bytes([2]) * 16_384


def now_ms(clock: FakeClock) -> int:
    return int(clock.time() * 1000)


def write(room: str, index: int, version: str, members: bytes | None, *,
          count: int = 2, size: int = 1) -> ShardWrite:
    return ShardWrite(room, index, count, version, size, members)


# --- shards -------------------------------------------------------------------


async def test_shards_are_written_listed_read_refreshed_and_dropped(
        store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    gone = await stats.write_shards("n1", [write("r", 0, "v1", b"\x91\xa1a"),
                                           write("r", 1, "v1", b"\x92\xa1b\xa1c", size=2)],
                                    t0, TTL_MS)
    assert gone == []
    (listed,) = await stats.shard_index(["r"], t0)
    assert listed == [ShardEntry("n1", 0, 2, "v1", 1, t0 + TTL_MS),
                      ShardEntry("n1", 1, 2, "v1", 2, t0 + TTL_MS)]
    assert await stats.read_shards("r", listed) == [b"\x91\xa1a", b"\x92\xa1b\xa1c"]

    # A refresh pushes the entry's expiry back and keeps the members.
    await fake_clock.advance(10)
    t1 = now_ms(fake_clock)
    assert await stats.write_shards("n1", [write("r", 0, "v1", None)], t1, TTL_MS) == []
    (listed,) = await stats.shard_index(["r"], t1)
    assert [(e.index, e.expires_ms) for e in listed] == [(0, t1 + TTL_MS), (1, t0 + TTL_MS)]
    assert await stats.read_shards("r", listed) == [b"\x91\xa1a", b"\x92\xa1b\xa1c"]

    # New members replace the old ones whole; size 0 drops the shard.
    await stats.write_shards("n1", [write("r", 0, "v2", b"\x91\xa1z"),
                                    write("r", 1, "v2", None, size=0)], t1, TTL_MS)
    (after,) = await stats.shard_index(["r"], t1)
    assert after == [ShardEntry("n1", 0, 2, "v2", 1, t1 + TTL_MS)]
    assert await stats.read_shards("r", listed) == [b"\x91\xa1z", None]


async def test_refreshing_a_shard_that_is_gone_is_reported(
        store: Store, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    await stats.write_shards("n1", [write("r", 0, "v1", b"\x91\xa1a"),
                                    write("r", 1, "v1", b"\x91\xa1b"),
                                    write("q", 0, "v1", b"\x91\xa1c", count=1)], t0, TTL_MS)
    # The key of r's shard 1 vanishes: Redis flushed it, or (memory engine) it
    # outlived its garbage-collection expiry while this node stalled.
    if raw_redis is None:
        await fake_clock.advance(2 * TTL_MS / 1000 + 1)
    else:
        await raw_redis.delete(keys.shard("r", "n1", 1, 2))
    t1 = now_ms(fake_clock)
    gone = await stats.write_shards(
        "n1", [write("r", 1, "v1", None), write("q", 0, "v1", None, count=1)], t1, TTL_MS)
    if raw_redis is None:
        assert sorted(gone) == [("q", 0), ("r", 1)]
    else:
        assert gone == [("r", 1)]
    (listed,) = await stats.shard_index(["r"], t1)
    assert all(e.index != 1 for e in listed)
    # The caller writes it whole again.
    assert await stats.write_shards("n1", [write("r", 1, "v1", b"\x91\xa1b")], t1, TTL_MS) == []
    (listed,) = await stats.shard_index(["r"], t1)
    assert [e.index for e in listed if e.node == "n1"] == ([1] if raw_redis is None else [0, 1])


async def test_refreshing_a_dropped_shard_is_reported(store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    await stats.write_shards("n1", [write("r", 0, "v1", b"\x91\xa1a")], t0, TTL_MS)
    await stats.write_shards("n1", [write("r", 0, "v1", None, size=0)], t0, TTL_MS)
    assert await stats.write_shards("n1", [write("r", 0, "v1", None)], t0, TTL_MS) == [("r", 0)]
    assert await stats.shard_index(["r"], t0) == [[]]


async def test_expired_entries_are_hidden_then_pruned_by_a_write(
        store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    await stats.write_shards("old", [write("r", 0, "v1", b"\x91\xa1a", count=1)], t0, TTL_MS)
    # Alive up to and including its expires_ms, hidden after.
    assert len((await stats.shard_index(["r"], t0 + TTL_MS))[0]) == 1
    assert await stats.shard_index(["r"], t0 + TTL_MS + 1) == [[]]
    # Hiding is not pruning: an earlier clock still sees it.
    assert len((await stats.shard_index(["r"], t0))[0]) == 1
    # Another node's write of the room prunes it for good.
    t1 = t0 + TTL_MS + 1
    await stats.write_shards("new", [write("r", 0, "w1", b"\x91\xa1b", count=1)], t1, TTL_MS)
    (listed,) = await stats.shard_index(["r"], t0)
    assert [e.node for e in listed] == ["new"]


async def test_every_nodes_shards_of_a_room_are_listed(store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    await stats.write_shards("n2", [write("r", 1, "b1", b"\x91\xa1d"),
                                    write("r", 0, "b1", b"\x91\xa1c")], t0, TTL_MS)
    await stats.write_shards("n1", [write("r", 0, "a1", b"\x91\xa1a", count=1),
                                    write("s", 0, "a1", b"\x91\xa1e", count=1)], t0, TTL_MS)
    in_r, never, in_s = await stats.shard_index(["r", "never-written", "s"], t0)
    assert [(e.node, e.index, e.count, e.version) for e in in_r] == [
        ("n1", 0, 1, "a1"), ("n2", 0, 2, "b1"), ("n2", 1, 2, "b1")]
    assert never == []
    assert [(e.node, e.index) for e in in_s] == [("n1", 0)]
    assert await stats.read_shards("r", in_r) == [b"\x91\xa1a", b"\x91\xa1c", b"\x91\xa1d"]
    assert await stats.read_shards("r", []) == []
    assert await stats.shard_index([], t0) == []
    assert await stats.write_shards("n1", [], t0, TTL_MS) == []


async def test_node_names_and_versions_may_hold_separators(
        store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    await stats.write_shards("host/a 1", [write("r", 3, "v 1/x", b"\x90", count=4)],
                             t0, TTL_MS)
    (listed,) = await stats.shard_index(["r"], t0)
    assert listed == [ShardEntry("host/a 1", 3, 4, "v 1/x", 1, t0 + TTL_MS)]
    assert await stats.read_shards("r", listed) == [b"\x90"]


async def test_an_entry_carries_its_trusted_count_which_a_refresh_may_change(
        store: Store, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    await stats.write_shards("n1", [ShardWrite("r", 0, 1, "v1", 3, b"\x90", 1)], t0, TTL_MS)
    (listed,) = await stats.shard_index(["r"], t0)
    assert listed == [ShardEntry("n1", 0, 1, "v1", 3, t0 + TTL_MS, 1)]
    # Two more members became trusted: a refresh says so, the version stays.
    await stats.write_shards("n1", [ShardWrite("r", 0, 1, "v1", 3, None, 3)], t0, TTL_MS)
    (listed,) = await stats.shard_index(["r"], t0)
    assert [(e.version, e.size, e.trusted) for e in listed] == [("v1", 3, 3)]
    if raw_redis is not None:
        # An older node's entry has no trusted count: all its members count.
        await raw_redis.hset(keys.shard_index("r"), "old/0/1", f"ab12.7 5 {t0 + TTL_MS}")
        (listed,) = await stats.shard_index(["r"], t0)
        assert [(e.node, e.version, e.size, e.trusted) for e in listed] == [
            ("n1", "v1", 3, 3), ("old", "ab12.7", 5, 5)]


async def test_the_head_of_a_shard_is_read_alone(store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    long_blob = bytes(range(200))
    await stats.write_shards("n1", [write("r", 0, "v1", long_blob, count=16),
                                    write("r", 5, "v1", b"\x91\xa1a", count=16)], t0, TTL_MS)
    listed = (await stats.shard_index(["r"], t0))[0]
    gone = ShardEntry("n9", 1, 16, "v", 1, t0 + TTL_MS)
    assert await stats.read_shards("r", [*listed, gone], 10) == [
        long_blob[:10], b"\x91\xa1a", None]
    assert await stats.read_shards("r", listed, 200) == [long_blob, b"\x91\xa1a"]
    with pytest.raises(ValueError, match="max_bytes"):
        await stats.read_shards("r", listed, 0)


async def test_a_refresh_of_a_vanished_vip_shard_asks_for_it_whole(
        store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    await stats.write_shards("n1", [write("v", i, "v1", b"\x91\xa1a", count=16)
                                    for i in range(3)], t0, TTL_MS)
    await stats.write_shards("n1", [write("v", 1, "", None, count=16, size=0)], t0, TTL_MS)
    gone = await stats.write_shards("n1", [write("v", i, "v1", None, count=16)
                                           for i in range(3)], t0, TTL_MS)
    assert gone == [("v", 1)]
    assert [e.index for e in (await stats.shard_index(["v"], t0))[0]] == [0, 2]


def test_a_vip_rooms_shards_spread_over_slots_and_others_stay_in_the_rooms() -> None:
    from redis.crc import key_slot

    room_slot = key_slot(keys.shard_index("stage").encode())
    assert key_slot(keys.shard("stage", "n1", 0, 1).encode()) == room_slot
    vip = {key_slot(keys.shard("stage", f"n{n}", i, 16).encode())
           for i in range(16) for n in range(3)}
    assert len(vip) == 16
    # Every node's shard i of a room shares a slot: a page reads one slot.
    assert len({key_slot(keys.shard("stage", f"n{n}", 3, 16).encode())
                for n in range(10)}) == 1


# --- viewers ------------------------------------------------------------------


async def test_the_exact_set_fills_to_the_threshold_then_stops(store: Store) -> None:
    stats = store.stats
    add = stats.add_viewers
    assert await add("r", "n1", ["u1", "u2"], None, 3, TTL_MS) == (2, True, 1)
    # Filled exactly to the threshold: still complete.
    assert await add("r", "n1", ["u2", "u3"], None, 3, TTL_MS) == (3, True, 1)
    assert await add("r", "n1", ["u1", "u3"], None, 3, TTL_MS) == (3, True, 1)
    # One more distinct uid would exceed it: incomplete, size stays.
    assert await add("r", "n1", ["u1", "u4"], None, 3, TTL_MS) == (3, False, 1)
    # For good: later uids are ignored, even with a larger threshold.
    assert await add("r", "n1", ["u5"], None, 10, TTL_MS) == (3, False, 1)
    assert await stats.viewers(["r"], sketches=[False]) == [ViewersState(3, False, ())]


async def test_a_batch_crossing_the_threshold_fills_it_in_order(store: Store) -> None:
    stats = store.stats
    assert await stats.add_viewers("r", "n1", ["a", "b", "a", "c", "d", "e"],
                                   None, 3, TTL_MS) == (3, False, 1)
    assert await stats.add_viewers("q", "n1", ["a", "a", "b", "a"], None, 3, TTL_MS) == (2, True, 1)
    assert await stats.add_viewers("z", "n1", ["a"], None, 0, TTL_MS) == (0, False, 1)
    assert await stats.viewers(["r", "q", "z"], sketches=[False, False, False]) == [
        ViewersState(3, False, ()), ViewersState(2, True, ()), ViewersState(0, False, ())]


async def test_each_nodes_sketch_is_kept_and_read_back(store: Store) -> None:
    stats = store.stats
    # The exact set (threshold 2) is capped by the third uid: sketches are kept from then.
    await stats.add_viewers("r", "n2", ["u1"], SKETCH_B, 2, TTL_MS)
    await stats.add_viewers("r", "n1", ["u2", "u0"], bytes(16_384), 2, TTL_MS)
    await stats.add_viewers("r", "n2", [], SKETCH_B, 2, TTL_MS)
    # A new sketch replaces the node's own; None leaves it as it is.
    await stats.add_viewers("r", "n1", ["u3"], SKETCH_A, 2, TTL_MS)
    await stats.add_viewers("r", "n1", ["u4"], None, 2, TTL_MS)
    assert await stats.load_sketch("r", "n1") == SKETCH_A
    assert await stats.load_sketch("r", "n2") == SKETCH_B
    assert await stats.load_sketch("r", "n3") is None
    assert await stats.load_sketch("never-written", "n1") is None
    with_sketches, without, never = await stats.viewers(
        ["r", "r", "never-written"], sketches=[True, False, True])
    assert with_sketches == ViewersState(2, False, (SKETCH_A, SKETCH_B))
    assert without == ViewersState(2, False, ())
    assert never == ViewersState(0, True, ())
    assert await stats.viewers([], sketches=[]) == []


async def test_no_sketch_is_stored_while_the_exact_set_is_the_whole_truth(
        store: Store, raw_redis: redis.asyncio.Redis | None) -> None:
    """The attack: many small rooms, each costing a 16 KiB sketch a node. The
    answer: below the threshold only the exact set is stored."""
    stats = store.stats
    for i in range(3):
        assert await stats.add_viewers("r", "n1", [f"u{i}"], SKETCH_A, 3, TTL_MS) == (
            i + 1, True, 1)
    assert await stats.load_sketch("r", "n1") is None
    assert await stats.viewers(["r"], sketches=[True]) == [ViewersState(3, True, ())]
    if raw_redis is not None:
        assert not await raw_redis.exists(keys.viewers_sketches("r"))
    # The uid that would exceed the threshold caps the set: the sketch is stored.
    assert await stats.add_viewers("r", "n1", ["u9"], SKETCH_A, 3, TTL_MS) == (3, False, 1)
    assert await stats.load_sketch("r", "n1") == SKETCH_A


async def test_viewers_history_expires_after_its_last_update(
        store: Store, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    stats = store.stats
    await stats.add_viewers("r", "n1", ["u1", "u2"], SKETCH_A, 1, TTL_MS)
    if raw_redis is None:
        await fake_clock.advance(TTL_MS / 1000 * 0.75)
        await stats.add_viewers("r", "n1", [], None, 1, TTL_MS)
        await fake_clock.advance(TTL_MS / 1000 * 0.5)
        assert await stats.viewers(["r"], sketches=[True]) == [ViewersState(1, False, (SKETCH_A,))]
        await fake_clock.advance(TTL_MS / 1000 * 0.6)
        assert await stats.viewers(["r"], sketches=[True]) == [ViewersState(0, True, ())]
        return
    for key in (keys.viewers_exact("r"), keys.viewers_meta("r"), keys.viewers_sketches("r")):
        assert TTL_MS - 5_000 < await raw_redis.pttl(key) <= TTL_MS


# --- series -------------------------------------------------------------------

BASE_S = 1_700_000_100
"""A multiple of 300 s (and 60 s): the start of a bucket in both test resolutions."""
RESOLUTIONS = [(60, 120), (300, 600)]


def sample(room: str, offset_s: float, online: int) -> OnlineSample:
    return OnlineSample(room, BASE_S * 1000 + round(offset_s * 1000), online)


async def test_samples_roll_into_every_resolution_across_boundaries(store: Store) -> None:
    stats = store.stats
    taken = await stats.record_online(
        [sample("r", 0, 5), sample("r", 10, 7), sample("r", 55, 3),
         sample("r", 60, 10), sample("r", 299, 2)], RESOLUTIONS, 5_000)
    assert taken == 5
    # 60 s resolution, 2 buckets kept: 299 s opened BASE+240, so BASE and BASE+60 went.
    assert await stats.read_online("r", 60, 0, 2 * BASE_S) == [
        (BASE_S + 240, 2, 2, 2, 1)]
    assert await stats.read_online("r", 300, 0, 2 * BASE_S) == [
        (BASE_S, 2, 10, 27, 5)]
    await stats.record_online([sample("r", 305, 4), sample("r", 330, 6)], RESOLUTIONS, 5_000)
    assert await stats.read_online("r", 60, 0, 2 * BASE_S) == [
        (BASE_S + 240, 2, 2, 2, 1), (BASE_S + 300, 4, 6, 10, 2)]
    assert await stats.read_online("r", 300, 0, 2 * BASE_S) == [
        (BASE_S, 2, 10, 27, 5), (BASE_S + 300, 4, 6, 10, 2)]


async def test_buckets_within_a_resolution_stay_apart_before_retention(store: Store) -> None:
    stats = store.stats
    # A sample exactly on a boundary opens the bucket starting there.
    await stats.record_online([sample("r", 0, 5), sample("r", 10, 7), sample("r", 59.999, 3),
                               sample("r", 60, 10)], RESOLUTIONS, 0)
    assert await stats.read_online("r", 60, BASE_S, BASE_S + 60) == [
        (BASE_S, 3, 7, 15, 3), (BASE_S + 60, 10, 10, 10, 1)]
    # The range is inclusive at both ends and selects by bucket start.
    assert await stats.read_online("r", 60, BASE_S + 1, BASE_S + 60) == [
        (BASE_S + 60, 10, 10, 10, 1)]
    assert await stats.read_online("r", 60, BASE_S, BASE_S + 59) == [(BASE_S, 3, 7, 15, 3)]
    assert await stats.read_online("r", 3600, 0, 2 * BASE_S) == []
    assert await stats.read_online("never-written", 60, 0, 2 * BASE_S) == []


async def test_a_sample_too_soon_after_the_last_is_skipped(store: Store) -> None:
    stats = store.stats
    taken = await stats.record_online(
        [sample("a", 0, 1), sample("a", 4.999, 2), sample("b", 3, 3), sample("a", 5, 4)],
        RESOLUTIONS, 5_000)
    assert taken == 3
    # From another node, later: too soon after a's last sample, or older than it.
    late = [sample("a", 9, 8), sample("a", 1, 9)]
    assert await stats.record_online(late, RESOLUTIONS, 5_000) == 0
    assert await stats.read_online("a", 60, 0, 2 * BASE_S) == [(BASE_S, 1, 4, 5, 2)]
    assert await stats.read_online("b", 60, 0, 2 * BASE_S) == [(BASE_S, 3, 3, 3, 1)]
    assert await stats.record_online([], RESOLUTIONS, 5_000) == 0


async def test_each_resolution_keeps_at_most_retention_over_step_buckets(store: Store) -> None:
    stats = store.stats
    # One sample a minute for 20 minutes, in two batches.
    samples = [sample("r", 60 * i + 1, i) for i in range(20)]
    assert await stats.record_online(samples[:7], RESOLUTIONS, 10_000) == 7
    assert await stats.record_online(samples[7:], RESOLUTIONS, 10_000) == 13
    minutes = await stats.read_online("r", 60, 0, 2 * BASE_S)
    assert minutes == [(BASE_S + 1080, 18, 18, 18, 1), (BASE_S + 1140, 19, 19, 19, 1)]
    fives = await stats.read_online("r", 300, 0, 2 * BASE_S)
    # Samples 10-14 and 15-19; the two older five-minute buckets are gone.
    assert fives == [(BASE_S + 600, 10, 14, 60, 5), (BASE_S + 900, 15, 19, 85, 5)]


async def test_a_series_expires_after_its_longest_retention(
        store: Store, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    stats = store.stats
    await stats.record_online([sample("r", 0, 5)], RESOLUTIONS, 5_000)
    if raw_redis is None:
        await fake_clock.advance(599)
        assert len(await stats.read_online("r", 300, 0, 2 * BASE_S)) == 1
        await fake_clock.advance(2)
        assert await stats.read_online("r", 300, 0, 2 * BASE_S) == []
        assert await stats.read_online("r", 60, 0, 2 * BASE_S) == []
        # The last sample's time went with it: no gap to wait for.
        assert await stats.record_online([sample("r", 1, 5)], RESOLUTIONS, 5_000) == 1
        return
    for key in (keys.series("r", 60), keys.series("r", 300), keys.series_last("r")):
        assert 595_000 < await raw_redis.pttl(key) <= 600_000


async def test_bad_series_arguments_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="resolutions"):
        await store.stats.record_online([sample("r", 0, 1)], [(60, 30)], 0)
    with pytest.raises(ValueError, match="min_gap_ms"):
        await store.stats.record_online([sample("r", 0, 1)], RESOLUTIONS, -1)


# --- nodes --------------------------------------------------------------------


async def test_announce_lists_the_live_nodes(store: Store, fake_clock: FakeClock) -> None:
    announce = store.stats.announce
    t0 = now_ms(fake_clock)
    assert await announce("b", t0, 10_000) == ["b"]
    assert await announce("a", t0 + 5_000, 10_000) == ["a", "b"]
    # b lives until t0 + 10 s inclusive, then drops out.
    assert await announce("c", t0 + 10_000, 10_000) == ["a", "b", "c"]
    assert await announce("c", t0 + 10_001, 10_000) == ["a", "c"]
    # Dropped for good: an earlier clock does not bring it back.
    assert await announce("a", t0, 10_000) == ["a", "c"]


def ranked(*pairs: tuple[str, int]) -> tuple[RankedRoom, ...]:
    return tuple(RankedRoom(room, online, float(online) / 10) for room, online in pairs)


async def test_announcements_are_kept_with_their_node_and_replaced_whole(
        store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    load_a = NodeLoad(rooms_cached=3, held_polls=7, members=5, rooms_merged=2)
    await stats.announce("a", t0, 10_000, Announcement(load_a, ranked(("big", 50), ("x", 2))))
    await stats.announce("b", t0 + 1_000, 10_000,
                         Announcement(NodeLoad(held_polls=1), ranked(("mid", 20))))
    nodes = await stats.nodes(t0 + 1_000)
    assert [(n.node, n.announced_ms, n.expires_ms) for n in nodes] == [
        ("a", t0, t0 + 10_000), ("b", t0 + 1_000, t0 + 11_000)]
    assert nodes[0].announcement == Announcement(load_a, ranked(("big", 50), ("x", 2)))
    assert await stats.biggest_rooms(t0 + 1_000, 10) == [
        *ranked(("big", 50), ("mid", 20), ("x", 2))]
    assert await stats.biggest_rooms(t0 + 1_000, 2) == [*ranked(("big", 50), ("mid", 20))]
    # A node's next announcement replaces its rooms whole: x went empty.
    await stats.announce("a", t0 + 2_000, 10_000, Announcement(load_a, ranked(("big", 40))))
    assert await stats.biggest_rooms(t0 + 2_000, 10) == [*ranked(("big", 40), ("mid", 20))]
    # b's time passes: its rooms go with it, unread and unannounced.
    assert [n.node for n in await stats.nodes(t0 + 11_001)] == ["a"]
    assert await stats.biggest_rooms(t0 + 11_001, 10) == [*ranked(("big", 40))]
    # Announced without an announcement: live, with nothing held and no rooms.
    await stats.announce("c", t0 + 3_000, 10_000)
    state = (await stats.nodes(t0 + 3_000))[-1]
    assert (state.node, state.announcement) == ("c", Announcement())
    # A node that stops withdraws: gone at once, with its rooms.
    await stats.withdraw("a")
    await stats.withdraw("nobody")
    assert [n.node for n in await stats.nodes(t0 + 3_000)] == ["b", "c"]
    assert await stats.biggest_rooms(t0 + 3_000, 10) == [*ranked(("mid", 20))]


async def test_a_room_two_nodes_list_counts_once_with_the_larger_figure(
        store: Store, fake_clock: FakeClock) -> None:
    stats = store.stats
    t0 = now_ms(fake_clock)
    unknown = RankedRoom("hop", 30, None)
    await stats.announce("a", t0, 10_000, Announcement(rooms=(unknown, *ranked(("b", 30)))))
    await stats.announce("b", t0, 10_000, Announcement(rooms=ranked(("hop", 29), ("c", 31))))
    assert await stats.biggest_rooms(t0, 10) == [*ranked(("c", 31), ("b", 30)), unknown]
    assert await stats.biggest_rooms(t0, 1) == [*ranked(("c", 31))]
    assert await stats.biggest_rooms(t0 + 10_001, 10) == []


# --- redis specifics ----------------------------------------------------------


async def test_the_registry_is_one_hash_and_tolerates_a_bad_entry(
        redis_store: Store, redis_url: str, fake_clock: FakeClock) -> None:
    t0 = now_ms(fake_clock)
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        # An entry of an older node (plain expires_ms) and one that is garbage.
        await client.hset(keys.STATS_NODES, mapping={"old": str(t0 + 10_000),
                                                     "junk": "not a time"})
        assert await redis_store.stats.announce(
            "new", t0, 10_000, Announcement(rooms=ranked(("r", 3)))) == ["new", "old"]
        assert await client.hkeys(keys.STATS_NODES) == [b"old", b"new"]
        value = await client.hget(keys.STATS_NODES, "new")
        assert value.startswith(f"{t0 + 10_000} ".encode())
        nodes = await redis_store.stats.nodes(t0)
        assert [(n.node, n.announcement) for n in nodes] == [
            ("new", Announcement(rooms=ranked(("r", 3)))), ("old", Announcement())]
        assert await redis_store.stats.biggest_rooms(t0, 5) == [*ranked(("r", 3))]
    finally:
        await client.aclose()



async def test_scripts_are_loaded_again_after_a_script_flush(
        redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, LogPolicy(), fake_clock) as store:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await store.stats.announce("n1", 0, 1_000)
            await client.script_flush()
            t0 = now_ms(fake_clock)
            gone = await store.stats.write_shards(
                "n1", [write(f"r{i}", 0, "v", None) for i in range(3)], t0, TTL_MS)
            assert gone == [("r0", 0), ("r1", 0), ("r2", 0)]
            await client.script_flush()
            assert await store.stats.record_online(
                [sample("r", 0, 1), sample("r", 10, 2)], RESOLUTIONS, 5_000) == 2
            assert await store.stats.read_online("r", 300, 0, 2 * BASE_S) == [
                (BASE_S, 1, 2, 3, 2)]
        finally:
            await client.aclose()


async def test_every_stats_call_reports_redis_down_as_unavailable(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, LogPolicy(), fake_clock) as store:
        stats = store.stats
        redis_server.stop()
        try:
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: stats.write_shards("n1", [write("r", 0, "v", b"\x90")], 0, TTL_MS),
                lambda: stats.shard_index(["r"], 0),
                lambda: stats.read_shards("r", [ShardEntry("n1", 0, 2, "v", 1, 0)]),
                lambda: stats.add_viewers("r", "n1", ["u"], None, 3, TTL_MS),
                lambda: stats.load_sketch("r", "n1"),
                lambda: stats.viewers(["r"], sketches=[True]),
                lambda: stats.record_online([sample("r", 0, 1)], RESOLUTIONS, 0),
                lambda: stats.read_online("r", 60, 0, 1),
                lambda: stats.announce("n1", 0, TTL_MS),
                lambda: stats.nodes(0),
                lambda: stats.withdraw("n1"),
                lambda: stats.biggest_rooms(0, 10),
            ]
            for call in calls:
                with pytest.raises(StoreUnavailable):
                    await call()
        finally:
            redis_server.start()


# --- property: the exact set follows statsvr's rule ------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(threshold=st.integers(0, 4),
       batches=st.lists(st.lists(st.sampled_from("abcdef"), max_size=6), max_size=6))
def test_the_exact_set_follows_plan_exact_update(
        engine: str, request: pytest.FixtureRequest, threshold: int,
        batches: list[list[str]]) -> None:
    asyncio.run(_run_exact_model(fresh_engine_url(engine, request), threshold, batches))


async def _run_exact_model(url: str, threshold: int, batches: list[list[str]]) -> None:
    known: set[str] = set()
    complete = True
    async with opened(url, LogPolicy(), FakeClock()) as store:
        for batch in batches:
            plan = plan_exact_update(known, complete, batch, threshold)
            known.update(plan.add)
            complete = plan.complete
            got = await store.stats.add_viewers("r", "n1", batch, None, threshold, TTL_MS)
            assert got == (len(known), complete, 1)
        (state,) = await store.stats.viewers(["r"], sketches=[False])
        assert (state.exact, state.complete) == (len(known), complete)
