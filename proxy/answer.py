"""Encoding poll answers by joining ready bytes.

Messages come encoded from the snapshot. Listeners answered from the same
snapshot at the same cursor share one encoded answer (memoised on the
snapshot); only the per-listener ``ctx`` is spliced in at the end. JSON and
msgpack answers are built the same way (msgpack maps and arrays concatenate).
"""

from __future__ import annotations

import msgpack
import orjson

from liveroom.codec import msgpack_array_header, msgpack_map_header
from liveroom.snapshot import Delivery, Snapshot

_MEMO_MAX = 256
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


def encode(snap: Snapshot | None, room: str, epoch: str, d: Delivery, *, reset: bool,
           online: int, interval_ms: int, ctx: str, use_msgpack: bool) -> bytes:
    """The whole answer; the part before ``ctx`` is shared through ``snap.memo``."""
    key = (use_msgpack, epoch, reset, d.seq, d.iseq, d.gap, d.igap, online, interval_ms,
           len(d.important), d.important[0].seq if d.important else 0,
           len(d.messages), d.messages[0].seq if d.messages else 0)
    head = snap.memo.get(key) if snap is not None else None
    if head is None:
        build = _msgpack_head if use_msgpack else _json_head
        head = build(room, epoch, d, reset, online, interval_ms)
        if snap is not None and d.seq == snap.head:
            memo = snap.memo
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            memo[key] = head
    if use_msgpack:
        return head + _pack(ctx)
    return head + ctx.encode() + b'"}'
