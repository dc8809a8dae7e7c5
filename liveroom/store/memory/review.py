"""Rooms' review queues in memory, laid out like the redis engine's keys: a
room's waiting messages, its remembered decisions and its ``client_msg_id``
index (``rv``, ``rvq``, ``rvd``) expire together on the store's clock,
``room_ttl_ms`` after the room's last hold or decision."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import orjson

from ...clock import Clock
from ...model import NewMessage
from ..base import (
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
from .expiring import Expiring
from .outbox import MemoryOutbox


@dataclass
class _Decision:
    held: Held
    """Its body ``None`` once settled or denied."""
    verdict: str
    epoch: str = ""
    seq: int = 0


@dataclass
class _Queue:
    """One room's queue (``lr:{R}:rv``, ``rvq``, ``rvd`` on Redis)."""

    given: int = 0
    """The last id given (``n``)."""
    waiting: dict[str, Held] = field(default_factory=dict)
    """id -> its message, oldest first (``rvq``)."""
    decided: dict[str, _Decision] = field(default_factory=dict)
    """id -> its decision, in the order they were made (``rvd``)."""
    by_cmid: dict[str, str] = field(default_factory=dict)
    """A held send's client_msg_id -> its id (``c:<cmid>``)."""

    def forget(self, held: Held) -> None:
        if held.client_msg_id is not None:
            self.by_cmid.pop(held.client_msg_id, None)


class MemoryReview:
    """``ReviewStore`` in this process: no method suspends, so each is atomic
    like the redis engine's scripts. Every call costs O(1) but for
    :meth:`held`, O(limit), and a drop of many (a lowered ``review_max``)."""

    def __init__(self, policy: LogPolicy, clock: Clock) -> None:
        self._ttl_ms = policy.room_ttl_ms
        self._max = policy.review_max
        self.outbox: MemoryOutbox | None = None
        """Where the decisions' webhook events are kept (the store's)."""
        self._rooms: Expiring[str, _Queue] = Expiring(clock)

    def sweep(self) -> None:
        """Drop the queues that expired on the store's clock."""
        self._rooms.sweep()

    async def hold(self, room: str, message: NewMessage, why: str, *,
                   event: bytes | None = None,
                   dropped: tuple[str, bytes] | None = None) -> Holding:
        check_hold(room, message, why)
        queue = self._rooms.get(room) or _Queue()
        cmid = message.client_msg_id
        if cmid is not None and cmid in queue.by_cmid:
            return Holding(queue.by_cmid[cmid], again=True)
        queue.given += 1
        held_id = str(queue.given)
        queue.waiting[held_id] = Held(held_id, message.uid, held_kind(message), message.body,
                                      message.ts, why, message.to, cmid)
        if cmid is not None:
            queue.by_cmid[cmid] = held_id
        outbox = self.outbox
        if outbox is not None:
            outbox.keep(room, event, held_id=held_id)
        gone_ones = []
        while len(queue.waiting) > self._max:
            oldest = next(iter(queue.waiting))
            gone = queue.waiting.pop(oldest)
            queue.forget(gone)
            gone_ones.append(gone)
            if outbox is not None and dropped is not None:
                stem, drop = dropped
                outbox.keep(room, orjson.dumps({"id": f"{stem}{len(gone_ones):08x}",
                                                **orjson.loads(drop)}),
                            held_id=gone.id, uid=gone.uid, kind=gone.kind, to=gone.to,
                            why=gone.why)
        self._rooms.put(room, queue, self._ttl_ms)
        return Holding(held_id, again=False, dropped=tuple(gone_ones))

    async def held(self, room: str, limit: int) -> tuple[list[Held], int]:
        check_held_list(room, limit)
        queue = self._rooms.get(room)
        if queue is None:
            return [], 0
        waiting = queue.waiting
        return [held for held, _ in zip(waiting.values(), range(limit), strict=False)], \
            len(waiting)

    async def find(self, room: str, held_id: str) -> Held | None:
        check_find(room, held_id)
        queue = self._rooms.get(room)
        return None if queue is None else queue.waiting.get(held_id)

    async def decide(self, room: str, held_id: str, verdict: str, *,
                     event: bytes | None = None) -> Verdict | None:
        check_verdict(room, held_id, verdict)
        queue = self._rooms.get(room)
        if queue is None:
            return None
        decision = queue.decided.get(held_id)
        if decision is not None:
            return Verdict(decision.held, decision.verdict, False, decision.epoch, decision.seq)
        held = queue.waiting.pop(held_id, None)
        if held is None:
            return None
        if verdict == "deny":
            held = replace(held, body=None)
        queue.decided[held_id] = _Decision(held, verdict)
        while len(queue.decided) > self._max:
            oldest = next(iter(queue.decided))
            queue.forget(queue.decided.pop(oldest).held)
        self._rooms.put(room, queue, self._ttl_ms)
        if self.outbox is not None:
            self.outbox.keep(room, event, uid=held.uid, kind=held.kind)
        return Verdict(held, verdict, True)

    async def settle(self, room: str, held_id: str, epoch: str, seq: int, *,
                     event: bytes | None = None) -> None:
        check_settle(room, held_id, epoch, seq)
        queue = self._rooms.get(room)
        decision = None if queue is None else queue.decided.get(held_id)
        if queue is None or decision is None or decision.verdict != "approve":
            return
        if not decision.seq and self.outbox is not None:  # its first settle
            self.outbox.keep(room, event)
        decision.held = replace(decision.held, body=None)
        decision.epoch, decision.seq = epoch, seq
        self._rooms.put(room, queue, self._ttl_ms)
