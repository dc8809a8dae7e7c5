"""Viewers history: HyperLogLog sketches, their merge, and the shown figure."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import plan_exact_update

from liveroom.clock import FakeClock
from liveroom.store.base import LogPolicy
from liveroom.store.memory import MemoryStore
from statsvr.history import ViewersHistory
from statsvr.viewers import (
    PRECISION,
    SKETCH_BYTES,
    ViewersFigure,
    ViewerSketch,
    merge_registers,
    uid_hash,
    viewers_figure,
)

uid_strategy = st.from_regex(r"[A-Za-z0-9_.-]{1,16}", fullmatch=True)


# (5) hash stability ---------------------------------------------------------


def test_uid_hash_is_pinned() -> None:
    # BLAKE2b-64 of b"alice" is 4deaec0cce54da89 (`printf alice | b2sum -l 64`),
    # read little-endian. Changing this corrupts every stored sketch.
    assert uid_hash("alice") == 0x89DA54CE0CECEA4D == 9933345172075899469
    assert uid_hash("") == 13020603013274838756
    assert 0 <= uid_hash("u" * 64) < 2**64


# (1) per-node merge equals the sketch of the union, exactly ------------------


@settings(max_examples=60, deadline=None)
@given(
    uids=st.lists(uid_strategy, max_size=300),
    nodes=st.integers(min_value=1, max_value=4),
    data=st.data(),
)
def test_merge_of_node_sketches_equals_sketch_of_union(
    uids: list[str], nodes: int, data: st.DataObject
) -> None:
    # Each uid goes to one or more nodes (a listener may hop between nodes).
    owners = [
        data.draw(st.sets(st.integers(0, nodes - 1), min_size=1), label=f"owners of {u}")
        for u in uids
    ]
    per_node = [ViewerSketch() for _ in range(nodes)]
    for uid, its_nodes in zip(uids, owners, strict=True):
        for n in its_nodes:
            per_node[n].add_many([uid])

    union = ViewerSketch()
    union.add_many(set(uids))

    merged = merge_registers(s.to_bytes() for s in per_node)
    assert merged.to_bytes() == union.to_bytes()

    in_place = per_node[-1].copy()
    for s in reversed(per_node[:-1]):
        in_place.merge(s)
    assert in_place == union


@settings(max_examples=60, deadline=None)
@given(uids=st.lists(uid_strategy, max_size=300))
def test_bulk_path_equals_datasketch_update(uids: list[str]) -> None:
    bulk, one_by_one = ViewerSketch(), ViewerSketch()
    bulk.add_many(uids)
    for uid in uids:
        one_by_one.add(uid)  # datasketch's own update() with uid_hash
    assert bulk.to_bytes() == one_by_one.to_bytes()


def test_merge_of_nothing_is_empty() -> None:
    merged = merge_registers([])
    assert merged.is_empty()
    assert merged.estimate() == 0


# (2) serialization ------------------------------------------------------------


def test_round_trip_and_from_bytes_sketch_is_writable() -> None:
    sketch = ViewerSketch()
    sketch.add_many(f"u{i}" for i in range(5000))
    blob = sketch.to_bytes()
    assert isinstance(blob, bytes)
    assert len(blob) == SKETCH_BYTES == 2**PRECISION == 16 * 1024

    back = ViewerSketch.from_bytes(blob)
    assert back == sketch
    assert back.estimate() == sketch.estimate()

    # Writable on every path: the scalar update, the bulk path and merge.
    back.add("someone-new")
    back.add_many(f"v{i}" for i in range(5000))
    back.merge(sketch)
    assert back.estimate() > sketch.estimate()
    assert blob == sketch.to_bytes()  # the source blob did not change

    from_memoryview = ViewerSketch.from_bytes(memoryview(blob))
    from_memoryview.add_many(["x"])


def test_merge_registers_leaves_its_inputs_alone() -> None:
    a, b = ViewerSketch(), ViewerSketch()
    a.add_many(["a1", "a2"])
    b.add_many(["b1"])
    blobs = [a.to_bytes(), b.to_bytes()]
    merged = merge_registers(blobs)
    merged.add_many(f"m{i}" for i in range(100))
    assert blobs == [a.to_bytes(), b.to_bytes()]


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\x00" * (SKETCH_BYTES - 1),
        b"\x00" * (SKETCH_BYTES + 1),
        b"\xff" * SKETCH_BYTES,
        b"\x40" * SKETCH_BYTES,
    ],
)
def test_from_bytes_rejects_corrupt_blobs(blob: bytes) -> None:
    with pytest.raises(ValueError, match="viewers sketch"):
        ViewerSketch.from_bytes(blob)
    with pytest.raises(ValueError, match="viewers sketch"):
        merge_registers([ViewerSketch().to_bytes(), blob])


def test_constructor_rejects_foreign_registers() -> None:
    with pytest.raises(ValueError, match="writable int8"):
        ViewerSketch(np.zeros(256, dtype=np.int8))
    with pytest.raises(ValueError, match="writable int8"):
        ViewerSketch(np.frombuffer(bytes(SKETCH_BYTES), dtype=np.int8))


# (3) accuracy at a million ------------------------------------------------------

STANDARD_ERROR = 1.04 / math.sqrt(2**PRECISION)  # about 0.81 %


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_estimate_within_three_standard_errors_at_a_million(seed: int) -> None:
    truth = 1_000_000
    sketch = ViewerSketch()
    sketch.add_many(f"{seed}-{i}" for i in range(truth))
    error = abs(sketch.estimate() - truth) / truth
    assert error <= 3 * STANDARD_ERROR, (seed, sketch.estimate())


def test_small_rooms_are_nearly_exact() -> None:
    sketch = ViewerSketch()
    sketch.add_many(f"s-{i}" for i in range(100))
    assert abs(sketch.estimate() - 100) <= 1
    sketch.add_many(f"s-{i}" for i in range(100))  # repeats change nothing
    assert abs(sketch.estimate() - 100) <= 1


# (4) the shown figure around the threshold -------------------------------------


def _simulate(total: int, threshold: int, prefix: str, bulk_until: int) -> list[ViewersFigure]:
    """Add ``total`` distinct uids, one by one after ``bulk_until``, through the
    product: an owner node's :class:`ViewersHistory` stores them (exact set and
    sketch, in the memory engine), another node's reads the figure it shows."""

    async def run() -> list[ViewersFigure]:
        clock = FakeClock()
        store = MemoryStore(LogPolicy(), clock)
        owner = ViewersHistory(store.stats, clock, "owner", threshold=threshold)
        reader = ViewersHistory(store.stats, clock, "reader", threshold=threshold)
        figures: list[ViewersFigure] = []

        async def step(batch: list[str]) -> None:
            owner.joined("r", batch)
            await owner.flush()
            await reader.refresh(["r"])
            figures.append(reader.figure("r"))

        await step([f"{prefix}{i}" for i in range(bulk_until)])
        for i in range(bulk_until, total):
            await step([f"{prefix}{i}"])
        return figures

    return asyncio.run(run())


