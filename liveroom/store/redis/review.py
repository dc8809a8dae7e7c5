"""Rooms' review queues on Redis (``ReviewStore``; keys in :mod:`.keys`).

A room's queue is three keys in its slot: the hash ``rv`` (each held
message's record, its body apart so a decision can drop it, its decision,
the ``client_msg_id`` index and the counters), the sorted set ``rvq`` (the
ids waiting, oldest first) and ``rvd`` (the ids decided, oldest first, to
forget the oldest). Every call is one script: ``lua/review_hold.lua``,
``review_decide.lua``, ``review_settle.lua`` (with the shared rules of
``review_forget.lua``) and the read-only ``review_list.lua``; ``find`` is
one ``HMGET``.

**Records** are msgpack: a held message ``[uid, kind, to, at_ms, why,
client_msg_id]`` (its id is its field's), its body packed alone. One that
does not decode is left out of a listing, so it never hides the others.
"""

from __future__ import annotations

from typing import Any

import msgpack

from ...model import NewMessage
from ..base import (
    KINDS,
    Held,
    Holding,
    LogPolicy,
    Verdict,
    check_find,
    check_held_list,
    check_hold,
    check_settle,
    check_verdict,
    held_kind,
)
from . import keys
from .calls import Client, Lua, run_scripts, text, unavailable


def pack_record(message: NewMessage, why: str) -> bytes:
    packed: bytes = msgpack.packb([message.uid, held_kind(message), message.to, message.ts,
                                   why, message.client_msg_id], use_bin_type=True)
    return packed


def pack_body(body: Any) -> bytes:
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


def unpack_held(held_id: Any, record: Any, body: Any) -> Held | None:
    """A held message from its record and its packed body (``None``: gone,
    once decided); ``None`` when the record does not decode."""
    try:
        uid, kind, to, at_ms, why, cmid = msgpack.unpackb(record, raw=False)
        if kind not in KINDS:
            return None
        return Held(text(held_id), str(uid), kind,
                    None if body is None else msgpack.unpackb(body, raw=False),
                    int(at_ms), str(why), None if to is None else str(to),
                    None if cmid is None else str(cmid))
    except (ValueError, TypeError, msgpack.UnpackException):
        return None


class RedisReview:
    """:class:`~liveroom.store.base.ReviewStore` on Redis (one Redis, or a
    Redis Cluster: every key of a room's queue is in its slot)."""

    def __init__(self, client: Client, policy: LogPolicy) -> None:
        self._client = client
        self._ttl_ms = policy.room_ttl_ms
        self._max = policy.review_max
        self._hold = Lua("review_hold.lua", uses=["review_forget.lua", "room_event_fn.lua"])
        self._decide = Lua("review_decide.lua",
                           uses=["review_forget.lua", "room_event_fn.lua"])
        self._settle = Lua("review_settle.lua",
                           uses=["review_forget.lua", "room_event_fn.lua"])
        self._list = Lua("review_list.lua")

    @staticmethod
    def _keys(room: str) -> list[str]:
        return [keys.review(room), keys.review_waiting(room), keys.review_decided(room)]

    async def hold(self, room: str, message: NewMessage, why: str, *,
                   event: bytes | None = None,
                   dropped: tuple[str, bytes] | None = None) -> Holding:
        check_hold(room, message, why)
        stem, drop = dropped or ("", b"")
        with unavailable("holding a message for review"):
            (reply,) = await run_scripts(self._client, [(
                self._hold, [*self._keys(room), keys.events(room)],
                [pack_record(message, why), pack_body(message.body),
                 message.client_msg_id or "", self._max, self._ttl_ms, event or b"", stem,
                 drop])])
        held_id, again, *rest = reply
        gone_ones = []
        for i in range(0, len(rest), 3):
            gone = unpack_held(rest[i], rest[i + 1], rest[i + 2])
            if gone is not None:
                gone_ones.append(gone)
        return Holding(text(held_id), again=bool(int(again)), dropped=tuple(gone_ones))

    async def held(self, room: str, limit: int) -> tuple[list[Held], int]:
        check_held_list(room, limit)
        with unavailable("reading a room's review queue"):
            (reply,) = await run_scripts(self._client, [(
                self._list, self._keys(room)[:2], [limit])])
        count, *rest = reply
        listed = [unpack_held(rest[i], rest[i + 1], rest[i + 2])
                  for i in range(0, len(rest), 3)]
        return [held for held in listed if held is not None], int(count)

    async def find(self, room: str, held_id: str) -> Held | None:
        check_find(room, held_id)
        with unavailable("reading a held message"):
            record, body, decided = await self._client.hmget(
                keys.review(room), [held_id, f"b:{held_id}", f"s:{held_id}"])
        if record is None or decided is not None:
            return None
        return unpack_held(held_id, record, body)

    async def decide(self, room: str, held_id: str, verdict: str, *,
                     event: bytes | None = None) -> Verdict | None:
        check_verdict(room, held_id, verdict)
        with unavailable("deciding a held message"):
            (reply,) = await run_scripts(self._client, [(
                self._decide, [*self._keys(room), keys.events(room)],
                [held_id, verdict, self._max, self._ttl_ms, event or b""])])
        if not reply:
            return None
        first, decision, record, body = reply
        held = unpack_held(held_id, record, body)
        if held is None:
            return None
        said, _, where = text(decision).partition(" ")
        epoch, _, seq = where.partition(" ")
        return Verdict(held, said, bool(int(first)), epoch, int(seq) if seq else 0)

    async def settle(self, room: str, held_id: str, epoch: str, seq: int, *,
                     event: bytes | None = None) -> None:
        check_settle(room, held_id, epoch, seq)
        with unavailable("settling an approval"):
            await run_scripts(self._client, [(
                self._settle, [*self._keys(room), keys.events(room)],
                [held_id, f"approve {epoch} {seq}", self._ttl_ms, event or b""])])
