"""Sender rate limits: multi-level time-bucket windows.

A window allows ``limit`` accepted sends per ``seconds``. It is counted in
buckets of ``bucket_ms`` (a tenth of windows under a minute, a sixtieth of longer
ones), so a check reads a bounded number of counters whatever the window's
length (a day-long window: 60 buckets of 24 minutes), and the window slides at
bucket granularity: a send at time ``t`` counts the buckets whose index is in
``(t // bucket_ms - buckets, t // bucket_ms]``.

The engines count these buckets under the room's keys, inside the append's one
round trip; only accepted sends count. The redis engine does it in
``store/redis/lua/log_append.lua``; the memory engine, and the tests' reference, with the
functions below over a plain dict of bucket counts (:data:`Counts`), which
follow the same rules:

- **Allowed** at ``now`` iff, for every window, the counts of the buckets it
  reads sum to less than its ``limit``.
- **Freed** at ``(j + buckets) * bucket_ms`` for a full window, ``j`` the
  smallest bucket index such that dropping every bucket up to ``j`` brings the
  sum below the limit: from then on the window no longer reads bucket ``j``.
  A refused send waits for the latest of its full windows (``retry_after``).
- **Pruned**: a bucket no window reads at ``now`` or later goes. Sends are
  timed by the proxy's clock; a clock that goes back sees the buckets pruned
  meanwhile as empty (it may allow a little more, never less).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from .errors import RateLimited

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


@dataclass(frozen=True, slots=True)
class Window:
    limit: int
    """Accepted sends allowed within the window."""
    seconds: int
    """The window's length."""

    def __post_init__(self) -> None:
        if self.limit < 1 or self.seconds < 1:
            raise ValueError(f"a rate window needs a positive limit and length: {self}")

    def __reduce__(self) -> tuple[type[Window], tuple[int, int]]:
        # Pickled with the settings a node hands its workers: compiled, a
        # frozen class refuses the field-by-field restore pickle does.
        return Window, (self.limit, self.seconds)

    @property
    def buckets(self) -> int:
        return 10 if self.seconds < 60 else 60

    @property
    def bucket_ms(self) -> int:
        return self.seconds * 1000 // self.buckets

    def __str__(self) -> str:
        for unit, size in reversed(_UNITS.items()):
            if self.seconds % size == 0:
                n = self.seconds // size
                return f"{self.limit}/{'' if n == 1 else n}{unit}"
        return f"{self.limit}/{self.seconds}s"  # pragma: no cover - 's' always divides


@dataclass(frozen=True, slots=True)
class RateLimits:
    """The sender limits of every room."""

    per_uid: tuple[Window, ...] = (Window(5, 1), Window(30, 60), Window(300, 3600))
    """Windows counted per (room, uid); all must allow a send."""
    room_per_second: int = 0
    """Accepted sends per second in one room, all senders together; 0 is off."""

    def __reduce__(self) -> tuple[type[RateLimits], tuple[tuple[Window, ...], int]]:
        return RateLimits, (self.per_uid, self.room_per_second)  # (see Window's)

    @property
    def off(self) -> bool:
        return not self.per_uid and not self.room_per_second

    @property
    def room_windows(self) -> tuple[Window, ...]:
        """The room's cap as windows: ``Window(room_per_second, 1)``, or none when off."""
        return (Window(self.room_per_second, 1),) if self.room_per_second > 0 else ()


def parse_windows(text: str) -> tuple[Window, ...]:
    """``"5/s,30/m,300/h"`` (also ``10/5m``, ``1000/d``); ``""`` or ``"off"`` for none."""
    text = text.strip()
    if text in ("", "off", "none"):
        return ()
    windows = []
    for part in text.split(","):
        limit, sep, span = part.strip().partition("/")
        unit = span[-1:] if span[-1:] in _UNITS else ""
        count = span[:len(span) - len(unit)] or "1"
        if not sep or not unit or not limit.isdigit() or not count.isdigit():
            raise ValueError(f"bad rate window {part.strip()!r}: write LIMIT/[N]UNIT "
                             f"with UNIT one of s, m, h, d (e.g. 5/s, 30/m, 100/10m)")
        windows.append(Window(int(limit), int(count) * _UNITS[unit]))
    return tuple(sorted(windows, key=lambda w: w.seconds))


