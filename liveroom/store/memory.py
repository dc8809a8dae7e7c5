"""The memory engine: the embedded default, one process, nothing to install.

Everything lives in this process's memory: a restart starts every room in a new
epoch, and several processes cannot share it (use the redis engine for that).
Notifies are direct calls. Expiry of idle rooms runs in a background sweep and
is also checked when a room is touched, so a room past its TTL is never seen.
statsvr's tables (:class:`MemoryStats`) mirror the redis engine's keys, with
the same rules and the same expiry, measured on the store's clock; so do the
rate counters and the ended broadcasts (:class:`MemoryOperators`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..clock import Clock
from ..model import Entry, NewMessage
from ..ratelimit import (
    Counts,
    RateLimits,
    Window,
    count_send,
    horizon_ms,
    prune,
    refusal,
    refused_until,
)
from .base import (
    Announcement,
    Appended,
    Ended,
    LogPolicy,
    NodeState,
    OnlineSample,
    OnNotify,
    OnResync,
    PastBroadcast,
    Pulled,
    PullRequest,
    RankedRoom,
    SeriesRow,
    ShardEntry,
    ShardWrite,
    ViewersState,
    biggest,
    new_epoch,
    series_horizon_ms,
)

Bucket = tuple[int, int, int, int]
"""``(min, max, sum, count)`` of one series bucket."""

_Counted = tuple[str, str | None]
"""Whose sends a :data:`~liveroom.ratelimit.Counts` holds: (room, uid), or
(room, None) for the room's cap."""

logger = logging.getLogger("liveroom.store.memory")


