"""The operators' HTTP API of the webhooks. Every route needs the admin
token (401 without, 403 for the publisher's):

- ``GET /v1/admin/webhooks/failed?limit=N`` (1 to 1 000, default 100): the
  events given up after ``--webhook-retry-for``, oldest first, each with
  its id, type, room, when it was given up and why (the last attempt's
  failure), and the event itself; ``count`` says how many are kept.
- ``POST /v1/admin/webhooks/replay`` with ``{"ids": [...]}`` (1 to 1 000
  event ids) puts those failed events back in the outbox, each under its
  own id (a receiver that kept one dedupes it); with no body, or ``{}``,
  every failed event. Answers the ids replayed (an id not in the failed
  list is left out) and wakes this node's delivery. Its body is read up to
  :data:`REPLAY_BODY_MAX` bytes, room for 1 000 ids of the longest (a
  longer body is refused with 413 as soon as it arrives).

Both work with or without ``--webhook`` on this node: the outbox is the
store's, and whichever node delivers sends what is replayed.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from aiohttp import web

from liveroom.codec import decode_request, media_type
from liveroom.errors import BadBody, TooLarge
from liveroom.model import parse_count
from liveroom.settings import DEFAULTS
from liveroom.store.base import EVENT_ID_MAX, FAILED_LIST_MAX, Failed, Outbox, check_event_id
from liveroom.webhooks import Webhooks

from ..auth import Right, Tokens
from ..bodies import read_body
from ..responses import document

REPLAY_BODY_MAX = 64 + FAILED_LIST_MAX * (EVENT_ID_MAX + 4)
"""Bytes of a replay's body: ``{"ids": [...]}`` with 1 000 ids of 64
characters, each quoted and followed by a comma and a space (about 68 KB;
the application's own bound is a send's, far less)."""

logger = logging.getLogger("liveroom.proxy.webhooks")

LIST_DEFAULT = 100
"""Failed events ``GET .../failed`` lists without a ``limit``."""


def failed_document(failed: Failed) -> dict[str, object]:
    """A failed event as the API lists it."""
    try:
        event: Any = orjson.loads(failed.data)
    except orjson.JSONDecodeError:
        event = None
    if not isinstance(event, dict):
        event = {}
    return {"id": failed.event_id, "type": event.get("type"), "room": event.get("room"),
            "failed_ms": failed.failed_ms, "why": failed.why, "event": event}


def parse_ids(doc: Any) -> list[str] | None:
    """The ids a replay's body names (``None``: every failed event, ``{}``)."""
    if doc == {}:
        return None
    if not isinstance(doc, dict):
        raise BadBody('the request body must be an object: {"ids": [...]}, or none')
    unknown = set(doc) - {"ids"}
    if unknown:
        raise BadBody(f"unknown fields: {', '.join(sorted(unknown))}")
    ids = doc.get("ids")
    if not isinstance(ids, list) or not 1 <= len(ids) <= FAILED_LIST_MAX:
        raise BadBody(f"ids must be a list of 1 to {FAILED_LIST_MAX} event ids")
    try:
        return list(dict.fromkeys(check_event_id(i) for i in ids))
    except ValueError as exc:
        raise BadBody(str(exc)) from None


class WebhookRoutes:
    """The webhooks' routes of one node (``outbox`` ``None``: a node built
    without a store's outbox answers an empty list and replays nothing)."""

    def __init__(self, outbox: Outbox | None, tokens: Tokens,
                 webhooks: Webhooks | None = None,
                 request_timeout: float = DEFAULTS.request_timeout) -> None:
        self._outbox = outbox
        self._request_timeout = request_timeout
        """Seconds a replay's body has to arrive in (``--request-timeout``)."""
        self._tokens = tokens
        self._webhooks = webhooks

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/admin/webhooks/failed", self.failed)
        app.router.add_post("/v1/admin/webhooks/replay", self.replay)

    def _admin(self, request: web.Request) -> None:
        self._tokens.require(request.headers.get("Authorization"), Right.ADMIN)

    async def failed(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        raw = request.query.get("limit")
        limit = LIST_DEFAULT if raw is None else parse_count("limit", raw, 1, FAILED_LIST_MAX)
        if self._outbox is None:
            return document(request, {"count": 0, "failed": []})
        listed, count = await self._outbox.failed(limit)
        return document(request, {"count": count,
                                  "failed": [failed_document(f) for f in listed]})

    async def replay(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        raw = await read_body(
            request, REPLAY_BODY_MAX, self._request_timeout,
            lambda: TooLarge(f"request body is larger than {REPLAY_BODY_MAX} bytes"))
        # No body replays every failed event; a body must be an object (a
        # JSON or msgpack null is no "none").
        ids = parse_ids(decode_request(media_type(request.headers.get("Content-Type", "")), raw)) \
            if raw else None
        if self._outbox is None:
            return document(request, {"replayed": [], "count": 0})
        replayed = await self._outbox.replay(ids)
        if self._webhooks is not None:
            self._webhooks.wake()
        logger.info("webhooks: %d failed events replayed by admin", len(replayed))
        return document(request, {"replayed": replayed, "count": len(replayed)})
