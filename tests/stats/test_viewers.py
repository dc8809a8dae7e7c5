"""Viewers history: HyperLogLog sketches, their merge, and the shown figure.

The sketch is our own pure-Python HyperLogLog++; datasketch's
``HyperLogLogPlusPlus(p=14)`` (a dependency of the tests, never imported by a
node) is the reference its registers and estimates are compared with.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import random
from pathlib import Path

import numpy as np
import pytest
from datasketch import HyperLogLogPlusPlus
from datasketch.hyperloglog_const import _bias, _raw_estimate, _thresholds
from hypothesis import event, given, settings
from hypothesis import strategies as st
from models import plan_exact_update

from liveroom.clock import FakeClock
from liveroom.store.base import LogPolicy
from liveroom.store.memory import MemoryStore
from statsvr import sketch_bias
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


# (1b) the same registers and estimates as datasketch's HyperLogLog++ ----------------

M = 2**PRECISION


def reference(registers: bytes | bytearray) -> HyperLogLogPlusPlus:
    """datasketch's sketch over a copy of ``registers``."""
    reg = np.frombuffer(bytes(registers), dtype=np.int8).copy()
    return HyperLogLogPlusPlus(reg=reg, hashfunc=uid_hash)


def reference_of(uids: list[str]) -> HyperLogLogPlusPlus:
    """datasketch's sketch fed ``uids`` by its own ``update()``."""
    hll = HyperLogLogPlusPlus(p=PRECISION, hashfunc=uid_hash)
    for uid in uids:
        hll.update(uid)
    return hll


def assert_same_estimate(ours: ViewerSketch, theirs: HyperLogLogPlusPlus) -> str:
    """The rounded estimate exactly, the float before rounding to its last bit
    (or to numpy's rounding of its sum once a register reaches 40): bit for
    bit when linear counting does not answer and no register reaches 40 (see
    ``ViewerSketch.count`` for the two places numpy rounds otherwise).
    Returns which of HLL++'s estimates answered."""
    registers = ours.to_bytes()
    expected = float(theirs.count())
    zeros = registers.count(0)
    linear = zeros and M * math.log(M / zeros) <= _thresholds[PRECISION - 4]
    raw = 0.7213 / (1 + 1.079 / M) * M * M / math.fsum(2.0**-r for r in registers)
    corrected = not linear and raw <= 5 * M
    # Once a register reaches 40, numpy's sum of 2**-register rounds as it
    # goes: pairwise over blocks of 128, each summed in 8 running sums, so up
    # to 16 + 3 + 7 roundings deep for 2**14 terms. Its raw estimate (and the
    # answer that subtracts a bias from it) may be that many last bits apart
    # from the exact sum's (two seen in random runs).
    summed = 0.0 if linear or max(registers) < 40 else 32 * 2.0**-53 * raw
    assert abs(ours.count() - expected) <= math.ulp(expected) + summed
    # The rounded estimate is datasketch's wherever the floats agree; where
    # numpy's sum differs by its last bit, a float a hair from .5 may round
    # the other way (seen once in a random run): one apart at most then.
    slack = 0 if ours.count() == expected else 1
    assert abs(ours.estimate() - round(expected)) <= slack
    if not linear and max(registers) < 40:
        assert ours.count() == expected
    return "linear counting" if linear else "bias-corrected" if corrected else "raw"


@settings(max_examples=60, deadline=None)
@given(uids=st.lists(uid_strategy, max_size=300))
def test_registers_equal_datasketch_update(uids: list[str]) -> None:
    bulk, one_by_one = ViewerSketch(), ViewerSketch()
    bulk.add_many(uids)
    for uid in uids:
        one_by_one.add(uid)
    theirs = reference_of(uids)
    assert bulk.to_bytes() == one_by_one.to_bytes() == theirs.reg.tobytes()
    event(assert_same_estimate(bulk, theirs))


@pytest.mark.parametrize(("prefix", "count", "regime"), [
    ("a", 5_000, "linear counting"), ("b", 20_000, "bias-corrected"), ("c", 120_000, "raw")])
def test_registers_and_estimate_equal_datasketch_by_the_thousand(prefix: str, count: int,
                                                                 regime: str) -> None:
    uids = [f"{prefix}-{i}" for i in range(count)]
    ours = ViewerSketch()
    ours.add_many(uids)
    theirs = reference_of(uids)
    assert ours.to_bytes() == theirs.reg.tobytes()
    assert assert_same_estimate(ours, theirs) == regime