# -- counting in buckets ----------------------------------------------------------

Counts = MutableMapping[tuple[int, int], int]
"""Accepted sends of one sender (or one room): ``(window seconds, bucket index)``
to the sends counted in that bucket. Windows of the same length share buckets."""


def bucket_of(window: Window, now_ms: int) -> int:
    """The index of the bucket of ``window`` that ``now_ms`` falls in."""
    return now_ms // window.bucket_ms


IN_FLIGHT_MS: Final = 1_000
"""When a window held only by sends in flight (``held``) frees, from now: as
they end, a round trip or so later (a retry hint; whole seconds anyway)."""


def freed_at(counts: Mapping[tuple[int, int], int], window: Window, now_ms: int,
             held: int = 0) -> int | None:
    """``None`` when ``window`` allows one more send at ``now_ms``; else the
    time (ms) it first allows one again, if nothing else is accepted meanwhile
    (always later than ``now_ms``). ``held`` sends in flight, not counted yet,
    take places too (see ``proxy/sends/new_rooms.py``)."""
    cur = bucket_of(window, now_ms)
    read = sorted((j, n) for (seconds, j), n in counts.items()
                  if seconds == window.seconds and cur - window.buckets < j <= cur)
    total = sum(n for _, n in read) + held
    if total < window.limit:
        return None
    for j, n in read:
        total -= n
        if total < window.limit:
            return (j + window.buckets) * window.bucket_ms
    if held:
        return now_ms + IN_FLIGHT_MS
    raise AssertionError("unreachable: with every bucket dropped the sum is 0 < limit")


def refused_until(counts: Mapping[tuple[int, int], int], windows: Sequence[Window],
                  now_ms: int, held: int = 0) -> tuple[Window, int] | None:
    """``None`` when every window allows a send at ``now_ms``; else the full
    window that frees last, and when it does (ms). ``held``: as in :func:`freed_at`."""
    worst: tuple[Window, int] | None = None
    for window in windows:
        free = freed_at(counts, window, now_ms, held)
        if free is not None and (worst is None or free > worst[1]):
            worst = window, free
    return worst


def count_send(counts: Counts, windows: Sequence[Window], now_ms: int) -> None:
    """Count one accepted send at ``now_ms`` in every window (once per length)."""
    for seconds, cur in {(w.seconds, bucket_of(w, now_ms)) for w in windows}:
        counts[seconds, cur] = counts.get((seconds, cur), 0) + 1


def prune(counts: Counts, windows: Sequence[Window], now_ms: int) -> None:
    """Drop the buckets no window of their length reads at ``now_ms`` or
    later, whether this send counts in such a window or not: a window this
    send does not know (slow mode that another node applies already, or
    this one no longer) keeps what it counted until it could read it no
    more. A sender's counts stay bounded by its windows' buckets, one set a
    length used within the key's life. ``windows`` (this send's) need not
    name every length counted."""
    oldest: dict[int, int] = {w.seconds: bucket_of(w, now_ms) - w.buckets + 1
                              for w in windows}
    for s, _ in counts:
        if s not in oldest:
            buckets = 10 if s < 60 else 60
            oldest[s] = now_ms // (s * 1000 // buckets) - buckets + 1
    for key in [(s, j) for s, j in counts if j < oldest[s]]:
        del counts[key]


