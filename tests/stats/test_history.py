"""The viewers history of statsvr nodes over a real store, on both engines.

Owner side (joined, flush) and reader side (refresh, figure) of
:class:`statsvr.history.ViewersHistory`, and how both start over in a new
broadcast. The HyperLogLog's accuracy at a million and the merge rule on pure
sketches are in ``tests/stats/test_viewers.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Sequence
from typing import Any, cast

import pytest
from support import LoopTurns

from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.store import Store
from liveroom.store.base import StatsStore, ViewersState
from statsvr.history import IDLE, SKETCH_SLICE, ViewersHistory
from statsvr.viewers import PRECISION, ViewersFigure, ViewerSketch, merge_registers

ROOM = "r1"
STANDARD_ERROR = 1.04 / math.sqrt(2**PRECISION)  # about 0.81 %


def uids(prefix: str, start: int, stop: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(start, stop)]


def sketch_of(members: Sequence[str]) -> ViewerSketch:
    sketch = ViewerSketch()
    sketch.add_many(members)
    return sketch


class Faulty:
    """The engine's stats store, with calls counted and a switch to take it down."""

    def __init__(self, inner: StatsStore) -> None:
        self.inner = inner
        self.down = False
        self.sent: list[int] = []
        """How many uids each add_viewers carried."""
        self.loads = 0

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("the test took the store down")

    async def add_viewers(self, room: str, node: str, uids: Sequence[str],
                          sketch: bytes | None, threshold: int,
                          ttl_ms: int) -> tuple[int, bool, int]:
        self._check()
        self.sent.append(len(uids))
        return await self.inner.add_viewers(room, node, uids, sketch, threshold, ttl_ms)

    async def load_sketch(self, room: str, node: str) -> bytes | None:
        self._check()
        self.loads += 1
        return await self.inner.load_sketch(room, node)

    async def viewers(self, rooms: Sequence[str], *,
                      sketches: Sequence[bool]) -> list[ViewersState]:
        self._check()
        return await self.inner.viewers(rooms, sketches=sketches)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def faulty(store: Store) -> tuple[Faulty, StatsStore]:
    wrapper = Faulty(store.stats)
    return wrapper, cast(StatsStore, wrapper)


async def stored(store: Store, room: str = ROOM) -> ViewersState:
    [state] = await store.stats.viewers([room], sketches=[True])
    return state


# -- exact up to the threshold, and never down across it ---------------------------


async def test_exact_at_9999_then_estimate_at_10001_never_dropping(
        store: Store, fake_clock: FakeClock) -> None:
    owner = ViewersHistory(store.stats, fake_clock, "a")
    reader = ViewersHistory(store.stats, fake_clock, "b")
    owner.joined(ROOM, uids("u", 0, 9_999))
    await owner.flush()
    await reader.refresh([ROOM])
    assert reader.figure(ROOM) == ViewersFigure(9_999, True)

    owner.joined(ROOM, uids("u", 9_999, 10_001))
    await owner.flush()
    state = await stored(store)
    assert (state.exact, state.complete) == (10_000, False)

    # The refresh that first sees the room incomplete has no sketches yet:
    # the capped exact set is the floor.
    await reader.refresh([ROOM])
    assert reader.figure(ROOM) == ViewersFigure(10_000, False)
    # The next one merges the sketches.
    await reader.refresh([ROOM])
    figure = reader.figure(ROOM)
    assert figure.viewers_exact is False
    assert figure.viewers >= 10_000
    assert abs(figure.viewers - 10_001) <= 3 * STANDARD_ERROR * 10_001


async def test_figure_never_drops_crossing_the_threshold_one_by_one(
        store: Store, fake_clock: FakeClock) -> None:
    threshold = 200
    owner = ViewersHistory(store.stats, fake_clock, "a", viewers_threshold=threshold)
    reader = ViewersHistory(store.stats, fake_clock, "b", viewers_threshold=threshold)
    owner.joined(ROOM, uids("x", 0, threshold - 20))
    shown: list[ViewersFigure] = []
    for i in range(threshold - 20, threshold + 40):
        owner.joined(ROOM, [f"x{i}"])
        await owner.flush()
        await reader.refresh([ROOM])
        shown.append(reader.figure(ROOM))
    counts = [figure.viewers for figure in shown]
    assert counts == sorted(counts), "the viewers figure went down"
    # figure k is after threshold - 19 + k distinct uids
    assert shown[18] == ViewersFigure(threshold - 1, True)
    assert shown[19] == ViewersFigure(threshold, True)
    assert all(not figure.viewers_exact for figure in shown[20:])
    assert all(figure.viewers >= threshold for figure in shown[20:])


