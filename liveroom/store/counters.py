"""A room's likes and gifts in the store (:class:`Counters`), per broadcast:
likes totals and the likes series, each giver's score, the gift total and
the top givers.

One of the store's interfaces (:mod:`.base`): every engine implements it, and
every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

GIFT_VALUE_MAX = 10**12
"""The largest value of one gift (:meth:`Counters.add_gift`)."""
RANKING_MAX = 100
"""The most givers one :meth:`Counters.ranking` lists."""
RANKING_KEPT = 100
"""Givers an ended broadcast's archive keeps (``PastBroadcast.ranking``)."""
RENEWALS_KEPT = 8
"""A broadcast's renewed epochs (``Log.renew_epoch``, the newest) that its
end records beside the last: taps acknowledged in one of them and written
after the end go to the ended broadcast (:meth:`Counters.add_likes`); taps
of an older one, to the next. Renewals are rare (a store that lost part of a
log), and taps wait at most a few flushes."""
SCORE_EXACT = 2**53
"""Scores and totals are exact below this (the redis engine ranks with a
sorted set, whose scores are doubles); no broadcast comes near it (9 000
gifts of :data:`GIFT_VALUE_MAX` from one giver)."""


@dataclass(frozen=True, slots=True)
class GiftRank:
    """A giver's place after a gift, in the room's current broadcast."""

    rank: int
    """1 for the top giver (see :meth:`Counters.ranking` for ties)."""
    score: int
    """The giver's sum of gift values in this broadcast."""
    total: int
    """The room's gift total in this broadcast, this gift included."""


@dataclass(frozen=True, slots=True)
class Ranking:
    """The top givers of a room's current broadcast."""

    top: tuple[tuple[str, int], ...]
    """``(giver, score)``, best first."""
    total: int
    """The sum of every gift's value in the broadcast."""
    count: int
    """Gifts given in the broadcast."""


def check_taps(taps: Mapping[str, int]) -> None:
    """Raise ``ValueError`` unless every room's taps are an int of at least 1."""
    for room, n in taps.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"taps of room {room!r} must be an int of at least 1, not {n!r}")


def check_gift(value: int) -> None:
    """Raise ``ValueError`` unless ``value`` is an int in 1..:data:`GIFT_VALUE_MAX`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= GIFT_VALUE_MAX:
        raise ValueError(f"a gift's value must be an int in 1..{GIFT_VALUE_MAX}, not {value!r}")


def check_limit(limit: int) -> None:
    """Raise ``ValueError`` unless ``limit`` is an int in 1..:data:`RANKING_MAX`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= RANKING_MAX:
        raise ValueError(f"limit must be an int in 1..{RANKING_MAX}, not {limit!r}")


def bucket_start(t_ms: int, step: int) -> int:
    """The start (Unix s) of the ``step``-second bucket holding ``t_ms``: the
    rule of ``statsvr.series.Resolution.start`` on integer ms."""
    return t_ms // (1000 * step) * step


