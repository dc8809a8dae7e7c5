"""The message model: names, messages as senders give them and as the store keeps them.

Data crossing a boundary (proxy → store, store → recvsvr) is a slotted value
class with a written ``__init__`` (docs/development.md, "Compiled modules").
Validation of names and integers lives here so every role refuses the same input.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Final, Protocol

from .errors import BadRequest

MAX_INT: Final = 2**53 - 1
"""Largest integer in the HTTP contract (it survives a JavaScript client)."""

_CLIENT_MSG_ID: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")

# Names and counts are checked with str methods, not patterns: a poll checks its
# room, uid, epoch and cursors, and a regex match costs several times a method
# call (tests/front/test_poll_query.py checks they agree with the patterns on any text).


def is_name(value: str) -> bool:
    """Whether ``value`` is a valid uid or room name, ``[A-Za-z0-9_.-]{1,64}``
    (no error: for hot paths that call :func:`check_name` only to raise)."""
    if not 0 < len(value) <= 64 or not value.isascii():
        return False
    # An ASCII string is alphanumeric exactly when it is [A-Za-z0-9]+.
    return value.isalnum() or value.replace("_", "a").replace(".", "a").replace(
        "-", "a").isalnum()


def is_room(value: str) -> bool:
    """Whether ``value`` is a valid room name: a name not made only of dots."""
    return is_name(value) and value.strip(".") != ""


def is_digits(value: str) -> bool:
    """Whether ``value`` is what :func:`parse_count` parses (range apart):
    ``[0-9]{1,16}``."""
    # ASCII first: str.isdigit() also takes other scripts' digits.
    return 0 < len(value) <= 16 and value.isascii() and value.isdigit()


def name_slot(name: str, count: int) -> int:
    """Which of ``count`` buckets ``name`` falls in: CRC-32 of its UTF-8 bytes
    modulo ``count``.

    The same in every process, on every host and in every release (unlike
    ``hash()``): the proxy picks a uid's statsvr node with it, and statsvr a
    uid's shard, so stored shards stay aligned between nodes.
    """
    return zlib.crc32(name.encode()) % count if count > 1 else 0


def check_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid room or uid name, else raise 400."""
    if not isinstance(value, str) or not is_name(value):
        raise BadRequest(f"{kind} must match [A-Za-z0-9_.-]{{1,64}}")
    if kind == "room" and value.strip(".") == "":  # is_room, its is_name done above
        # "." and ".." are path segments: no browser, proxy or dashboard link
        # can address such a room, so none may exist.
        raise BadRequest("room must not be made only of dots")
    return value


def check_client_msg_id(value: object) -> str:
    if not isinstance(value, str) or not _CLIENT_MSG_ID.fullmatch(value):
        raise BadRequest("client_msg_id must match [A-Za-z0-9_.:-]{1,128}")
    return value


def parse_count(name: str, text: str, low: int = 0, high: int = MAX_INT) -> int:
    """Parse a decimal integer from a query string, strictly.

    Python's ``int()`` also accepts ``1_000``, surrounding spaces, a sign and
    non-ASCII digits; the contract does not, so only ASCII digits are allowed.
    """
    if not is_digits(text):
        raise BadRequest(f"{name} must be an integer between {low} and {high}")
    value = int(text)
    if not low <= value <= high:
        raise BadRequest(f"{name} must be an integer between {low} and {high}")
    return value


# A message's values are slotted value classes (compiled modules: see
# docs/development.md, "Compiled modules"). Treat them as immutable.


class Valued(Protocol):
    """A value class: its value is the tuple its ``_fields`` returns."""

    def _fields(self) -> tuple[object, ...]: ...


def same_value(one: Valued, other: object) -> bool:
    """``one.__eq__(other)`` for a value class: ``other`` is of the same class
    and has the same fields. With :func:`value_hash` it makes the pair of a
    value class's ``__eq__`` and ``__hash__``, which always agree."""
    return type(other) is type(one) and one._fields() == other._fields()


def value_hash(one: Valued) -> int:
    """``one.__hash__()`` for a value class: the hash of its fields."""
    return hash(one._fields())