async def test_a_burst_past_the_threshold_sends_at_most_threshold_plus_one_uids(
        store: Store, fake_clock: FakeClock) -> None:
    wrapper, stats = faulty(store)
    owner = ViewersHistory(stats, fake_clock, "a", viewers_threshold=1_000)
    owner.joined(ROOM, uids("b", 0, 5_000))
    await owner.flush()
    assert wrapper.sent == [1_001]
    state = await stored(store)
    assert (state.exact, state.complete) == (1_000, False)
    # Known incomplete: only the sketch goes now.
    owner.joined(ROOM, uids("b", 5_000, 6_000))
    await owner.flush()
    assert wrapper.sent == [1_001, 0]
    assert merge_registers((await stored(store)).sketches) == sketch_of(uids("b", 0, 6_000))


async def test_a_big_burst_is_hashed_in_slices(store: Store, fake_clock: FakeClock) -> None:
    owner = ViewersHistory(store.stats, fake_clock, "a", viewers_threshold=100)
    burst = uids("s", 0, 3 * SKETCH_SLICE + 1)
    owner.joined(ROOM, burst)
    async with LoopTurns() as loop:
        await owner.flush()
    # The loop ran other tasks between the slices (at least once per slice).
    assert loop.turns >= 3
    assert merge_registers((await stored(store)).sketches) == sketch_of(burst)


# -- several nodes ------------------------------------------------------------------


async def test_two_nodes_with_overlapping_uids_count_the_union(
        store: Store, fake_clock: FakeClock) -> None:
    a = ViewersHistory(store.stats, fake_clock, "a")
    b = ViewersHistory(store.stats, fake_clock, "b")
    a.joined(ROOM, uids("u", 0, 6_000))
    b.joined(ROOM, uids("u", 3_000, 9_000))
    await a.flush()
    await b.flush()
    for node in (a, b):
        await node.refresh([ROOM])
        assert node.figure(ROOM) == ViewersFigure(9_000, True)


async def test_per_node_sketches_merge_to_the_sketch_of_the_union(
        store: Store, fake_clock: FakeClock) -> None:
    threshold = 1_000
    nodes = [ViewersHistory(store.stats, fake_clock, name, viewers_threshold=threshold)
             for name in ("a", "b", "c")]
    # Overlapping ranges: 0-20k, 15k-35k, 30k-50k; a few uids on every node.
    for k, node in enumerate(nodes):
        node.joined(ROOM, uids("m", 15_000 * k, 15_000 * k + 20_000))
        node.joined(ROOM, ["everywhere-1", "everywhere-2"])
        await node.flush()
    union = [*uids("m", 0, 50_000), "everywhere-1", "everywhere-2"]
    state = await stored(store)
    assert len(state.sketches) == 3
    merged = merge_registers(state.sketches)
    assert merged == sketch_of(union)  # register by register

    reader = nodes[0]
    await reader.refresh([ROOM])  # first sees it incomplete
    await reader.refresh([ROOM])
    figure = reader.figure(ROOM)
    assert figure == ViewersFigure(merged.estimate(), False)
    assert abs(figure.viewers - len(union)) <= 3 * STANDARD_ERROR * len(union)


async def test_a_node_dropped_without_flushing_loses_only_its_unflushed_joins(
        store: Store, fake_clock: FakeClock) -> None:
    threshold = 500
    a = ViewersHistory(store.stats, fake_clock, "a", viewers_threshold=threshold)
    a.joined(ROOM, uids("k", 0, 300))
    await a.flush()
    a.joined(ROOM, uids("lost", 0, 100))
    del a  # killed without warning: the last joins never reached the store

    reader = ViewersHistory(store.stats, fake_clock, "r", viewers_threshold=threshold)
    await reader.refresh([ROOM])
    assert reader.figure(ROOM) == ViewersFigure(300, True)

    # Beyond the threshold, what was flushed stays counted in the sketch.
    b = ViewersHistory(store.stats, fake_clock, "b", viewers_threshold=threshold)
    b.joined(ROOM, uids("k", 0, 2_000))
    await b.flush()
    b.joined(ROOM, uids("lost-too", 0, 1_000))
    del b
    state = await stored(store)
    assert merge_registers(state.sketches) == sketch_of(uids("k", 0, 2_000))


