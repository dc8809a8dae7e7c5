"""The operators' HTTP API of the word filter. Every route needs the admin
token (401 without, 403 for the publisher's):

- ``PUT /v1/admin/filters/{name}`` with ``{"words": [...], "action":
  "block" | "hold" | "mask", "rooms": [...]}`` stores the list ``name``
  (``[A-Za-z0-9_.-]{1,64}``), replacing one of that name; without
  ``rooms`` (or with ``[]``) it applies to every room. Words are kept each
  once, in their first order; each has 1 to ``--filter-word-chars``
  characters and at least one letter or digit; a list has 1 to
  ``--filter-words-max`` words and names at most 1 000 rooms (400
  otherwise); past ``--filter-lists-max`` lists a new name is 409. The
  body may take ``--filter-words-max`` words of ``--filter-word-chars``
  characters each escaped the longest JSON way (:func:`body_limit`; 413
  beyond). Answers the list as stored.
- ``GET /v1/admin/filters``: every list, by name, with the version and
  the limits.
- ``DELETE /v1/admin/filters/{name}``: the list is gone (404 if there was
  none).

A change is applied through the store (:mod:`.lists`: every node within
about a second, this one before it answers) and logged, one line.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from liveroom.clock import Clock
from liveroom.codec import decode_request, media_type
from liveroom.errors import BadBody, BadRequest, Conflict, NotFound, TooLarge, UnsupportedMedia
from liveroom.settings import Settings
from liveroom.store.base import (
    FILTER_ROOMS_MAX,
    FiltersFull,
    FilterStore,
    WordList,
    check_filter_name,
    made_list,
)

from ..auth import Right, Tokens
from ..bodies import read_body
from ..responses import document
from .lists import Filters

logger = logging.getLogger("liveroom.proxy.filters")

_FIELDS = frozenset(("words", "action", "rooms"))


def body_limit(settings: Settings) -> int:
    """The most bytes a list's ``PUT`` body may have under ``settings``:
    every word as long as it may be, each character escaped as JSON's
    longest (a surrogate pair of ``\\uXXXX``, 12 bytes), with its quotes
    and comma; every room; 4 KiB for the rest (about 3.9 MB by default)."""
    return (settings.filter_words_max * (settings.filter_word_chars * 12 + 3)
            + FILTER_ROOMS_MAX * 67 + 4096)


def list_document(word_list: WordList) -> dict[str, object]:
    """A list as the API shows it (``rooms`` empty: every room)."""
    return {"name": word_list.name, "action": word_list.action,
            "rooms": list(word_list.rooms), "words": list(word_list.words),
            "count": len(word_list.words), "version": word_list.version,
            "at_ms": word_list.at_ms}


def parse_list(name: str, doc: Any, at_ms: int) -> WordList:
    """The list a ``PUT``'s body gives (its rules checked by the store)."""
    if not isinstance(doc, dict):
        raise BadBody("the request body must be an object with words, action and rooms")
    unknown = set(doc) - _FIELDS
    if unknown:
        raise BadBody(f"unknown fields: {', '.join(sorted(unknown))}")
    words, action, rooms = doc.get("words"), doc.get("action"), doc.get("rooms", [])
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        raise BadBody("words must be a list of at least one word (text)")
    if not isinstance(action, str):
        raise BadBody("action must be block, hold or mask")
    if not isinstance(rooms, list) or not all(isinstance(r, str) for r in rooms):
        raise BadBody("rooms must be a list of rooms (none: every room)")
    return made_list(name, action, words, rooms, at_ms)


class FilterRoutes:
    """The word filter's routes of one node."""

    def __init__(self, filters: Filters, store: FilterStore, tokens: Tokens, clock: Clock,
                 settings: Settings) -> None:
        self.filters = filters
        self._store = store
        self._tokens = tokens
        self._clock = clock
        self._settings = settings
        self._limits = settings.filter_limits()
        self._body_limit = body_limit(settings)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/admin/filters", self.lists)
        app.router.add_put("/v1/admin/filters/{name}", self.put)
        app.router.add_delete("/v1/admin/filters/{name}", self.delete)

    def _admin(self, request: web.Request) -> None:
        self._tokens.require(request.headers.get("Authorization"), Right.ADMIN)

    @staticmethod
    def _name(request: web.Request) -> str:
        try:
            return check_filter_name(request.match_info["name"])
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    async def lists(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        version, versions = await self._store.versions(0)
        found = await self._store.lists(sorted(versions or ()))
        limits = self._limits
        return document(request, {
            "version": version, "lists": [list_document(found[n]) for n in sorted(found)],
            "limits": {"lists": limits.lists, "words": limits.words,
                       "word_chars": limits.word_chars, "rooms": FILTER_ROOMS_MAX}})

    async def put(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        name = self._name(request)
        if (request.headers.get("Content-Encoding") or "identity").lower() != "identity":
            raise UnsupportedMedia("compressed bodies are not accepted")
        limit = self._body_limit
        raw = await read_body(request, limit, self._settings.request_timeout,
                              lambda: TooLarge(f"request body is larger than {limit} bytes"))
        doc = decode_request(media_type(request.headers.get("Content-Type", "")), raw)
        word_list = parse_list(name, doc, int(self._clock.time() * 1000))
        try:
            version = await self._store.put(word_list, self._limits)
        except FiltersFull as exc:
            raise Conflict(f"{exc}; delete one first") from None
        except ValueError as exc:
            raise BadBody(str(exc)) from None
        await self.filters.refresh()
        rooms = ", ".join(word_list.rooms) or "every room"
        logger.info("word filter: list %s put by admin (%s, %d words, %s), version %d", name,
                    word_list.action, len(word_list.words), rooms, version)
        return document(request, list_document(WordList(
            name, word_list.action, word_list.words, word_list.rooms, word_list.at_ms,
            version)))

    async def delete(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        name = self._name(request)
        version = await self._store.delete(name)
        if version is None:
            raise NotFound(f"no word list is named {name}")
        await self.filters.refresh()
        logger.info("word filter: list %s deleted by admin, version %d", name, version)
        return document(request, {"name": name, "deleted": True, "version": version})
