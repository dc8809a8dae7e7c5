"""The memory engine: the embedded default, one process, nothing to install.

Everything lives in this process's memory: a restart starts every room in a new
epoch, and several processes cannot share it (use the redis engine for that).
Notifies are direct calls. Expiry of idle rooms runs in a background sweep and
is also checked when a room is touched, so a room past its TTL is never seen.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..clock import Clock
from ..model import Entry, NewMessage
from .base import Appended, LogPolicy, OnNotify, OnResync, Pulled, PullRequest, new_epoch


@dataclass
class _Room:
    epoch: str
    used_ms: int
    seq: int = 0
    ic: int = 0
    log: deque[Entry] = field(default_factory=deque)
    important: deque[Entry] = field(default_factory=deque)
    dedup: dict[str, tuple[int, int]] = field(default_factory=dict)
    """client_msg_id -> (seq, expires_ms)"""


class MemoryNotifier:
    def __init__(self) -> None:
        self._subscribers: list[tuple[OnNotify, OnResync]] = []

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None:
        self._subscribers.append((on_notify, on_resync))

    @property
    def alive(self) -> bool:
        return True

    def publish(self, room: str, seq: int) -> None:
        for on_notify, _ in self._subscribers:
            on_notify(room, seq)


class MemoryLog:
    def __init__(self, policy: LogPolicy, clock: Clock, notifier: MemoryNotifier) -> None:
        self.policy = policy
        self._clock = clock
        self._notifier = notifier
        self._rooms: dict[str, _Room] = {}

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    def _room(self, room: str, *, create: bool) -> _Room | None:
        now = self._now_ms()
        state = self._rooms.get(room)
        if state is not None and now - state.used_ms > self.policy.room_ttl_ms:
            del self._rooms[room]
            state = None
        if state is None and create:
            state = self._rooms[room] = _Room(epoch=new_epoch(), used_ms=now)
        return state

    def sweep(self) -> None:
        """Drop every room idle past its TTL."""
        cutoff = self._now_ms() - self.policy.room_ttl_ms
        for room in [r for r, s in self._rooms.items() if s.used_ms < cutoff]:
            del self._rooms[room]

    async def open_room(self, room: str) -> str:
        state = self._room(room, create=True)
        assert state is not None
        state.used_ms = self._now_ms()
        return state.epoch

    async def append(self, room: str, message: NewMessage) -> Appended:
        state = self._room(room, create=True)
        assert state is not None
        now = self._now_ms()
        cmid = message.client_msg_id
        if cmid is not None:
            seen = state.dedup.get(cmid)
            if seen is not None and seen[1] > now:
                return Appended(state.epoch, seen[0], duplicate=True)
        policy = self.policy
        state.seq += 1
        state.ic += message.important
        entry = Entry(seq=state.seq, ic=state.ic, uid=message.uid,
                      important=message.important, ts=message.ts, body=message.body)
        state.log.append(entry)
        if len(state.log) > policy.log_cap:
            state.log.popleft()
        if message.important:
            kept = state.important
            kept.append(entry)
            oldest_ok = message.ts - policy.important_window_ms
            while len(kept) > policy.important_keep and (
                kept[0].ts < oldest_ok or len(kept) > policy.important_hard_cap
            ):
                kept.popleft()
        if cmid is not None:
            if len(state.dedup) > 4 * policy.log_cap:
                state.dedup = {k: v for k, v in state.dedup.items() if v[1] > now}
            state.dedup[cmid] = (state.seq, now + policy.dedup_ttl_ms)
        state.used_ms = now
        self._notifier.publish(room, state.seq)
        return Appended(state.epoch, state.seq, duplicate=False)

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        return [self._pull_one(request) for request in requests]

    def _pull_one(self, request: PullRequest) -> Pulled:
        state = self._room(request.room, create=False)
        if state is None:
            return Pulled(request.room, None, 0, 0, (), complete=True)
        after = request.after
        log = state.log
        # The log is dense: the entry with seq s sits at index s - first.
        first = log[0].seq if log else state.seq + 1
        start = max(0, after + 1 - first)
        newer = max(0, len(log) - start)
        take = min(newer, request.limit)
        picked = [log[i] for i in range(len(log) - take, len(log))]
        complete = take == newer and first <= after + 1
        floor = picked[0].seq if picked else state.seq + 1
        extra = [e for e in state.important if after < e.seq < floor]
        return Pulled(request.room, state.epoch, state.seq, state.ic,
                      tuple(extra + picked), complete=complete)

    async def renew_epoch(self, room: str, stale: str) -> str:
        state = self._room(room, create=True)
        assert state is not None
        if state.epoch == stale:
            state.epoch = new_epoch()
        return state.epoch

    async def touch(self, rooms: Sequence[str]) -> None:
        now = self._now_ms()
        for room in rooms:
            state = self._room(room, create=False)
            if state is not None:
                state.used_ms = now


class MemoryStore:
    """The embedded engine (``--store memory``)."""

    name = "memory"

    def __init__(self, policy: LogPolicy, clock: Clock) -> None:
        self._clock = clock
        self.notifier = MemoryNotifier()
        self.log = MemoryLog(policy, clock, self.notifier)
        self._values: dict[str, str] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="memory-store-sweep")

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _sweep_forever(self) -> None:
        while True:
            await self._clock.sleep(60.0)
            self.log.sweep()

    async def ping(self) -> None:
        return None

    async def shared_value(self, name: str, candidate: str) -> str:
        return self._values.setdefault(name, candidate)