async def test_a_restarted_node_continues_its_sketch(store: Store, fake_clock: FakeClock) -> None:
    threshold = 100
    first = ViewersHistory(store.stats, fake_clock, "a", viewers_threshold=threshold)
    first.joined(ROOM, uids("p", 0, 5_000))
    await first.flush()
    reader = ViewersHistory(store.stats, fake_clock, "r", viewers_threshold=threshold)
    await reader.refresh([ROOM])
    await reader.refresh([ROOM])
    before = reader.figure(ROOM).viewers
    stored_before = await store.stats.load_sketch(ROOM, "a")
    assert stored_before is not None

    again = ViewersHistory(store.stats, fake_clock, "a", viewers_threshold=threshold)  # same id
    again.joined(ROOM, uids("p", 5_000, 5_010))
    await again.flush()
    stored_after = await store.stats.load_sketch(ROOM, "a")
    assert stored_after is not None
    assert all(new >= old for old, new in zip(stored_before, stored_after, strict=True)), \
        "the restarted node overwrote its sketch"
    assert ViewerSketch.from_bytes(stored_after) == sketch_of(uids("p", 0, 5_010))
    assert len((await stored(store)).sketches) == 1  # its own key, not a new one

    fresh = ViewersHistory(store.stats, fake_clock, "r2", viewers_threshold=threshold)
    await fresh.refresh([ROOM])
    await fresh.refresh([ROOM])
    assert fresh.figure(ROOM).viewers >= before


# -- outages and memory ----------------------------------------------------------------


