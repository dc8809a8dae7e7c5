"""The moderators' HTTP API: mute, ban and slow mode, recall, and the audit.

Every route under ``/v1/admin/`` needs the admin token (401 without, 403
for the publisher's):

- ``PUT /v1/admin/rooms/{room}/muted/{uid}`` with ``{"seconds": n, "reason":
  "..."}`` mutes the uid for ``n`` seconds (1 to 30 days); ``DELETE`` lifts
  it; ``GET /v1/admin/rooms/{room}/muted`` lists the mutes in force.
- ``PUT /v1/admin/rooms/{room}/banned/{uid}`` (optional ``seconds``, 0 or
  none: until lifted; optional ``reason``) bans it; ``DELETE`` lifts it;
  ``GET .../banned`` lists the bans.
- ``PUT /v1/admin/rooms/{room}/slow`` with ``{"seconds": s}`` (0 lifts it)
  sets slow mode.
- ``DELETE /v1/rooms/{room}/messages/{seq}`` recalls a message: the
  moderators, the backend, or its sender for a while (:mod:`.recall`).
- ``GET /v1/admin/rooms/{room}/moderation?limit=N`` (1 to 1000, default 100):
  the room's slow mode and the audit of its current broadcast, newest first;
  with ``&broadcast=N``, the audit archived with ended broadcast N.
- ``GET /v1/admin/rooms/{room}/review?limit=N`` (1 to 1000, default 100):
  the room's held messages, oldest first; ``POST .../review/{id}/approve``
  stores one as its sender's (201), ``POST .../review/{id}/deny`` drops it
  (:mod:`.review`).
- ``GET /v1/admin/rooms/{room}/messages?limit=N`` (1 to 100, default 50): the
  room's latest messages as this node holds them, normal and important in
  one list by seq, recalled ones as their tombstones: what a moderator picks
  a recall from (the dashboard's list). Read from the node's snapshot, not
  polled: the moderator is no listener, counted nowhere.

Each action is applied through the store (:mod:`.rules`: every node
within about a second), recorded in the audit and logged, one line.
"""

from __future__ import annotations

import heapq
import logging
from operator import attrgetter
from typing import Any

import orjson
from aiohttp import web

from liveroom.clock import Clock
from liveroom.codec import decode_request, media_type
from liveroom.errors import BadBody, Conflict, NotFound
from liveroom.events import NO_EVENTS, SANCTION_EVENTS, Events
from liveroom.model import check_name, parse_count
from liveroom.roles import RoomReader
from liveroom.store.base import (
    AUDIT_KEPT,
    LIST_MAX,
    AuditEntry,
    ModerationStore,
    Operators,
    RoomModeration,
    Sanction,
    SanctionsFull,
    in_force,
)

from ..auth import Right, Tokens
from ..responses import document
from .recall import Recalls
from .review import LIST_DEFAULT, Reviews
from .rules import Moderation

logger = logging.getLogger("liveroom.proxy.moderation")

SECONDS_MAX = 30 * 86_400
"""The longest mute, ban or slow mode one action sets."""
REASON_MAX = 200
"""Characters of a reason."""
AUDIT_DEFAULT = 100
"""Entries ``GET .../moderation`` lists without a ``limit``."""
MESSAGES_MAX = 100
"""The most messages ``GET .../messages`` lists."""
MESSAGES_DEFAULT = 50
"""Messages ``GET .../messages`` lists without a ``limit``."""

_seq = attrgetter("seq")

