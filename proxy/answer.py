"""Encoding poll answers by joining ready bytes.

Messages come encoded from the snapshot. An answer is its :func:`head`
(everything before the per-listener ``ctx``), which listeners answered from
the same snapshot at the same cursor share (:mod:`.poll` keeps it in the
snapshot's memo), then the ``ctx`` spliced in by :func:`finish`. JSON and
msgpack answers are built the same way (msgpack maps and arrays concatenate).
"""

from __future__ import annotations

import msgpack
import orjson

from liveroom.codec import msgpack_array_header, msgpack_map_header
from liveroom.snapshot import Delivery

_FIELDS = 12


def _pack(value: object) -> bytes:
    return msgpack.packb(value)  # type: ignore[no-any-return]


def _json_head(room: str, epoch: str, d: Delivery, reset: bool, online: int,
               interval_ms: int) -> bytes:
    return b"".join((
        b'{"room":', orjson.dumps(room), b',"epoch":', orjson.dumps(epoch),
        b',"seq":', str(d.seq).encode(), b',"iseq":', str(d.iseq).encode(),
        b',"gap":', str(d.gap).encode(), b',"igap":', str(d.igap).encode(),
        b',"reset":', b"true" if reset else b"false",
        b',"online":', str(online).encode(), b',"interval_ms":', str(interval_ms).encode(),
        b',"important":[', b",".join(i.json for i in d.important),
        b'],"messages":[', b",".join(i.json for i in d.messages), b'],"ctx":"',
    ))


def _msgpack_head(room: str, epoch: str, d: Delivery, reset: bool, online: int,
                  interval_ms: int) -> bytes:
    parts = [msgpack_map_header(_FIELDS)]
    for key, value in (("room", room), ("epoch", epoch), ("seq", d.seq), ("iseq", d.iseq),
                       ("gap", d.gap), ("igap", d.igap), ("reset", reset),
                       ("online", online), ("interval_ms", interval_ms)):
        parts += (_pack(key), _pack(value))
    parts += (_pack("important"), msgpack_array_header(len(d.important)),
              *(i.mp for i in d.important))
    parts += (_pack("messages"), msgpack_array_header(len(d.messages)),
              *(i.mp for i in d.messages))
    parts.append(_pack("ctx"))
    return b"".join(parts)


def head(room: str, epoch: str, d: Delivery, *, reset: bool, online: int,
         interval_ms: int, use_msgpack: bool) -> bytes:
    """The answer up to its ``ctx``."""
    build = _msgpack_head if use_msgpack else _json_head
    return build(room, epoch, d, reset, online, interval_ms)


_SPREAD_MP = _pack("spread")
_MAP_WITH_SPREAD = msgpack_map_header(_FIELDS + 1)


def finish(head: bytes, ctx: str, use_msgpack: bool, spread: int | None = None) -> bytes:
    """The whole answer: ``head``, the listener's ``ctx`` and, in a vip room,
    its routing hint ``spread``."""
    if spread is None:
        if use_msgpack:
            return head + _pack(ctx)
        return head + ctx.encode() + b'"}'
    if use_msgpack:
        # Both map headers are one byte (fixmap): the head's says 12 fields.
        return b"".join((_MAP_WITH_SPREAD, head[1:], _pack(ctx), _SPREAD_MP, _pack(spread)))
    return b"".join((head, ctx.encode(), b'","spread":', str(spread).encode(), b"}"))