Tally = list[int]
"""The accepted sends of one sender (or of one room, for its cap) as the
memory engine keeps them: the counts :data:`Counts` holds, by the same rules
(:func:`refused_until`, :func:`count_send` and :func:`prune` are the
reference), in one flat list of ints so that a sender costs the heap one
object (the cyclic collector visits it, never its numbers), however many
windows it is counted in::

    [expires_ms,
     seconds, total, n, bucket, count, ..., bucket, count,   # one window length
     seconds, total, n, ...]                                  # the next

Per window length a run of its ``n`` non-empty buckets, oldest first, and
``total`` their sum: a check drops the buckets that left every window from a
run's front and reads a sum, a count adds to the last bucket or appends one.
Nothing is allocated on that path but a bucket appended in place. A window
that is full answers by :func:`refused_until` over :func:`tally_counts` (the
refusal's path builds a dict). Lengths a send does not name keep their
buckets (slow mode one node applies and another not yet: :func:`prune`'s
rule); a tally holds at most one run per length counted in its life, each of
at most that length's ``buckets`` buckets (more only while a clock gone back
reads older ones). ``expires_ms``: when its owner may forget it
(:func:`horizon_ms` after its last count, on the store's clock)."""


def new_tally() -> Tally:
    return [0]


def _bucket_ms(seconds: int) -> int:
    return seconds * 1000 // (10 if seconds < 60 else 60)  # Window.bucket_ms's rule


def _run_of(tally: Tally, seconds: int) -> int:
    """The index of the run of ``seconds`` in ``tally``; -1 when it has none."""
    i, end = 1, len(tally)
    while i < end:
        if tally[i] == seconds:
            return i
        i += 3 + 2 * tally[i + 2]
    return -1


def _read(tally: Tally, i: int, now_ms: int) -> int:
    """What a window reads at ``now_ms`` in the run at ``i`` (its buckets not
    dropped, less those after ``now_ms``'s own: a clock gone back does not
    read them)."""
    cur = now_ms // _bucket_ms(tally[i])
    total = tally[i + 1]
    k = i + 1 + 2 * tally[i + 2]
    while k > i + 1 and tally[k] > cur:
        total -= tally[k + 1]
        k -= 2
    return total


def tally_drop_unread(tally: Tally, now_ms: int) -> None:
    """:func:`prune` at ``now_ms``: drop the buckets no window of their
    length reads at ``now_ms`` or later."""
    i = 1
    while i < len(tally):
        seconds, n = tally[i], tally[i + 2]
        last = now_ms // _bucket_ms(seconds) - (10 if seconds < 60 else 60)
        first = k = i + 3
        end = first + 2 * n
        dropped = 0
        while k < end and tally[k] <= last:
            dropped += tally[k + 1]
            k += 2
        if k > first:
            del tally[first:k]
            tally[i + 1] -= dropped
            n -= (k - first) // 2
            tally[i + 2] = n
        i += 3 + 2 * n


def tally_refused(tally: Tally, windows: Sequence[Window], now_ms: int,
                  held: int = 0) -> tuple[Window, int] | None:
    """:func:`refused_until` of the tally's counts after :func:`prune` at ``now_ms``."""
    tally_drop_unread(tally, now_ms)
    for window in windows:
        i = _run_of(tally, window.seconds)
        if (0 if i < 0 else _read(tally, i, now_ms)) + held >= window.limit:
            return refused_until(tally_counts(tally), windows, now_ms, held)
    return None


def tally_count(tally: Tally, windows: Sequence[Window], now_ms: int) -> None:
    """:func:`count_send`: one send at ``now_ms``, once per window length."""
    for w in range(len(windows)):
        seconds = windows[w].seconds
        v = 0
        while v < w and windows[v].seconds != seconds:
            v += 1
        if v < w:
            continue  # two windows of one length count in one run, once
        cur = now_ms // _bucket_ms(seconds)
        i = _run_of(tally, seconds)
        if i < 0:
            tally += (seconds, 1, 1, cur, 1)
            continue
        tally[i + 1] += 1
        k = i + 1 + 2 * tally[i + 2]  # the run's last bucket
        if k > i + 1 and tally[k] == cur:
            tally[k + 1] += 1
            continue
        while k > i + 1 and tally[k] > cur:  # a clock gone back: its place in order
            k -= 2
        if k > i + 1 and tally[k] == cur:
            tally[k + 1] += 1
        else:
            tally.insert(k + 2, 1)
            tally.insert(k + 2, cur)
            tally[i + 2] += 1