def sanction_document(sanction: Sanction, now_ms: int) -> dict[str, object]:
    """A mute or ban as the API shows it (``until_ms`` 0 and ``seconds_left``
    null: until lifted)."""
    left = None if not sanction.until_ms else max(0, -(-(sanction.until_ms - now_ms) // 1000))
    return {"uid": sanction.uid, "until_ms": sanction.until_ms, "seconds_left": left,
            "reason": sanction.reason, "by": sanction.by, "at_ms": sanction.at_ms}


def audit_document(entry: AuditEntry) -> dict[str, object]:
    return {"at_ms": entry.at_ms, "by": entry.by, "action": entry.action,
            "target": entry.target, "seconds": entry.seconds, "reason": entry.reason}


def parse_action(doc: Any, *, seconds_required: bool, low: int) -> tuple[int, str]:
    """``(seconds, reason)`` of an action's body (``{}`` when it has none)."""
    if not isinstance(doc, dict):
        raise BadBody("the request body must be an object with seconds and reason")
    unknown = set(doc) - {"seconds", "reason"}
    if unknown:
        raise BadBody(f"unknown fields: {', '.join(sorted(unknown))}")
    if seconds_required and "seconds" not in doc:
        raise BadBody("seconds is required")
    seconds = doc.get("seconds", 0)
    if type(seconds) is not int or not low <= seconds <= SECONDS_MAX:
        raise BadBody(f"seconds must be a whole number from {low} to {SECONDS_MAX}")
    reason = doc.get("reason", "")
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise BadBody(f"reason must be text of at most {REASON_MAX} characters")
    return seconds, reason


class ModerationRoutes:
    """The moderators' routes of one node."""

    def __init__(self, moderation: Moderation, store: ModerationStore, tokens: Tokens,
                 clock: Clock, recalls: Recalls, operators: Operators,
                 reader: RoomReader, reviews: Reviews, events: Events = NO_EVENTS) -> None:
        self.moderation = moderation
        self.events = events
        self.recalls = recalls
        self.reviews = reviews
        self._operators = operators
        self._reader = reader
        self._store = store
        self._tokens = tokens
        self._clock = clock

    def add_routes(self, app: web.Application) -> None:
        for kind in ("muted", "banned"):
            app.router.add_put(f"/v1/admin/rooms/{{room}}/{kind}/{{uid}}", self.sanction)
            app.router.add_delete(f"/v1/admin/rooms/{{room}}/{kind}/{{uid}}", self.lift)
            app.router.add_get(f"/v1/admin/rooms/{{room}}/{kind}", self.sanctions)
        app.router.add_put("/v1/admin/rooms/{room}/slow", self.slow)
        app.router.add_get("/v1/admin/rooms/{room}/moderation", self.audit)
        app.router.add_get("/v1/admin/rooms/{room}/messages", self.messages)
        app.router.add_delete("/v1/rooms/{room}/messages/{seq}", self.recall)
        app.router.add_delete("/v1/rooms/{room}/personal/{seq}", self.recall_personal)
        app.router.add_get("/v1/admin/rooms/{room}/review", self.held)
        app.router.add_post("/v1/admin/rooms/{room}/review/{id}/approve", self.approve)
        app.router.add_post("/v1/admin/rooms/{room}/review/{id}/deny", self.deny)

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    def _admin(self, request: web.Request) -> str:
        self._tokens.require(request.headers.get("Authorization"), Right.ADMIN)
        return check_name("room", request.match_info["room"])

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return {}
        return decode_request(media_type(request.headers.get("Content-Type", "")), raw)

    async def _act(self, room: str, action: str, target: str, seconds: int,
                   reason: str) -> RoomModeration | None:
        entry = AuditEntry(at_ms=self._now_ms(), by="admin", action=action, target=target,
                           seconds=seconds, reason=reason)
        kind = SANCTION_EVENTS.get(action)
        # Kept by the store with the act, when it took effect (not a lift of
        # no sanction, nor a retried act).
        ahead = None if kind is None else await self.events.ahead(
            kind, room, uid=target, seconds=seconds, reason=reason, by="admin")
        try:
            state = await self.moderation.act(room, entry,
                                              event=None if ahead is None else ahead.event)
        except SanctionsFull as exc:
            raise Conflict(f"{exc}; lift some first") from None
        except ValueError as exc:  # what the store refuses that the body check let by
            raise BadBody(str(exc)) from None
        finally:
            await self.events.settle(ahead)
        logger.info("moderation: %s %s in room %s by admin%s%s", action, target or "-", room,
                    f" for {seconds} s" if seconds else "", f": {reason}" if reason else "")
        return state

    async def sanction(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        uid = check_name("uid", request.match_info["uid"])
        muting = request.path.rsplit("/", 2)[-2] == "muted"
        seconds, reason = parse_action(await self._body(request), seconds_required=muting,
                                       low=1 if muting else 0)
        state = await self._act(room, "mute" if muting else "ban", uid, seconds, reason)
        given = None if state is None else next(
            (s for s in (state.muted if muting else state.banned) if s.uid == uid), None)
        kind = "muted" if muting else "banned"
        return document(request, {"room": room, kind: None if given is None
                                  else sanction_document(given, self._now_ms())})

    async def lift(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        uid = check_name("uid", request.match_info["uid"])
        muting = request.path.rsplit("/", 2)[-2] == "muted"
        await self._act(room, "unmute" if muting else "unban", uid, 0, "")
        return document(request, {"room": room, "uid": uid, "lifted": True})

    async def sanctions(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        kind = request.path.rsplit("/", 1)[-1]
        now_ms = self._now_ms()
        state = (await self._store.rooms([room], now_ms)).get(room)
        given = () if state is None else state.muted if kind == "muted" else state.banned
        return document(request, {"room": room, kind: [
            sanction_document(s, now_ms) for s in given if in_force(s, now_ms)]})

    async def slow(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        seconds, reason = parse_action(await self._body(request), seconds_required=True, low=0)
        await self._act(room, "slow", "", seconds, reason)
        return document(request, {"room": room, "slow": seconds})

    async def recall(self, request: web.Request) -> web.StreamResponse:
        doc = await self.recalls.recall(request.match_info["room"], request.match_info["seq"],
                                        request.headers.get("Authorization"),
                                        request.query.get("uid"))
        return document(request, doc)

    async def recall_personal(self, request: web.Request) -> web.StreamResponse:
        doc = await self.recalls.recall(request.match_info["room"], request.match_info["seq"],
                                        request.headers.get("Authorization"),
                                        request.query.get("uid"), personal=True)
        return document(request, doc)

    async def audit(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        raw = request.query.get("limit")
        limit = AUDIT_DEFAULT if raw is None else parse_count("limit", raw, 1, AUDIT_KEPT)
        raw = request.query.get("broadcast")
        if raw is not None:  # an ended broadcast's audit, from its archive
            number = parse_count("broadcast", raw, 1)
            past = next((b for b in await self._operators.broadcasts(room)
                         if b.broadcast == number), None)
            if past is None:
                raise NotFound(f"room {room} keeps no ended broadcast {number}")
            return document(request, {"room": room, "broadcast": number, "audit": [
                audit_document(e) for e in past.moderation[:limit]]})
        now_ms = self._now_ms()
        state = (await self._store.rooms([room], now_ms)).get(room)
        entries = await self._store.audit(room, limit)
        return document(request, {
            "room": room, "slow": 0 if state is None else state.slow,
            "muted": 0 if state is None else len(state.muted),
            "banned": 0 if state is None else len(state.banned),
            "audit": [audit_document(e) for e in entries]})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        raw = request.query.get("limit")
        limit = MESSAGES_DEFAULT if raw is None else parse_count("limit", raw, 1, MESSAGES_MAX)
        snap = await self._reader.snapshot(room)
        # Recall notices are no messages (answers list them as ``recalled``).
        held = list(heapq.merge(snap.normal, (i for i in snap.important if not i.recall),
                                key=_seq))
        return document(request, {"room": room, "epoch": snap.epoch, "seq": snap.head,
                                  "messages": [orjson.loads(i.json) for i in held[-limit:]]})

    async def held(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        raw = request.query.get("limit")
        limit = LIST_DEFAULT if raw is None else parse_count("limit", raw, 1, LIST_MAX)
        return document(request, await self.reviews.listing(room, limit))

    async def approve(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        return document(request, await self.reviews.approve(room, request.match_info["id"]),
                        status=201)

    async def deny(self, request: web.Request) -> web.StreamResponse:
        room = self._admin(request)
        return document(request, await self.reviews.deny(room, request.match_info["id"]))
