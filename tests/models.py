"""Reference models of rules the engines each implement (the memory engine in
Python, the redis engine in Lua): the tests hold the engines to these, and
nothing in the product runs them.

* :func:`plan_exact_update`: how a room's exact viewers set grows to its cap.
* :class:`SeriesState`: one room's online series, each sample added to its
  bucket in every resolution (the bucket rule of ``statsvr.series``), old
  buckets dropped past retention.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, NamedTuple

from liveroom.settings import VIEWERS_THRESHOLD
from statsvr.series import (
    DEFAULT_RESOLUTIONS,
    SAMPLE_EVERY,
    Bucket,
    Point,
    Resolution,
    _finite,
    _is_int,
    query_window,
    to_point,
    validate_resolutions,
)


class ExactSetUpdate(NamedTuple):
    """What to do to a room's exact set: add ``add`` to it and store ``complete``."""

    add: tuple[str, ...]
    """Uids to add to the stored set (new ones only, in first-seen order)."""
    complete: bool
    """False once the set is capped: it no longer holds every viewer."""


def plan_exact_update(
    known: Collection[str],
    complete: bool,
    uids: Iterable[str],
    threshold: int = VIEWERS_THRESHOLD,
) -> ExactSetUpdate:
    """Decide how a room's exact set grows with a batch of ``uids``.

    ``known`` is the stored set (anything with ``in`` and ``len``) and
    ``complete`` its stored flag. While the set plus the batch's new uids fit
    in ``threshold``, all new uids are added and the set stays complete. When
    they would exceed it, the set is filled up to exactly ``threshold`` (so its
    size is a floor for the figure) and marked incomplete; an incomplete set
    never grows again. ``threshold`` must be at least 0.

    In a store shared by several nodes, applying the plan must be atomic with
    reading ``known`` (e.g. one Lua script doing the same); this function is the
    rule, not the concurrency control.
    """
    if threshold < 0:
        raise ValueError("threshold must be >= 0")
    if not complete:
        return ExactSetUpdate((), False)
    room = threshold - len(known)
    new: dict[str, None] = {}
    for uid in uids:
        if uid not in known and uid not in new:
            if len(new) >= room:
                return ExactSetUpdate(tuple(new), False)
            new[uid] = None
    return ExactSetUpdate(tuple(new), len(known) <= threshold)


# -- the online series ----------------------------------------------------------

FORMAT_VERSION: Final = 1
"""The ``"v"`` of :meth:`SeriesState.to_dict`; :meth:`SeriesState.from_dict` refuses others."""


