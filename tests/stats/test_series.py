"""The online-count time series: the bucket rule and query window of
``statsvr.series``, and the reference model the engines are held to
(``SeriesState`` in ``tests/models.py``): resolutions, rollup, expiry, query, storage.

Pure logic, driven by explicit times. The properties compare the series with an
independent oracle: the raw samples grouped into each resolution's buckets with exact
(Fraction) floor division, restricted to the resolution's retention window.
"""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction
from itertools import pairwise

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from models import SeriesState

from statsvr.series import (
    DEFAULT_RESOLUTIONS,
    Resolution,
    choose_resolution,
    query_window,
    rollup,
    validate_resolutions,
)

DAY = 86_400
# An hour boundary (and so a 60 s and 300 s boundary too), in late 2023.
BASE = 1_700_002_800
assert BASE % 3600 == 0

Sample = tuple[float, int]


# -- oracle -----------------------------------------------------------------------


def exact_start(t: float, step: int) -> int:
    """Bucket start by exact arithmetic, independent of the code's float ``//``."""
    return (Fraction(t) // step) * step


def oracle(samples: list[Sample], resolution: Resolution,
           now: float) -> dict[int, tuple[int, int, int, int]]:
    """Raw samples rolled up into ``resolution``'s buckets, kept if within retention at ``now``."""
    step = resolution.step
    horizon = exact_start(now, step) - (resolution.retention // step - 1) * step
    groups: dict[int, list[int]] = {}
    for t, online in samples:
        groups.setdefault(exact_start(t, resolution.step), []).append(online)
    return {
        start: (min(values), max(values), sum(values), len(values))
        for start, values in sorted(groups.items())
        if start >= horizon
    }


# -- strategies ---------------------------------------------------------------------


@st.composite
def resolution_tables(draw: st.DrawFn) -> tuple[Resolution, ...]:
    """The default table, or a small random valid one (so retention bites often)."""
    if draw(st.booleans()):
        return DEFAULT_RESOLUTIONS
    steps = [draw(st.integers(1, 6))]
    for _ in range(draw(st.integers(0, 2))):
        steps.append(steps[-1] * draw(st.integers(2, 4)))
    resolutions: list[Resolution] = []
    retention = 0
    for step in steps:
        keep = max(1, -(-retention // step)) + draw(st.integers(0, 6))
        retention = keep * step
        resolutions.append(Resolution(step, retention))
    return validate_resolutions(resolutions)


@st.composite
def streams(draw: st.DrawFn) -> tuple[tuple[Resolution, ...], list[Sample]]:
    """A resolution table and increasing sample times with random online counts.

    Gaps mix sub-step floats, exact multiples of the finest step (boundaries), and
    jumps up to past the coarsest retention.
    """
    resolutions = draw(resolution_tables())
    fine, coarse = resolutions[0], resolutions[-1]
    gap = st.one_of(
        st.floats(0.001, fine.step * 2.0, allow_nan=False, allow_infinity=False),
        st.integers(1, 3).map(lambda k: float(k * fine.step)),
        st.integers(1, coarse.retention * 2).map(float),
        st.just(10.0),
    )
    t = float(draw(st.integers(0, 2_000_000_000)))
    samples: list[Sample] = []
    for _ in range(draw(st.integers(0, 120))):
        t += draw(gap)
        samples.append((t, draw(st.integers(0, 5_000_000))))
    return resolutions, samples


def fed(resolutions: tuple[Resolution, ...], samples: list[Sample]) -> SeriesState:
    state = SeriesState(resolutions)
    for t, online in samples:
        assert state.record(t, online)
    return state


# -- properties ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(streams())
def test_every_resolution_is_the_rollup_of_the_raw_samples_within_retention(
    stream: tuple[tuple[Resolution, ...], list[Sample]],
) -> None:
    resolutions, samples = stream
    state = fed(resolutions, samples)
    for resolution in resolutions:
        got = state.buckets(resolution.step)
        if samples:
            assert got == oracle(samples, resolution, samples[-1][0])
            # Kept: exactly the buckets that start after last - retention.
            assert all(start > samples[-1][0] - resolution.retention for start in got)
        else:
            assert got == {}
        assert len(got) <= resolution.keep
        assert list(got) == sorted(got)
    assert state.last == (samples[-1][0] if samples else None)


@settings(max_examples=200, deadline=None)
@given(streams(), st.floats(0, 200 * DAY))
def test_expire_keeps_exactly_the_retention_window(
    stream: tuple[tuple[Resolution, ...], list[Sample]], later: float
) -> None:
    resolutions, samples = stream
    state = fed(resolutions, samples)
    now = (samples[-1][0] if samples else 0.0) + later
    before = len(state)
    dropped = state.expire(now)
    assert before - dropped == len(state)
    for resolution in resolutions:
        assert state.buckets(resolution.step) == oracle(samples, resolution, now)


@settings(max_examples=200, deadline=None)
@given(streams())
def test_coarser_resolutions_equal_the_rollup_of_the_finer(
    stream: tuple[tuple[Resolution, ...], list[Sample]],
) -> None:
    resolutions, samples = stream
    state = fed(resolutions, samples)
    if not samples:
        return
    last = samples[-1][0]
    for finer, coarser in pairwise(resolutions):
        fine = state.buckets(finer.step)
        coarse = state.buckets(coarser.step)
        rolled = rollup(fine, coarser.step)
        horizon = finer.horizon(last)
        # Every coarse bucket whose fine buckets are all still kept is exactly
        # their rollup: min of mins, max of maxes, sum of sums, count of counts.
        for start, bucket in coarse.items():
            if start >= horizon:
                assert rolled[start] == bucket
        for start, bucket in rolled.items():
            if start >= horizon:
                assert coarse[start] == bucket
            elif start in coarse:  # straddles the fine horizon: holds more samples
                assert coarse[start][3] >= bucket[3]
            else:  # the coarse resolution already dropped it (its retention is not longer)
                assert start < coarser.horizon(last)


@settings(max_examples=150, deadline=None)
@given(streams())
def test_to_dict_from_dict_round_trip_through_msgpack_and_json(
    stream: tuple[tuple[Resolution, ...], list[Sample]],
) -> None:
    resolutions, samples = stream
    half = len(samples) // 2
    state = fed(resolutions, samples[:half])
    data = state.to_dict()
    for copy in (
        SeriesState.from_dict(data),
        SeriesState.from_dict(msgpack.unpackb(msgpack.packb(data))),
        SeriesState.from_dict(msgpack.unpackb(msgpack.packb(data), use_list=False)),
        SeriesState.from_dict(json.loads(json.dumps(data))),
    ):
        assert copy.to_dict() == data
        assert copy.resolutions == state.resolutions
        # The restored state goes on exactly like the original.
        for t, online in samples[half:]:
            assert copy.record(t, online)
        assert copy.to_dict() == fed(resolutions, samples).to_dict()


@settings(max_examples=150, deadline=None)
@given(streams(), st.randoms(use_true_random=False))
def test_merge_sorts_a_batch_and_a_replay_changes_nothing(
    stream: tuple[tuple[Resolution, ...], list[Sample]], rnd: random.Random
) -> None:
    resolutions, samples = stream
    shuffled = list(samples)
    rnd.shuffle(shuffled)
    state = SeriesState(resolutions)
    assert state.merge(shuffled) == len(samples)
    assert state.to_dict() == fed(resolutions, samples).to_dict()
    assert state.merge(samples) == 0
    assert state.to_dict() == fed(resolutions, samples).to_dict()


@settings(max_examples=200, deadline=None)
@given(
    streams(),
    st.floats(-100 * DAY, 10 * DAY),
    st.floats(0, 100 * DAY),
    st.floats(0, 2 * DAY),
)
def test_query_answers_one_resolution_within_the_range(
    stream: tuple[tuple[Resolution, ...], list[Sample]], since_off: float, length: float,
    late: float,
) -> None:
    resolutions, samples = stream
    state = fed(resolutions, samples)
    now = (samples[-1][0] if samples else float(BASE)) + late
    since = now + since_off
    until = since + length
    step, points = state.query(since, until, now)
    resolution = next((x for x in resolutions if since >= now - x.retention), resolutions[-1])
    assert step == resolution.step
    clamped = max(since, now - resolution.retention)
    expected = {
        start: bucket
        for start, bucket in (oracle(samples, resolution, now) if samples else {}).items()
        if exact_start(clamped, resolution.step) <= start <= until
    }
    assert [p[0] for p in points] == list(expected)
    for (start, avg, high), bucket in zip(points, expected.values(), strict=True):
        assert start % step == 0
        assert high == bucket[1]
        assert avg == round(bucket[2] / bucket[3], 2)
        assert bucket[0] - 0.005 <= avg <= bucket[1] + 0.005
    assert len(points) <= resolution.keep


# -- boundaries and hand-computed examples ---------------------------------------------


def test_a_sample_on_a_bucket_boundary_opens_the_new_bucket() -> None:
    state = SeriesState()
    assert state.record(BASE + 60 - 0.001, 7)
    assert state.record(BASE + 60, 9)  # t = 60k: the new minute
    assert state.record(BASE + 300, 11)  # t = 300k: new minute and new 5 minutes
    assert state.buckets(60) == {
        BASE: (7, 7, 7, 1),
        BASE + 60: (9, 9, 9, 1),
        BASE + 300: (11, 11, 11, 1),
    }
    assert state.buckets(300) == {BASE: (7, 9, 16, 2), BASE + 300: (11, 11, 11, 1)}
    assert state.buckets(3600) == {BASE: (7, 11, 27, 3)}


def test_avg_and_max_of_a_hand_computed_example() -> None:
    state = SeriesState()
    samples = [(BASE, 10), (BASE + 10, 20), (BASE + 20, 30), (BASE + 50, 41)]
    samples += [(BASE + 60, 5), (BASE + 70, 7)]
    assert state.merge(samples) == 6
    now = BASE + 80
    # Minute buckets: (10+20+30+41)/4 = 25.25, max 41; (5+7)/2 = 6.0, max 7.
    assert state.query(BASE, BASE + 60, now) == (60, [(BASE, 25.25, 41), (BASE + 60, 6.0, 7)])
    # until is inclusive of the bucket starting there; since's bucket is included.
    assert state.query(BASE + 30, BASE + 59, now) == (60, [(BASE, 25.25, 41)])
    assert state.query(BASE + 61, BASE + 600, now) == (60, [(BASE + 60, 6.0, 7)])
    # Older than a day: the 5-minute resolution, 113 / 6 = 18.833... -> 18.83.
    assert state.query(now - 2 * DAY, now, now) == (300, [(BASE, 18.83, 41)])
    # Older than a week: the hour resolution.
    assert state.query(now - 8 * DAY, now, now) == (3600, [(BASE, 18.83, 41)])


def test_crossing_a_day_moves_queries_from_step_60_to_300() -> None:
    state = SeriesState()
    start = BASE - DAY - 600
    now = BASE + 25  # not on a boundary
    t = float(start)
    while t <= now:
        state.record(t, int(t) % 97)
        t += 10
    step, points = state.query(now - DAY + 60, now, now)
    assert step == 60
    assert len(points) == 1440  # every kept minute, from since's minute on
    assert state.query(now - DAY, now, now)[0] == 60
    step, points = state.query(now - DAY - 1, now, now)
    assert step == 300
    assert points[0][0] == (now - DAY - 1) // 300 * 300
    assert points[-1][0] == BASE
    # The minute resolution no longer holds the minute one day ago; the 5-minute one does.
    assert min(state.buckets(60)) == (now // 60) * 60 - 1439 * 60
    assert min(state.buckets(300)) == start // 300 * 300


def test_old_since_picks_the_hour_resolution_and_is_clamped_to_90_days() -> None:
    state = SeriesState()
    now = BASE + 100 * DAY + 1234
    for day in range(0, 101):
        state.record(BASE + day * DAY + 5, day)
    assert state.query(now - 7 * DAY, now, now)[0] == 300
    assert state.query(now - 7 * DAY - 1, now, now)[0] == 3600
    step, points = state.query(now - 90 * DAY, now, now)
    assert step == 3600
    step, far = state.query(now - 400 * DAY, now, now)
    assert step == 3600
    assert far == points  # clamped to the 90-day retention
    horizon = (now // 3600 - 2159) * 3600
    assert all(t >= horizon for t, _, _ in far)
    assert [avg for _, avg, _ in far] == [float(d) for d in range(11, 101)]
    assert len(state.buckets(3600)) == 90  # one sample a day, days 11..100


def test_expiry_drops_buckets_past_each_retention() -> None:
    state = SeriesState()
    state.record(BASE, 3)
    assert len(state) == 3
    assert state.expire(BASE + DAY - 60) == 0  # still the 1440th minute
    assert state.expire(BASE + DAY) == 1  # the minute is gone, 5 min and hour stay
    assert state.buckets(60) == {}
    assert state.buckets(300) == {BASE: (3, 3, 3, 1)}
    assert state.query(BASE, BASE + 60, BASE + DAY)[1] == []  # step 60 now, no bucket
    assert state.expire(BASE + 7 * DAY) == 1
    assert state.buckets(300) == {}
    assert state.buckets(3600) == {BASE: (3, 3, 3, 1)}
    # since exactly 7 days back is still the 5-minute resolution's by retention, but its
    # oldest (partial) step is already gone: the documented price of the bound.
    assert state.query(BASE, BASE + 60, BASE + 7 * DAY) == (300, [])
    assert state.query(BASE - 1, BASE + 60, BASE + 7 * DAY) == (3600, [(BASE, 3.0, 3)])
    assert state.expire(BASE + 90 * DAY - 3600) == 0
    assert state.expire(BASE + 90 * DAY) == 1
    assert len(state) == 0
    assert state.query(BASE, BASE + 60, BASE + 90 * DAY)[1] == []
    # A new sample far later also drops what fell out, without expire().
    state.record(BASE + 100 * DAY, 1)
    state.record(BASE + 102 * DAY, 2)
    assert state.buckets(60) == {BASE + 102 * DAY: (2, 2, 2, 1)}
    assert len(state.buckets(300)) == 2


def test_memory_is_bounded_by_the_resolution_table() -> None:
    state = SeriesState()
    t = BASE
    while t < BASE + 95 * DAY:
        state.record(t, 1)
        t += 60
    assert [len(state.buckets(r.step)) for r in DEFAULT_RESOLUTIONS] == [1440, 2016, 2160]
    assert len(state) == 1440 + 2016 + 2160
    step, points = state.query(0, t, t - 60)
    assert step == 3600
    assert len(points) == 2160
    assert len(msgpack.packb(state.to_dict())) < 150_000


def test_stale_and_repeated_samples_are_ignored() -> None:
    state = SeriesState()
    assert state.record(BASE + 20, 5)
    assert not state.record(BASE + 20, 6)
    assert not state.record(BASE + 10, 6)
    assert state.buckets(60) == {BASE: (5, 5, 5, 1)}
    assert state.last == BASE + 20


def test_the_resolution_rule_on_its_own() -> None:
    now = BASE + 25.0
    assert choose_resolution(DEFAULT_RESOLUTIONS, now - 3600, now) == (0, now - 3600)
    assert choose_resolution(DEFAULT_RESOLUTIONS, now - DAY, now) == (0, now - DAY)
    assert choose_resolution(DEFAULT_RESOLUTIONS, now - DAY - 1, now) == (1, now - DAY - 1)
    assert choose_resolution(DEFAULT_RESOLUTIONS, now - 3 * DAY, now) == (1, now - 3 * DAY)
    assert choose_resolution(DEFAULT_RESOLUTIONS, now - 30 * DAY, now) == (2, now - 30 * DAY)
    assert choose_resolution(DEFAULT_RESOLUTIONS, now - 400 * DAY, now) == (2, now - 90 * DAY)
    assert choose_resolution(DEFAULT_RESOLUTIONS, now + 50, now) == (0, now + 50)
    # Buckets from since's own, not before the horizon, up to until floored.
    assert query_window(DEFAULT_RESOLUTIONS, now - 90, now + 0.5, now) == (0, BASE - 120, BASE + 25)
    assert query_window(DEFAULT_RESOLUTIONS, now - 400 * DAY, now, now) == (
        2, (now // 3600 - 2159) * 3600, BASE + 25)
    index, low, high = query_window(DEFAULT_RESOLUTIONS, now, now - 1, now)
    assert index == 0
    assert low > high
    with pytest.raises(ValueError, match="until"):
        query_window(DEFAULT_RESOLUTIONS, now, float("nan"), now)


def test_since_after_until_answers_no_points() -> None:
    state = SeriesState()
    state.merge([(BASE, 1), (BASE + 60, 2)])
    assert state.query(BASE + 60, BASE, BASE + 70) == (60, [])
    assert state.query(BASE + 500, BASE + 900, BASE + 70) == (60, [])  # the future


def test_due_follows_the_sample_interval() -> None:
    state = SeriesState()
    assert state.due(BASE)
    state.record(BASE, 1)
    assert not state.due(BASE + 9.9)
    assert state.due(BASE + 10)


@pytest.mark.parametrize(
    ("t", "online"),
    [(float("nan"), 1), (float("inf"), 1), (BASE, -1), (BASE, 1.5), (BASE, True)],
)
def test_bad_samples_are_refused(t: float, online: int) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message names the argument
        SeriesState().record(t, online)


@pytest.mark.parametrize(
    ("resolutions", "message"),
    [
        ([], "^a series needs at least one resolution$"),
        ([Resolution(60, 600), "60/600"], "not a Resolution: '60/600'"),
        ([Resolution(60, 600), Resolution(90, 900)],  # 90 is not a multiple of 60
         "step 90 must be a larger multiple of the finer step 60"),
        ([Resolution(60, 600), Resolution(60, 900)],  # the same step twice
         "step 60 must be a larger multiple of the finer step 60"),
        ([Resolution(300, 600), Resolution(60, 600)],  # not finest first
         "step 60 must be a larger multiple of the finer step 300"),
        ([Resolution(60, 6000), Resolution(300, 3000)],  # coarser keeps less
         r"retention 3000 \(step 300\) is shorter than 6000 \(step 60\)"),
    ],
)
def test_bad_resolution_tables_are_refused_saying_why(resolutions: list[Resolution],
                                                      message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SeriesState(resolutions)


@pytest.mark.parametrize(("step", "retention", "message"), [
    (0, 60, "step must be a positive integer of seconds, not 0"),
    (60.0, 600, "step must be a positive integer of seconds, not 60.0"),
    (60, 30, "retention must be an integer of seconds >= step 60, not 30"),
    (60, 90, "retention 90 is not a multiple of its step 60"),
])
def test_bad_resolutions_are_refused_saying_why(step: int, retention: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Resolution(step, retention)


def test_from_dict_refuses_malformed_data_and_another_table() -> None:
    state = SeriesState()
    state.merge([(BASE, 1), (BASE + 60, 2)])
    good = state.to_dict()
    bad = [
        {**good, "v": 2},
        {**good, "resolutions": [[60, 86_400]]},
        {**good, "buckets": [[[BASE + 1, 1, 1, 1, 1]], [], []]},  # unaligned
        {**good, "buckets": [[[BASE, 1, 1, 1, 1], [BASE, 1, 1, 1, 1]], [], []]},
        {**good, "buckets": [[[BASE, 2, 1, 3, 2]], [], []]},  # min > max
        {**good, "buckets": [[[BASE + 600, 1, 1, 1, 1]], [], []]},  # after last
        {**good, "last": None},
        {**good, "last": "soon"},
        {**good, "resolutions": "60"},
    ]
    for data in bad:
        with pytest.raises(ValueError):  # noqa: PT011
            SeriesState.from_dict(data)
    with pytest.raises(ValueError, match="another resolution table"):
        SeriesState.from_dict(good, resolutions=[Resolution(60, 3600)])
    assert SeriesState.from_dict(good, resolutions=DEFAULT_RESOLUTIONS).to_dict() == good


def test_from_dict_drops_buckets_past_retention() -> None:
    data = SeriesState().to_dict()
    data["last"] = BASE + 2 * DAY
    data["buckets"][0] = [[BASE, 1, 1, 1, 1], [BASE + 2 * DAY, 2, 2, 2, 1]]
    state = SeriesState.from_dict(data)
    assert state.buckets(60) == {BASE + 2 * DAY: (2, 2, 2, 1)}


@pytest.mark.parametrize("name", ["since", "until", "now"])
def test_a_time_that_is_not_finite_is_refused_by_name(name: str) -> None:
    times = {"since": 0.0, "until": 60.0, "now": 60.0, name: math.inf}
    with pytest.raises(ValueError, match=rf"^{name} must be a finite number"):
        query_window(DEFAULT_RESOLUTIONS, times["since"], times["until"], times["now"])


def test_rollup_takes_a_positive_whole_step_of_seconds() -> None:
    fine = {0: (1, 1, 1, 1), 1: (3, 3, 3, 1)}
    assert rollup(fine, 1) == fine
    assert rollup(fine, 2) == {0: (1, 3, 4, 2)}
    for bad in (0, -60, 1.5):
        with pytest.raises(ValueError, match="step must be a positive integer"):
            rollup(fine, bad)  # type: ignore[arg-type]
