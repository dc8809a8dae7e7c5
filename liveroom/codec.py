"""Codecs: request bodies in, messages out, and the stored form of a message.

Two wire formats: JSON (orjson) and msgpack. Both decoders refuse what the
contract refuses (invalid documents, NaN and infinities, non-string keys,
duplicate keys, binary or extension values, deep nesting) with a 400, so a body
that was accepted can always be encoded in either format later, and means one
thing (with a key twice, which one counts would be the parser's choice).

A message is encoded once per format when a recvsvr pulls it; answers are then
built by joining those ready bytes (:func:`msgpack_array_header` lets a msgpack
answer be concatenated the same way as a JSON one).
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, Final

import msgpack
import orjson

from .errors import BadBody, UnsupportedMedia
from .model import Entry

JSON: Final = "application/json"
MSGPACK: Final = "application/msgpack"
_MSGPACK_TYPES: Final = frozenset({MSGPACK, "application/x-msgpack"})
_loads: Final = orjson.loads
"""Bound once: compiled code looks a module's attribute up at each call."""
MAX_DEPTH: Final = 32
"""Deepest nesting accepted in a message body."""


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` header, as aiohttp reads it
    (parameters dropped, lower case; none is ``application/octet-stream``)."""
    if content_type == JSON:
        return JSON  # as most sends say it
    if not content_type:
        return "application/octet-stream"
    return content_type.partition(";")[0].strip().lower()


def wants_msgpack(accept: str) -> bool:
    """Whether an ``Accept`` header asks for msgpack answers."""
    return "msgpack" in accept


class _DuplicateKey(ValueError):
    pass


def _unique(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A decoded object's pairs as a dict, refusing a key given twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[Any] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"duplicate key {key!r}")
            seen.add(key)
    return obj


def decode_request(content_type: str, raw: bytes) -> Any:
    """Decode a JSON or msgpack request body; refuse anything else."""
    return decode_request_bounded(content_type, raw)[0]


def decode_request_bounded(content_type: str, raw: bytes) -> tuple[Any, int]:
    """:func:`decode_request`, and a bound on the JSON size of any part of
    the document: ``len(raw)`` for a JSON body without floats (then no part
    encodes longer than its text: orjson writes no space, escapes no more
    than JSON must and shortens what a sender may escape longer, and an
    integer never grows), -1 otherwise (a float may encode longer, ``1e5``
    as ``100000.0``; msgpack is another size altogether)."""
    if content_type == JSON:
        try:
            value = _loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadBody(f"invalid JSON: {exc}") from None
        members = _walk(value, 0)
        # orjson keeps the last of duplicate keys silently, and reads an
        # integer beyond 64 bits as a float (a body would change on its way
        # through); the standard parser can say so, at twice orjson's cost,
        # so it reads only a body that may hold either: one with a float, or
        # with more colons than the keys orjson found. Each member of an
        # object has its one colon outside strings, so as many colons as keys
        # means no key was given twice (and no colon in a string).
        if members < 0 or (members and raw.count(b":") != members):
            try:
                json.loads(raw, object_pairs_hook=_unique, parse_int=_int_in_range)
            except _DuplicateKey as exc:
                raise BadBody(f"invalid JSON: {exc}") from None
        return value, -1 if members < 0 else len(raw)
    if content_type in _MSGPACK_TYPES:
        try:
            value = msgpack.unpackb(raw, raw=False, strict_map_key=True, max_bin_len=0,
                                    max_ext_len=0, object_pairs_hook=_unique)
        except Exception as exc:  # msgpack raises several unrelated types
            raise BadBody(f"invalid msgpack: {exc}") from None
        check_value(value)
        return value, -1
    raise UnsupportedMedia("send application/json or application/msgpack")


INT_BOUND: Final = 2**63
"""Largest magnitude of an integer in a message body (msgpack and orjson
carry 64 bits)."""


def _int_in_range(text: str) -> int:
    value = int(text)
    if abs(value) > INT_BOUND:
        raise BadBody("integer out of range")
    return value


def check_value(value: Any, depth: int = 0) -> None:
    """Refuse values JSON cannot carry faithfully (NaN, bytes, non-string keys)."""
    _walk(value, depth)


_SCALARS: Final = (str, bool, int)


def _walk(value: Any, depth: int) -> int:
    """:func:`check_value`'s walk. Returns the object keys in ``value``, all
    levels, or -1 when it holds a float (after checking all of it).

    The decoders make exact dicts, lists, strings and numbers: those are told
    by their exact type (a pointer comparison when compiled), anything else
    by :func:`_walk_other`. Tuples of types, not ``A | B``: a union is a new
    object at each call."""
    if depth > MAX_DEPTH:
        raise BadBody(f"nesting deeper than {MAX_DEPTH}")
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return 0
    floats = False
    n = 0
    if kind is dict:
        members: dict[Any, Any] = value
        n = len(members)
        for key, item in members.items():
            if type(key) is not str and not isinstance(key, str):
                raise BadBody("object keys must be strings")
            inner = _walk(item, depth + 1)
            if inner < 0:
                floats = True
            else:
                n += inner
    elif kind is list:
        items: list[Any] = value
        for item in items:
            inner = _walk(item, depth + 1)
            if inner < 0:
                floats = True
            else:
                n += inner
    elif kind is int:
        number: int = value
        if number > INT_BOUND or number < -INT_BOUND:
            raise BadBody("integer out of range")
    else:
        return _walk_other(value, depth)
    return -1 if floats else n


def _walk_other(value: Any, depth: int) -> int:
    """:func:`_walk` of a value of no exact type it knows: a float, a tuple,
    a subclass, or something no message may hold."""
    if isinstance(value, _SCALARS):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_BOUND:
            raise BadBody("integer out of range")
        return 0
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadBody("NaN and infinities are not allowed")
        return -1
    # A subclass or a tuple is walked as the plain container it holds.
    if isinstance(value, dict):
        return _walk(dict(value), depth)
    if isinstance(value, (list, tuple)):
        return _walk(list(value), depth)
    raise BadBody(f"values of type {type(value).__name__} are not allowed")


def json_size(value: Any) -> int:
    """Size of ``value`` encoded as JSON, the measure of the message size limit."""
    return len(orjson.dumps(value))


def pack_stored(uid: str, important: bool, ts: int, body: Any, to: str | None = None,
                extra: dict[str, Any] | None = None) -> bytes:
    """The stored form of a message (the store adds seq and ic beside it, or
    a personal message's position and ordinal): a msgpack array ``[uid,
    important, ts, body]``, then ``to`` for a personal message, then (``to``
    or nil before it) the send hook's ``extra`` for a message with one. The
    Lua scripts read it by position (``lua/log_recall.lua``): fields are only
    ever added at its end."""
    if extra is not None:
        fields: tuple[Any, ...] = (uid, important, ts, body, to, extra)
    elif to is not None:
        fields = (uid, important, ts, body, to)
    else:
        fields = (uid, important, ts, body)
    return msgpack.packb(fields, use_bin_type=True)  # type: ignore[no-any-return]


def unpack_stored(seq: int, ic: int, blob: bytes, n: int = 0) -> Entry:
    """The entry of a stored message (:func:`pack_stored`'s), of any release:
    one stored before extras existed reads with ``extra`` None, and so does
    one whose extra is no object (written by something else)."""
    uid, important, ts, body, *rest = msgpack.unpackb(blob, raw=False)
    extra = rest[1] if len(rest) > 1 and type(rest[1]) is dict else None
    return Entry(seq=seq, ic=ic, uid=uid, important=bool(important), ts=int(ts), body=body,
                 to=rest[0] if rest else None, n=n, extra=extra)


def encode_message(entry: Entry) -> tuple[bytes, bytes]:
    """The message as it appears in answers, in JSON and in msgpack. A
    personal message has ``pseq`` (its position in the room's personal
    sequence), ``n`` (its ordinal for its addressee) and ``to`` instead of
    ``seq``. A recalled message (its tombstone: no body) has ``"body": null``
    and ``"recalled": true``. A message the send hook gave an ``extra`` has
    it after its body (no field without one)."""
    doc: dict[str, Any]
    if entry.to is None:
        doc = {"seq": entry.seq, "uid": entry.uid, "important": entry.important,
               "ts": entry.ts, "body": entry.body}
    else:
        doc = {"pseq": entry.seq, "n": entry.n, "uid": entry.uid, "to": entry.to,
               "important": True, "ts": entry.ts, "body": entry.body}
    if entry.body is None:  # a recalled message's tombstone
        doc["recalled"] = True
    elif entry.extra is not None:
        doc["extra"] = entry.extra
    return orjson.dumps(doc), msgpack.packb(doc, use_bin_type=True)


def msgpack_array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def msgpack_map_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x80 | n,))
    return b"\xde" + struct.pack(">H", n)
