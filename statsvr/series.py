"""Online count over time: one room's series in 1-minute, 5-minute and 1-hour buckets.

Rolled up as a metrics store does (every tier keeps min, max, sum and count of
its buckets, so coarser tiers are exact rollups of finer ones): a room's online
count is sampled (every :data:`SAMPLE_EVERY` seconds) and each sample is added to
the bucket that holds it in *every* tier of a :class:`Resolution` table. By default:

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
:func:`rollup`. Older data lives on only in the coarser tiers ("rolled up, not
kept at fine grain"). Buckets start at multiples of their step counted from the
Unix epoch, so hour buckets start on the hour (UTC).

This module is pure logic: no clock reads, no I/O, no locks. Every time is passed
in as Unix seconds, so callers (and tests) drive time. :class:`SeriesState` is
one room's series; it serializes to a msgpack- and JSON-friendly dict with
:meth:`SeriesState.to_dict` and back with :meth:`SeriesState.from_dict`.

Limits, on purpose:

* **Bounded memory.** A tier keeps the buckets that start after
  ``now - retention``: the bucket holding ``now`` and the ``retention // step - 1``
  before it, never more, so a room holds at most 1 440 + 2 016 + 2 160 buckets
  with the default table. The price: the bucket holding ``now - retention`` itself
  is gone, so a range starting right at a tier's retention edge lacks its first
  (partial) step.
* **Samples in time order.** :meth:`SeriesState.record` ignores a sample that is
  not newer than the last one it took (a replayed batch, a clock that stepped
  back); it does not rewrite history.
* **One step per answer.** :meth:`SeriesState.query` answers from one tier only,
  the finest whose retention reaches back to ``since``; it does not stitch tiers.
  :func:`choose_tier` and :func:`query_window` are that rule on their own, for
  readers of a series kept elsewhere (``statsvr.sampler`` reads it from the store).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Final

Bucket = tuple[int, int, int, int]
"""``(min, max, sum, count)`` of the samples in one bucket; ``count >= 1``."""

Point = tuple[int, float, int]
"""``(t, avg, max)``: bucket start (Unix s), mean of its samples, their maximum."""

SAMPLE_EVERY: Final = 10.0
"""Seconds between two samples of a room's online count (see :meth:`SeriesState.due`)."""

AVG_DIGITS: Final = 2
"""Decimal places of the ``avg`` in a :data:`Point`."""

