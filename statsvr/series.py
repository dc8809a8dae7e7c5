"""Online count over time: one room's series in 1-minute, 5-minute and 1-hour buckets.

Rolled up as a metrics store does (every resolution keeps min, max, sum and count of
its buckets, so coarser resolutions are exact rollups of finer ones): a room's online
count is sampled (every :data:`SAMPLE_EVERY` seconds) and each sample is added to
the bucket that holds it in *every* resolution of a :class:`Resolution` table. By default:

=========  ===========  ======================
step       retention    buckets kept at most
=========  ===========  ======================
60 s       1 day        1 440
300 s      7 days       2 016
3 600 s    90 days      2 160
=========  ===========  ======================

A bucket is ``(min, max, sum, count)`` of the samples in it, all integers, so
sums are exact and a coarser bucket is *exactly* the rollup (min of mins, max of
maxes, sum of sums, count of counts) of the finer buckets inside it; see
:func:`rollup`. Older data lives on only in the coarser resolutions ("rolled up, not
kept at fine grain"). Buckets start at multiples of their step counted from the
Unix epoch, so hour buckets start on the hour (UTC).

This module is pure logic: no clock reads, no I/O, no locks. Every time is passed
in as Unix seconds, so callers (and tests) drive time. The series itself is kept
by the store: each engine adds a sample with this bucket rule (the memory engine
in Python, the redis engine in ``stats_series.lua``), and the tests hold both to one
reference model (``SeriesState`` in ``tests/models.py``).

Limits, on purpose:

* **Bounded memory.** A resolution keeps the buckets that start after
  ``now - retention``: the bucket holding ``now`` and the ``retention // step - 1``
  before it, never more, so a room holds at most 1 440 + 2 016 + 2 160 buckets
  with the default table. The price: the bucket holding ``now - retention`` itself
  is gone, so a range starting right at a resolution's retention edge lacks its first
  (partial) step.
* **Samples in time order.** The store ignores a sample that is
  not newer than the last one it took (a replayed batch, a clock that stepped
  back); it does not rewrite history.
* **One step per answer.** A query answers from one resolution only,
  the finest whose retention reaches back to ``since``; it does not stitch resolutions.
  :func:`choose_resolution` and :func:`query_window` are that rule on their own, for
  readers of a series kept elsewhere (``statsvr.sampler`` reads it from the store).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from liveroom.store.base import SERIES_RESOLUTIONS

Bucket = tuple[int, int, int, int]
"""``(min, max, sum, count)`` of the samples in one bucket; ``count >= 1``."""

Point = tuple[int, float, int]
"""``(t, avg, max)``: bucket start (Unix s), mean of its samples, their maximum."""

SAMPLE_EVERY: Final = 10.0
"""Seconds between two samples of a room's online count (by ``statsvr.sampler``)."""