class SeriesState:
    """One room's online count over time, in every resolution of a :class:`Resolution` table.

    Feed it with :meth:`record` (or :meth:`merge` for a batch), drop old buckets
    with :meth:`expire`, read it with :meth:`query`, store it with
    :meth:`to_dict`. Not thread-safe; one writer per room (docs/design.md picks one
    statsvr node per room).
    """

    __slots__ = ("_buckets", "_last", "_resolutions")

    def __init__(self, resolutions: Iterable[Resolution] = DEFAULT_RESOLUTIONS) -> None:
        self._resolutions = validate_resolutions(resolutions)
        # One dict per resolution, bucket start -> bucket, always in ascending key order
        # (record() only ever appends a newer key; from_dict() sorts), so expiry
        # pops from the front.
        self._buckets: tuple[dict[int, Bucket], ...] = tuple({} for _ in self._resolutions)
        self._last: float | None = None

    # -- reading the state -------------------------------------------------------

    @property
    def resolutions(self) -> tuple[Resolution, ...]:
        """The resolution table, finest first."""
        return self._resolutions

    @property
    def last(self) -> float | None:
        """Time of the newest sample taken, or ``None`` before the first."""
        return self._last

    def buckets(self, step: int) -> dict[int, Bucket]:
        """A copy of the buckets of the resolution with this ``step``, keyed by start, oldest first.

        Raises :class:`KeyError` for a step that is not in the table.
        """
        for resolution, buckets in zip(self._resolutions, self._buckets, strict=True):
            if resolution.step == step:
                return dict(buckets)
        raise KeyError(step)

    def __len__(self) -> int:
        """Buckets held over all resolutions."""
        return sum(len(buckets) for buckets in self._buckets)

    def __repr__(self) -> str:
        sizes = ", ".join(
            f"{resolution.step}s:{len(buckets)}"
            for resolution, buckets in zip(self._resolutions, self._buckets, strict=True)
        )
        return f"SeriesState(last={self._last!r}, buckets=[{sizes}])"

    def due(self, now: float, every: float = SAMPLE_EVERY) -> bool:
        """Whether a new sample is due at ``now``: none yet, or ``every`` s since the last."""
        return self._last is None or now - self._last >= every

    # -- writing -------------------------------------------------------------------

    def record(self, t: float, online: int) -> bool:
        """Add the sample ``online`` at time ``t`` to its bucket in every resolution.

        A time exactly on a bucket boundary (``t == k * step``) belongs to the bucket
        that starts there. Returns ``False`` and changes nothing when ``t`` is not
        newer than the last sample taken (a replay or a clock step back). Opening a
        new bucket drops the buckets of that resolution that fell out of its retention as
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
        for resolution, buckets in zip(self._resolutions, self._buckets, strict=True):
            start = resolution.start(t)
            have = buckets.get(start)
            if have is None:
                buckets[start] = (online, online, online, 1)
                self._trim(buckets, resolution.horizon(t))
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
        """Drop every bucket past its resolution's retention at ``now``; returns how many.

        This is the "rollup" step of the design: since each sample already went into
        every resolution, dropping a fine bucket leaves its data only in the coarser ones.
        A later sample older than ``now`` is still taken; :meth:`query` hides what is
        past retention either way.
        """
        now = _finite("now", now)
        dropped = 0
        for resolution, buckets in zip(self._resolutions, self._buckets, strict=True):
            dropped += self._trim(buckets, resolution.horizon(now))
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

        * **Step.** The finest resolution whose retention reaches back to ``since``
          (``since >= now - retention``); if none does, ``since`` is clamped to
          ``now - retention`` of the coarsest resolution and that resolution answers. A
          ``since`` in the future picks the finest resolution. (:func:`choose_resolution`,
          the rule the store-backed series uses too.)
        * **Points.** ``(t, avg, max)`` for every bucket of that resolution that overlaps
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
        index, low, high = query_window(self._resolutions, since, until, now)
        points = [
            to_point(start, bucket)
            for start, bucket in self._buckets[index].items()
            if low <= start <= high
        ]
        return self._resolutions[index].step, points

    # -- storage ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The whole state as plain data for msgpack or JSON.

        ``{"v": 1, "resolutions": [[step, retention], ...], "last": t | None,
        "buckets": [[[start, min, max, sum, count], ...] per resolution]}``: integer keys
        become lists (msgpack maps with int keys do not survive JSON), buckets
        oldest first. With the default table that is at most 5 616 buckets, about
        100 KB of msgpack for a room with a full 90 days.
        """
        return {
            "v": FORMAT_VERSION,
            "resolutions": [[r.step, r.retention] for r in self._resolutions],
            "last": self._last,
            "buckets": [
                [[start, *bucket] for start, bucket in buckets.items()] for buckets in self._buckets
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any],
                  resolutions: Iterable[Resolution] | None = None) -> SeriesState:
        """Rebuild a state from :meth:`to_dict`'s output (lists or tuples both accepted).

        The state keeps the resolution table it was stored with. When ``resolutions`` is given
        and differs from the stored table, raises :class:`ValueError` (finer data
        cannot be rebuilt from coarser; start a new series instead). Malformed data
        (wrong version, unaligned or duplicate bucket starts, impossible buckets)
        raises :class:`ValueError`. Buckets past retention relative to ``last``
        are dropped on load, so the memory bound holds for any input.
        """
        if not isinstance(data, Mapping) or data.get("v") != FORMAT_VERSION:
            raise ValueError(f"not a version {FORMAT_VERSION} series")
        pairs = data.get("resolutions")
        if not isinstance(pairs, list | tuple) or not all(
            isinstance(pair, list | tuple) and len(pair) == 2 for pair in pairs
        ):
            raise ValueError("malformed series: resolutions must be [[step, retention], ...]")
        stored = validate_resolutions(Resolution(step, retention) for step, retention in pairs)
        if resolutions is not None and validate_resolutions(resolutions) != stored:
            raise ValueError("the stored series was built with another resolution table")
        state = cls(stored)
        last = data.get("last")
        if last is not None:
            state._last = _finite("last", last)
        rows = data.get("buckets")
        if not isinstance(rows, list | tuple) or len(rows) != len(stored):
            raise ValueError("malformed series: need one bucket list per resolution")
        for resolution, buckets, resolution_rows in zip(stored, state._buckets, rows, strict=True):
            if not isinstance(resolution_rows, list | tuple):
                raise ValueError(f"malformed buckets of the {resolution.step}s resolution")
            loaded: dict[int, Bucket] = {}
            for row in resolution_rows:
                start, bucket = cls._bucket_from_row(resolution, row)
                if start in loaded:
                    raise ValueError(
                        f"bucket {start} of the {resolution.step}s resolution appears twice")
                if state._last is None or start > resolution.start(state._last):
                    raise ValueError(
                        f"bucket {start} of the {resolution.step}s resolution is after 'last'")
                loaded[start] = bucket
            for start in sorted(loaded):
                buckets[start] = loaded[start]
            if state._last is not None:
                cls._trim(buckets, resolution.horizon(state._last))
        return state

    @staticmethod
    def _bucket_from_row(resolution: Resolution, row: object) -> tuple[int, Bucket]:
        if not isinstance(row, list | tuple) or len(row) != 5 or not all(map(_is_int, row)):
            raise ValueError(f"malformed bucket of the {resolution.step}s resolution: {row!r}")
        start, low, high, total, count = row
        if start % resolution.step:
            raise ValueError(f"bucket {start} is not aligned to the {resolution.step}s step")
        if count < 1 or not 0 <= low <= high or not low * count <= total <= high * count:
            raise ValueError(f"impossible bucket {row!r} in the {resolution.step}s resolution")
        return start, (low, high, total, count)