FORMAT_VERSION: Final = 1
"""The ``"v"`` of :meth:`SeriesState.to_dict`; :meth:`SeriesState.from_dict` refuses others."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of Unix seconds, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Resolution:
    """One resolution of a series: buckets of ``step`` seconds kept for ``retention``.

    ``retention`` is a positive multiple of ``step``; the tier keeps
    ``retention // step`` buckets (see :meth:`horizon`).
    """

    step: int
    retention: int

    def __post_init__(self) -> None:
        if not _is_int(self.step) or self.step <= 0:
            raise ValueError(f"tier step must be a positive integer of seconds, not {self.step!r}")
        if not _is_int(self.retention) or self.retention < self.step:
            raise ValueError(
                f"tier retention must be an integer of seconds >= step {self.step}, "
                f"not {self.retention!r}"
            )
        if self.retention % self.step:
            raise ValueError(
                f"tier retention {self.retention} is not a multiple of its step {self.step}"
            )

    @property
    def keep(self) -> int:
        """How many buckets this tier holds at most."""
        return self.retention // self.step

    def start(self, t: float) -> int:
        """Start of the bucket that holds ``t``: a time exactly on a boundary opens the new one."""
        return int(t // self.step) * self.step

    def horizon(self, now: float) -> int:
        """Start of the oldest bucket kept at ``now``: ``keep - 1`` steps before now's bucket.

        That is the first bucket start after ``now - retention`` (strictly).
        """
        return self.start(now) - (self.keep - 1) * self.step


DEFAULT_TIERS: Final[tuple[Resolution, ...]] = (
    Resolution(step=60, retention=86_400),
    Resolution(step=300, retention=7 * 86_400),
    Resolution(step=3_600, retention=90 * 86_400),
)
"""1-minute buckets for a day, 5-minute buckets for a week, 1-hour buckets for 90 days."""


def validate_tiers(tiers: Iterable[Resolution]) -> tuple[Resolution, ...]:
    """Check a tier table and return it as a tuple, finest first.

    A table needs at least one tier; steps strictly increasing, each a multiple of
    the one before (so a coarse bucket is a whole number of fine ones and rolls up
    exactly); retentions not decreasing. Raises :class:`ValueError` otherwise.
    """
    table = tuple(tiers)
    if not table:
        raise ValueError("a series needs at least one tier")
    for tier in table:
        if not isinstance(tier, Resolution):
            raise ValueError(f"not a Resolution: {tier!r}")
    for finer, coarser in pairwise(table):
        if coarser.step <= finer.step or coarser.step % finer.step:
            raise ValueError(
                f"tier step {coarser.step} must be a larger multiple of the finer step {finer.step}"
            )
        if coarser.retention < finer.retention:
            raise ValueError(
                f"tier retention {coarser.retention} (step {coarser.step}) is shorter than "
                f"{finer.retention} (step {finer.step})"
            )
    return table


def choose_tier(tiers: Sequence[Resolution], since: float, now: float) -> tuple[int, float]:
    """Which tier answers a query from ``since`` seen at ``now``: ``(index, since)``.

    The finest tier whose retention reaches back to ``since`` (``since >= now -
    retention``) answers, with ``since`` unchanged. If none does, the coarsest
    tier answers and ``since`` is clamped to its ``now - retention``. A ``since``
    in the future picks the finest tier. ``tiers`` is a valid table, finest
    first (:func:`validate_tiers`). Every reader of a series (the in-memory
    :class:`SeriesState` and the store-backed one) picks the step with this one
    rule, so they answer the same step for the same range. Raises
    :class:`ValueError` for a non-finite time.
    """
    since = _finite("since", since)
    now = _finite("now", now)
    for index, tier in enumerate(tiers):
        if since >= now - tier.retention:
            return index, since
    index = len(tiers) - 1
    return index, max(since, now - tiers[index].retention)


def query_window(
    tiers: Sequence[Resolution], since: float, until: float, now: float
) -> tuple[int, int, int]:
    """The tier and bucket starts that answer ``[since, until]`` at ``now``: ``(index, low, high)``.

    The tier is :func:`choose_tier`'s. Its buckets that answer are those whose
    start is in ``[low, high]``: from the start of (clamped) ``since``'s bucket,
    but not before the oldest bucket the tier keeps at ``now``
    (:meth:`Resolution.horizon`), up to ``until`` (floored: bucket starts are whole
    seconds). ``low > high`` means no bucket answers (``since`` after ``until``).
    Raises :class:`ValueError` for a non-finite time.
    """
    until = _finite("until", until)
    index, since = choose_tier(tiers, since, now)
    tier = tiers[index]
    if since > until:
        return index, 1, 0
    return index, max(tier.start(since), tier.horizon(now)), math.floor(until)


def to_point(start: int, bucket: Bucket) -> Point:
    """The answer's ``(t, avg, max)`` of one bucket: ``avg`` rounded to :data:`AVG_DIGITS`."""
    return (start, round(bucket[2] / bucket[3], AVG_DIGITS), bucket[1])


def combine(a: Bucket, b: Bucket) -> Bucket:
    """The bucket of the samples of ``a`` and ``b`` together."""
    return (min(a[0], b[0]), max(a[1], b[1]), a[2] + b[2], a[3] + b[3])