def tally_empty(tally: Tally) -> bool:
    """Whether the tally counts no send (its runs all empty)."""
    i = 1
    while i < len(tally):
        if tally[i + 2]:
            return False
        i += 3
    return True


def tally_counts(tally: Tally) -> dict[tuple[int, int], int]:
    """The tally's counts as :data:`Counts` holds them."""
    counts = {}
    i = 1
    while i < len(tally):
        seconds, n = tally[i], tally[i + 2]
        for k in range(i + 3, i + 3 + 2 * n, 2):
            counts[seconds, tally[k]] = tally[k + 1]
        i += 3 + 2 * n
    return counts


class SenderTally(Protocol):
    """A sender's (or a room's) accepted sends as the memory engine counts
    them: :class:`ListTally`, or its C twin ``liveroom.tally_c.CTally``
    where the install built it (:func:`sender_tally`)."""

    expires_ms: int
    """When its owner may forget it (:func:`horizon_ms` after its last count,
    on the store's clock)."""

    def refused(self, windows: Sequence[Window], now_ms: int,
                held: int = 0) -> tuple[Window, int] | None:
        """:func:`tally_refused`."""

    def count(self, windows: Sequence[Window], now_ms: int) -> None:
        """:func:`tally_count`."""

    def counts(self) -> dict[tuple[int, int], int]:
        """:func:`tally_counts`."""


class ListTally:
    """A :data:`Tally` list and the functions above as methods: the pure
    build's :class:`SenderTally`, and the reference of the C one."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs = new_tally()

    @property
    def expires_ms(self) -> int:
        return self.runs[0]

    @expires_ms.setter
    def expires_ms(self, value: int) -> None:
        self.runs[0] = value

    def refused(self, windows: Sequence[Window], now_ms: int,
                held: int = 0) -> tuple[Window, int] | None:
        return tally_refused(self.runs, windows, now_ms, held)

    def count(self, windows: Sequence[Window], now_ms: int) -> None:
        tally_count(self.runs, windows, now_ms)

    def counts(self) -> dict[tuple[int, int], int]:
        return tally_counts(self.runs)


def sender_tally() -> Callable[[], SenderTally]:
    """The senders' tally of this build: at C level (``liveroom.tally_c``,
    Cython) where the install built it (``pip install .``), else
    :class:`ListTally`: the same counts, held equal by
    ``tests/hostile/test_rate_limits.py``."""
    try:
        from .tally_c import CTally
    except ImportError:
        return ListTally
    return CTally


def horizon_ms(windows: Sequence[Window]) -> int:
    """How long counts matter after the last accepted send: the longest window
    plus one of its buckets (0 without windows)."""
    longest = 0
    for w in windows:  # a loop, not max() over a generator: every send asks
        longest = max(longest, w.seconds * 1000 + w.bucket_ms)
    return longest


def span(seconds: int) -> str:
    """A window's length for people: ``1 s``, ``90 s``, ``1 min``, ``2 h``, ``1 d``."""
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def refusal(room: str, uid: str | None, window: Window, free_ms: int,
            now_ms: int) -> RateLimited:
    """The error of a send refused at ``now_ms`` by ``window`` (of ``uid``, or of
    the room when ``uid`` is None), which frees at ``free_ms``."""
    retry_after = (free_ms - now_ms) / 1000
    limit = f"over {window.limit} sends per {span(window.seconds)}"
    what = (f"uid {uid} {limit} in room {room}" if uid is not None
            else f"room {room} {limit} from all senders")
    return RateLimited(f"{what}; retry in {retry_after:g} s", retry_after=retry_after)


