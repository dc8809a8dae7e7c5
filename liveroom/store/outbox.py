"""The webhooks' outbox in the store (:class:`Outbox`): the events of the
rooms' actions, written with their actions, waiting for the node that
delivers them to the backend (:mod:`liveroom.webhooks`), and the events
given up, kept until they are replayed.

One of the store's interfaces (:mod:`.base`): every engine implements it, and
every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver. An event is opaque here: its id (for the failed list
and its replay) and its bytes, the JSON document the backend receives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

OUTBOX_MAX = 1_000_000
"""Events the outbox keeps waiting at most (a backend away for long): past
it the oldest are dropped (Redis trims the stream, approximately). About
300 bytes each: some 300 MB of Redis at worst."""
FAILED_MAX = 100_000
"""Events given up kept at most: one more forgets the oldest."""
FAILED_LIST_MAX = 1_000
""":meth:`Outbox.failed`'s largest ``limit``."""
EVENT_ID_MAX = 64
"""Characters of an event's id."""
MOVE_MAX = 1_000
"""Events of one room :meth:`Outbox.pending` answers at most (a room with
more gives the rest at its next move)."""
MOVED_KEPT_MS = 3_600_000
"""How long the outbox remembers the id of an event it took in from a room
(:meth:`Outbox.move`), so that a move repeated within it adds nothing."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """An event the delivering node holds: it is its until :meth:`Outbox.done`
    or :meth:`Outbox.give_up` (or another node takes the outbox over)."""

    entry: str
    """Its place in the outbox (a stream id on Redis), what ``done`` takes."""
    event_id: str
    data: bytes
    """The event's JSON document, as it is POSTed."""


@dataclass(frozen=True, slots=True)
class Moving:
    """An event on its way from its room to the outbox (:meth:`Outbox.move`)."""

    kept: bytes
    """The event as its room keeps it (what the move takes out of the room)."""
    event_id: str
    data: bytes
    """The event's JSON document as it goes in the outbox (``kept``, or
    ``kept`` completed: a ``broadcast.ended``'s figures)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """An event given up after ``--webhook-retry-for``."""

    event_id: str
    data: bytes
    why: str
    """The last attempt's failure (``"503"``, ``"timeout"``...)."""
    failed_ms: int
    """When it was given up."""


def check_event_id(event_id: object) -> str:
    """Return ``event_id`` if it may name an event (1 to :data:`EVENT_ID_MAX`
    characters of ``[A-Za-z0-9_.:-]``), else raise ``ValueError``."""
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= EVENT_ID_MAX or \
            not event_id.isascii() or \
            not all(c.isalnum() or c in "_.:-" for c in event_id):
        raise ValueError(f"an event id is 1 to {EVENT_ID_MAX} letters, digits or _.:-, "
                         f"not {event_id!r}")
    return event_id


def check_failed_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or \
            not 1 <= limit <= FAILED_LIST_MAX:
        raise ValueError(f"limit must be an int in 1..{FAILED_LIST_MAX}, not {limit!r}")