class NewMessage:
    """A message as a sender posted it, before the store numbers it.

    ``ts``: milliseconds since the epoch, taken by the proxy that accepted it.
    ``to``: the one uid a personal message is for (then it is important);
    ``None`` for a room message, which every listener reads. ``extra``: what
    the backend's send hook attached to it (a small JSON object, bounded by
    ``--send-hook-extra-bytes``), stored and delivered with it; ``None``:
    nothing."""

    __slots__ = ("body", "client_msg_id", "extra", "important", "to", "ts", "uid")

    def __init__(self, uid: str, body: Any, important: bool, ts: int,
                 client_msg_id: str | None = None, to: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        self.uid = uid
        self.body = body
        self.important = important
        self.ts = ts
        self.client_msg_id = client_msg_id
        self.to = to
        self.extra = extra

    def _fields(self) -> tuple[Any, ...]:
        return (self.uid, self.body, self.important, self.ts, self.client_msg_id, self.to,
                self.extra)

    def __eq__(self, other: object) -> bool:
        return same_value(self, other)

    def __hash__(self) -> int:
        return value_hash(self)

    def __repr__(self) -> str:
        return (f"NewMessage(uid={self.uid!r}, body={self.body!r}, important={self.important}, "
                f"ts={self.ts}, client_msg_id={self.client_msg_id!r}, to={self.to!r}, "
                f"extra={self.extra!r})")


class Entry:
    """One message of a room's log as the store keeps it.

    ``ic`` is the number of important messages in the room with a ``seq`` up
    to and including this one; with it a reader counts the normal and important
    messages between two positions without having them (exact ``gap``/``igap``).

    ``to``: a personal message's addressee. Then ``seq`` is its position in the
    room's personal sequence (apart from the room's), ``ic`` is 0, and ``n``
    its ordinal among the messages to ``to`` in the room (1, 2, ...).

    ``extra``: the send hook's object stored with it (``NewMessage.extra``);
    ``None`` for a message without one, an entry stored before extras
    existed, and a tombstone.
    """

    __slots__ = ("body", "extra", "ic", "important", "n", "seq", "to", "ts", "uid")

    def __init__(self, seq: int, ic: int, uid: str, important: bool, ts: int, body: Any,
                 to: str | None = None, n: int = 0,
                 extra: dict[str, Any] | None = None) -> None:
        self.seq = seq
        self.ic = ic
        self.uid = uid
        self.important = important
        self.ts = ts
        self.body = body
        self.to = to
        self.n = n
        self.extra = extra

    def _fields(self) -> tuple[Any, ...]:
        return (self.seq, self.ic, self.uid, self.important, self.ts, self.body, self.to,
                self.n, self.extra)

    def __eq__(self, other: object) -> bool:
        return same_value(self, other)

    def __hash__(self) -> int:
        return value_hash(self)

    def __repr__(self) -> str:
        return (f"Entry(seq={self.seq}, ic={self.ic}, uid={self.uid!r}, "
                f"important={self.important}, ts={self.ts}, body={self.body!r}, "
                f"to={self.to!r}, n={self.n}, extra={self.extra!r})")


RECALL_UID: Final = ""
"""The uid of a recall's notice, the important entry that tells every
listener a message was recalled: no sender has it (a uid is a name of 1 to
64 characters). Its body is :func:`recall_notice`'s."""


def recall_notice(seq: int, uid: str, important: bool, ts: int, ic: int,
                  n: int = 0) -> dict[str, Any]:
    """The body of the notice that message ``seq`` (of ``uid``, sent at
    ``ts``, with ``ic`` important messages up to it) was recalled: what a
    reader needs to put its tombstone in its place. A personal message's
    notice is itself a personal message to the same addressee; ``seq`` is
    then the message's position and ``n`` its ordinal."""
    notice = {"recall": seq, "uid": uid, "important": important, "ts": ts, "ic": ic}
    if n:
        notice["n"] = n
    return notice


def recall_notice_id(seq: int, *, personal: bool = False) -> str:
    """The client_msg_id of the notice that message ``seq`` (``personal``:
    the personal message at that position) was recalled: no sender may
    take it (a client_msg_id of a send never starts with ``!``), and a
    retried recall appends its notice once."""
    return f"!recall:{'personal' if personal else 'room'}:{seq}"


def recalled_target(entry: Entry) -> int:
    """The seq (a personal notice: the position) a recall notice recalls; 0
    for any other entry."""
    if entry.uid != RECALL_UID:
        return 0
    body = entry.body
    if isinstance(body, dict):
        target = body.get("recall")
        if type(target) is int:
            return target
    return 0


def tombstone_of(notice: Entry) -> Entry:
    """The tombstone a recall notice puts in its target's place: the
    message's seq, sender, lane and time, with no body."""
    body = notice.body
    uid, ic, ts, n = body.get("uid"), body.get("ic"), body.get("ts"), body.get("n")
    return Entry(seq=recalled_target(notice), ic=ic if type(ic) is int else 0,
                 uid=uid if isinstance(uid, str) else "", important=body.get("important") is True,
                 ts=ts if type(ts) is int else notice.ts, body=None, to=notice.to,
                 n=n if type(n) is int else 0)


class Appended:
    """What the store says of an append (one is made per send: a native class
    in a compiled build, see docs/development.md, "Compiled modules")."""

    __slots__ = ("created", "duplicate", "epoch", "seq")

    def __init__(self, epoch: str, seq: int, duplicate: bool, created: bool = False) -> None:
        self.epoch = epoch
        self.seq = seq
        """The message's seq; a personal message's position in the room's
        personal sequence."""
        self.duplicate = duplicate
        """True when the ``client_msg_id`` was seen: nothing was stored."""
        self.created = created
        """This send created the room's log."""

    def _fields(self) -> tuple[Any, ...]:
        return (self.epoch, self.seq, self.duplicate, self.created)

    def __eq__(self, other: object) -> bool:
        return same_value(self, other)

    def __hash__(self) -> int:
        return value_hash(self)

    def __repr__(self) -> str:
        return (f"Appended(epoch={self.epoch!r}, seq={self.seq}, duplicate={self.duplicate}, "
                f"created={self.created})")