def rollup(buckets: Mapping[int, Bucket], step: int) -> dict[int, Bucket]:
    """Roll buckets up into ``step``-second buckets, keyed by start, in time order.

    ``rollup(fine, coarse.step)`` is what the coarse tier holds for every coarse
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


class SeriesState:
    """One room's online count over time, in every tier of a :class:`Resolution` table.

    Feed it with :meth:`record` (or :meth:`merge` for a batch), drop old buckets
    with :meth:`expire`, read it with :meth:`query`, store it with
    :meth:`to_dict`. Not thread-safe; one writer per room (DESIGN.md picks one
    statsvr node per room).
    """

    __slots__ = ("_buckets", "_last", "_tiers")

    def __init__(self, tiers: Iterable[Resolution] = DEFAULT_TIERS) -> None:
        self._tiers = validate_tiers(tiers)
        # One dict per tier, bucket start -> bucket, always in ascending key order
        # (record() only ever appends a newer key; from_dict() sorts), so expiry
        # pops from the front.
        self._buckets: tuple[dict[int, Bucket], ...] = tuple({} for _ in self._tiers)
        self._last: float | None = None

    # -- reading the state -------------------------------------------------------

    @property
    def tiers(self) -> tuple[Resolution, ...]:
        """The tier table, finest first."""
        return self._tiers

    @property
    def last(self) -> float | None:
        """Time of the newest sample taken, or ``None`` before the first."""
        return self._last

    def buckets(self, step: int) -> dict[int, Bucket]:
        """A copy of the buckets of the tier with this ``step``, keyed by start, oldest first.

        Raises :class:`KeyError` for a step that is not in the table.
        """
        for tier, buckets in zip(self._tiers, self._buckets, strict=True):
            if tier.step == step:
                return dict(buckets)
        raise KeyError(step)

    def __len__(self) -> int:
        """Buckets held over all tiers."""
        return sum(len(buckets) for buckets in self._buckets)

    def __repr__(self) -> str:
        sizes = ", ".join(
            f"{tier.step}s:{len(buckets)}"
            for tier, buckets in zip(self._tiers, self._buckets, strict=True)
        )
        return f"SeriesState(last={self._last!r}, buckets=[{sizes}])"

    def due(self, now: float, every: float = SAMPLE_EVERY) -> bool:
        """Whether a new sample is due at ``now``: none yet, or ``every`` s since the last."""
        return self._last is None or now - self._last >= every

    # -- writing -------------------------------------------------------------------

    def record(self, t: float, online: int) -> bool:
        """Add the sample ``online`` at time ``t`` to its bucket in every tier.

        A time exactly on a bucket boundary (``t == k * step``) belongs to the bucket
        that starts there. Returns ``False`` and changes nothing when ``t`` is not
        newer than the last sample taken (a replay or a clock step back). Opening a
        new bucket drops the buckets of that tier that fell out of its retention as
        seen from ``t``, so memory stays bounded even if :meth:`expire` is never
        called. Raises :class:`ValueError` for a non-finite ``t`` or a negative or
        non-integer ``online``.
        """
        t = _finite("t", t)
        if not _is_int(online) or online < 0:
            raise ValueError(f"online must be a non-negative integer, not {online!r}")
        if self._last is not None and t <= self._last:
            return False
        self._last = t
        for tier, buckets in zip(self._tiers, self._buckets, strict=True):
            start = tier.start(t)
            have = buckets.get(start)
            if have is None:
                buckets[start] = (online, online, online, 1)
                self._trim(buckets, tier.horizon(t))
            else:
                buckets[start] = (
                    min(have[0], online),
                    max(have[1], online),
                    have[2] + online,
                    have[3] + 1,
                )
        return True

    def merge(self, samples: Iterable[tuple[float, int]]) -> int:
        """Record a batch of ``(t, online)`` samples in time order; returns how many were taken.

        The batch is sorted by time first, so it may come in any order; samples not
        newer than the newest already taken (including repeats within the batch) are
        skipped, which makes replaying a batch harmless.
        """
        taken = 0
        for t, online in sorted(samples, key=lambda sample: sample[0]):
            if self.record(t, online):
                taken += 1
        return taken

    def expire(self, now: float) -> int:
        """Drop every bucket that fell out of its tier's retention at ``now``; returns how many.

        This is the "rollup" step of the design: since each sample already went into
        every tier, dropping a fine bucket leaves its data only in the coarser ones.
        A later sample older than ``now`` is still taken; :meth:`query` hides what is
        past retention either way.
        """
        now = _finite("now", now)
        dropped = 0
        for tier, buckets in zip(self._tiers, self._buckets, strict=True):
            dropped += self._trim(buckets, tier.horizon(now))
        return dropped

    @staticmethod
    def _trim(buckets: dict[int, Bucket], horizon: int) -> int:
        dropped = 0
        while buckets:
            oldest = next(iter(buckets))
            if oldest >= horizon:
                break
            del buckets[oldest]
            dropped += 1
        return dropped

    # -- querying ------------------------------------------------------------------

    def query(self, since: float, until: float, now: float) -> tuple[int, list[Point]]:
        """The series from ``since`` to ``until`` (Unix s) as seen at ``now``: ``(step, points)``.

        * **Step.** The finest tier whose retention reaches back to ``since``
          (``since >= now - retention``); if none does, ``since`` is clamped to
          ``now - retention`` of the coarsest tier and that tier answers. A
          ``since`` in the future picks the finest tier. (:func:`choose_tier`,
          the rule the store-backed series uses too.)
        * **Points.** ``(t, avg, max)`` for every bucket of that tier that overlaps
          ``[since, until]`` (its start ``t`` is in ``[start of since's bucket,
          until]``) and is still within retention at ``now``, oldest first. ``avg``
          is ``sum / count`` rounded to :data:`AVG_DIGITS` places. Buckets with no
          sample are omitted, not zero-filled. At most ``keep`` points
          (1 440 / 2 016 / 2 160 with the default table).
        * ``since > until`` (after clamping) answers no points with the step
          ``since`` picks. ``until`` is not clamped to ``now``: there are simply no
          buckets after the newest sample.

        ``now`` should not be older than the newest sample: buckets that
        :meth:`record` already dropped relative to a newer sample do not come back.
        Raises :class:`ValueError` for a non-finite argument; the HTTP layer is
        expected to validate its parameters before.
        """
        index, low, high = query_window(self._tiers, since, until, now)
        points = [
            to_point(start, bucket)
            for start, bucket in self._buckets[index].items()
            if low <= start <= high
        ]
        return self._tiers[index].step, points

    # -- storage ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The whole state as plain data for msgpack or JSON.

        ``{"v": 1, "tiers": [[step, retention], ...], "last": t | None,
        "buckets": [[[start, min, max, sum, count], ...] per tier]}``: integer keys
        become lists (msgpack maps with int keys do not survive JSON), buckets
        oldest first. With the default table that is at most 5 616 buckets, about
        100 KB of msgpack for a room with a full 90 days.
        """
        return {
            "v": FORMAT_VERSION,
            "tiers": [[tier.step, tier.retention] for tier in self._tiers],
            "last": self._last,
            "buckets": [
                [[start, *bucket] for start, bucket in buckets.items()] for buckets in self._buckets
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any],
                  tiers: Iterable[Resolution] | None = None) -> SeriesState:
        """Rebuild a state from :meth:`to_dict`'s output (lists or tuples both accepted).

        The state keeps the tier table it was stored with. When ``tiers`` is given
        and differs from the stored table, raises :class:`ValueError` (finer data
        cannot be rebuilt from coarser; start a new series instead). Malformed data
        (wrong version, unaligned or duplicate bucket starts, impossible buckets)
        raises :class:`ValueError`. Buckets past retention relative to ``last``
        are dropped on load, so the memory bound holds for any input.
        """
        if not isinstance(data, Mapping) or data.get("v") != FORMAT_VERSION:
            raise ValueError(f"not a version {FORMAT_VERSION} series")
        pairs = data.get("tiers")
        if not isinstance(pairs, list | tuple) or not all(
            isinstance(pair, list | tuple) and len(pair) == 2 for pair in pairs
        ):
            raise ValueError("malformed series: tiers must be [[step, retention], ...]")
        stored = validate_tiers(Resolution(step, retention) for step, retention in pairs)
        if tiers is not None and validate_tiers(tiers) != stored:
            raise ValueError("the stored series was built with another tier table")
        state = cls(stored)
        last = data.get("last")
        if last is not None:
            state._last = _finite("last", last)
        rows = data.get("buckets")
        if not isinstance(rows, list | tuple) or len(rows) != len(stored):
            raise ValueError("malformed series: need one bucket list per tier")
        for tier, buckets, tier_rows in zip(stored, state._buckets, rows, strict=True):
            if not isinstance(tier_rows, list | tuple):
                raise ValueError(f"malformed buckets of the {tier.step}s tier")
            loaded: dict[int, Bucket] = {}
            for row in tier_rows:
                start, bucket = cls._bucket_from_row(tier, row)
                if start in loaded:
                    raise ValueError(f"bucket {start} of the {tier.step}s tier appears twice")
                if state._last is None or start > tier.start(state._last):
                    raise ValueError(f"bucket {start} of the {tier.step}s tier is after 'last'")
                loaded[start] = bucket
            for start in sorted(loaded):
                buckets[start] = loaded[start]
            if state._last is not None:
                cls._trim(buckets, tier.horizon(state._last))
        return state

    @staticmethod
    def _bucket_from_row(tier: Resolution, row: object) -> tuple[int, Bucket]:
        if not isinstance(row, list | tuple) or len(row) != 5 or not all(map(_is_int, row)):
            raise ValueError(f"malformed bucket of the {tier.step}s tier: {row!r}")
        start, low, high, total, count = row
        if start % tier.step:
            raise ValueError(f"bucket {start} is not aligned to the {tier.step}s step")
        if count < 1 or not 0 <= low <= high or not low * count <= total <= high * count:
            raise ValueError(f"impossible bucket {row!r} in the {tier.step}s tier")
        return start, (low, high, total, count)