def registers_at(cardinality: float, rng: random.Random) -> bytearray:
    """Registers as ``cardinality`` distinct uids leave them, drawn directly.

    A register is the highest rank of the hashes it gets, about
    Poisson(cardinality / 2**14) of them, each of rank above ``k`` with
    probability 2**-k: it is at most ``k`` with probability
    ``exp(-load * 2**-k)``, inverted here for a uniform draw.
    """
    load = cardinality / M
    registers = bytearray(M)
    for i in range(M):
        tail = -math.log(1.0 - rng.random())  # > 0 but for a 2**-53 draw
        if load == 0:
            continue
        rank = 51 if tail == 0 else max(0, math.ceil(math.log2(load / tail)))
        registers[i] = min(rank, 51)
    return registers


cardinalities = st.one_of(
    st.integers(0, 20_000),  # linear counting and where it hands over
    st.integers(8_000, 100_000),  # the bias-corrected range (raw estimate up to 5 * 2**14)
    st.floats(1e5, 1e12),  # raw HyperLogLog, registers up to the highest ranks
)
# 16 384 registers are too many draws for hypothesis to shrink: it picks a seed.
seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=80, deadline=None)
@given(cardinality=cardinalities, seed=seeds,
       high=st.lists(st.tuples(st.integers(0, M - 1), st.integers(35, 51)), max_size=3))
def test_estimate_equals_datasketch_from_small_to_huge(
    cardinality: float, seed: int, high: list[tuple[int, int]]
) -> None:
    registers = registers_at(cardinality, random.Random(seed))
    for i, rank in high:  # ranks numpy's pairwise sum starts to round
        registers[i] = rank
    ours = ViewerSketch(bytearray(registers))
    regime = assert_same_estimate(ours, reference(registers))
    back = ViewerSketch.from_bytes(ours.to_bytes())
    assert back == ours
    assert assert_same_estimate(back, reference(registers)) == regime
    event(regime)
    event("a register at 40 or more" if max(registers) >= 40 else "every register under 40")


@settings(max_examples=40, deadline=None)
@given(cardinality=cardinalities, nodes=st.integers(1, 4), seed=seeds)
def test_merge_registers_equals_datasketch_merge(cardinality: float, nodes: int,
                                                 seed: int) -> None:
    rng = random.Random(seed)
    per_node = [registers_at(cardinality / nodes, rng) for _ in range(nodes)]
    theirs = reference(per_node[0])
    for registers in per_node[1:]:
        theirs.merge(reference(registers))
    merged = merge_registers(bytes(registers) for registers in per_node)
    assert merged.to_bytes() == theirs.reg.tobytes()
    event(assert_same_estimate(merged, theirs))
    in_place = ViewerSketch.from_bytes(per_node[0])
    for registers in per_node[1:]:
        in_place.merge(ViewerSketch.from_bytes(registers))
    assert in_place == merged


def test_linear_counting_equals_datasketch_for_every_count_of_empty_registers() -> None:
    # Linear counting reads nothing but how many registers are 0: all 16 384 cases.
    for zeros in range(1, M + 1):
        registers = bytearray([1]) * M
        registers[:zeros] = bytes(zeros)
        ours, theirs = ViewerSketch(registers), reference(registers)
        expected = float(theirs.count())
        assert ours.estimate() == round(expected), zeros
        # numpy's log may be its own (AVX-512 here): the last bit may differ.
        assert abs(ours.count() - expected) <= math.ulp(expected), zeros


def test_bias_tables_are_datasketchs_p14_rows() -> None:
    assert list(sketch_bias.RAW_ESTIMATES) == _raw_estimate[PRECISION - 4].tolist()
    assert list(sketch_bias.BIAS) == _bias[PRECISION - 4].tolist()
    assert _thresholds[PRECISION - 4] == sketch_bias.LINEAR_COUNTING_THRESHOLD
    spec = importlib.util.find_spec("datasketch")
    assert spec is not None
    assert spec.submodule_search_locations
    shipped = Path(spec.submodule_search_locations[0]) / "hyperloglog_const.py"
    assert "# precision 14" in shipped.read_text()


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
    with pytest.raises(ValueError, match="bytearray of"):
        ViewerSketch(bytearray(256))
    with pytest.raises(ValueError, match="bytearray of"):
        ViewerSketch(bytes(SKETCH_BYTES))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bytearray of"):
        ViewerSketch(np.zeros(SKETCH_BYTES, dtype=np.int8))  # type: ignore[arg-type]


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
        owner = ViewersHistory(store.stats, clock, "owner", viewers_threshold=threshold)
        reader = ViewersHistory(store.stats, clock, "reader", viewers_threshold=threshold)
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