AVG_DIGITS: Final = 2
"""Decimal places of the ``avg`` in a :data:`Point`."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of Unix seconds, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Resolution:
    """One resolution of a series: buckets of ``step`` seconds kept for ``retention``.

    ``retention`` is a positive multiple of ``step``; the resolution keeps
    ``retention // step`` buckets (see :meth:`horizon`).
    """

    step: int
    retention: int

    def __post_init__(self) -> None:
        if not _is_int(self.step) or self.step <= 0:
            raise ValueError(
                f"resolution step must be a positive integer of seconds, not {self.step!r}")
        if not _is_int(self.retention) or self.retention < self.step:
            raise ValueError(
                f"resolution retention must be an integer of seconds >= step {self.step}, "
                f"not {self.retention!r}"
            )
        if self.retention % self.step:
            raise ValueError(
                f"resolution retention {self.retention} is not a multiple of its step {self.step}"
            )

    @property
    def keep(self) -> int:
        """How many buckets this resolution holds at most."""
        return self.retention // self.step

    def start(self, t: float) -> int:
        """Start of the bucket that holds ``t``: a time exactly on a boundary opens the new one."""
        return int(t // self.step) * self.step

    def horizon(self, now: float) -> int:
        """Start of the oldest bucket kept at ``now``: ``keep - 1`` steps before now's bucket.

        That is the first bucket start after ``now - retention`` (strictly).
        """
        return self.start(now) - (self.keep - 1) * self.step


DEFAULT_RESOLUTIONS: Final[tuple[Resolution, ...]] = tuple(
    Resolution(step=step, retention=retention) for step, retention in SERIES_RESOLUTIONS)
"""1-minute buckets for a day, 5-minute buckets for a week, 1-hour buckets for 90 days:
the store's table (``liveroom.store.base.SERIES_RESOLUTIONS``, which the likes
series uses too), as :class:`Resolution` objects."""


def validate_resolutions(resolutions: Iterable[Resolution]) -> tuple[Resolution, ...]:
    """Check a resolution table and return it as a tuple, finest first.

    A table needs at least one resolution; steps strictly increasing, each a multiple of
    the one before (so a coarse bucket is a whole number of fine ones and rolls up
    exactly); retentions not decreasing. Raises :class:`ValueError` otherwise.
    """
    table = tuple(resolutions)
    if not table:
        raise ValueError("a series needs at least one resolution")
    for resolution in table:
        if not isinstance(resolution, Resolution):
            raise ValueError(f"not a Resolution: {resolution!r}")
    for finer, coarser in pairwise(table):
        if coarser.step <= finer.step or coarser.step % finer.step:
            raise ValueError(
                f"resolution step {coarser.step} must be a larger multiple of the finer "
                f"step {finer.step}"
            )
        if coarser.retention < finer.retention:
            raise ValueError(
                f"resolution retention {coarser.retention} (step {coarser.step}) is shorter than "
                f"{finer.retention} (step {finer.step})"
            )
    return table


def choose_resolution(
    resolutions: Sequence[Resolution], since: float, now: float
) -> tuple[int, float]:
    """Which resolution answers a query from ``since`` seen at ``now``: ``(index, since)``.

    The finest resolution whose retention reaches back to ``since`` (``since >= now -
    retention``) answers, with ``since`` unchanged. If none does, the coarsest
    resolution answers and ``since`` is clamped to its ``now - retention``. A ``since``
    in the future picks the finest resolution. ``resolutions`` is a valid table, finest
    first (:func:`validate_resolutions`). Every reader of a series picks the step
    with this one rule, so they answer the same step for the same range. Raises
    :class:`ValueError` for a non-finite time.
    """
    since = _finite("since", since)
    now = _finite("now", now)
    for index, resolution in enumerate(resolutions):
        if since >= now - resolution.retention:
            return index, since
    index = len(resolutions) - 1
    return index, max(since, now - resolutions[index].retention)


def query_window(
    resolutions: Sequence[Resolution], since: float, until: float, now: float
) -> tuple[int, int, int]:
    """Which resolution and buckets answer ``[since, until]`` at ``now``: ``(index, low, high)``.

    The resolution is :func:`choose_resolution`'s. Its buckets that answer are those whose
    start is in ``[low, high]``: from the start of (clamped) ``since``'s bucket,
    but not before the oldest bucket the resolution keeps at ``now``
    (:meth:`Resolution.horizon`), up to ``until`` (floored: bucket starts are whole
    seconds). ``low > high`` means no bucket answers (``since`` after ``until``).
    Raises :class:`ValueError` for a non-finite time.
    """
    until = _finite("until", until)
    index, since = choose_resolution(resolutions, since, now)
    resolution = resolutions[index]
    if since > until:
        return index, 1, 0
    return index, max(resolution.start(since), resolution.horizon(now)), math.floor(until)


def to_point(start: int, bucket: Bucket) -> Point:
    """The answer's ``(t, avg, max)`` of one bucket: ``avg`` rounded to :data:`AVG_DIGITS`."""
    return (start, round(bucket[2] / bucket[3], AVG_DIGITS), bucket[1])


def combine(a: Bucket, b: Bucket) -> Bucket:
    """The bucket of the samples of ``a`` and ``b`` together."""
    return (min(a[0], b[0]), max(a[1], b[1]), a[2] + b[2], a[3] + b[3])


def rollup(buckets: Mapping[int, Bucket], step: int) -> dict[int, Bucket]:
    """Roll buckets up into ``step``-second buckets, keyed by start, in time order.

    ``rollup(fine, coarse.step)`` is what the coarse resolution holds for every coarse
    bucket whose fine buckets are all still kept. Works for any finer buckets whose
    step divides ``step``.
    """
    if not _is_int(step) or step <= 0:
        raise ValueError(f"step must be a positive integer, not {step!r}")
    out: dict[int, Bucket] = {}
    for start in sorted(buckets):
        key = start // step * step
        have = out.get(key)
        out[key] = buckets[start] if have is None else combine(have, buckets[start])
    return out
