"""A like request: ``POST /v1/rooms/{room}/likes`` with ``{"uid": ..., "count": n}``.

Who taps: in ``open`` mode the body names its uid; in ``ticket`` mode the
ticket does (a uid in the body must be the ticket's, as for a send), and the
ticket must be good for the room; the backend's tokens (publisher or admin)
tap for the uid the body names. The room must exist (its first message, or
an operator's ``room start``: a 404 ``no_such_room`` otherwise, asked of the
room cache as a first poll asks it, :mod:`proxy.room_gate`). ``count``
is 1 to :data:`~.likes.MAX_COUNT` (a client batches its taps). Answered
``202 {"likes": total}``, the room's total as this node knows it, at once:
the taps reach the store with the node's next flush (:mod:`.likes`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Coroutine
from typing import Any, Final

from liveroom.codec import decode_request, media_type, wants_msgpack
from liveroom.errors import BadBody, StoreUnavailable, Unauthorized
from liveroom.snapshot import ABSENT_EPOCH

from ..auth import Tokens, bearer
from ..front.limits import HeadRules
from ..moderation.rules import Moderation
from ..params import body_uid
from ..reply import Reply, answer_to, document_reply
from ..room_gate import RoomGate
from ..tickets import UID_MISMATCH, Tickets
from .likes import MAX_COUNT, Likes

logger: Final = logging.getLogger("liveroom.proxy.taps")


def parse_taps(doc: Any, *, uid_required: bool) -> tuple[str | None, int]:
    """``(uid, count)`` of a like request's document."""
    uid = body_uid(doc, fields="uid and count", uid_required=uid_required)
    count = doc.get("count", 1)
    if type(count) is not int or not 1 <= count <= MAX_COUNT:
        raise BadBody(f"count must be a whole number from 1 to {MAX_COUNT}")
    unknown = set(doc) - {"uid", "count"}
    if unknown:
        raise BadBody(f"unknown fields: {', '.join(sorted(unknown))}")
    return uid, count


class Taps:
    """The like requests of one node (both paths: the front and aiohttp)."""

    def __init__(self, likes: Likes, head_rules: HeadRules,
                 tickets: Tickets | None = None, *, gate: RoomGate | None = None,
                 moderation: Moderation | None = None, tokens: Tokens | None = None) -> None:
        self.likes = likes
        self.head_rules = head_rules
        """What a like's head may be (checked before its body is read)."""
        self.tickets = tickets
        """Set by the role in ``ticket`` mode (None: open)."""
        self.gate = gate
        """Where the cost table says a like's room must exist: who asks (None: any name)."""
        self.moderation = moderation
        """The rooms' mutes, bans and slow mode (None: none)."""
        self.tokens = tokens
        """The backend's tokens: in ``ticket`` mode they tap for the uid the
        body names (None: tickets only)."""

    def tap(self, room: str, content_type: str, raw: bytes,
            authorization: str | bytes | None,
            accept: str) -> Reply | Coroutine[Any, Any, Reply]:
        """The answer to one like request (202, or the error's); its head, the
        room's name included, was checked by :attr:`head_rules` (on the
        front and on aiohttp alike). A coroutine giving it when the node must
        first learn whether the room exists or what its total is (a room it
        has not read lately)."""
        try:
            # The room first, as aiohttp's routes check it (proxy/api/bounds.py):
            # the same request gets the same refusal on either path. Its epoch
            # is the broadcast the taps belong to ("": not asked, any name).
            gate = self.gate
            epoch = "" if gate is None else gate.epoch(room)
            if epoch is None:
                return self._tap_later(room, content_type, raw, authorization, accept)
            if epoch == ABSENT_EPOCH:
                assert gate is not None
                raise gate.refusal(room)
            uid, count = self._taps_of(room, content_type, raw, authorization)
            if not self.likes.knows(room, epoch):
                return self._learn_then_tap(room, uid, count, accept, epoch)
            return self._tapped(room, uid, count, accept, epoch)
        except Exception as exc:
            return answer_to(exc, logger, "a like in room %s failed", room)

    async def _tap_later(self, room: str, content_type: str, raw: bytes,
                         authorization: str | bytes | None, accept: str) -> Reply:
        try:
            assert self.gate is not None
            epoch = await self.gate.require(room)
            uid, count = self._taps_of(room, content_type, raw, authorization)
        except Exception as exc:
            return answer_to(exc, logger, "a like in room %s failed", room)
        return await self._learn_then_tap(room, uid, count, accept, epoch)

    async def _learn_then_tap(self, room: str, uid: str, count: int, accept: str,
                              epoch: str) -> Reply:
        try:
            if not self.likes.knows(room, epoch):
                # The store away: the taps are still acknowledged (they wait in
                # memory), the total shown from what this node holds.
                with contextlib.suppress(StoreUnavailable):
                    await self.likes.learn(room, epoch)
            return self._tapped(room, uid, count, accept, epoch)
        except Exception as exc:
            return answer_to(exc, logger, "a like in room %s failed", room)

    def _taps_of(self, room: str, content_type: str, raw: bytes,
                 authorization: str | bytes | None) -> tuple[str, int]:
        """``(uid, count)``: who taps, by its credential (checked before the
        body is decoded), and how often."""
        claims = None
        tickets = self.tickets
        if tickets is not None:
            token = bearer(authorization)
            # The backend's tokens tap for a uid the body names (as they send for one).
            if self.tokens is None or self.tokens.right_of(token) is None:
                claims = tickets.good_for(room, token, None)
        uid, count = parse_taps(decode_request(media_type(content_type), raw),
                                uid_required=claims is None)
        if claims is not None:
            if uid is not None and uid != claims.uid:
                raise Unauthorized(UID_MISMATCH)
            uid = claims.uid
        assert uid is not None
        return uid, count

    def _tapped(self, room: str, uid: str, count: int, accept: str, epoch: str) -> Reply:
        """Count the taps (a uid that may not speak in the room may not tap
        either; slow mode paces its like requests); the 202."""
        moderation = self.moderation
        slow = 0
        if moderation is not None and room in moderation.rules:
            slow = moderation.like_pace(room, uid)
        total = self.likes.tap(room, uid, count, slow, epoch)
        return document_reply({"likes": total}, use_msgpack=wants_msgpack(accept), status=202)
