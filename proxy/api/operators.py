"""The operators' HTTP API: the rooms' sects, the start and the end of a
broadcast, and the overview.

Every route under ``/v1/admin/`` needs the admin token (a missing or unknown
token is 401, the publisher token 403). ``GET /v1/rooms/{room}/broadcasts`` is
public, like the other stats.

- ``GET /v1/admin/vip`` lists the rooms' sects (read from the store): the vip
  rooms, every room with a record (pinned or automatic, since when, its last
  moves) and the automatic rule in force; ``GET /v1/admin/vip/{room}`` one.
- ``PUT /v1/admin/vip/{room}/pin?sect=vip|normal`` pins a room (moving it
  there); ``DELETE .../pin`` unpins it (it stays, and the rule decides from
  now on). ``PUT /v1/admin/vip/{room}`` is a pin to vip; ``DELETE
  /v1/admin/vip/{room}`` unpins the room and moves it to the normal sect now.
  This node serves the room from its new sect at once; other nodes over the
  same store within their ``--vip-refresh``.
- ``POST /v1/admin/rooms/{room}/start`` opens a room before its first message
  (201, or 200 when it was open already): its listeners count online and as
  viewers from their first poll, and it lives ``room_ttl`` while read.
- ``POST /v1/admin/rooms/{room}/end`` ends the room's broadcast: a new epoch
  with an empty log (every listener resets into it, with no recent messages)
  and a new viewers history; the ended one's viewers stay readable for
  ``history_ttl``.
- ``GET /v1/admin/rooms?limit=N`` lists the biggest rooms now over every node
  (1 to 100, default 20), each with its online count, the hold's
  ``interval_ms`` for that count (as a poll answer says it), its vip flag and
  its messages a minute; ``GET /v1/admin/nodes`` the live nodes and what each
  holds. Both read the node registry (``statsvr.registry``: one store read,
  the figures a few seconds old) and, for the rooms, this node's sects.

A store that cannot be reached answers 503 with ``Retry-After`` (the errors
middleware shapes every failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from liveroom import sects
from liveroom.clock import Clock
from liveroom.errors import BadRequest, StoreUnavailable
from liveroom.events import NO_EVENTS, Events
from liveroom.model import check_name, parse_count
from liveroom.roles import RoomReader, StatsReader
from liveroom.sects import NONE, Sect
from liveroom.settings import Settings
from liveroom.store.base import RANKED_ROOMS_MAX, MessageLog, Operators
from liveroom.whitelist import (
    SectChange,
    VipList,
    pin_room,
    read_sects,
    release_room,
)

from ..auth import Right, Tokens
from ..polls.tiers import TierTable
from ..responses import document

logger = logging.getLogger("liveroom.proxy")

ROOMS_DEFAULT = 20
"""Rooms ``GET /v1/admin/rooms`` lists without a ``limit``."""

PULL_WAIT = 2.0
"""Seconds an end of broadcast waits for this node to pull the new epoch."""


@dataclass
class OperatorRoutes:
    """The admin API of one node, and the public list of ended broadcasts."""

    operators: Operators
    tokens: Tokens
    clock: Clock
    settings: Settings
    stats: StatsReader
    reader: RoomReader
    log: MessageLog
    vip_list: VipList
    """This node's sects: told at once of a change made through this API."""
    events: Events = NO_EVENTS
    """Where a broadcast's start and end and a room's move write their events."""

    tiers: TierTable = field(init=False)
    """The hold's tiers, to say which a room's online count gets."""

    def __post_init__(self) -> None:
        self.tiers = TierTable(self.settings.tiers)
        self.events.completes("broadcast.ended", self._complete_ended)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/admin/vip", self.sect_list)
        app.router.add_get("/v1/admin/vip/{room}", self.vip_room)
        app.router.add_put("/v1/admin/vip/{room}", self.vip_add)
        app.router.add_delete("/v1/admin/vip/{room}", self.vip_remove)
        app.router.add_put("/v1/admin/vip/{room}/pin", self.vip_pin)
        app.router.add_delete("/v1/admin/vip/{room}/pin", self.vip_unpin)
        app.router.add_post("/v1/admin/rooms/{room}/start", self.start_broadcast)
        app.router.add_post("/v1/admin/rooms/{room}/end", self.end_broadcast)
        app.router.add_get("/v1/rooms/{room}/broadcasts", self.broadcasts)
        app.router.add_get("/v1/admin/rooms", self.biggest_rooms)
        app.router.add_get("/v1/admin/nodes", self.nodes)

    def _admin(self, request: web.Request) -> None:
        self.tokens.require(request.headers.get("Authorization"), Right.ADMIN)

    # -- the sects ---------------------------------------------------------------------

    async def sect_list(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        records = await read_sects(self.operators)
        rule = self.vip_list.rule
        return document(request, {
            "rooms": sorted(room for room, record in records.items() if record.vip),
            "sects": [sects.document(room, records[room]) for room in sorted(records)],
            "rule": None if rule is None else {
                "promote": rule.promote, "promote_after": rule.promote_after,
                "demote": rule.demote, "demote_after": rule.demote_after,
                "settle": rule.settle}})

    async def vip_room(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        room = check_name("room", request.match_info["room"])
        records = await read_sects(self.operators)
        return document(request, sects.document(room, records.get(room, NONE)))

    async def vip_add(self, request: web.Request) -> web.StreamResponse:
        return await self._change(request, lambda room, now: pin_room(
            self.operators, self.log, room, "vip", now, events=self.events))

    async def vip_remove(self, request: web.Request) -> web.StreamResponse:
        return await self._change(request, lambda room, now: release_room(
            self.operators, room, now, events=self.events))

    async def vip_pin(self, request: web.Request) -> web.StreamResponse:
        sect: Sect
        match request.query.get("sect"):
            case "vip":
                sect = "vip"
            case "normal":
                sect = "normal"
            case _:
                raise BadRequest("sect must be vip or normal")
        return await self._change(request, lambda room, now: pin_room(
            self.operators, self.log, room, sect, now, events=self.events))

    async def vip_unpin(self, request: web.Request) -> web.StreamResponse:
        return await self._change(request, lambda room, now: pin_room(
            self.operators, self.log, room, None, now, events=self.events))

    async def _change(self, request: web.Request,
                      call: Callable[[str, int], Awaitable[SectChange]]) -> web.StreamResponse:
        self._admin(request)
        room = check_name("room", request.match_info["room"])
        change = await call(room, int(self.clock.time() * 1000))
        # Noted even when unchanged in the store: this node may not have read
        # another node's change yet.
        self.vip_list.note(change)
        return document(request, {**sects.document(room, change.after),
                                   "changed": change.moved})

    # -- broadcasts ------------------------------------------------------------------

    async def start_broadcast(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        room = check_name("room", request.match_info["room"])
        ahead = await self.events.ahead("broadcast.started", room)
        try:
            started = await self.operators.start_broadcast(
                room, event=None if ahead is None else ahead.event)
        finally:
            await self.events.settle(ahead)
        if started.created:
            logger.info("room %s: opened, broadcast %d (epoch %s)", room,
                        started.broadcast, started.epoch)
            await self._pulled(room)
        return document(request, {"room": room, "epoch": started.epoch,
                                   "broadcast": started.broadcast,
                                   "created": started.created},
                         201 if started.created else 200)

    async def end_broadcast(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        room = check_name("room", request.match_info["room"])
        ahead = await self.events.ahead("broadcast.ended", room)
        try:
            ended = await self.operators.end_broadcast(
                room, int(self.clock.time() * 1000), int(self.settings.history_ttl * 1000),
                event=None if ahead is None else ahead.event)
        finally:
            await self.events.settle(ahead)
        logger.info("room %s: broadcast %d started (epoch %s)", room, ended.broadcast,
                 ended.epoch)
        await self._pulled(room)
        return document(request, {"room": room, "epoch": ended.epoch,
                                   "broadcast": ended.broadcast})

    async def _complete_ended(self, room: str, event: dict[str, Any]) -> dict[str, Any]:
        """A ``broadcast.ended`` event, kept by the end with its number
        alone, with its figures as the ended broadcast's archive keeps them
        (zeros when the archive is gone: the end stands, and its event goes
        out all the same). Raises ``StoreUnavailable`` when the archive
        cannot be read: the event stays in its room for the next move."""
        number = int(event["broadcast"])
        fields: dict[str, Any] = {"broadcast": number, "viewers": 0, "likes": 0,
                                  "gifts": 0, "ranking": []}
        past = next((b for b in await self.stats.broadcasts(room)
                     if b.broadcast == number), None)
        if past is not None:
            fields.update(ended_ms=past.ended_ms, viewers=past.viewers,
                          viewers_exact=past.viewers_exact, likes=past.likes,
                          gifts=past.gifts,
                          ranking=[{"uid": uid, "score": score} for uid, score in past.ranking])
        return {**event, **fields}

    async def _pulled(self, room: str) -> None:
        """This node's listeners see the change at once rather than at the
        next fallback pull; it is stored already, so a failed pull only delays
        them."""
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            async with asyncio.timeout(PULL_WAIT):
                await self.reader.wait_pulled(room)

    async def broadcasts(self, request: web.Request) -> web.StreamResponse:
        room = check_name("room", request.match_info["room"])
        past = await self.stats.broadcasts(room)
        return document(request, {"room": room, "broadcasts": [
            {"broadcast": b.broadcast, "ended_at": b.ended_ms, "viewers": b.viewers,
             "viewers_exact": b.viewers_exact, "likes": b.likes, "gifts": b.gifts,
             "ranking": [{"uid": uid, "score": score} for uid, score in b.ranking]}
            for b in past]})

    # -- the overview ------------------------------------------------------------------

    async def biggest_rooms(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        limit = parse_count("limit", request.query["limit"], 1, RANKED_ROOMS_MAX) \
            if "limit" in request.query else ROOMS_DEFAULT
        ranked = await self.stats.biggest_rooms(limit)
        return document(request, {"rooms": [
            {"room": r.room, "online": r.online,
             "interval_ms": self.tiers.pace(r.online, "", 0).interval_ms,
             "vip": self.vip_list.is_vip(r.room), "messages_per_minute": r.per_minute}
            for r in ranked]})

    async def nodes(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        states = await self.stats.nodes()
        return document(request, {"nodes": [
            {"node": n.node, "announced_at": n.announced_ms, "expires_at": n.expires_ms,
             "rooms_cached": n.announcement.load.rooms_cached,
             "held_polls": n.announcement.load.held_polls,
             "members": n.announcement.load.members,
             "rooms_merged": n.announcement.load.rooms_merged,
             "rooms_listed": len(n.announcement.rooms)}
            for n in states]})

