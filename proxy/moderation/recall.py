"""Recalling a message (撤回): its body gone everywhere, every listener told.

``DELETE /v1/rooms/{room}/messages/{seq}`` recalls a message of the room,
normal or important:

- the admin token or the publisher token (the backend, a moderator) recall
  any message the room keeps; so does a ticket with ``publish``;
- its sender recalls its own normal messages within ``--recall-window``
  (120 s) of sending them: with a ticket naming it, or in ``open`` mode with
  ``?uid=`` (open mode proves no uid, as for sends). Not while banned or
  muted in the room, and within windows like its sends' (counted apart, on
  this node). An important message carrying its uid is the backend's (a
  gift's announcement): the sender cannot recall it. A sender's own recall
  is not moderation and is not in the room's audit (so no sender can push
  the moderators' entries out of it); the moderators' and the backend's are.

``DELETE /v1/rooms/{room}/personal/{pseq}`` recalls a personal message (the
backend's: a token, or a ticket with ``publish``): its notice is a personal
message to the same addressee, whose answers list it in ``precalled``.

One atomic step in the store (``MessageLog.recall``): the message's
tombstone takes its place (its body leaves the store) and the recall's
*notice* is appended, an important entry of ``RECALL_UID`` whose body says
which message and what its tombstone keeps. A recall cut short (the client
resets and the handler is cancelled, the node dies) is done whole or not at
all: never a body gone from the store with no notice to tell the nodes that
cached it. The notice travels like any important message (the notify, the
fallback pull, the cut-through of a paced room): never lost within the
important window, on every node. A node that reads it puts the tombstone in
place of the message in its snapshot, so the body is gone from every later
answer, first polls and ``recent`` included, and answers list the recalled
seqs after the listener's cursor as ``recalled: [seq, ...]`` (ahead of
``important``). The notice's client_msg_id is ``!recall:room:<seq>`` (no
sender may use ``!``). A retried recall answers the same, its notice's seq
included, and appends nothing; one the store could not confirm answers 503
and is retried the same way. The audit entry is written after, a call of
its own; the route runs to its end whatever its client does once it is
read (the cost table's rows), so only a node that dies between the two
leaves a recall done and unaudited.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from liveroom.clock import Clock
from liveroom.errors import BadRequest, Forbidden, Unauthorized
from liveroom.events import NO_EVENTS, Events
from liveroom.model import check_name, parse_count
from liveroom.ratelimit import UidWindows, Window
from liveroom.store.base import AuditEntry, MessageLog

from ..auth import Right, Tokens, bearer
from ..tickets import Tickets
from .rules import Moderation

logger = logging.getLogger("liveroom.proxy.moderation")

SENDERS_MAX = 100_000
"""Senders whose recall windows a node keeps at once (one more evicts
another's, :class:`~liveroom.ratelimit.UidWindows`)."""


class Recalls:
    """A node's recalls."""

    def __init__(self, log: MessageLog, tokens: Tokens, moderation: Moderation, clock: Clock,
                 *, recall_window: float, tickets: Tickets | None = None,
                 windows: Sequence[Window] = (), events: Events = NO_EVENTS) -> None:
        self._log = log
        self._events = events
        self._tokens = tokens
        self._moderation = moderation
        self._clock = clock
        self.recall_window = recall_window
        self.tickets = tickets
        """The ticket verifier in ``ticket`` mode; None: open."""
        self.senders = UidWindows(windows, (), SENDERS_MAX, ("recalls", "", ""))
        """A sender's own recalls, counted in windows like its sends (the
        sends' ``--rate-limits``, counted apart on this node)."""

    def _who(self, room: str, authorization: str | None,
             uid: str | None) -> tuple[str, str | None]:
        """``(by, sender)``: who recalls, as the audit names it, and the uid
        whose own message it must be (None: any message)."""
        tickets = self.tickets
        if authorization is None and tickets is None:  # open mode: the uid is said
            if uid is None:
                raise BadRequest("uid is required (the sender recalling its own message), "
                                 "or a token")
            return f"uid:{check_name('uid', uid)}", uid
        token = bearer(authorization)
        right = self._tokens.right_of(token)
        if right is Right.ADMIN:
            return "admin", None
        if right is Right.PUBLISH:
            return "publisher", None
        if tickets is None:
            raise Unauthorized("unknown token")
        claims = tickets.good_for(room, token, None)
        if uid is not None and uid != claims.uid:
            raise Unauthorized("the ticket names another uid than the query's")
        return f"uid:{claims.uid}", None if claims.publish else claims.uid

    def _may_recall(self, room: str, sender: str) -> None:
        """A sender recalling its own message: not while banned or muted, and
        within its windows (429 past them)."""
        self._moderation.check_speaker(room, sender)
        self.senders.take(room, sender, 1, int(self._clock.time() * 1000))

    async def recall(self, room: str, raw_seq: str, authorization: str | None,
                     uid: str | None, *, personal: bool = False) -> dict[str, object]:
        """Recall message ``raw_seq`` of ``room`` (``personal``: the personal
        message at that position); the answer's document."""
        check_name("room", room)
        seq = parse_count("pseq" if personal else "seq", raw_seq, 1)
        by, sender = self._who(room, authorization, uid)
        if personal and sender is not None:
            raise Forbidden("a personal message is the backend's: recalling one needs the "
                            "publisher or admin token, or a ticket with publish")
        if sender is not None:
            self._may_recall(room, sender)
        now_ms = int(self._clock.time() * 1000)
        lane = "personal" if personal else "room"
        # The script adds the event's uid and to, and keeps it only when it
        # recalls the message now (not when recalled before).
        ahead = await self._events.ahead("message.recalled", room, lane=lane, seq=seq, by=by)
        try:
            recalled = await self._log.recall(
                room, seq, at_ms=now_ms, personal=personal, sender=sender,
                since_ms=now_ms - int(self.recall_window * 1000),
                event=None if ahead is None else ahead.event)
        finally:
            await self._events.settle(ahead)
        if sender is None:
            # The moderators' and the backend's recalls are moderation, in the
            # audit; a sender taking back its own message is not, and a
            # sender's recalls cannot push the moderators' entries out.
            await self._moderation.record(room, AuditEntry(
                at_ms=now_ms, by=by, action="recall", target=f"{lane}:{seq}", seconds=0,
                reason=""))
        else:
            self._moderation.count("own_recall")
        logger.info("moderation: recall of %s message %d (uid %s) in room %s by %s", lane,
                    seq, recalled.uid, room, by)
        if personal:
            return {"room": room, "pseq": seq, "uid": recalled.uid, "to": recalled.to,
                    "recalled": True, "notice": recalled.notice}
        return {"room": room, "seq": seq, "uid": recalled.uid, "recalled": True,
                "notice": recalled.notice}