@pytest.mark.parametrize("prefix", ["a-", "b-", "c-"])
def test_exact_up_to_threshold_and_never_drops_across_it(prefix: str) -> None:
    threshold = 10_000
    figures = _simulate(10_050, threshold, prefix, bulk_until=9_950)
    # figures[k] is the figure after 9_950 + k distinct uids.
    by_count = {9_950 + k: f for k, f in enumerate(figures)}

    assert by_count[9_999] == ViewersFigure(9_999, True)
    assert by_count[10_000] == ViewersFigure(10_000, True)
    assert by_count[10_001].viewers_exact is False
    assert by_count[10_001].viewers >= 10_000
    for count in range(9_950, 10_001):
        assert by_count[count] == ViewersFigure(count, True)
    for count in range(10_001, 10_050):
        assert by_count[count].viewers_exact is False
        # Still the HyperLogLog near the truth: linear counting at this size.
        assert abs(by_count[count].viewers - count) <= 3 * STANDARD_ERROR * count

    shown = [f.viewers for f in figures]
    assert shown == sorted(shown), "the viewers figure went down"


def test_figure_never_drops_when_estimate_is_low() -> None:
    # Crossing: the capped set holds the threshold, the estimate is a bit low.
    assert viewers_figure(10_000, False, 9_900, 10_000) == (10_000, False)
    # Beyond: the estimate wobbles below the last shown figure.
    assert viewers_figure(10_000, False, 50_000, 49_000) == (50_000, False)
    assert viewers_figure(10_000, False, 49_500, 50_000) == (50_000, False)
    # No exact set at all (e.g. lost): estimate, never below what was shown.
    assert viewers_figure(None, True, 120, 0) == (120, False)
    assert viewers_figure(None, True, 120, 130) == (130, False)
    # ... and a room nobody watched yet shows 0, not 1.
    assert viewers_figure(None, False, 0, 0) == (0, False)
    # A complete exact set smaller than what was shown (history lost): not exact.
    assert viewers_figure(5, True, 5, 7) == (7, False)
    # Threshold lowered below a room's exact count: the room goes to the estimate.
    assert viewers_figure(600, True, 598, 600, threshold=500) == (600, False)
    assert viewers_figure(0, True, 0, 0) == (0, True)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 20_000), st.booleans(), st.integers(0, 30_000)), max_size=30
    )
)
def test_figure_is_monotonic_whatever_the_inputs(steps: list[tuple[int, bool, int]]) -> None:
    last = 0
    for exact_count, complete, estimate in steps:
        figure = viewers_figure(exact_count, complete, estimate, last)
        assert figure.viewers >= last
        if figure.viewers_exact:
            assert figure.viewers == exact_count
            assert complete
            assert exact_count <= 10_000
        last = figure.viewers


