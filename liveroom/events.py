"""The rooms' events, as the webhooks tell them: made here, written to the
store with their actions, moved to the store's outbox
(:class:`~liveroom.store.outbox.Outbox`) for the delivering node
(:mod:`liveroom.webhooks`).

An event is a JSON object ``{"id", "type", "at_ms", "room", ...}``: its id
(``ev_`` and 24 hex digits, random) is the receiver's key to dedupe (an
event may arrive twice: delivery is at least once), its type one of
:data:`TYPES`, ``at_ms`` when its action happened, and the fields of its
type (docs/api.md, "Webhooks"). A room action adds its event so::

    ahead = await events.ahead("uid.banned", room, uid=uid, seconds=seconds, reason=reason)
    try:
        await store.act(room, entry, now_ms, event=None if ahead is None else ahead.event)
    finally:
        await events.settle(ahead)

**When it is written.** In the same step as its action: :meth:`Events.ahead`
makes the event (and marks the room first, a mark of the action's own:
:meth:`Outbox.mark <liveroom.store.outbox.Outbox.mark>`), and the action's store call (one
script on Redis) keeps it in the room's list of events beside the action's
own writes, only when the action took effect (a recall repeated, a lift of
no sanction, a decision made before keep none). The fields only the action
knows (a recalled message's uid, a gift's rank, a held message's id) are
added there. :meth:`Events.settle` then moves the room's events into the
outbox and lifts the action's mark (only its own: another action's event
may not be written yet). A node that dies between the two, or a store that
fails the move, leaves them in their room, marked: the delivering node's
:meth:`Events.sweep` (every :data:`SWEEP_EVERY` seconds) moves them. A
``broadcast.ended`` is kept with its number only; its figures are read from
the ended broadcast's archive (which the same script wrote) as it moves.

A ``room.sect_changed`` needs no room list: the sect records are in the
outbox's slot, so the swap's own script writes the event to the outbox
(:meth:`Events.made`, then :meth:`Events.written`).

:meth:`Events.emit` writes an event straight to the outbox after its
action, one store call of its own: the seam for an action with no store
write of its own to keep the event with (no action is one today). A node
that dies between such an action and its emit loses the event; a store
that fails the write loses it too (logged, counted in
``liveroom_webhook_events_lost_total``). With no ``--webhook`` nothing is
written and each of these costs a call.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from .clock import Clock, SystemClock
from .errors import StoreUnavailable
from .lograte import Throttled
from .metrics import Metrics
from .store.outbox import MOVE_MAX, Moving, Outbox

logger: Final = logging.getLogger("liveroom.events")

TYPES: Final = (
    "broadcast.started", "broadcast.ended",
    "message.recalled", "message.held", "message.approved", "message.denied",
    "message.dropped",
    "uid.muted", "uid.banned", "uid.unbanned",
    "room.sect_changed", "gift.given",
)
"""Every event type, in the order docs/api.md lists them."""
SANCTION_EVENTS: Final = {"mute": "uid.muted", "ban": "uid.banned", "unban": "uid.unbanned"}
"""The moderation actions that are events, and their types."""
COMMON: Final = frozenset(("id", "type", "at_ms", "room"))
"""The fields every event has (a type's own fields are named otherwise)."""


SWEEP_EVERY: Final = 30.0
"""Seconds between two sweeps of the marked rooms by the delivering node."""
SWEEP_GRACE_MS: Final = 10_000
"""A room marked this recently is left to the node acting on it."""
SWEEP_ROOMS: Final = 100
"""Marks one sweep takes at most (the oldest first; a room marked by
several actions comes once each)."""

Complete = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""Completes an event kept with only what its action knew: the room, the
event's document; the document to deliver."""


@dataclass(frozen=True, slots=True)
class Ahead:
    """An event made before its action: ``event`` goes to the action's store
    call, which keeps it with the action; :meth:`Events.settle` moves it."""

    room: str
    kind: str
    event: bytes
    """The event's JSON, without the fields only the action knows."""
    mark: int
    """The room's mark (:meth:`Outbox.mark`), lifted by the move."""


def new_event_id() -> str:
    """A fresh event id: ``ev_`` and 24 random hex digits."""
    return "ev_" + secrets.token_hex(12)


def event_document(event_id: str, kind: str, at_ms: int, room: str,
                   fields: dict[str, Any]) -> dict[str, Any]:
    """An event's JSON object: its four common fields, then its own."""
    return {"id": event_id, "type": kind, "at_ms": at_ms, "room": room, **fields}


class Events:
    """Where actions tell what happened: one per node (``outbox`` ``None``:
    webhooks are off, and nothing is written)."""

    def __init__(self, outbox: Outbox | None, clock: Clock, *,
                 metrics: Metrics | None = None) -> None:
        self._outbox = outbox
        self._clock = clock
        self._metrics = metrics
        self._lost = Throttled(logger, 60.0)
        self._complete: dict[str, Complete] = {}
        self.on_added: list[Callable[[], None]] = []
        """Told after each event this node wrote (the delivering node, to
        read it at once rather than at its next poll)."""

    @property
    def enabled(self) -> bool:
        return self._outbox is not None

    def completes(self, kind: str, complete: Complete) -> None:
        """Events of ``kind`` are completed by ``complete`` as they move to
        the outbox (``broadcast.ended``: its figures, read from its archive)."""
        if self._outbox is not None:
            self._complete[kind] = complete

    def _document(self, kind: str, room: str, fields: dict[str, Any]) -> tuple[str, bytes]:
        if kind not in TYPES:
            raise ValueError(f"unknown event type {kind!r}")
        if not COMMON.isdisjoint(fields):
            raise ValueError(f"an event's own fields cannot be {', '.join(sorted(COMMON))}")
        event_id = new_event_id()
        return event_id, orjson.dumps(event_document(
            event_id, kind, int(self._clock.time() * 1000), room, fields))

    def made(self, kind: str, room: str, /, **fields: Any) -> tuple[str, bytes] | None:
        """Event ``kind`` of ``room`` with ``fields``: its id and JSON, for
        an action whose store step writes it to the outbox itself (a sect
        record's swap: the records and the outbox share the global slot);
        :meth:`written` once it did. ``None`` when webhooks are off."""
        if self._outbox is None:
            return None
        return self._document(kind, room, fields)

    def several(self, kind: str, room: str) -> tuple[str, bytes] | None:
        """For an action that may keep several events of ``kind`` (a hold
        that pushes messages out of a full queue): an id stem (``ev_`` and
        16 random hex digits: the store gives the i-th event the stem and
        ``i`` in 8 hex digits) and the JSON of their ``type``, ``at_ms`` and
        ``room``, to which the store adds the rest. ``None`` when webhooks
        are off. The room is marked by the action's :meth:`ahead`."""
        if self._outbox is None:
            return None
        if kind not in TYPES:
            raise ValueError(f"unknown event type {kind!r}")
        return "ev_" + secrets.token_hex(8), orjson.dumps(
            {"type": kind, "at_ms": int(self._clock.time() * 1000), "room": room})

    def written(self, kinds: list[str]) -> None:
        """Events of ``kinds`` went to the outbox with their actions' steps."""
        if self._metrics is not None:
            for kind in kinds:
                self._metrics.webhook_queued.labels(kind).inc()
        if kinds:
            for listener in self.on_added:
                listener()

    async def ahead(self, kind: str, room: str, /, **fields: Any) -> Ahead | None:
        """Event ``kind`` of ``room`` with ``fields`` (those known before the
        action), for the action's store call to keep; the room marked
        first. ``None`` when webhooks are off. Raises ``ValueError`` as
        :meth:`emit`, and ``StoreUnavailable`` when the mark cannot be
        written (the action must not go on: its event could be stranded)."""
        outbox = self._outbox
        if outbox is None:
            return None
        _, event = self._document(kind, room, fields)
        mark = await outbox.mark(room, int(self._clock.time() * 1000))
        return Ahead(room, kind, event, mark)

    async def settle(self, ahead: Ahead | None) -> None:
        """Move ``ahead``'s room's events (its own, and any an earlier action
        left) into the outbox, once its action returned (or failed: the mark
        is lifted). Never raises: events it cannot move stay in their room,
        marked, for the sweep (logged)."""
        if ahead is None:
            return
        try:
            # Shielded: a caller cancelled mid-move (its client went away)
            # leaves the sweep less to do.
            await asyncio.shield(self._move(ahead.room, ahead.mark))
        except StoreUnavailable as exc:
            self._lost.warning("unmoved", "events of room %s (%s, and any before) wait in the "
                               "room for the sweep: %s", ahead.room, ahead.kind, exc.message)
        except Exception:  # the action is done: its answer must not fail for its event
            logger.exception("events of room %s wait in the room: their move failed",
                             ahead.room)

    async def sweep(self) -> int:
        """Move the events of the rooms marked before the last
        :data:`SWEEP_GRACE_MS` (their actions' nodes died, or their moves
        failed), :data:`SWEEP_ROOMS` marks at most; how many rooms. The
        delivering node calls it every :data:`SWEEP_EVERY` seconds."""
        outbox = self._outbox
        if outbox is None:
            return 0
        before = int(self._clock.time() * 1000) - SWEEP_GRACE_MS
        marks = await outbox.marked(before, SWEEP_ROOMS)
        # A room marked by several actions comes once each: its first move
        # takes its events, the next ones find none and lift their marks.
        for room, mark in marks:
            try:
                await self._move(room, mark)
            except StoreUnavailable:
                raise
            except Exception:  # one room's fault must not hold the others' events
                logger.exception("events of room %s: their move failed; the next sweep "
                                 "tries again", room)
        return len({room for room, _ in marks})

    async def _move(self, room: str, mark: int) -> None:
        outbox = self._outbox
        assert outbox is not None
        moving, kinds = [], []
        pending = await outbox.pending(room)
        for kept in pending:
            try:
                doc = orjson.loads(kept)
                event_id, kind = str(doc["id"]), str(doc["type"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                # Only a hand-edited store has one: left where it is.
                logger.error("room %s keeps an event that is no JSON event: %r", room,
                             kept[:200])
                continue
            complete = self._complete.get(kind)
            data = orjson.dumps(await complete(room, doc)) if complete is not None else kept
            moving.append(Moving(kept, event_id, data))
            kinds.append(kind)
        # A full read may have left more: the mark stays up for the sweep.
        await outbox.move(room, moving, None if len(pending) >= MOVE_MAX else mark)
        self.written(kinds)

    async def emit(self, kind: str, room: str, /, **fields: Any) -> str | None:
        """Write event ``kind`` (one of :data:`TYPES`) of ``room`` with
        ``fields`` (JSON values; none of :data:`COMMON`) to the outbox; its
        id, ``None`` when webhooks are off or the store failed the write
        (logged, counted: the action stands). Raises ``ValueError`` for an
        unknown type or a field of :data:`COMMON`."""
        outbox = self._outbox
        if outbox is None:
            return None
        event_id, data = self._document(kind, room, fields)
        try:
            # Shielded: a caller cancelled mid-write (its client went away)
            # must not leave the action done and its event unwritten.
            await asyncio.shield(outbox.add(event_id, data))
        except StoreUnavailable as exc:
            if self._metrics is not None:
                self._metrics.webhook_lost.inc()
            self._lost.warning("lost", "event %s %s of room %s lost: the outbox could not be "
                               "written: %s", kind, event_id, room, exc.message)
            return None
        if self._metrics is not None:
            self._metrics.webhook_queued.labels(kind).inc()
        for listener in self.on_added:
            listener()
        return event_id


NO_EVENTS: Final = Events(None, SystemClock())
"""Events that go nowhere: the default of a part built without a node (a
test, a benchmark)."""