class UidWindows:
    """Per-uid windows over a node's requests of one kind (a like's taps, a
    recall), kept in memory: each a fixed window (``limit`` per ``seconds``,
    counted from the window's start), for requests or for the units they
    carry (taps; ``what`` names both in refusals). Kept for the uids seen in
    the last two of the longest window (one table for the window now, one
    for the one before: a uid's state moves to the current table when it
    asks, and the older table is dropped whole at each turn), and for at
    most ``uids_max`` uids at once. One more evicts
    a uid's state rather than refuse anyone: one not seen in this turn if
    there is one, else the newest of this turn (so a flood of made-up uids
    evicts its own, and the uids that tapped before it keep their windows).
    An evicted uid starts its windows afresh: at worst it taps a window's
    worth more, never less."""

    def __init__(self, requests: Sequence[Window], taps: Sequence[Window],
                 uids_max: int, what: tuple[str, str, str] = ("requests", "taps",
                                                              "like request")) -> None:
        self.what = what
        """How refusals name a request, a unit, and a request in slow mode."""
        self.requests = tuple(requests)
        self.taps = tuple(taps)
        self.uids_max = uids_max
        longest = max((w.seconds for w in (*self.requests, *self.taps)), default=1)
        self._turn_ms = longest * 1000
        self._turn = -1
        self._now: dict[str, list[int]] = {}
        self._before: dict[str, list[int]] = {}
        self.evicted = 0
        """Uids whose state made way for another's (the table was full)."""

    def __len__(self) -> int:
        return len(self._now) + len(self._before)

    def take(self, room: str, uid: str, count: int, now_ms: int, slow: int = 0) -> None:
        """Count one request of ``count`` taps by ``uid``, or raise
        :class:`RateLimited` (nothing counted) with the wait. ``slow``: the
        room's slow mode (seconds; 0: none), where a uid's like requests are
        paced as its messages are, one per ``slow`` seconds (its taps
        batched in them)."""
        turn = now_ms // self._turn_ms
        if turn != self._turn:
            self._before = self._now if turn == self._turn + 1 else {}
            self._now = {}
            self._turn = turn
        state = self._now.get(uid)
        if state is None:
            state = self._before.pop(uid, None)
            if state is None:
                if len(self._now) + len(self._before) >= self.uids_max:
                    (self._before or self._now).popitem()  # O(1); see the docstring
                    self.evicted += 1
                state = [0] * (2 * (len(self.requests) + len(self.taps)) + 1)
            self._now[uid] = state
        if slow:
            wait_ms = state[-1] + slow * 1000 - now_ms
            if state[-1] and wait_ms > 0:
                raise RateLimited(f"room {room} is in slow mode: one {self.what[2]} per "
                                  f"{span(slow)} per uid; retry in {wait_ms / 1000:g} s",
                                  retry_after=wait_ms / 1000)
        at = 0
        for windows, cost in ((self.requests, 1), (self.taps, count)):
            for window in windows:
                start = now_ms // (window.seconds * 1000)
                used = state[at + 1] if state[at] == start else 0
                if used + cost > window.limit:
                    wait = ((start + 1) * window.seconds * 1000 - now_ms) / 1000
                    what = self.what[0] if windows is self.requests else self.what[1]
                    raise RateLimited(
                        f"uid {uid} over {window.limit} {what} per {span(window.seconds)} "
                        f"in room {room}; retry in {wait:g} s", retry_after=wait)
                at += 2
        at = 0
        for windows, cost in ((self.requests, 1), (self.taps, count)):
            for window in windows:
                start = now_ms // (window.seconds * 1000)
                if state[at] != start:
                    state[at], state[at + 1] = start, 0
                state[at + 1] += cost
                at += 2
        state[-1] = now_ms
