"""What operators (and the automatic vip rule) change in the store
(:class:`Operators`): the rooms' sect records and the start and end of a
broadcast, whose viewers history, counters and moderation audit an ended
broadcast keeps (:class:`PastBroadcast`).

One of the store's interfaces (:mod:`.base`): every engine implements it, and
every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .moderation import AuditEntry
from .stats import ViewersState


@dataclass(frozen=True, slots=True)
class Ended:
    """A broadcast an operator ended."""

    epoch: str
    """The room's new epoch (every listener resets into it)."""
    broadcast: int
    """The number of the broadcast that starts now (the first one is 1)."""


@dataclass(frozen=True, slots=True)
class Started:
    """A room an operator started (or found started)."""

    epoch: str
    """The room's epoch (unchanged when it already had a log)."""
    broadcast: int
    """The room's current broadcast (the first one is 1)."""
    created: bool
    """True when the room had no log and starts now."""


@dataclass(frozen=True, slots=True)
class PastBroadcast:
    """An ended broadcast whose viewers history (and counters) are still kept."""

    broadcast: int
    ended_ms: int
    viewers: ViewersState
    likes: int = 0
    """The broadcast's likes total when it ended (0 in an archive written
    before counters existed)."""
    gifts: int = 0
    """Its gift total (the sum of the gifts' values)."""
    ranking: tuple[tuple[str, int], ...] = ()
    """Its top givers (at most ``RANKING_KEPT``) with their scores, in
    ``Counters.ranking``'s order."""
    moderation: tuple[AuditEntry, ...] = ()
    """Its moderation audit (``ModerationStore.audit``), newest first, at most
    ``AUDIT_KEPT`` entries (empty in an archive of before moderation)."""


@dataclass(frozen=True, slots=True)
class VipSwap:
    """Replace ``room``'s sect record, if it is still ``before``."""

    room: str
    before: bytes
    after: bytes
    vip: bool
    event_id: str = ""
    event: bytes = b""
    """The ``room.sect_changed`` webhook event (its JSON; ``b""``: none),
    written to the outbox (``Outbox``) in the same atomic step as the swap,
    if it applies: the records and the outbox share the global slot."""


class Operators(Protocol):
    """What operators (and the automatic vip rule) change: the rooms' sect
    records and the start and end of a broadcast."""

    async def vip_records(self) -> dict[str, bytes]:
        """Every room's sect record (:mod:`liveroom.sects` encodes them), by
        room: the rooms with none are normal. A room whitelisted by a version
        that kept no records has ``b""``. One round trip; nodes keep them and
        never read them per poll."""

    async def vip_swap(self, swaps: Sequence[VipSwap]) -> list[bool]:
        """Apply each swap whose ``before`` is the room's record now (``b""``:
        none), each atomically: the record becomes ``after`` (``b""``: none)
        and the room is in the whitelist iff ``vip``. True for each applied."""

    async def start_broadcast(self, room: str, *, event: bytes | None = None) -> Started:
        """Open ``room`` before its first message: a room with no log gets one
        (a new epoch at seq 0, its listeners notified); a room with a log keeps
        it. Either way the room is *live*: it lives ``room_ttl_ms`` and reads
        keep it alive like a room with messages, so a node counts its listeners
        online (and as viewers) from the first poll. Idempotent; atomic.

        ``event``: the webhook event (``Events.ahead``'s JSON; ``None``:
        none), kept in the room's list of events (``Outbox``) in the same
        atomic step, each call (``created`` says whether it opened the
        room), with ``"broadcast"``, ``"epoch"`` and ``"created"`` added.
        """

    async def end_broadcast(self, room: str, now_ms: int, ttl_ms: int, *,
                            event: bytes | None = None) -> Ended:
        """End the room's broadcast: a new epoch with an empty log (the ended
        broadcast's messages are dropped; seqs go on) and a new viewers
        history. Atomic, and always effective: ending twice ends two broadcasts.

        The room gets a new epoch unconditionally (a log is created if it has
        none), so every listener resets, into no recent messages; the room is
        live afterwards, as after :meth:`start_broadcast`. The broadcast number goes up by one
        (a room never ended is in broadcast 1). The ended broadcast's viewers
        history is set aside and stays readable (:meth:`broadcasts`) for
        ``ttl_ms`` (on the store's clock, like every expiry of the engine);
        ``now_ms`` is recorded as when it ended. So are, in the same atomic
        step, its counters (``Counters``): its likes total, gift total
        and top ``RANKING_KEPT`` givers; the new broadcast's likes, gifts
        and ranking start at zero (the likes series, the room's by time,
        goes on); and its moderation audit (``ModerationStore.audit``), the
        new broadcast's starting empty (mutes, bans and slow mode are the
        room's, not the broadcast's: they stay). ``StatsStore.viewers`` and
        ``add_viewers`` work on the new, empty history from now on and report
        the new number, so a statsvr node forgets whom it had counted. Every
        recvsvr is notified with the room's head, as after an append.

        ``event``: the webhook event (``Events.ahead``'s JSON; ``None``:
        none), kept in the room's list of events (``Outbox``) in the same
        atomic step, with ``"broadcast"`` (the ended one's number) added.
        """

    async def broadcasts(self, room: str) -> list[PastBroadcast]:
        """The room's ended broadcasts still kept, newest first, with their
        viewers history as stored (sketches included, ``broadcast`` their number),
        their counters and their moderation audit (zero and empty in an
        archive of before them)."""
