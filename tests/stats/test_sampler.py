"""The online-count series in the store, on both engines: who samples, buckets, the query.

:class:`statsvr.sampler.OnlineSeries` against the real store; the in-memory
:class:`statsvr.series.SeriesState` fed the same samples is the oracle, so the
store-backed series and the pure one answer alike.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator, Sequence
from statistics import mean
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import SeriesState

from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.store import Store
from liveroom.store.base import OnlineSample, StatsStore
from statsvr.sampler import OnlineSeries, writer_of
from statsvr.series import rollup

ROOM = "r1"
DAY = 86_400
BASE = 1_700_002_800
"""An hour boundary just after the fake clock's start."""
assert BASE % 3600 == 0


async def at(clock: FakeClock, t: float) -> None:
    """Move the fake clock forward to Unix time ``t``."""
    assert t >= clock.time()
    await clock.advance(t - clock.time())


class Recording:
    """The engine's stats store, with a switch to take it down and an event per record."""

    def __init__(self, inner: StatsStore) -> None:
        self.inner = inner
        self.down = False
        self.recorded = asyncio.Event()

    async def record_online(self, samples: Sequence[OnlineSample],
                            resolutions: Sequence[tuple[int, int]], min_gap_ms: int) -> int:
        if self.down:
            raise StoreUnavailable("the test took the store down")
        try:
            return await self.inner.record_online(samples, resolutions, min_gap_ms)
        finally:
            self.recorded.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def recording(store: Store) -> tuple[Recording, StatsStore]:
    wrapper = Recording(store.stats)
    return wrapper, cast(StatsStore, wrapper)


# -- buckets -----------------------------------------------------------------------


async def test_samples_every_10s_for_3_minutes(store: Store, fake_clock: FakeClock) -> None:
    await at(fake_clock, BASE)
    series = OnlineSeries(store.stats, fake_clock, "a")
    oracle = SeriesState()
    values = [(i * 37) % 101 for i in range(18)]
    for value in values:
        assert await series.sample([(ROOM, value, {"a"})]) == 1
        oracle.record(fake_clock.time(), value)
        await fake_clock.advance(10)

    minutes = [values[k:k + 6] for k in range(0, 18, 6)]
    assert await store.stats.read_online(ROOM, 60, BASE, BASE + 180) == [
        (BASE + 60 * k, min(m), max(m), sum(m), 6) for k, m in enumerate(minutes)]
    assert await store.stats.read_online(ROOM, 300, BASE, BASE + 180) == [
        (BASE, min(values), max(values), sum(values), 18)]
    assert await store.stats.read_online(ROOM, 3600, BASE, BASE + 180) == [
        (BASE, min(values), max(values), sum(values), 18)]

    now = fake_clock.time()
    assert await series.query(ROOM, BASE, now) == (60, [
        (BASE + 60 * k, round(mean(m), 2), max(m)) for k, m in enumerate(minutes)])
    assert await series.query(ROOM, now - 2 * DAY, now) == (
        300, [(BASE, round(mean(values), 2), max(values))])
    for since, until in [(BASE, now), (BASE + 61, BASE + 119), (now - 2 * DAY, now),
                         (now - 8 * DAY, now), (BASE + 200, BASE), (now + 60, now + 120)]:
        assert await series.query(ROOM, since, until) == oracle.query(since, until, now)


async def test_the_step_follows_the_age_of_the_range(store: Store, fake_clock: FakeClock) -> None:
    await at(fake_clock, BASE)
    series = OnlineSeries(store.stats, fake_clock, "a")
    await series.sample([(ROOM, 5, {"a"})])
    await fake_clock.advance(600)
    now = fake_clock.time()
    assert await series.query(ROOM, now - 3600, now) == (60, [(BASE, 5.0, 5)])
    assert await series.query(ROOM, now - 3 * DAY, now) == (300, [(BASE, 5.0, 5)])
    assert await series.query(ROOM, now - 30 * DAY, now) == (3600, [(BASE, 5.0, 5)])
    assert await series.query(ROOM, now - 400 * DAY, now) == (3600, [(BASE, 5.0, 5)])
    assert await series.query("never-sampled", now - 3600, now) == (60, [])
    assert await series.query(ROOM, now, now - 3600) == (60, [])