async def test_a_store_outage_keeps_joins_pending_and_logs_once(
        store: Store, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    wrapper, stats = faulty(store)
    node = ViewersHistory(stats, fake_clock, "a")
    node.joined(ROOM, uids("o", 0, 10))
    node.joined("r2", ["z"])
    await node.flush()
    await node.refresh([ROOM])
    assert node.figure(ROOM) == ViewersFigure(10, True)

    wrapper.down = True
    node.joined(ROOM, uids("o", 10, 20))
    node.joined("r2", ["y"])
    with caplog.at_level(logging.WARNING, logger="liveroom.statsvr.history"):
        await node.flush()
        node.joined(ROOM, uids("o", 20, 25))
        await node.flush()
        await node.refresh([ROOM])
        await node.refresh([ROOM])
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # one for storing, one for reading
    assert node.pending(ROOM) == 15
    assert node.pending("r2") == 1
    assert node.figure(ROOM) == ViewersFigure(10, True)  # the last one, kept

    wrapper.down = False
    await node.flush()
    assert node.pending(ROOM) == node.pending("r2") == 0
    await node.refresh([ROOM, "r2"])
    assert node.figure(ROOM) == ViewersFigure(25, True)
    assert node.figure("r2") == ViewersFigure(2, True)


async def test_a_cancelled_flush_keeps_its_joins(store: Store, fake_clock: FakeClock) -> None:
    node = ViewersHistory(store.stats, fake_clock, "a")
    burst = uids("c", 0, 2 * SKETCH_SLICE)
    node.joined(ROOM, burst)
    flush = asyncio.create_task(node.flush())
    await asyncio.sleep(0)  # inside the flush
    node.joined(ROOM, ["late"])
    flush.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await flush
    if store.name == "memory":
        # Cancelled between two slices: nothing was stored, all is pending.
        assert flush.cancelled()
        assert node.pending(ROOM) == len(burst) + 1
    else:
        # redis-py may finish a command in flight and swallow the cancel: then the
        # burst was stored; either way nothing is lost.
        assert node.pending(ROOM) in (1, len(burst) + 1)
    await node.flush()
    assert node.pending(ROOM) == 0
    state = await stored(store)
    assert merge_registers(state.sketches) == sketch_of([*burst, "late"])
    assert (state.exact, state.complete) == (10_000, False)


async def test_unknown_rooms_and_idle_rooms(store: Store, fake_clock: FakeClock) -> None:
    wrapper, stats = faulty(store)
    node = ViewersHistory(stats, fake_clock, "a")
    assert node.figure("nobody") == ViewersFigure(0, True)
    assert not node.known("nobody")
    await node.refresh(["nobody"])
    assert node.known("nobody")
    assert node.figure("nobody") == ViewersFigure(0, True)

    node.joined(ROOM, ["u1"])
    await node.flush()
    node.joined(ROOM, ["u2"])
    await node.flush()
    assert wrapper.loads == 1  # the stored sketch is loaded once per room in memory
    await node.refresh([ROOM])
    assert node.known(ROOM)

    await fake_clock.advance(IDLE + 1)
    node.figure("nobody")  # a read keeps a room
    await node.flush()
    await node.refresh([])
    assert not node.known(ROOM)
    assert node.known("nobody")
    node.joined(ROOM, ["u3"])
    await node.flush()
    assert wrapper.loads == 2  # it left memory: loaded (and continued) again
    await node.refresh([ROOM])
    assert node.figure(ROOM) == ViewersFigure(3, True)
    state = await stored(store)
    # Below the threshold the exact set is the whole truth: no sketch is stored.
    assert state.sketches == ()


# -- broadcasts ------------------------------------------------------------------------


TTL_MS = 3_600_000
"""How long an ended broadcast's history is kept in these tests."""


class Members:
    """A node's table as the history sees it: the members of each room now."""

    def __init__(self) -> None:
        self.rooms: dict[str, set[str]] = {}

    def __call__(self, room: str) -> set[str]:
        return set(self.rooms.get(room, ()))


async def end(store: Store, clock: FakeClock, room: str = ROOM) -> int:
    ended = await store.operators.end_broadcast(room, int(clock.time() * 1000), TTL_MS)
    return ended.broadcast


async def test_a_refresh_that_sees_a_new_broadcast_counts_the_members_again(
        store: Store, fake_clock: FakeClock) -> None:
    members = Members()
    node = ViewersHistory(store.stats, fake_clock, "a", members=members)
    members.rooms[ROOM] = {"u1", "u2", "u3"}
    node.joined(ROOM, ["u1", "u2", "u3"])
    await node.flush()
    await node.refresh([ROOM])
    assert node.figure(ROOM) == ViewersFigure(3, True)

    members.rooms[ROOM] = {"u2", "u3"}  # u1 left
    assert await end(store, fake_clock) == 2
    await node.refresh([ROOM])
    # A new broadcast: nobody counted yet, the figure starts over.
    assert node.figure(ROOM) == ViewersFigure(0, True)
    assert node.pending(ROOM) == 2
    await node.flush()
    await node.refresh([ROOM])
    assert node.figure(ROOM) == ViewersFigure(2, True)
    state = await stored(store)
    assert (state.exact, state.broadcast) == (2, 2)
    # Below the threshold no sketch is stored, in either broadcast (that the
    # sketch starts afresh is shown with a capped set in the next test).
    assert state.sketches == ()
    (past,) = await store.operators.broadcasts(ROOM)
    assert (past.broadcast, past.viewers.exact) == (1, 3)
    assert past.viewers.sketches == ()


async def test_a_flush_into_a_new_broadcast_replaces_the_old_sketch_at_once(
        store: Store, fake_clock: FakeClock) -> None:
    members = Members()
    # Threshold 2: three members cap the exact set, so sketches are stored.
    node = ViewersHistory(store.stats, fake_clock, "a", members=members, viewers_threshold=2)
    members.rooms[ROOM] = {"u1", "u2", "u3"}
    node.joined(ROOM, ["u1", "u2", "u3"])
    await node.flush()
    await end(store, fake_clock)
    members.rooms[ROOM] = {"u2", "u3", "u4"}
    node.joined(ROOM, ["u4"])
    # This flush writes u4 with the old sketch into broadcast 2, learns it,
    # and writes every member with a fresh sketch right after.
    await node.flush()
    assert node.pending(ROOM) == 0
    state = await stored(store)
    assert (state.exact, state.complete, state.broadcast) == (2, False, 2)
    assert state.sketches == (sketch_of(["u2", "u3", "u4"]).to_bytes(),)


async def test_the_figure_never_goes_down_within_a_broadcast(
        store: Store, fake_clock: FakeClock) -> None:
    members = Members()
    owner = ViewersHistory(store.stats, fake_clock, "a", members=members)
    reader = ViewersHistory(store.stats, fake_clock, "b")
    shown: list[tuple[int, int]] = []

    async def step(joined: list[str], online: set[str]) -> None:
        members.rooms[ROOM] = online
        owner.joined(ROOM, joined)
        await owner.refresh([ROOM])
        await owner.flush()
        await reader.refresh([ROOM])
        broadcast = (await stored(store)).broadcast
        shown.append((broadcast, reader.figure(ROOM).viewers))

    await step(["a", "b", "c"], {"a", "b", "c"})
    await step(["d"], {"c", "d"})
    await end(store, fake_clock)
    await step([], {"c", "d"})
    await step(["e"], {"d", "e"})
    await end(store, fake_clock)
    await step([], set())
    await step(["f"], {"f"})
    for broadcast in (1, 2, 3):
        figures = [viewers for b, viewers in shown if b == broadcast]
        assert figures == sorted(figures), f"broadcast {broadcast}: {shown}"
    assert shown == [(1, 3), (1, 4), (2, 2), (2, 3), (3, 0), (3, 1)]


async def test_a_read_from_before_an_end_is_not_taken_for_the_new_broadcast(
        store: Store, fake_clock: FakeClock) -> None:
    held = HeldReads(store.stats)
    members = Members()
    members.rooms[ROOM] = {"u1", "u2"}
    node = ViewersHistory(cast(StatsStore, held), fake_clock, "a", members=members)
    node.joined(ROOM, ["u1", "u2"])
    await node.flush()
    await node.refresh([ROOM])
    assert node.figure(ROOM) == ViewersFigure(2, True)

    # A refresh reads broadcast 1, and its reply is held back...
    held.hold = True
    refresh = asyncio.create_task(node.refresh([ROOM]))
    await held.read.wait()
    # ...while the broadcast ends and a flush learns of it.
    await end(store, fake_clock)
    members.rooms[ROOM] = {"u2"}
    node.joined(ROOM, ["u2"])
    await node.flush()
    held.release.set()
    await refresh
    # The late reply of broadcast 1 did not bring its figure back.
    assert node.figure(ROOM) == ViewersFigure(0, True)
    held.hold = False
    await node.refresh([ROOM])
    assert node.figure(ROOM) == ViewersFigure(1, True)


async def test_numbers_that_start_over_are_believed_when_reported_twice(
        memory_store: Store, fake_clock: FakeClock) -> None:
    members = Members()
    node = ViewersHistory(memory_store.stats, fake_clock, "a", history_ttl=60.0, idle=10 * 86_400.0,
                          members=members)
    await memory_store.operators.end_broadcast(ROOM, int(fake_clock.time() * 1000), 60_000)
    node.joined(ROOM, ["u1"])
    await node.flush()
    await node.refresh([ROOM])
    assert (await stored(memory_store)).broadcast == 2
    # Every history of the room expires: its numbers start over at 1.
    await fake_clock.advance(61)
    await node.refresh([ROOM])  # doubted: maybe a late reply
    await node.refresh([ROOM])  # again: believed, a new broadcast
    node.joined(ROOM, ["u8"])
    await node.flush()
    await node.refresh([ROOM])
    state = await stored(memory_store)
    assert (state.exact, state.broadcast) == (1, 1)
    assert node.figure(ROOM) == ViewersFigure(1, True)


class HeldReads:
    """The engine's stats store; ``viewers`` replies held back while ``hold``."""

    def __init__(self, inner: StatsStore) -> None:
        self.inner = inner
        self.hold = False
        self.read = asyncio.Event()
        self.release = asyncio.Event()

    async def viewers(self, rooms: Sequence[str], *,
                      sketches: Sequence[bool]) -> list[ViewersState]:
        states = await self.inner.viewers(rooms, sketches=sketches)
        if self.hold:
            self.read.set()
            await self.release.wait()
        return states

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