def bucket_horizon(start: int, step: int, retention: int) -> int:
    """The oldest bucket start kept when the newest is ``start``
    (``statsvr.series.Resolution.horizon``)."""
    return start - (retention // step - 1) * step


ROOT_MOVED: Final = "\x00moved"
"""The root of a likes total read while its broadcast ended: none's."""


class Counters(Protocol):
    """A room's likes and gifts, per broadcast (``Operators.end_broadcast``
    archives them and starts the next broadcast at zero).

    - **Likes** are merged by the caller: a node adds a room's taps in memory
      and hands the sum since its last flush to :meth:`add_likes`, so store
      writes do not grow with the tap rate. A room's total and its likes
      series move together, atomically per room: a reader never sees a
      partial add.
    - **Gifts** are exact: each giver's score and the room's total and count
      move together in one atomic step per gift.
    - **Expiry**: a room's totals and ranking live
      ``LogPolicy.history_ttl_ms`` after their last write, its likes series
      the longest retention of ``SERIES_RESOLUTIONS`` after its last
      add (like the online series), so a dead room's counters go.
    - Every call is one round trip (the memory engine never suspends).
    """

    async def add_likes(self, taps: Mapping[str, int], now_ms: int,
                        epochs: Mapping[str, str] | None = None, write_id: str = "") -> None:
        """Add each room's taps (an int of at least 1) to its current
        broadcast's total and to the likes series: each ``(step, retention)``
        of ``SERIES_RESOLUTIONS`` sums the taps of the ``step``-second
        bucket holding ``now_ms`` and keeps the buckets of the last
        ``retention`` seconds (relative to ``now_ms``, as
        ``StatsStore.record_online`` does). The series is the room's, by
        time: a broadcast's end does not reset it (its buckets are minutes
        of the room, whatever broadcast they fell in).

        **A tap belongs to the broadcast in which it was acknowledged.**
        ``epochs`` names, for a room, the epoch of the log in which the
        node acknowledged its taps (its snapshot's). Where that epoch is one
        a broadcast of the room ended with (``Operators.end_broadcast``
        records it), the taps go to that ended broadcast's total, as its
        archive keeps it (``PastBroadcast.likes``), not to the current one;
        an epoch the broadcast had before a renewal (``Log.renew_epoch``)
        counts as the one it ended with, for the newest
        :data:`RENEWALS_KEPT` renewals; where the epoch is the current one,
        not known (the log was lost and made anew), or the ended broadcast's
        archive is gone, to the current broadcast. The series takes them all, by time.

        **A write tried again is added once.** ``write_id`` ("": none) names
        this write: a caller that could not tell whether a write was added
        (its reply lost: ``StoreUnavailable`` after the store ran it) tries
        it again with the same name and the same taps, and a room that took
        it already takes nothing more, within ``LogPolicy.dedup_ttl_ms``
        (one key per room and name until then, on Redis).

        All rooms in one round trip (on a cluster, one per node, sent
        together); atomic per room, not across rooms. Raises ``ValueError``
        (storing nothing) for taps that are not an int of at least 1."""

    async def likes(self, rooms: Sequence[str]) -> dict[str, int]:
        """The current broadcast's likes total of each room (0 for a room with
        none, or whose counters expired), one round trip."""

    async def likes_in(self, rooms: Sequence[str]) -> dict[str, tuple[int, str]]:
        """:meth:`likes`, each with the broadcast it counts: its ``root``
        (the epoch it began with, as ``Pulled.root``); "" where the store
        cannot tell, and :data:`ROOT_MOVED` where a broadcast ended while
        the read ran (the total may be of either). A reader that noted a
        room's broadcast before the read takes a total of another for none
        of its own (a refresh whose read reached the store after ``room
        end``). The memory engine's read runs whole between two of the
        caller's steps: its root is never :data:`ROOT_MOVED`."""

    async def read_likes(self, room: str, step: int, low: int,
                         high: int) -> list[tuple[int, int]]:
        """``(bucket start, taps)`` of the ``step``-second likes buckets of
        ``room`` whose start (Unix s, like ``StatsStore.read_online``) is in
        ``[low, high]``, oldest first; buckets without taps are absent."""

    async def add_gift(self, room: str, giver: str, value: int, gift: str,
                       now_ms: int, *, event: bytes | None = None) -> GiftRank:
        """Add ``value`` (1..:data:`GIFT_VALUE_MAX`) to ``giver``'s score in
        the room's current broadcast, to the room's gift total and one to its
        gift count, atomically; return the giver's rank, score and the total.

        ``gift`` (its name) and ``now_ms`` are not stored: the store keeps
        sums, not a ledger (the caller logs or sends gifts it must keep).
        ``event``: the webhook event of the gift (``Events.ahead``'s JSON;
        ``None``: none), kept in the room's list of events (``Outbox``) in
        the same atomic step, with ``"rank"``, ``"score"`` and ``"total"``
        (as answered) added.

        Raises ``ValueError`` for a value out of range."""

    async def ranking(self, room: str, limit: int) -> Ranking:
        """The ``limit`` (1..:data:`RANKING_MAX`) top givers of the room's
        current broadcast with their scores, and its gift total and count.

        Order: score descending; givers with equal scores by name
        *descending* (code point order, which is UTF-8 byte order): the order
        of Redis's ``ZREVRANGE``, which every engine follows, so a rank is the
        same everywhere. Read-only, one round trip."""

    async def rankings(self, rooms: Sequence[str], limit: int) -> dict[str, Ranking]:
        """The :meth:`ranking` of each room with a gift in its current
        broadcast (the others absent from the answer): all rooms in one round
        trip (on a cluster, one per node, sent together). Nodes read the rooms
        their listeners poll, once a second, for the ranking in answers."""
