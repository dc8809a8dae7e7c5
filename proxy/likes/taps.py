"""A like request: ``POST /v1/rooms/{room}/likes`` with ``{"uid": ..., "count": n}``.

Who taps: in ``open`` mode the body names its uid; in ``ticket`` mode the
ticket does (a uid in the body must be the ticket's, as for a send), and the
ticket must be good for the room. The room need not exist yet (a broadcast
may be tapped before its first message) but its name must be valid. ``count``
is 1 to :data:`~.likes.MAX_COUNT` (a client batches its taps). Answered
``202 {"likes": total}``, the room's total as this node knows it, at once:
the taps reach the store with the node's next flush (:mod:`.likes`).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from liveroom.codec import decode_request, media_type, wants_msgpack
from liveroom.errors import BadBody, Unauthorized

from ..auth import bearer
from ..front.limits import HeadRules
from ..params import body_uid
from ..reply import Reply, answer_to, document_reply
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
                 tickets: Tickets | None = None) -> None:
        self.likes = likes
        self.head_rules = head_rules
        """What a like's head may be (checked before its body is read)."""
        self.tickets = tickets
        """Set by the role in ``ticket`` mode (None: open)."""

    def tap(self, room: str, content_type: str, raw: bytes,
            authorization: str | bytes | None, accept: str) -> Reply:
        """The answer to one like request (202, or the error's); its head, the
        room's name included, was checked by :attr:`head_rules` (on the
        front and on aiohttp alike)."""
        try:
            tickets = self.tickets
            if tickets is None:
                uid, count = parse_taps(decode_request(media_type(content_type), raw),
                                        uid_required=True)
            else:
                claims = tickets.good_for(room, bearer(authorization), None)
                uid, count = parse_taps(decode_request(media_type(content_type), raw),
                                        uid_required=False)
                if uid is not None and uid != claims.uid:
                    raise Unauthorized(UID_MISMATCH)
                uid = claims.uid
            assert uid is not None
            total = self.likes.tap(room, uid, count)
            return document_reply({"likes": total}, use_msgpack=wants_msgpack(accept),
                                  status=202)
        except Exception as exc:
            return answer_to(exc, logger, "a like in room %s failed", room)