async def test_the_query_hides_buckets_past_retention_now(
        store: Store, fake_clock: FakeClock) -> None:
    await at(fake_clock, BASE)
    series = OnlineSeries(store.stats, fake_clock, "a")
    await series.sample([(ROOM, 9, {"a"})])
    await fake_clock.advance(2 * DAY)
    now = fake_clock.time()
    # The store still holds the minute (no later sample dropped it), but the
    # minute resolution keeps a day: the answer leaves it out.
    assert await store.stats.read_online(ROOM, 60, BASE, BASE) == [(BASE, 9, 9, 9, 1)]
    assert await series.query(ROOM, now - DAY, now) == (60, [])
    assert await series.query(ROOM, BASE - 1, now) == (300, [(BASE, 9.0, 9)])


@pytest.mark.parametrize("seed", [1, 2])
async def test_rollup_across_bucket_boundaries(
        store: Store, fake_clock: FakeClock, seed: int) -> None:
    rnd = random.Random(seed)
    start = BASE - 900  # across 60 s, 300 s and hour boundaries
    await at(fake_clock, start)
    series = OnlineSeries(store.stats, fake_clock, "a")
    oracle = SeriesState()
    while fake_clock.time() < BASE + 1200:
        value = rnd.randrange(0, 1000)
        assert await series.sample([(ROOM, value, ["a"])]) == 1
        oracle.record(fake_clock.time(), value)
        # Multiples of 10 s land on boundaries often; 7.5 s lands between.
        await fake_clock.advance(rnd.choice([7.5, 10, 10, 20, 60, 290]))
    resolutions: dict[int, dict[int, tuple[int, int, int, int]]] = {}
    for step in (60, 300, 3600):
        rows = await store.stats.read_online(ROOM, step, 0, BASE + DAY)
        resolutions[step] = {row[0]: row[1:] for row in rows}
        assert resolutions[step] == oracle.buckets(step)
    assert resolutions[300] == rollup(resolutions[60], 300)
    assert resolutions[3600] == rollup(resolutions[60], 3600) == rollup(resolutions[300], 3600)
    assert sorted(resolutions[3600]) == [BASE - 3600, BASE]
    now = fake_clock.time()
    for since in (start, BASE - 1, BASE, BASE + 299, now - 2 * DAY, now - 8 * DAY):
        assert await series.query(ROOM, since, now) == oracle.query(since, now, now)


# -- who samples ---------------------------------------------------------------------


async def test_two_writers_at_once_do_not_double_count(
        store: Store, fake_clock: FakeClock) -> None:
    await at(fake_clock, BASE)
    a = OnlineSeries(store.stats, fake_clock, "a")
    b = OnlineSeries(store.stats, fake_clock, "b")
    # During a change of nodes each one thinks it writes the room.
    assert await a.sample([(ROOM, 10, {"a"})]) + await b.sample([(ROOM, 12, {"b"})]) == 1
    await fake_clock.advance(4.9)
    assert await b.sample([(ROOM, 50, {"b"})]) == 0  # within half an interval
    await fake_clock.advance(0.1)
    assert await b.sample([(ROOM, 14, {"b"})]) == 1  # half an interval later
    await fake_clock.advance(5)
    assert await a.sample([(ROOM, 20, {"a"})]) + await b.sample([(ROOM, 20, {"b"})]) == 1
    assert await store.stats.read_online(ROOM, 60, BASE, BASE) == [(BASE, 10, 20, 44, 3)]


async def test_a_node_samples_only_the_rooms_it_writes(
        store: Store, fake_clock: FakeClock) -> None:
    nodes = {"a", "b", "c"}
    rooms = [f"room-{i}" for i in range(60)]
    taken = 0
    for name in sorted(nodes):
        series = OnlineSeries(store.stats, fake_clock, name)
        mine = [room for room in rooms if writer_of(room, nodes) == name]
        assert 0 < len(mine) < len(rooms)
        assert await series.sample((room, 1, nodes) for room in rooms) == len(mine)
        taken += len(mine)
    assert taken == len(rooms)
    # No shard anywhere: no writer, no sample.
    assert await OnlineSeries(store.stats, fake_clock, "a").sample([("empty", 0, ())]) == 0


