"""Parsing and validating requests into frozen values; every refusal is a 4xx."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from liveroom.codec import json_size
from liveroom.errors import BadBody, BadRequest, TooLarge
from liveroom.model import (
    MAX_INT,
    check_client_msg_id,
    check_name,
    is_digits,
    is_name,
    is_room,
    parse_count,
    same_value,
    value_hash,
)

# The values made per poll are slotted value classes (docs/development.md,
# "Compiled modules").


class Cursor:
    """Where a listener stands, as its last answer told it."""

    __slots__ = ("ctx", "epoch", "iseq", "seq")

    def __init__(self, epoch: str, seq: int, iseq: int, ctx: str | None) -> None:
        self.epoch = epoch
        self.seq = seq
        self.iseq = iseq
        self.ctx = ctx

    def _fields(self) -> tuple[str, int, int, str | None]:
        return self.epoch, self.seq, self.iseq, self.ctx

    def __eq__(self, other: object) -> bool:
        return same_value(self, other)

    def __hash__(self) -> int:
        return value_hash(self)

    def __repr__(self) -> str:
        return f"Cursor({self.epoch!r}, {self.seq}, {self.iseq}, {self.ctx!r})"


class PollParams:
    """A poll's parameters."""

    __slots__ = ("cursor", "pseq", "ranking", "recent", "room", "spread", "timeout", "uid")

    def __init__(self, room: str, uid: str, cursor: Cursor | None, timeout: float,
                 recent: int, spread: int | None = None, pseq: int | None = None,
                 ranking: int | None = None) -> None:
        self.room = room
        self.uid = uid
        self.cursor = cursor
        """``None`` for a first poll."""
        self.timeout = timeout
        self.recent = recent
        self.spread = spread
        """The routing hint the client echoes (``spread``), if any."""
        self.pseq = pseq
        """The personal cursor the client echoes (``pseq``), if any."""
        self.ranking = ranking
        """The version of the gift ranking the client echoes (``ranking``), if any."""


SPREAD_MAX: Final = 4095
"""The largest routing hint a poll may echo (``--vip-spread`` is at most 4096)."""

def parse_poll(room: str, query: dict[str, str], *, default_timeout: float,
               max_timeout: int, recent_default: int, recent_max: int) -> PollParams:
    """A poll's parameters from its query (a dict, not any mapping:
    docs/development.md, "Compiled modules"), or a 400."""
    # The checks of check_name and parse_count, made inline on every poll;
    # those functions only raise the refusals.
    if not is_room(room):
        check_name("room", room)
    uid = query.get("uid")
    if uid is None:
        raise BadRequest("uid is required")
    if not is_name(uid):
        check_name("uid", uid)
    raw_timeout = query.get("timeout")
    timeout = default_timeout if raw_timeout is None else float(
        parse_count("timeout", raw_timeout, 1, max_timeout))
    raw_recent = query.get("recent")
    recent = recent_default if raw_recent is None else parse_count(
        "recent", raw_recent, 0, recent_max)
    raw_spread = query.get("spread")
    spread = None if raw_spread is None else parse_count("spread", raw_spread, 0, SPREAD_MAX)
    raw_pseq = query.get("pseq")
    pseq = None if raw_pseq is None else parse_count("pseq", raw_pseq)
    raw_ranking = query.get("ranking")
    ranking = None if raw_ranking is None else parse_count("ranking", raw_ranking)
    raw_seq = query.get("seq")
    epoch = query.get("epoch")
    if epoch is not None and not is_name(epoch):  # an epoch is written like a name
        raise BadRequest("epoch must be the value of a previous answer")
    # Checked on first polls too, like the epoch: the parameter means the same
    # on every poll, whether or not this one uses it.
    ctx = query.get("ctx") or None
    if ctx is not None and len(ctx) > 512:
        raise BadRequest("ctx must be the value of a previous answer")
    if raw_seq is None:
        raw_iseq = query.get("iseq")
        if raw_iseq is not None:  # a cursor, checked on a first poll too
            parse_count("iseq", raw_iseq)
            if epoch is None:
                raise BadRequest("epoch is required with iseq")
        return PollParams(room, uid, None, timeout, recent, spread, pseq, ranking)
    seq = int(raw_seq) if is_digits(raw_seq) else parse_count("seq", raw_seq)
    if seq > MAX_INT:
        parse_count("seq", raw_seq)
    raw_iseq = query.get("iseq")
    if raw_iseq is None:
        iseq = seq
    else:
        iseq = int(raw_iseq) if is_digits(raw_iseq) else parse_count("iseq", raw_iseq)
        if iseq > MAX_INT:
            parse_count("iseq", raw_iseq)
    if epoch is None:
        raise BadRequest("epoch is required with seq")
    return PollParams(room, uid, Cursor(epoch, seq, iseq, ctx), timeout, recent, spread, pseq,
                      ranking)


