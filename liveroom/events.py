"""The rooms' events, as the webhooks tell them: the one seam every action
emits through (:meth:`Events.emit`), which writes the event to the store's
outbox (:class:`~liveroom.store.outbox.Outbox`) for the delivering node
(:mod:`liveroom.webhooks`).

An event is a JSON object ``{"id", "type", "at_ms", "room", ...}``: its id
(``ev_`` and 24 hex digits, random) is the receiver's key to dedupe (an
event may arrive twice: delivery is at least once), its type one of
:data:`TYPES`, ``at_ms`` when its action happened, and the fields of its
type (docs/api.md, "Webhooks"). A new action adds its event in one line::

    await events.emit("uid.banned", room, uid=uid, seconds=seconds, reason=reason)

**When it is written.** Right after the action's own write acknowledged, as
one more store call (one ``XADD`` on Redis): the action's caller waits for
it. A node that dies between the two loses the event; a store that fails
the write loses it too (the action stands: it is logged, one line, and
counted in ``liveroom_webhook_events_lost_total``). With no ``--webhook``
nothing is written and :meth:`Events.emit` costs a call.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any, Final

import orjson

from .clock import Clock, SystemClock
from .errors import StoreUnavailable
from .lograte import Throttled
from .metrics import Metrics
from .store.outbox import Outbox

logger: Final = logging.getLogger("liveroom.events")

TYPES: Final = (
    "broadcast.started", "broadcast.ended",
    "message.recalled", "message.held", "message.approved", "message.denied",
    "message.dropped",
    "uid.muted", "uid.banned", "uid.unbanned",
    "room.sect_changed", "gift.given",
)
"""Every event type, in the order docs/api.md lists them."""
COMMON: Final = frozenset(("id", "type", "at_ms", "room"))
"""The fields every event has (a type's own fields are named otherwise)."""


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
        self.on_added: list[Callable[[], None]] = []
        """Told after each event this node wrote (the delivering node, to
        read it at once rather than at its next poll)."""

    @property
    def enabled(self) -> bool:
        return self._outbox is not None

    async def emit(self, kind: str, room: str, /, **fields: Any) -> str | None:
        """Write event ``kind`` (one of :data:`TYPES`) of ``room`` with
        ``fields`` (JSON values; none of :data:`COMMON`) to the outbox; its
        id, ``None`` when webhooks are off or the store failed the write
        (logged, counted: the action stands). Raises ``ValueError`` for an
        unknown type or a field of :data:`COMMON`."""
        outbox = self._outbox
        if outbox is None:
            return None
        if kind not in TYPES:
            raise ValueError(f"unknown event type {kind!r}")
        if not COMMON.isdisjoint(fields):
            raise ValueError(f"an event's own fields cannot be {', '.join(sorted(COMMON))}")
        event_id = new_event_id()
        data = orjson.dumps(event_document(event_id, kind, int(self._clock.time() * 1000),
                                           room, fields))
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
