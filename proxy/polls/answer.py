"""Encoding poll answers by joining ready bytes.

Messages come encoded from the snapshot. An answer is its :func:`head`
(everything before the per-listener ``ctx``), which listeners answered from
the same snapshot at the same cursor share (:mod:`.poll` keeps it in the
snapshot's memo), then the ``ctx`` spliced in by :func:`finish`. JSON and
msgpack answers are built the same way (msgpack maps and arrays concatenate).
"""

from __future__ import annotations

from typing import Final

import msgpack
import orjson

from liveroom.codec import msgpack_array_header, msgpack_map_header
from liveroom.snapshot import Delivery, Item

_FIELDS: Final = 13


def _pack(value: object) -> bytes:
    return msgpack.packb(value)  # type: ignore[no-any-return]


def _lanes(important: tuple[Item, ...]) -> tuple[tuple[Item, ...], list[int]]:
    """The important (or personal) messages, and the seqs (positions) the
    recall notices among them recall."""
    recalled = [i.recall for i in important if i.recall]
    if not recalled:
        return important, recalled
    return tuple(i for i in important if not i.recall), recalled


def _json_head(room: str, epoch: str, d: Delivery, reset: bool, online: int, likes: int,
               interval_ms: int) -> bytes:
    important, recalled = _lanes(d.important)
    return b"".join((
        b'{"room":', orjson.dumps(room), b',"epoch":', orjson.dumps(epoch),
        b',"seq":', str(d.seq).encode(), b',"iseq":', str(d.iseq).encode(),
        b',"gap":', str(d.gap).encode(), b',"igap":', str(d.igap).encode(),
        b',"reset":', b"true" if reset else b"false",
        b',"online":', str(online).encode(), b',"likes":', str(likes).encode(),
        b',"interval_ms":', str(interval_ms).encode(),
        b',"recalled":' + orjson.dumps(recalled) if recalled else b"",
        b',"important":[', b",".join(i.json for i in important),
        b'],"messages":[', b",".join(i.json for i in d.messages), b'],"ctx":"',
    ))


def _msgpack_head(room: str, epoch: str, d: Delivery, reset: bool, online: int, likes: int,
                  interval_ms: int) -> bytes:
    important, recalled = _lanes(d.important)
    parts = [msgpack_map_header(_FIELDS + bool(recalled))]
    for key, value in (("room", room), ("epoch", epoch), ("seq", d.seq), ("iseq", d.iseq),
                       ("gap", d.gap), ("igap", d.igap), ("reset", reset),
                       ("online", online), ("likes", likes), ("interval_ms", interval_ms)):
        parts += (_pack(key), _pack(value))
    if recalled:
        parts += (_pack("recalled"), _pack(recalled))
    parts += (_pack("important"), msgpack_array_header(len(important)),
              *(i.mp for i in important))
    parts += (_pack("messages"), msgpack_array_header(len(d.messages)),
              *(i.mp for i in d.messages))
    parts.append(_pack("ctx"))
    return b"".join(parts)


def head(room: str, epoch: str, d: Delivery, *, reset: bool, online: int,
         interval_ms: int, use_msgpack: bool, likes: int = 0) -> bytes:
    """The answer up to its ``ctx``."""
    build = _msgpack_head if use_msgpack else _json_head
    return build(room, epoch, d, reset, online, likes, interval_ms)


_PSEQ_MP: Final = _pack("pseq")
_PERSONAL_MP: Final = _pack("personal")
_PGAP_MP: Final = _pack("pgap")
_SPREAD_MP: Final = _pack("spread")
_SLOW_MP: Final = _pack("slow")
_PRECALLED_MP: Final = _pack("precalled")


def finish(head: bytes, ctx: bytes, use_msgpack: bool, spread: int | None = None,
           pseq: int = 0, personal: tuple[Item, ...] = (), pgap: int = 0,
           ranking: bytes = b"", slow: int = 0) -> bytes:
    """The whole answer: ``head``, then what is the listener's own: its
    ``ctx`` (ASCII), its personal cursor ``pseq``, its personal messages (and the
    positions of its recalled ones, ``precalled``) and ``pgap`` (only when
    there are some), in a vip room its routing hint
    ``spread``, and the room's gift ranking when the listener has not seen
    it (``ranking``: the field, key and value, as :mod:`proxy.gifts.ranking` encodes it
    in the answer's format; empty: none), and a slow room's ``slow``
    seconds (0: not slow, no field)."""
    if use_msgpack:
        # The head's map header is one byte (a fixmap of 13 fields, 14 with
        # ``recalled``).
        parts = [b"", head[1:], _pack(ctx.decode()), _PSEQ_MP, _pack(pseq)]
        fields = (head[0] & 0x0F) + 1  # and pseq
        precalled: list[int] = []
        if personal:
            personal, precalled = _lanes(personal)
        if personal:
            parts += (_PERSONAL_MP, msgpack_array_header(len(personal)),
                      *(i.mp for i in personal))
            fields += 1
        if precalled:
            parts += (_PRECALLED_MP, _pack(precalled))
            fields += 1
        if pgap:
            parts += (_PGAP_MP, _pack(pgap))
            fields += 1
        if spread is not None:
            parts += (_SPREAD_MP, _pack(spread))
            fields += 1
        if ranking:
            parts.append(ranking)
            fields += 1
        if slow:
            parts += (_SLOW_MP, _pack(slow))
            fields += 1
        parts[0] = msgpack_map_header(fields)
        return b"".join(parts)
    tail = b'","pseq":' + str(pseq).encode()
    if personal:
        personal, precalled = _lanes(personal)
        if personal:
            tail += b',"personal":[' + b",".join(i.json for i in personal) + b"]"
        if precalled:
            tail += b',"precalled":' + orjson.dumps(precalled)
    if pgap:
        tail += b',"pgap":' + str(pgap).encode()
    if spread is not None:
        tail += b',"spread":' + str(spread).encode()
    if ranking:
        tail += ranking
    if slow:
        tail += b',"slow":' + str(slow).encode()
    return b"".join((head, ctx, tail, b"}"))
