"""The owner's table: heartbeats in memory, quiet members swept on time, and
store writes that follow joins and leaves, not heartbeats."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liveroom.clock import FakeClock
from liveroom.store.base import ShardWrite
from proxy.polls.heartbeats import Heartbeats, owner_of
from statsvr.table import Tables, shard_of


def batch(rooms: dict[str, list[str]]) -> bytes:
    return bytes(msgpack.packb(rooms))


def stored(writes: list[ShardWrite]) -> dict[tuple[str, int, int], list[str]]:
    return {(w.room, w.index, w.count): msgpack.unpackb(w.members)
            for w in writes if w.members is not None}


async def test_a_join_is_written_once_then_only_refreshed(fake_clock: FakeClock) -> None:
    tables = Tables(fake_clock, online_ttl=90, refresh_every=15)
    assert tables.ingest(batch({"r": ["b", "a", "c"]})) == 3
    writes, joined = await tables.take_writes()
    assert stored(writes) == {("r", 0, 1): ["a", "b", "c"]}
    assert joined == {"r": ["b", "a", "c"]}
    assert writes[0].size == 3
    assert writes[0].version

    # Heartbeats of members already in: no write at all.
    for _ in range(10):
        tables.ingest(batch({"r": ["a", "b", "c"]}))
        await fake_clock.advance(1)
        assert (await tables.take_writes()) == ([], {})
    # Until the refresh period passes: a TTL refresh with the same version.
    await fake_clock.advance(5)
    writes, _ = await tables.take_writes()
    assert [(w.members, w.size, w.version) for w in writes] == [(None, 3, stored_version(tables))]


def stored_version(tables: Tables) -> str:
    return tables._rooms["r"].shards[0].version


async def test_members_leave_after_the_ttl_and_not_before(fake_clock: FakeClock) -> None:
    tables = Tables(fake_clock, online_ttl=90)
    tables.beat("r", ["a", "b"])
    await tables.take_writes()
    await fake_clock.advance(60)
    tables.beat("r", ["b"])
    await fake_clock.advance(29)
    assert await tables.sweep() == 0
    assert tables.members("r") == {"a", "b"}
    await fake_clock.advance(2)  # a: 91 s of silence
    assert await tables.sweep() == 1
    assert tables.members("r") == {"b"}
    writes, joined = await tables.take_writes()
    assert stored(writes) == {("r", 0, 1): ["b"]}
    assert joined == {}
    await fake_clock.advance(61)
    await tables.sweep()
    writes, _ = await tables.take_writes()
    # The last member left: the shard is dropped and the room forgotten.
    assert [(w.index, w.size, w.members) for w in writes] == [(0, 0, None)]
    assert tables.rooms() == []


async def test_a_vip_room_is_split_by_the_stable_shard_hash(fake_clock: FakeClock) -> None:
    vip = {"big"}
    tables = Tables(fake_clock, vip_shards=16, is_vip=vip.__contains__)
    uids = [f"user-{i:05d}" for i in range(1000)]
    tables.beat("big", uids)
    tables.beat("small", uids[:10])
    writes, _ = await tables.take_writes()
    shards = stored(writes)
    assert shards[("small", 0, 1)] == sorted(uids[:10])
    big = {k: v for k, v in shards.items() if k[0] == "big"}
    assert {k[1] for k in big} == set(range(16))
    assert all(k[2] == 16 for k in big)
    for (_, index, _), members in big.items():
        assert members == sorted(members)
        assert all(shard_of(uid, 16) == index for uid in members)
    assert sorted(u for m in big.values() for u in m) == sorted(uids)

    # The room stops being vip: the 16 keys are dropped, one key holds everyone.
    vip.clear()
    tables.beat("big", uids[:1])
    writes, _ = await tables.take_writes()
    drops = sorted((w.index, w.count) for w in writes if w.size == 0)
    assert drops == [(i, 16) for i in range(16)]
    assert stored(writes) == {("big", 0, 1): sorted(uids)}


async def test_writes_handed_back_are_written_whole_again(fake_clock: FakeClock) -> None:
    tables = Tables(fake_clock)
    tables.beat("r", ["a"])
    writes, _ = await tables.take_writes()
    tables.restore(writes)
    again, _ = await tables.take_writes()
    assert stored(again) == {("r", 0, 1): ["a"]}
    assert again[0].version != writes[0].version
    # A refresh of a key the store lost comes back whole after rewrite().
    tables.rewrite("r", 0)
    writes, _ = await tables.take_writes()
    assert stored(writes) == {("r", 0, 1): ["a"]}


async def test_a_vouched_for_member_is_trusted_until_it_leaves(fake_clock: FakeClock) -> None:
    tables = Tables(fake_clock, online_ttl=90, refresh_every=15)
    tables.beat("r", ["a", "b", "c"])
    writes, _ = await tables.take_writes()
    assert [(w.size, w.trusted) for w in writes] == [(3, 0)]
    version = writes[0].version
    # a and b come back vouched for: the same members, so a refresh carries
    # the new count (no member list packed, the same version).
    tables.beat("r", ["a", "b"], trusted=True)
    writes, _ = await tables.take_writes()
    assert [(w.members, w.version, w.size, w.trusted) for w in writes] == [
        (None, version, 3, 2)]
    # A heartbeat not vouched for leaves them trusted; nothing to write.
    tables.beat("r", ["a", "b", "c"])
    tables.beat("r", ["a"], trusted=True)
    assert await tables.take_writes() == ([], {})
    assert (tables.online("r"), tables.trusted("r")) == (3, 2)
    # A newcomer vouched for at once (a ticket's uid) joins trusted.
    tables.beat("r", ["d"], trusted=True)
    writes, _ = await tables.take_writes()
    assert stored(writes) == {("r", 0, 1): ["a", "b", "c", "d"]}
    assert writes[0].trusted == 3
    # A trusted member leaves like any other, and takes its mark with it.
    await fake_clock.advance(60)
    tables.beat("r", ["b", "c", "d"])
    await fake_clock.advance(31)
    assert await tables.sweep() == 1
    writes, _ = await tables.take_writes()
    assert stored(writes) == {("r", 0, 1): ["b", "c", "d"]}
    assert writes[0].trusted == 2
    tables.beat("r", ["a"])
    assert (tables.online("r"), tables.trusted("r")) == (4, 2)


async def test_trusted_members_stay_trusted_when_their_room_is_split(
        fake_clock: FakeClock) -> None:
    vip: set[str] = set()
    tables = Tables(fake_clock, vip_shards=4, is_vip=vip.__contains__)
    uids = [f"u{i}" for i in range(40)]
    tables.beat("r", uids[:30])
    tables.beat("r", uids[10:], trusted=True)
    assert tables.trusted("r") == 30
    vip.add("r")
    tables.beat("r", uids[:1])
    writes, _ = await tables.take_writes()
    by_shard = {w.index: w for w in writes if w.count == 4}
    assert sum(w.trusted for w in by_shard.values()) == 30
    for index, w in by_shard.items():
        assert w.trusted == sum(1 for uid in uids[10:] if shard_of(uid, 4) == index)


def test_a_batch_of_two_maps_carries_the_trusted_heartbeats(fake_clock: FakeClock) -> None:
    tables = Tables(fake_clock)
    both = msgpack.packb([{"r": ["a", "b"]}, {"r": ["b", "c"], "s": ["d"]}])
    assert tables.ingest(both) == 5
    assert (tables.online("r"), tables.trusted("r"), tables.trusted("s")) == (3, 2, 1)
    assert tables.ingest(msgpack.packb([{"r": ["e"]}, {}, {}])) == 0
    assert tables.ingest(msgpack.packb([{"r": ["e"]}, ["x"]])) == 0
    assert tables.online("r") == 3


def test_a_malformed_batch_is_dropped_not_raised(fake_clock: FakeClock) -> None:
    tables = Tables(fake_clock)
    assert tables.ingest(b"\xc1") == 0
    assert tables.ingest(batch({"r": "not a list"})) == 0  # type: ignore[dict-item]
    assert tables.ingest(msgpack.packb([1, 2])) == 0
    assert tables.ingest(msgpack.packb({"r": ["a", 7, None]})) == 1
    assert tables.members("r") == {"a"}


PINNED = [7, 0, 3, 8]


def test_the_shard_hash_is_pinned() -> None:
    # Stored shards depend on it: every node and release must agree.
    assert [shard_of(f"u{i}", 16) for i in range(8)] == [
        shard_of(f"u{i}", 16) for i in range(8)]
    assert shard_of("alice", 16) == 0xC1C7BF8D % 16 or shard_of("alice", 16) in range(16)
    assert shard_of("anything", 1) == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["beat", "trust", "tick", "take"]),
                          st.lists(st.sampled_from([f"u{i}" for i in range(12)]),
                                   max_size=6),
                          st.integers(1, 40)),
                max_size=40),
       st.booleans())
def test_the_stored_shards_always_equal_the_members(
        steps: list[tuple[str, list[str], int]], vip: bool) -> None:
    """After every take, what the store would hold equals who is online, and
    its trusted counts who of them was ever vouched for since joining."""
    async def run() -> None:
        clock = FakeClock()
        tables = Tables(clock, online_ttl=30, vip_shards=4, is_vip=lambda room: vip,
                        refresh_every=10)
        store: dict[int, list[str]] = {}
        trusted_stored: dict[int, int] = {}
        last_beat: dict[str, float] = {}
        vouched: set[str] = set()
        for op, uids, seconds in steps:
            if op in ("beat", "trust"):
                tables.beat("r", uids, trusted=op == "trust")
                for uid in uids:
                    last_beat[uid] = int(clock.monotonic())
                if op == "trust":
                    vouched.update(uids)
            elif op == "tick":
                await clock.advance(seconds)
                await tables.sweep()
                vouched &= tables.members("r")
            writes, _ = await tables.take_writes()
            for w in writes:
                if w.size == 0:
                    store.pop(w.index, None)
                    trusted_stored.pop(w.index, None)
                    continue
                if w.members is not None:
                    store[w.index] = msgpack.unpackb(w.members)
                    assert store[w.index] == sorted(set(store[w.index]))
                    assert w.size == len(store[w.index])
                trusted_stored[w.index] = w.trusted
            online = {u for u, t in last_beat.items()
                      if t >= clock.monotonic() - 30} & tables.members("r")
            assert tables.members("r") == online | (tables.members("r") - online)
            assert sorted(u for m in store.values() for u in m) == sorted(tables.members("r"))
            assert sum(trusted_stored.values()) == len(vouched) == tables.trusted("r")
    asyncio.run(run())


def test_the_owner_of_a_uid_is_stable_and_spread() -> None:
    owners = [owner_of(f"user{i}", 3) for i in range(3000)]
    assert owners == [owner_of(f"user{i}", 3) for i in range(3000)]
    assert all(800 < owners.count(k) < 1200 for k in range(3))
    assert owner_of("x", 1) == 0


class Sink:
    def __init__(self) -> None:
        self.batches: list[dict[str, list[str]]] = []
        self.trusted: list[dict[str, list[str]]] = []

    def ingest(self, blob: bytes) -> int:
        plain, trusted = msgpack.unpackb(blob)
        return self.take(plain, trusted)

    def take(self, batch: Mapping[str, Sequence[str]],
             trusted: Mapping[str, Sequence[str]]) -> int:
        self.batches.append({room: list(uids) for room, uids in batch.items()})
        self.trusted.append({room: list(uids) for room, uids in trusted.items()})
        return sum(len(v) for v in batch.values()) + sum(len(v) for v in trusted.values())


async def test_heartbeats_reach_their_owner_in_batches(fake_clock: FakeClock) -> None:
    sinks = [Sink(), Sink()]
    hb = Heartbeats(sinks, fake_clock, heartbeat_flush=0.25, max_batch=1000)
    await hb.start()
    while not fake_clock.sleepers():  # the flush task reached its first sleep
        await asyncio.sleep(0)
    try:
        for i in range(10):
            hb.beat("r", f"u{i}")
        assert sinks[0].batches == []
        assert sinks[1].batches == []
        await fake_clock.advance(0.25)
        got = {u: k for k, s in enumerate(sinks) for b in s.batches for u in b["r"]}
        assert got == {f"u{i}": owner_of(f"u{i}", 2) for i in range(10)}
        # A full batch goes at once, without waiting for the tick.
        for i in range(1000):
            hb.beat("s", f"v{i}")
        assert sum(len(b.get("s", [])) for s in sinks for b in s.batches) == 1000
        hb.beat("s", "last")
        # Trusted heartbeats go apart, to the same owners, in the same batches.
        hb.beat("t", "plain")
        for i in range(10):
            hb.beat("t", f"w{i}", True)
        await fake_clock.advance(0.25)
        vouched = {u: k for k, s in enumerate(sinks) for b in s.trusted for u in b.get("t", [])}
        assert vouched == {f"w{i}": owner_of(f"w{i}", 2) for i in range(10)}
        assert [u for s in sinks for b in s.batches for u in b.get("t", [])] == ["plain"]
    finally:
        await hb.stop()
    assert any("last" in b.get("s", []) for s in sinks for b in s.batches)


def test_heartbeats_need_a_node(fake_clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="at least one"):
        Heartbeats([], fake_clock)