@dataclass
class _Room:
    epoch: str
    used_ms: int
    """When it was created, last sent to or read: with messages, it expires
    ``room_ttl_ms`` after; with none yet, ``empty_room_ttl_ms`` after its creation
    (reads do not move this then, like ``lua/touch.lua``)."""
    seq: int = 0
    ic: int = 0
    log: deque[Entry] = field(default_factory=deque)
    important: deque[Entry] = field(default_factory=deque)
    dedup: dict[str, tuple[int, int]] = field(default_factory=dict)
    """client_msg_id -> (seq, expires_ms)"""


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Expiring(Generic[K, V]):
    """Values that vanish at a deadline on the store's clock, like Redis keys with a TTL.

    Expiry is checked when a value is read and by :meth:`sweep`.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._items: dict[K, tuple[V, int]] = {}
        """key -> (value, deadline in clock ms)"""

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if self._now_ms() > item[1]:
            del self._items[key]
            return None
        return item[0]

    def put(self, key: K, value: V, ttl_ms: int) -> None:
        self._items[key] = (value, self._now_ms() + ttl_ms)

    def expire(self, key: K, ttl_ms: int, *, only_later: bool = False) -> bool:
        """Set the key's deadline ``ttl_ms`` from now (never earlier with
        ``only_later``); False when there is no such key."""
        value = self.get(key)
        if value is None:
            return False
        deadline = self._now_ms() + ttl_ms
        if only_later:
            deadline = max(deadline, self._items[key][1])
        self._items[key] = (value, deadline)
        return True

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def sweep(self) -> None:
        now = self._now_ms()
        for key in [k for k, (_, deadline) in self._items.items() if now > deadline]:
            del self._items[key]


class MemoryNotifier:
    def __init__(self) -> None:
        self._subscribers: list[tuple[OnNotify, OnResync]] = []

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None:
        self._subscribers.append((on_notify, on_resync))

    @property
    def alive(self) -> bool:
        return True

    def watch(self, room: str) -> None:
        """Every notify reaches every reader in one process: nothing to do."""

    def unwatch(self, room: str) -> None:
        """See :meth:`watch`."""

    def hears(self, room: str) -> bool:
        return True

    def publish(self, room: str, seq: int) -> None:
        """Call every subscriber; one that raises is logged and the others still
        hear (the append that notifies has succeeded whatever they do)."""
        for on_notify, _ in self._subscribers:
            try:
                on_notify(room, seq)
            except Exception:
                logger.exception("notify subscriber failed")


class MemoryLog:
    reads_replicas = False

    def __init__(self, policy: LogPolicy, clock: Clock, notifier: MemoryNotifier) -> None:
        self.policy = policy
        self._clock = clock
        self._notifier = notifier
        self._rooms: dict[str, _Room] = {}
        # Apart from the rooms, like Redis's own keys: they expire on their own
        # horizon, not the room's TTL.
        self._counts: _Expiring[_Counted, Counts] = _Expiring(clock)

    def _now_ms(self) -> int:
        return int(self._clock.time() * 1000)

    def _expired(self, state: _Room, now: int) -> bool:
        policy = self.policy
        ttl = policy.room_ttl_ms if state.seq else policy.empty_room_ttl_ms
        return now - state.used_ms > ttl

    def _room(self, room: str, *, create: bool) -> _Room | None:
        now = self._now_ms()
        state = self._rooms.get(room)
        if state is not None and self._expired(state, now):
            del self._rooms[room]
            state = None
        if state is None and create:
            state = self._rooms[room] = _Room(epoch=new_epoch(), used_ms=now)
        return state

    def sweep(self) -> None:
        """Drop every room idle past its TTL."""
        now = self._now_ms()
        for room in [r for r, s in self._rooms.items() if self._expired(s, now)]:
            del self._rooms[room]
        self._counts.sweep()

    async def open_room(self, room: str) -> str:
        state = self._room(room, create=True)
        assert state is not None
        if state.seq:
            state.used_ms = self._now_ms()
        return state.epoch

    async def append(self, room: str, message: NewMessage,
                     limits: RateLimits | None = None) -> Appended:
        """The order of ``append.lua``: a seen client_msg_id, then the limits
        (a refused send creates no log), then the append and its counts."""
        now = self._now_ms()
        cmid = message.client_msg_id
        state = self._room(room, create=False)
        if state is not None and cmid is not None:
            seen = state.dedup.get(cmid)
            if seen is not None and seen[1] > now:
                return Appended(state.epoch, seen[0], duplicate=True)
        counted = self._check_limits(room, message, limits) if limits is not None else []
        if state is None:
            state = self._room(room, create=True)
            assert state is not None
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
        for key, windows in counted:
            counts = self._counts.get(key)
            if counts is None:
                counts = {}
            count_send(counts, windows, message.ts)
            self._counts.put(key, counts, horizon_ms(windows))
        self._notifier.publish(room, state.seq)
        return Appended(state.epoch, state.seq, duplicate=False)

    def _check_limits(self, room: str, message: NewMessage, limits: RateLimits,
                      ) -> list[tuple[_Counted, tuple[Window, ...]]]:
        """Raise RateLimited when a window of the sender or of the room is full
        at ``message.ts`` (the one freeing last names the error); else return
        the counts the send will go to."""
        ts = message.ts
        checked = [((room, message.uid), limits.per_uid), ((room, None), limits.room_windows)]
        worst: tuple[str | None, Window, int] | None = None
        for key, windows in checked:
            counts = self._counts.get(key)
            if counts is None or not windows:
                continue
            prune(counts, windows, ts)
            full = refused_until(counts, windows, ts)
            if full is not None and (worst is None or full[1] > worst[2]):
                worst = key[1], *full
        if worst is not None:
            raise refusal(room, worst[0], worst[1], worst[2], ts)
        return [(key, windows) for key, windows in checked if windows]

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

    def start_epoch(self, room: str) -> tuple[str, int]:
        """Give the room a new epoch whatever its current one (creating its log
        if it has none); return it and the room's head."""
        state = self._room(room, create=True)
        assert state is not None
        state.epoch = new_epoch()
        return state.epoch, state.seq

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
            if state is not None and state.seq:
                state.used_ms = now


# -- statsvr's tables -----------------------------------------------------------