# the exact set's growth ----------------------------------------------------------


def test_plan_adds_new_uids_once_in_first_seen_order() -> None:
    plan = plan_exact_update({"a"}, True, ["b", "a", "c", "b"], threshold=10)
    assert plan == (("b", "c"), True)


def test_plan_fills_to_threshold_then_stops_for_good() -> None:
    plan = plan_exact_update({"a", "b"}, True, ["c", "d", "e"], threshold=3)
    assert plan == (("c",), False)
    assert plan_exact_update({"a", "b", "c"}, True, ["a", "b"], threshold=3) == ((), True)
    assert plan_exact_update({"a", "b", "c"}, True, ["d"], threshold=3) == ((), False)
    # Once incomplete, nothing is added, not even a uid that would fit.
    assert plan_exact_update({"a"}, False, ["z"], threshold=3) == ((), False)
    # A set already over a lowered threshold is incomplete.
    assert plan_exact_update({"a", "b"}, True, [], threshold=1) == ((), False)
    with pytest.raises(ValueError, match="threshold"):
        plan_exact_update(set(), True, [], threshold=-1)


def test_a_sketch_with_a_viewer_is_not_empty() -> None:
    sketch = ViewerSketch()
    assert sketch.is_empty()
    sketch.add("u1")
    assert not sketch.is_empty()
    assert not ViewerSketch.from_bytes(sketch.to_bytes()).is_empty()


def test_a_stored_sketch_keeps_registers_up_to_the_highest_rank_and_no_higher() -> None:
    registers = bytearray(SKETCH_BYTES)
    highest = 64 - PRECISION + 1  # the rank of a hash whose remaining bits are all 0
    registers[7] = highest
    assert not ViewerSketch.from_bytes(bytes(registers)).is_empty()
    registers[7] = highest + 1
    with pytest.raises(ValueError, match="register is out of"):
        ViewerSketch.from_bytes(bytes(registers))