class SendParams:
    """A send's fields. ``uid`` is ``None`` only where the uid may come from
    elsewhere (a ticket); ``to`` names the addressee of a personal message
    (then ``important`` is true)."""

    __slots__ = ("body", "client_msg_id", "important", "to", "uid")

    def __init__(self, uid: str | None, body: Any, important: bool, client_msg_id: str | None,
                 to: str | None = None) -> None:
        self.uid = uid
        self.body = body
        self.important = important
        self.client_msg_id = client_msg_id
        self.to = to

    def __repr__(self) -> str:
        return (f"SendParams(uid={self.uid!r}, body={self.body!r}, "
                f"important={self.important}, client_msg_id={self.client_msg_id!r}, "
                f"to={self.to!r})")


def body_uid(doc: Any, *, fields: str, uid_required: bool) -> str | None:
    """The ``uid`` a request's body names (checked), from an object that
    should hold ``fields`` (said in the refusal); ``None`` when it names none
    and ``uid_required`` is false (in ``ticket`` mode, where the ticket names it)."""
    if not isinstance(doc, dict):
        raise BadBody(f"the request body must be an object with {fields}")
    uid = doc.get("uid")
    if uid is None:
        if uid_required:
            raise BadBody("uid is required")
    else:
        check_name("uid", uid)
    return uid


_SEND_FIELDS: Final = frozenset({"uid", "body", "important", "client_msg_id", "to"})


def parse_send(doc: Any, *, max_body: int, uid_required: bool = True,
               size_bound: int = -1) -> SendParams:
    """A send's fields, from a document :func:`~liveroom.codec.decode_request`
    made (its values checked); ``uid_required=False`` lets the body name no
    uid (in ``ticket`` mode, where the ticket names it). ``size_bound``: a
    bound on the JSON size of any part of ``doc``
    (:func:`~liveroom.codec.decode_request_bounded`; -1: none known), which
    spares encoding the body to measure it when it is within ``max_body``."""
    uid = body_uid(doc, fields="uid and body", uid_required=uid_required)
    if "body" not in doc or doc["body"] is None:
        raise BadBody("body is required")
    body = doc["body"]  # checked with the whole document by decode_request
    if not 0 <= size_bound <= max_body and json_size(body) > max_body:
        raise TooLarge(f"body is larger than {max_body} bytes")
    to = doc.get("to")
    if to is not None:
        check_name("to", to)
    important = doc.get("important", to is not None)
    if not isinstance(important, bool):
        raise BadBody("important must be true or false")
    if to is not None and not important:
        raise BadBody("a personal message (to) is important: leave important out or true")
    cmid = doc.get("client_msg_id")
    if cmid is not None:
        check_client_msg_id(cmid)
    # A uid and a body are all most sends hold: only a document with more
    # (or other) keys is looked through.
    if len(doc) > 2 or uid is None:
        unknown = [key for key in doc if key not in _SEND_FIELDS]
        if unknown:
            raise BadBody(f"unknown fields: {', '.join(sorted(unknown))}")
    return SendParams(uid, body, important, cmid, to)


MEMBERS_PAGE_MAX: Final = 1000
"""Most members one ``/online`` answer lists."""


def parse_members_page(room: str, query: Mapping[str, str]) -> tuple[str, int, int]:
    """``(room, offset, limit)`` of ``GET /v1/rooms/{room}/online``."""
    check_name("room", room)
    offset = parse_count("offset", query["offset"]) if "offset" in query else 0
    limit = parse_count("limit", query["limit"], 1, MEMBERS_PAGE_MAX) \
        if "limit" in query else 100
    return room, offset, limit


def parse_series_range(room: str, query: Mapping[str, str], now: float) -> tuple[str, int, int]:
    """``(room, since, until)`` of ``GET /v1/rooms/{room}/stats/online``, in Unix
    seconds: ``until`` defaults to now, ``since`` to an hour before ``until``."""
    check_name("room", room)
    until = parse_count("until", query["until"]) if "until" in query else int(now)
    since = parse_count("since", query["since"]) if "since" in query else max(0, until - 3600)
    if since > until:
        raise BadRequest("since must not be after until")
    return room, since, until