_ShardKey = tuple[str, int, int]
"""(node, index, count) of a shard."""
_IndexValue = tuple[str, int, int]
"""(version, size, expires_ms) of a shard index entry."""


@dataclass
class _Viewers:
    exact: set[str] = field(default_factory=set)
    complete: bool = True
    sketches: dict[str, bytes] = field(default_factory=dict)

    def state(self, broadcast: int, *, sketches: bool = True) -> ViewersState:
        """As stored; sketches ordered by node."""
        by_node = self.sketches if sketches else {}
        return ViewersState(len(self.exact), self.complete,
                            tuple(by_node[n] for n in sorted(by_node)), broadcast)


@dataclass
class _Broadcasts:
    """A room's broadcasts (``lr:{R}:bc`` on Redis)."""

    current: int = 1
    ended: dict[int, int] = field(default_factory=dict)
    """Ended broadcasts -> when they ended (ms), while their history may be kept."""


class MemoryStats:
    """statsvr's tables in this process, laid out like the redis engine's keys.

    Times in arguments (``now_ms``, ``t_ms``) decide what is live, as on Redis;
    the store's own clock drops what Redis would expire by itself (shard
    blobs and indexes after twice their TTL, viewers history, idle series), so
    memory stays bounded when the caller's clock is the store's.
    """

    def __init__(self, clock: Clock) -> None:
        self._shard_index: _Expiring[str, dict[_ShardKey, _IndexValue]] = _Expiring(clock)
        self._shards: _Expiring[tuple[str, str, int, int], bytes] = _Expiring(clock)
        self._viewers: _Expiring[str, _Viewers] = _Expiring(clock)
        self._broadcasts: _Expiring[str, _Broadcasts] = _Expiring(clock)
        self._ended: _Expiring[tuple[str, int], _Viewers] = _Expiring(clock)
        """(room, broadcast) -> the viewers history of an ended broadcast."""
        self._series: _Expiring[tuple[str, int], dict[int, Bucket]] = _Expiring(clock)
        self._series_last: _Expiring[str, int] = _Expiring(clock)
        self._nodes: dict[str, NodeState] = {}

    def sweep(self) -> None:
        """Drop whatever expired on the store's clock."""
        for table in (self._shard_index, self._shards, self._viewers, self._broadcasts,
                      self._ended, self._series, self._series_last):
            table.sweep()

    # -- shards ------------------------------------------------------------------

    async def write_shards(self, node: str, writes: Sequence[ShardWrite],
                           now_ms: int, ttl_ms: int) -> list[tuple[str, int]]:
        gc_ms = 2 * ttl_ms
        gone: list[tuple[str, int]] = []
        rooms: dict[str, None] = {}
        for w in writes:
            rooms[w.room] = None
            shard = (node, w.index, w.count)
            blob_key = (w.room, *shard)
            index = self._shard_index.get(w.room)
            if index is None:
                index = {}
                self._shard_index.put(w.room, index, gc_ms)
            value = (w.version, w.size, now_ms + ttl_ms)
            if w.size == 0:
                self._shards.pop(blob_key)
                index.pop(shard, None)
            elif w.members is not None:
                self._shards.put(blob_key, w.members, gc_ms)
                index[shard] = value
            elif self._shards.expire(blob_key, gc_ms):
                index[shard] = value
            else:
                index.pop(shard, None)
                gone.append((w.room, w.index))
        for room in rooms:
            index = self._shard_index.get(room)
            assert index is not None
            for shard in [s for s, (_, _, until) in index.items() if until < now_ms]:
                del index[shard]
            if index:
                self._shard_index.expire(room, gc_ms, only_later=True)
            else:
                self._shard_index.pop(room)
        return gone

    async def shard_index(self, rooms: Sequence[str], now_ms: int) -> list[list[ShardEntry]]:
        listed = []
        for room in rooms:
            index = self._shard_index.get(room) or {}
            listed.append([ShardEntry(node, i, n, version, size, until)
                           for (node, i, n), (version, size, until) in sorted(index.items())
                           if until >= now_ms])
        return listed

    async def read_shards(self, room: str, entries: Sequence[ShardEntry]) -> list[bytes | None]:
        return [self._shards.get((room, e.node, e.index, e.count)) for e in entries]

    # -- viewers -----------------------------------------------------------------

    async def add_viewers(self, room: str, node: str, uids: Sequence[str],
                          sketch: bytes | None, threshold: int,
                          ttl_ms: int) -> tuple[int, bool, int]:
        state = self._viewers.get(room) or _Viewers()
        if state.complete:
            for uid in uids:
                if uid in state.exact:
                    continue
                if len(state.exact) >= threshold:
                    state.complete = False
                    break
                state.exact.add(uid)
        if sketch is not None and not state.complete:  # see StatsStore.add_viewers
            state.sketches[node] = sketch
        if state.exact or not state.complete or state.sketches:
            self._viewers.put(room, state, ttl_ms)
        # The broadcast number outlives every viewers history of the room.
        self._broadcasts.expire(room, ttl_ms, only_later=True)
        return len(state.exact), state.complete, self._broadcast(room)

    def _broadcast(self, room: str) -> int:
        broadcasts = self._broadcasts.get(room)
        return 1 if broadcasts is None else broadcasts.current

    async def load_sketch(self, room: str, node: str) -> bytes | None:
        state = self._viewers.get(room)
        return None if state is None else state.sketches.get(node)

    async def viewers(self, rooms: Sequence[str], *,
                      sketches: Sequence[bool]) -> list[ViewersState]:
        """Each room's sketches come ordered by node."""
        if len(rooms) != len(sketches):
            raise ValueError("viewers() needs one sketches flag per room")
        return [(self._viewers.get(room) or _Viewers()).state(
                    self._broadcast(room), sketches=with_sketches)
                for room, with_sketches in zip(rooms, sketches, strict=True)]

    # -- broadcasts ----------------------------------------------------------------

    def end_broadcast(self, room: str, now_ms: int, ttl_ms: int) -> int:
        """Set the room's viewers history aside for ``ttl_ms`` under the
        broadcast's number; return the new broadcast's number."""
        broadcasts = self._broadcasts.get(room)
        if broadcasts is None:
            broadcasts = _Broadcasts()
            self._broadcasts.put(room, broadcasts, ttl_ms)
        else:
            self._broadcasts.expire(room, ttl_ms, only_later=True)
        ended = broadcasts.current
        self._ended.put((room, ended), self._viewers.get(room) or _Viewers(), ttl_ms)
        self._viewers.pop(room)
        broadcasts.ended = {n: at for n, at in broadcasts.ended.items()
                            if self._ended.get((room, n)) is not None}
        broadcasts.ended[ended] = now_ms
        broadcasts.current = ended + 1
        return broadcasts.current

    def ended_broadcasts(self, room: str) -> list[PastBroadcast]:
        broadcasts = self._broadcasts.get(room)
        if broadcasts is None:
            return []
        past = []
        for n in sorted(broadcasts.ended, reverse=True):
            viewers = self._ended.get((room, n))
            if viewers is not None:
                past.append(PastBroadcast(n, broadcasts.ended[n], viewers.state(n)))
        return past

    # -- series ------------------------------------------------------------------

    async def record_online(self, samples: Sequence[OnlineSample],
                            tiers: Sequence[tuple[int, int]], min_gap_ms: int) -> int:
        keep_ms = series_horizon_ms(tiers, min_gap_ms)
        if not tiers:
            return 0
        taken = 0
        for sample in samples:
            last = self._series_last.get(sample.room)
            if last is not None and sample.t_ms - last < min_gap_ms:
                continue
            taken += 1
            self._series_last.put(sample.room, sample.t_ms, keep_ms)
            for step, retention in tiers:
                buckets = self._series.get((sample.room, step))
                if buckets is None:
                    buckets = {}
                self._series.put((sample.room, step), _add_sample(
                    buckets, sample, step, retention), keep_ms)
        return taken

    async def read_online(self, room: str, step: int, low: int, high: int) -> list[SeriesRow]:
        buckets = self._series.get((room, step)) or {}
        return [(start, *bucket) for start, bucket in sorted(buckets.items())
                if low <= start <= high]

    # -- nodes -------------------------------------------------------------------

    async def announce(self, node: str, now_ms: int, ttl_ms: int,
                       announcement: Announcement | None = None) -> list[str]:
        self._nodes[node] = NodeState(node, now_ms, now_ms + ttl_ms,
                                      announcement or Announcement())
        self._nodes = {n: state for n, state in self._nodes.items()
                       if state.expires_ms >= now_ms}
        return sorted(self._nodes)

    async def withdraw(self, node: str) -> None:
        self._nodes.pop(node, None)

    async def nodes(self, now_ms: int) -> list[NodeState]:
        return [self._nodes[n] for n in sorted(self._nodes)
                if self._nodes[n].expires_ms >= now_ms]

    async def biggest_rooms(self, now_ms: int, limit: int) -> list[RankedRoom]:
        return biggest((state.announcement for state in await self.nodes(now_ms)), limit)


