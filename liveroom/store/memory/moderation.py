"""Rooms' moderation in memory, laid out like the redis engine's keys: a
room's sanctions, slow mode and audit (``mod``, ``modt``, ``aud``) expire
together on the store's clock, as the keys do in Redis; the journal
(``modv``, ``modj``, ``modx``) never expires and is pruned by acts."""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...clock import Clock
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
    moderation_lives_ms,
    sanction_until,
)
from .expiring import Expiring
from .outbox import MemoryOutbox

_KEPT_UNTIL_LIFTED_MS = 2**62
"""The time to live of a room that holds a ban until lifted: for ever."""
_NEVER = float("inf")
"""The end of a ban until lifted (and of its room), where ends are sorted."""
_KIND = {"mute": "m", "unmute": "m", "ban": "b", "unban": "b"}
"""The kind of sanction an action gives or lifts."""


@dataclass
class _Room:
    """One room's moderation (``lr:{R}:mod``, ``modt``, ``aud`` on Redis)."""

    sanctions: dict[tuple[str, str], Sanction] = field(default_factory=dict)
    """``(kind, uid)`` -> its sanction; kind ``"m"`` (mute) or ``"b"`` (ban)."""
    ends: list[tuple[float, str, str]] = field(default_factory=list)
    """``(until_ms or inf, kind, uid)`` of every sanction, ascending (``modt``)."""
    counts: dict[str, int] = field(default_factory=lambda: {"m": 0, "b": 0})
    slow: int = 0
    version: int = 0
    audit: deque[AuditEntry] = field(default_factory=lambda: deque(maxlen=AUDIT_KEPT))
    """Newest first; the oldest fall off past :data:`AUDIT_KEPT`."""

    def prune(self, now_ms: int) -> None:
        """Drop the sanctions that ended at ``now_ms``."""
        while self.ends and self.ends[0][0] <= now_ms:
            _, kind, uid = self.ends.pop(0)
            self._forget(kind, uid)

    def give(self, kind: str, sanction: Sanction) -> None:
        """Set a uid's mute or ban, replacing one it has; raise
        :class:`SanctionsFull` for a new uid past :data:`SANCTIONS_MAX`."""
        key = (kind, sanction.uid)
        if key in self.sanctions:
            self.lift(kind, sanction.uid)
        elif self.counts[kind] >= SANCTIONS_MAX:
            raise SanctionsFull(f"the room holds {SANCTIONS_MAX} "
                                f"{'mutes' if kind == 'm' else 'bans'} already")
        self.sanctions[key] = sanction
        self.counts[kind] += 1
        bisect.insort(self.ends, (_end(sanction), kind, sanction.uid))

    def lift(self, kind: str, uid: str) -> None:
        sanction = self.sanctions.get((kind, uid))
        if sanction is not None:
            del self.ends[bisect.bisect_left(self.ends, (_end(sanction), kind, uid))]
            self._forget(kind, uid)

    def _forget(self, kind: str, uid: str) -> None:
        del self.sanctions[kind, uid]
        self.counts[kind] -= 1

    def last_until(self) -> int | None:
        """When the last sanction ends: 0 for a ban until lifted, ``None``
        without any."""
        if not self.ends:
            return None
        last = self.ends[-1][0]
        return 0 if last == _NEVER else int(last)

    def now(self, now_ms: int) -> RoomModeration | None:
        """The room's moderation in force at ``now_ms``; ``None`` for none."""
        muted: list[Sanction] = []
        banned: list[Sanction] = []
        for (kind, _), sanction in self.sanctions.items():
            if in_force(sanction, now_ms):
                (muted if kind == "m" else banned).append(sanction)
        if not muted and not banned and not self.slow:
            return None
        return RoomModeration(tuple(sorted(muted, key=_uid)), tuple(sorted(banned, key=_uid)),
                              self.slow, self.version)


def _end(sanction: Sanction) -> float:
    return sanction.until_ms or _NEVER


def _uid(sanction: Sanction) -> str:
    return sanction.uid


