"""Rooms' moderation on Redis (``ModerationStore``; keys in :mod:`.keys`).

- **A room's state** is in its slot: the hash ``mod`` (each sanction packed
  under ``m:<uid>`` or ``b:<uid>``, slow mode, the version, the counts its
  cap checks), the sorted set ``modt`` (each sanction by its end, to prune
  ended ones and to find how long the room is kept) and the list ``aud``
  (its audit). ``lua/moderation_act.lua`` changes them in one call.
- **The journal** is under the global tag: the version counter ``modv``,
  ``modj`` (room -> the version of its last change) and ``modx`` (room ->
  when its moderation ends, by which each act prunes the journal). On one
  Redis ``moderation_act.lua`` takes these keys too and an act is one call; on a
  Redis Cluster they are in another slot than the room's, so an act is three
  calls: ``moderation_act.lua`` in the room's slot, ``moderation_journal.lua`` in the
  global one, ``moderation_stamp.lua`` back in the room's (see ``ModerationStore`` for
  what a failure between them leaves), and a fourth, ``moderation_journal_end.lua``,
  when another act's step came between this one's and its note (the stamp
  reads back the end the room's last step found, and the journal keeps it).
  ``changed`` is one call of ``moderation_changed.lua``; ``rooms`` one
  ``HGETALL`` per room in one pipeline (on a cluster, a batch per node, sent
  together); ``audit`` one ``LRANGE``.
- **Records** are msgpack arrays: a sanction ``[until_ms, reason, by,
  at_ms]`` (its uid is its field's), an audit entry ``[at_ms, by, action,
  target, seconds, reason]``. One that does not decode is left out of an
  answer, so it never hides the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from ..base import (
    AUDIT_KEPT,
    JOURNAL_PRUNED,
    SANCTIONS_MAX,
    AuditEntry,
    LogPolicy,
    RoomModeration,
    Sanction,
    SanctionsFull,
    check_act,
    check_audit_limit,
    check_room,
    check_since,
    in_force,
    sanction_until,
)
from . import keys
from .calls import Client, Lua, run_scripts, text, unavailable

_KIND = {"mute": "m", "unmute": "m", "ban": "b", "unban": "b"}
"""The field prefix of the sanction an action gives or lifts."""


def pack_sanction(sanction: Sanction) -> bytes:
    packed: bytes = msgpack.packb([sanction.until_ms, sanction.reason, sanction.by,
                                   sanction.at_ms])
    return packed


def unpack_sanction(uid: str, value: bytes) -> Sanction | None:
    """A sanction from its record; ``None`` when it does not decode."""
    try:
        until_ms, reason, by, at_ms = msgpack.unpackb(value)
        return Sanction(uid, int(until_ms), str(reason), str(by), int(at_ms))
    except (ValueError, TypeError, msgpack.UnpackException):
        return None


def pack_audit(entry: AuditEntry) -> bytes:
    packed: bytes = msgpack.packb([entry.at_ms, entry.by, entry.action, entry.target,
                                   entry.seconds, entry.reason])
    return packed


def unpack_audit(values: Sequence[bytes]) -> tuple[AuditEntry, ...]:
    """Audit entries from their records, in order; those that do not decode
    left out."""
    entries = []
    for value in values:
        try:
            at_ms, by, action, target, seconds, reason = msgpack.unpackb(value)
            entries.append(AuditEntry(int(at_ms), str(by), str(action), str(target),
                                      int(seconds), str(reason)))
        except (ValueError, TypeError, msgpack.UnpackException):
            continue
    return tuple(entries)


def room_moderation(fields: dict[bytes, bytes], now_ms: int) -> RoomModeration | None:
    """A room's moderation in force at ``now_ms`` from its ``mod`` hash;
    ``None`` for none."""
    muted: list[Sanction] = []
    banned: list[Sanction] = []
    for name, value in fields.items():
        kind, sep, uid = name.partition(b":")
        if not sep or kind not in (b"m", b"b"):
            continue
        sanction = unpack_sanction(uid.decode(errors="replace"), value)
        if sanction is not None and in_force(sanction, now_ms):
            (muted if kind == b"m" else banned).append(sanction)
    slow = int(fields.get(b"slow", 0))
    if not muted and not banned and not slow:
        return None
    return RoomModeration(tuple(sorted(muted, key=lambda s: s.uid)),
                          tuple(sorted(banned, key=lambda s: s.uid)),
                          slow, int(fields.get(b"v", 0)))


class RedisModeration:
    """:class:`~liveroom.store.base.ModerationStore` on Redis (one Redis, or a
    Redis Cluster with ``sharded``)."""

    def __init__(self, client: Client, policy: LogPolicy, *, sharded: bool = False) -> None:
        self._client = client
        self._sharded = sharded
        self._ttl_ms = policy.history_ttl_ms
        self._moderate = Lua("moderation_act.lua", uses=["moderation_note.lua",
                                                          "room_event_fn.lua"])
        self._journal = Lua("moderation_journal.lua", uses=["moderation_note.lua"])
        self._stamp = Lua("moderation_stamp.lua")
        self._journal_end = Lua("moderation_journal_end.lua")
        self._changed = Lua("moderation_changed.lua")

    async def act(self, room: str, entry: AuditEntry, now_ms: int, *,
                  event: bytes | None = None) -> int:
        check_act(room, entry, now_ms)
        action = entry.action
        field = f"{_KIND[action]}:{entry.target}" if action in _KIND else ""
        value: bytes | int = b""
        end: str | int = ""
        if action in ("mute", "ban"):
            until = sanction_until(entry, now_ms)
            value = pack_sanction(Sanction(entry.target, until, entry.reason, entry.by,
                                           entry.at_ms))
            end = until or "inf"
        elif action == "slow":
            value = entry.seconds
        journal = [keys.MODERATION_VERSION, keys.MODERATION_JOURNAL, keys.MODERATION_ENDS]
        room_keys = [keys.moderation(room), keys.moderation_ends(room), keys.audit(room),
                     keys.events(room)]
        with unavailable("moderating a room"):
            ((applied, version, ends),) = await run_scripts(self._client, [(
                self._moderate, room_keys if self._sharded else room_keys + journal,
                [action, field, value, end, pack_audit(entry), now_ms, self._ttl_ms,
                 AUDIT_KEPT, SANCTIONS_MAX, room, JOURNAL_PRUNED, event or b""])])
        if not applied:
            kinds = "mutes" if action == "mute" else "bans"
            raise SanctionsFull(f"room {room} holds {SANCTIONS_MAX} {kinds} already")
        if not self._sharded:
            return int(version)
        with unavailable("noting a moderation change"):
            (version,) = await run_scripts(self._client, [(
                self._journal, journal, [room, text(ends), now_ms, JOURNAL_PRUNED])])
        with unavailable("stamping a moderation change"):
            ((_, found),) = await run_scripts(self._client, [(
                self._stamp, [keys.moderation(room)], [version])])
        if found and text(found) != text(ends):
            # Another act's step came between this one's and its note: the
            # journal keeps the end the room's last step found.
            with unavailable("noting when a room's moderation ends"):
                await run_scripts(self._client, [(
                    self._journal_end, [keys.MODERATION_JOURNAL, keys.MODERATION_ENDS],
                    [room, text(found), version])])
        return int(version)

    async def rooms(self, rooms: Sequence[str], now_ms: int) -> dict[str, RoomModeration]:
        for room in rooms:
            check_room(room)
        if not rooms:
            return {}
        with unavailable("reading rooms' moderation"):
            async with self._client.pipeline(transaction=False) as pipe:
                for room in rooms:
                    pipe.hgetall(keys.moderation(room))
                replies: list[Any] = await pipe.execute()
        found = {}
        for room, fields in zip(rooms, replies, strict=True):
            moderation = room_moderation(fields, now_ms)
            if moderation is not None:
                found[room] = moderation
        return found

    async def changed(self, since: int) -> tuple[int, list[str]]:
        check_since(since)
        with unavailable("reading the moderation journal"):
            ((version, rooms),) = await run_scripts(self._client, [(
                self._changed, [keys.MODERATION_VERSION, keys.MODERATION_JOURNAL], [since])])
        return int(version), [text(room) for room in rooms]

    async def audit(self, room: str, limit: int) -> list[AuditEntry]:
        check_room(room)
        check_audit_limit(limit)
        with unavailable("reading a room's moderation audit"):
            values: list[Any] = await self._client.lrange(keys.audit(room), 0, limit - 1)
        return list(unpack_audit(values))
