"""Deciding held messages: the moderators' side of the review queue.

A word filter or the backend's send hook holds a send instead of storing it
(:class:`liveroom.review.ReviewQueue`); it waits in its room's queue until a
moderator (the admin token) decides it, through
``/v1/admin/rooms/{room}/review`` (:mod:`.routes`), the dashboard or
``liveroom review``:

- **Approve** stores the message then, as its sender's: its uid, its lane
  (normal, important, or personal to its addressee), its body, at the time
  of the approval (``ts``), through the log's append like any send, so every
  listener of every node gets it as it would a send. Rate limits and slow
  mode do not apply (the moderator's call, not the sender's send). Its
  sender must be free to speak in the room now: while it is muted or banned
  the approval is refused (409) and the message stays held (deny it, or lift
  the sanction first). Approving twice answers the same seq; a retry after a
  failure (a 503) stores it once (the append's ``client_msg_id`` is the
  approval's own, ``!review:<id>:<at_ms>``, which no sender may use).
- **Deny** drops it: its body leaves the store at once.
- One decision per message: of an approval and a denial racing, one wins
  and the other is refused (409), whichever node each went through.

Both are moderation: recorded in the room's audit (``approve`` or ``deny``,
target ``"<uid>:<id>"``, the reason it was held), counted in
``liveroom_moderation_actions_total`` and logged, one line, by the call that
decided. The audit entry is a call of its own after the decision (as for a
recall): a store that fails between them leaves the decision unaudited, and
an approval whose message could not be stored yet (503) is stored by
approving it again.
"""

from __future__ import annotations

import logging

from liveroom.clock import Clock
from liveroom.errors import Conflict, Forbidden, NotFound
from liveroom.events import NO_EVENTS, Events
from liveroom.model import parse_count
from liveroom.store.base import AuditEntry, Held, MessageLog, ReviewStore, Verdict

from .rules import Moderation

logger = logging.getLogger("liveroom.proxy.moderation")

LIST_DEFAULT = 100
"""Held messages ``GET .../review`` lists without a ``limit``."""


def held_id_of(raw: str) -> str:
    """A held message's id from a path (400 unless 1 to 16 digits, not 0)."""
    return str(parse_count("id", raw, 1))


def held_document(held: Held) -> dict[str, object]:
    """A held message as the API lists it (``to`` for a personal one only)."""
    doc: dict[str, object] = {"id": held.id, "uid": held.uid, "kind": held.kind,
                              "body": held.body, "at_ms": held.at_ms, "why": held.why}
    if held.to is not None:
        doc["to"] = held.to
    return doc


def approval_document(room: str, verdict: Verdict) -> dict[str, object]:
    """An approval's answer: where its message was stored, ``seq`` (``iseq``
    for an important one, ``pseq`` and ``to`` for a personal one)."""
    held = verdict.held
    doc: dict[str, object] = {"room": room, "id": held.id, "uid": held.uid,
                              "approved": True, "epoch": verdict.epoch}
    if held.kind == "personal":
        doc.update(pseq=verdict.seq, to=held.to)
    else:
        doc["iseq" if held.kind == "important" else "seq"] = verdict.seq
    return doc


class Reviews:
    """A node's decisions on held messages (see the module's docstring)."""

    def __init__(self, store: ReviewStore, log: MessageLog, moderation: Moderation,
                 clock: Clock, events: Events = NO_EVENTS) -> None:
        self.store = store
        self._events = events
        self._log = log
        self._moderation = moderation
        self._clock = clock

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    async def listing(self, room: str, limit: int) -> dict[str, object]:
        """The room's held messages, oldest first, and how many wait."""
        held, count = await self.store.held(room, limit)
        return {"room": room, "count": count, "held": [held_document(h) for h in held]}

    async def approve(self, room: str, raw_id: str) -> dict[str, object]:
        """Approve held message ``raw_id`` of ``room``: store it as its
        sender's; the answer's document (the same when approved before)."""
        held_id = held_id_of(raw_id)
        waiting = await self.store.find(room, held_id)
        if waiting is not None:
            try:
                self._moderation.check_speaker(room, waiting.uid)
            except Forbidden as exc:  # muted or banned since it was held
                raise Conflict(f"{exc.message}: its held message {held_id} stays held "
                               f"(lift that first, or deny it)") from None
        verdict = await self._decided(room, held_id, "approve")
        if verdict.seq:
            return approval_document(room, verdict)
        now_ms = self._now_ms()
        if verdict.first:
            await self._record(room, verdict.held, "approve", now_ms)
        held = verdict.held
        appended = await self._log.append(
            room, held.message(now_ms, f"!review:{held.id}:{held.at_ms}"), None,
            may_create=True)
        doc = approval_document(room, Verdict(held, "approve", verdict.first,
                                              appended.epoch, appended.seq))
        # Kept with the settle that first records where the message went: an
        # approval retried after a failure keeps it then, once.
        ahead = await self._events.ahead("message.approved", room, **{
            key: value for key, value in doc.items() if key not in ("room", "approved", "id")},
            held_id=held.id, kind=held.kind, by="admin")
        try:
            await self.store.settle(room, held.id, appended.epoch, appended.seq,
                                    event=None if ahead is None else ahead.event)
        finally:
            await self._events.settle(ahead)
        if verdict.first:
            logger.info("review: held message %s of uid %s in room %s approved by admin: "
                        "%s %d", held.id, held.uid, room, held.kind, appended.seq)
        return doc

    async def deny(self, room: str, raw_id: str) -> dict[str, object]:
        """Deny held message ``raw_id`` of ``room``: its body is gone."""
        held_id = held_id_of(raw_id)
        # Kept with the decision, when it is the first, its uid and kind added.
        ahead = await self._events.ahead("message.denied", room, held_id=held_id, by="admin")
        try:
            verdict = await self._decided(room, held_id, "deny",
                                          None if ahead is None else ahead.event)
        finally:
            await self._events.settle(ahead)
        held = verdict.held
        if verdict.first:
            await self._record(room, held, "deny", self._now_ms())
            logger.info("review: held message %s of uid %s in room %s denied by admin",
                        held.id, held.uid, room)
        return {"room": room, "id": held.id, "uid": held.uid, "denied": True}

    async def _decided(self, room: str, held_id: str, verdict: str,
                       event: bytes | None = None) -> Verdict:
        """The message's decision: ``verdict`` if it was still waiting (its
        webhook ``event`` kept with it); 404 for an id the room does not
        know, 409 when it went the other way."""
        decided = await self.store.decide(room, held_id, verdict, event=event)
        if decided is None:
            raise NotFound(f"room {room} holds no message {held_id} for review (never held, "
                           f"dropped from a full queue, or expired)")
        if decided.verdict != verdict:
            raise Conflict(f"held message {held_id} of room {room} was "
                           f"{'approved' if decided.verdict == 'approve' else 'denied'} "
                           f"already")
        return decided

    async def _record(self, room: str, held: Held, action: str, now_ms: int) -> None:
        """The decision in the room's audit, counted."""
        await self._moderation.record(room, AuditEntry(
            at_ms=now_ms, by="admin", action=action, target=f"{held.uid}:{held.id}",
            seconds=0, reason=held.why))