class Outbox(Protocol):
    """Events waiting for delivery, and the events given up.

    - **Written with the action.** An action that has an event writes it in
      the same step as itself (the same script on Redis) to its room's list
      of events not yet moved: on a Redis Cluster the outbox is in the
      global slot, the room's keys in the room's, and no script touches
      both. Before the action, the acting node marks the room
      (:meth:`mark`); after it, it moves the room's events into the outbox
      (:meth:`pending`, then :meth:`move`, which also lifts its mark). A
      node that dies between the two, or a store that fails the move,
      leaves the events in their room, its mark up: the delivering node's
      sweep (:meth:`marked`) moves them. A move is safe to repeat (the
      outbox adds an event id it took in during the last
      :data:`MOVED_KEPT_MS` once). :meth:`add` is the same without a room
      (a replay, an event whose action writes nothing of its own). Nothing
      loses an event short of :data:`OUTBOX_MAX`.
    - **One consumer at a time.** A node delivers only while it holds the
      lease (:meth:`lease`: taken when free, renewed by its holder, gone
      when not renewed in time). A node that takes it takes over every
      event another node held and did not finish (:meth:`take_over`), then
      reads the new ones (:meth:`next`). Two nodes may deliver one event
      when a holder stalls past its lease: delivery is at least once.
    - **Until done.** An event read stays the reader's until :meth:`done`
      (delivered: gone) or :meth:`give_up` (kept in the failed list,
      :data:`FAILED_MAX` of them, the oldest forgotten), which
      :meth:`replay` puts back in the outbox as new.
    - **The memory engine** is one process's: its outbox is bounded and a
      restart loses it (the node says so when it starts).
    """

    async def add(self, event_id: str, data: bytes) -> None:
        """Queue the event ``data`` (its JSON) under ``event_id``."""

    async def mark(self, room: str, at_ms: int) -> int:
        """Note, before an action of ``room`` that has an event, that the
        room may hold events not yet moved (from ``at_ms``): a mark of this
        action's own, whose number :meth:`move` takes to lift it (another
        action's mark stays until its own move or the sweep: its event may
        not be written yet)."""

    async def pending(self, room: str) -> list[bytes]:
        """The events ``room``'s actions wrote and no move took yet, oldest
        first, :data:`MOVE_MAX` at most."""

    async def move(self, room: str, events: Sequence[Moving], mark: int | None) -> None:
        """Put ``events`` (read by :meth:`pending`) in the outbox, each once
        (an id taken in during the last :data:`MOVED_KEPT_MS` is not added
        again), then take them out of ``room``, then lift the action's
        mark ``mark`` (None: none; the room's other marks stay). Safe to
        repeat, or to run beside another move of the same room."""

    async def marked(self, before_ms: int, count: int) -> list[tuple[str, int]]:
        """At most ``count`` marks put at or before ``before_ms`` and not
        lifted, oldest first: ``(room, mark)`` (a room may come more than
        once), for the sweep."""

    async def lease(self, holder: str, ttl_ms: int) -> bool:
        """Take the lease for ``holder`` when it is free, or renew it when
        ``holder`` has it, for ``ttl_ms``; whether ``holder`` has it now."""

    async def release(self, holder: str) -> None:
        """Give the lease up if ``holder`` has it (a node that stops)."""

    async def delivered(self) -> bool:
        """Whether a node delivers this outbox's events now (the lease is
        held): an action taken in the store without a node (the CLI's
        ``--store``) keeps its event only then, for that node's sweep."""

    async def take_over(self, holder: str, count: int) -> list[Outgoing]:
        """The events read before and not finished, whoever read them (a
        dead holder, this one before a restart), now ``holder``'s: at most
        ``count``, oldest first (call again until it answers fewer)."""

    async def next(self, holder: str, count: int) -> list[Outgoing]:
        """At most ``count`` events never read, oldest first, now ``holder``'s."""

    async def done(self, entries: Sequence[str]) -> None:
        """The events at ``entries`` were delivered: they leave the outbox."""

    async def give_up(self, event: Outgoing, why: str, at_ms: int) -> None:
        """``event`` leaves the outbox for the failed list, given up at
        ``at_ms`` for ``why`` (the last attempt's failure)."""

    async def failed(self, limit: int) -> tuple[list[Failed], int]:
        """The events given up, oldest first, at most ``limit``
        (1..:data:`FAILED_LIST_MAX`), and how many are kept in all."""

    async def replay(self, event_ids: Sequence[str] | None) -> list[str]:
        """Put the failed events ``event_ids`` (``None``: every one) back in
        the outbox, each under its own id (a receiver that kept it
        dedupes it); the ids replayed (those failed and kept)."""

    async def waiting(self) -> int:
        """Events in the outbox, read or not (none of them delivered)."""