def _add_sample(buckets: dict[int, Bucket], sample: OnlineSample,
                step: int, retention: int) -> dict[int, Bucket]:
    """The tier's buckets with the sample added and buckets past retention dropped
    (the rule of ``lua/series.lua``); ascending by start."""
    start = sample.t_ms // (1000 * step) * step
    online = sample.online
    have = buckets.get(start)
    if have is None:
        ordered = not buckets or start > next(reversed(buckets))
        buckets[start] = (online, online, online, 1)
        if not ordered:
            buckets = dict(sorted(buckets.items()))
    else:
        buckets[start] = (min(have[0], online), max(have[1], online),
                          have[2] + online, have[3] + 1)
    horizon = start - (retention // step - 1) * step
    while buckets and next(iter(buckets)) < horizon:
        del buckets[next(iter(buckets))]
    return buckets


class MemoryOperators:
    """The vip whitelist and the end of broadcasts, in this process.

    ``end_broadcast`` never suspends, so it is atomic like the redis engine's script.
    """

    def __init__(self, log: MemoryLog, stats: MemoryStats, notifier: MemoryNotifier) -> None:
        self._log = log
        self._stats = stats
        self._notifier = notifier
        self._vip: set[str] = set()

    async def vip_add(self, room: str) -> bool:
        # An operator action makes the room exist (an empty log, short-lived
        # until its first message), as on Redis.
        await self._log.open_room(room)
        if room in self._vip:
            return False
        self._vip.add(room)
        return True

    async def vip_remove(self, room: str) -> bool:
        if room not in self._vip:
            return False
        self._vip.discard(room)
        return True

    async def vip_rooms(self) -> frozenset[str]:
        return frozenset(self._vip)

    async def end_broadcast(self, room: str, now_ms: int, ttl_ms: int) -> Ended:
        epoch, head = self._log.start_epoch(room)
        broadcast = self._stats.end_broadcast(room, now_ms, ttl_ms)
        self._notifier.publish(room, head)
        return Ended(epoch, broadcast)

    async def broadcasts(self, room: str) -> list[PastBroadcast]:
        return self._stats.ended_broadcasts(room)


class MemoryStore:
    """The embedded engine (``--store memory``)."""

    name = "memory"

    def __init__(self, policy: LogPolicy, clock: Clock) -> None:
        self._clock = clock
        self.notifier = MemoryNotifier()
        self.log = MemoryLog(policy, clock, self.notifier)
        self.stats = MemoryStats(clock)
        self.operators = MemoryOperators(self.log, self.stats, self.notifier)
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
            self.stats.sweep()

    async def ping(self) -> None:
        return None