class MemoryModeration:
    """``ModerationStore`` in this process: no method suspends, so each is atomic
    like the redis engine's scripts (on one Redis), journal included.

    An act costs O(log n) to place a sanction among the room's n plus a list
    move (``bisect.insort``), and a read O(n): microseconds for a room's
    thousands. The journal is a dict in the order of the rooms' last
    changes, so :meth:`changed` costs the rooms it answers, not all."""

    def __init__(self, policy: LogPolicy, clock: Clock) -> None:
        self._ttl_ms = policy.history_ttl_ms
        self._rooms: Expiring[str, _Room] = Expiring(clock)
        self.outbox: MemoryOutbox | None = None
        """Where the room actions' webhook events are kept (the store's)."""
        """room -> its moderation (``mod``, ``modt``, ``aud``)."""
        self._version = 0
        """The system's moderation version (``modv``)."""
        self._journal: dict[str, int] = {}
        """room -> the version of its last change, in the order of those
        changes (``modj``)."""
        self._ends: list[tuple[float, str]] = []
        """``(ms its moderation ends or inf, room)`` of every room in the
        journal, ascending (``modx``)."""
        self._end_of: dict[str, float] = {}

    def sweep(self) -> None:
        """Drop the rooms whose moderation expired on the store's clock."""
        self._rooms.sweep()

    async def act(self, room: str, entry: AuditEntry, now_ms: int, *,
                  event: bytes | None = None) -> int:
        check_act(room, entry, now_ms)
        state = self._rooms.get(room) or _Room()
        state.prune(now_ms)
        action = entry.action
        effect = action in ("mute", "ban")
        if effect:
            state.give(_KIND[action], Sanction(entry.target, sanction_until(entry, now_ms),
                                           entry.reason, entry.by, entry.at_ms))
        elif action in ("unmute", "unban"):
            effect = (_KIND[action], entry.target) in state.sanctions
            state.lift(_KIND[action], entry.target)
        elif action == "slow":
            state.slow = entry.seconds
        if not state.audit or state.audit[0] != entry:  # not a retried act
            state.audit.appendleft(entry)
            if effect and self.outbox is not None:
                self.outbox.keep(room, event)
        self._version += 1
        state.version = self._version
        lives_ms = moderation_lives_ms(self._ttl_ms, state.last_until(), now_ms)
        self._rooms.put(room, state, _KEPT_UNTIL_LIFTED_MS if lives_ms is None else lives_ms)
        self._note(room, _NEVER if lives_ms is None else now_ms + lives_ms, now_ms)
        return self._version

    def _note(self, room: str, ends: float, now_ms: int) -> None:
        """The journal's step (``moderation_note.lua``): the room changed at the
        current version, its moderation kept until ``ends``; rooms whose
        moderation ended by ``now_ms`` leave it (the oldest
        :data:`JOURNAL_PRUNED`)."""
        self._journal.pop(room, None)
        self._journal[room] = self._version
        before = self._end_of.get(room)
        if before is not None:
            del self._ends[bisect.bisect_left(self._ends, (before, room))]
        self._end_of[room] = ends
        bisect.insort(self._ends, (ends, room))
        pruned = 0
        while self._ends and self._ends[0][0] <= now_ms and pruned < JOURNAL_PRUNED:
            _, gone = self._ends.pop(0)
            del self._journal[gone], self._end_of[gone]
            pruned += 1

    async def rooms(self, rooms: Sequence[str], now_ms: int) -> dict[str, RoomModeration]:
        for room in rooms:
            check_room(room)
        found = {}
        for room in rooms:
            state = self._rooms.get(room)
            moderation = None if state is None else state.now(now_ms)
            if moderation is not None:
                found[room] = moderation
        return found

    async def changed(self, since: int) -> tuple[int, list[str]]:
        check_since(since)
        if since > self._version:
            since = 0
        rooms = list(itertools.takewhile(lambda room: self._journal[room] > since,
                                         reversed(self._journal)))
        rooms.reverse()
        return self._version, rooms

    async def audit(self, room: str, limit: int) -> list[AuditEntry]:
        check_room(room)
        check_audit_limit(limit)
        state = self._rooms.get(room)
        return [] if state is None else list(itertools.islice(state.audit, limit))

    # -- the end of a broadcast ----------------------------------------------------------

    def take_audit(self, room: str) -> tuple[AuditEntry, ...]:
        """The current broadcast's audit, newest first, the room's audit left
        empty (``Operators.end_broadcast``); its sanctions and slow mode stay."""
        state = self._rooms.get(room)
        if state is None:
            return ()
        audit = tuple(state.audit)
        state.audit.clear()
        return audit