node_names = st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True)
room_names = st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(nodes=st.sets(node_names, min_size=1, max_size=8),
       rooms=st.lists(room_names, min_size=1, max_size=30),
       newcomer=node_names, data=st.data())
def test_writer_of_is_stable_and_moves_only_a_departed_nodes_rooms(
        nodes: set[str], rooms: list[str], newcomer: str, data: st.DataObject) -> None:
    ordered = sorted(nodes)
    shuffled = data.draw(st.permutations(ordered))
    gone = data.draw(st.sampled_from(ordered))
    left = nodes - {gone}
    for room in rooms:
        writer = writer_of(room, nodes)
        assert writer in nodes
        assert writer_of(room, shuffled) == writer_of(room, tuple(ordered)) == writer
        moved = writer_of(room, left)
        if writer != gone:
            assert moved == writer
        else:
            assert moved in left or not left
        grown = writer_of(room, nodes | {newcomer})
        assert grown in (writer, newcomer)


def test_writer_of_is_pinned_and_spreads_rooms() -> None:
    # BLAKE2b, not hash(): the same on every process. Changing it moves rooms.
    assert writer_of("r1", ["a", "b", "c"]) == writer_of("r1", {"c", "b", "a"})
    assert [writer_of(f"room-{i}", ["a", "b", "c"]) for i in range(8)] == [
        "a", "b", "c", "a", "c", "a", "c", "a"]
    assert writer_of("r1", []) is None
    counts: dict[str | None, int] = {}
    for i in range(3000):
        writer = writer_of(f"room-{i}", ["n1", "n2", "n3"])
        counts[writer] = counts.get(writer, 0) + 1
    assert set(counts) == {"n1", "n2", "n3"}
    assert all(850 <= n <= 1150 for n in counts.values()), counts


# -- the loop and outages ----------------------------------------------------------------


async def test_the_loop_samples_on_multiples_of_the_interval(
        store: Store, fake_clock: FakeClock) -> None:
    wrapper, stats = recording(store)
    await at(fake_clock, BASE + 3)
    series = OnlineSeries(stats, fake_clock, "a")
    online = iter(range(100, 200))

    def source() -> Iterator[tuple[str, int, frozenset[str]]]:
        yield ROOM, next(online), frozenset({"a"})
        yield "not-mine", 1, frozenset()

    others = fake_clock.sleepers()  # the engine's own background loops
    await series.start(source)
    for target in (BASE + 10, BASE + 20, BASE + 30):
        await asyncio.sleep(0)
        assert fake_clock.sleepers() == others + 1
        wrapper.recorded.clear()
        await at(fake_clock, target)
        await asyncio.wait_for(wrapper.recorded.wait(), 10)
    await series.stop()
    assert fake_clock.sleepers() == others
    await fake_clock.advance(60)
    assert await store.stats.read_online(ROOM, 60, BASE, BASE) == [(BASE, 100, 102, 303, 3)]
    assert await series.query(ROOM, BASE, BASE + 60) == (60, [(BASE, 101.0, 102)])


async def test_a_store_outage_loses_that_sample_and_logs_once(
        store: Store, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    wrapper, stats = recording(store)
    await at(fake_clock, BASE)
    series = OnlineSeries(stats, fake_clock, "a")
    wrapper.down = True
    with caplog.at_level(logging.INFO, logger="liveroom.statsvr.sampler"):
        assert await series.sample([(ROOM, 1, {"a"})]) == 0
        await fake_clock.advance(10)
        assert await series.sample([(ROOM, 2, {"a"})]) == 0
        wrapper.down = False
        await fake_clock.advance(10)
        assert await series.sample([(ROOM, 3, {"a"})]) == 1
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
    assert await series.query(ROOM, BASE, BASE + 60) == (60, [(BASE, 3.0, 3)])
