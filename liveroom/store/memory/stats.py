"""statsvr's tables in memory, mirroring the redis engine's keys: shard
index and shards, viewers history, online series, the node registry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...clock import Clock
from ..base import (
    Announcement,
    AuditEntry,
    NodeState,
    OnlineSample,
    PastBroadcast,
    RankedRoom,
    SeriesRow,
    ShardEntry,
    ShardWrite,
    ViewersState,
    biggest,
    series_horizon_ms,
)
from .expiring import Expiring

Bucket = tuple[int, int, int, int]
"""``(min, max, sum, count)`` of one series bucket."""

Counted = tuple[int, int, tuple[tuple[str, int], ...]]
"""An ended broadcast's likes total, gift total and ranking."""
_ShardKey = tuple[str, int, int]
"""(node, index, count) of a shard."""
_IndexValue = tuple[str, int, int, int]
"""(version, size, trusted, expires_ms) of a shard index entry."""


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

    def __init__(self, clock: Clock, provisional: Callable[[str], tuple[str, int] | None]
                 = lambda room: None) -> None:
        self._provisional = provisional
        """A room of one sender's sender and how long its log has left (ms),
        ``None`` for any other room: its stats live no longer (see
        ``StatsStore.add_viewers``)."""
        self._shard_index: Expiring[str, dict[_ShardKey, _IndexValue]] = Expiring(clock)
        self._shards: Expiring[tuple[str, str, int, int], bytes] = Expiring(clock)
        self._viewers: Expiring[str, _Viewers] = Expiring(clock)
        self._broadcasts: Expiring[str, _Broadcasts] = Expiring(clock)
        self._ended: Expiring[tuple[str, int],
                              tuple[_Viewers, Counted, tuple[AuditEntry, ...]]] = Expiring(clock)
        """(room, broadcast) -> the viewers history, counters and moderation
        audit of an ended broadcast."""
        self._series: Expiring[tuple[str, int], dict[int, Bucket]] = Expiring(clock)
        self._series_last: Expiring[str, int] = Expiring(clock)
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
            value = (w.version, w.size, w.trusted, now_ms + ttl_ms)
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
            for shard in [s for s, (*_, until) in index.items() if until < now_ms]:
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
            listed.append([ShardEntry(node, i, n, version, size, until, trusted)
                           for (node, i, n), (version, size, trusted, until)
                           in sorted(index.items()) if until >= now_ms])
        return listed

    async def read_shards(self, room: str, entries: Sequence[ShardEntry],
                          max_bytes: int | None = None) -> list[bytes | None]:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        blobs = [self._shards.get((room, e.node, e.index, e.count)) for e in entries]
        if max_bytes is None:
            return blobs
        return [None if b is None else b[:max_bytes] for b in blobs]

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
        ttl_ms = self._lives_ms(room, ttl_ms, uids)
        if state.exact or not state.complete or state.sketches:
            self._viewers.put(room, state, ttl_ms)
        # The broadcast number outlives every viewers history of the room.
        self._broadcasts.expire(room, ttl_ms, only_later=True)
        return len(state.exact), state.complete, self._broadcast(room)

    def current_broadcast(self, room: str) -> int:
        """The room's current broadcast number (1 for a room never ended)."""
        return self._broadcast(room)

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

    def end_broadcast(self, room: str, now_ms: int, ttl_ms: int,
                      counted: Counted = (0, 0, ()),
                      audit: tuple[AuditEntry, ...] = ()) -> int:
        """Set the room's viewers history aside for ``ttl_ms`` under the
        broadcast's number, with what its counters ``counted`` (likes, gift
        total, ranking) and its moderation ``audit``; return the new
        broadcast's number."""
        broadcasts = self._broadcasts.get(room)
        if broadcasts is None:
            broadcasts = _Broadcasts()
            self._broadcasts.put(room, broadcasts, ttl_ms)
        else:
            self._broadcasts.expire(room, ttl_ms, only_later=True)
        ended = broadcasts.current
        self._ended.put((room, ended), (self._viewers.get(room) or _Viewers(), counted, audit),
                        ttl_ms)
        self._viewers.pop(room)
        broadcasts.ended = {n: at for n, at in broadcasts.ended.items()
                            if self._ended.get((room, n)) is not None}
        broadcasts.ended[ended] = now_ms
        broadcasts.current = ended + 1
        return broadcasts.current

    def add_ended_likes(self, room: str, broadcast: int, taps: int) -> bool:
        """Add ``taps`` to ended broadcast ``broadcast``'s likes; False when its
        archive is gone (nothing added)."""
        archived = self._ended.get((room, broadcast))
        if archived is None:
            return False
        viewers, (likes, gifts, ranking), audit = archived
        return self._ended.replace((room, broadcast),
                                   (viewers, (likes + taps, gifts, ranking), audit))

    def ended_broadcasts(self, room: str) -> list[PastBroadcast]:
        broadcasts = self._broadcasts.get(room)
        if broadcasts is None:
            return []
        past = []
        for n in sorted(broadcasts.ended, reverse=True):
            archived = self._ended.get((room, n))
            if archived is not None:
                viewers, (likes, gifts, ranking), audit = archived
                past.append(PastBroadcast(n, broadcasts.ended[n], viewers.state(n),
                                          likes, gifts, ranking, audit))
        return past

    # -- series ------------------------------------------------------------------

    async def record_online(self, samples: Sequence[OnlineSample],
                            resolutions: Sequence[tuple[int, int]], min_gap_ms: int) -> int:
        keep_ms = series_horizon_ms(resolutions, min_gap_ms)
        if not resolutions:
            return 0
        taken = 0
        for sample in samples:
            last = self._series_last.get(sample.room)
            if last is not None and sample.t_ms - last < min_gap_ms:
                continue
            taken += 1
            keep = self._lives_ms(sample.room, keep_ms, None)
            self._series_last.put(sample.room, sample.t_ms, keep)
            for step, retention in resolutions:
                buckets = self._series.get((sample.room, step))
                if buckets is None:
                    buckets = {}
                self._series.put((sample.room, step), _add_sample(
                    buckets, sample, step, retention), keep)
        return taken

    def _lives_ms(self, room: str, ttl_ms: int, uids: Sequence[str] | None) -> int:
        """``ttl_ms``, or what its log has left for a room of one sender
        (with ``uids``: only when they are that sender alone)."""
        provisional = self._provisional(room)
        if provisional is None:
            return ttl_ms
        by, left = provisional
        if uids is not None and (not uids or any(uid != by for uid in uids)):
            return ttl_ms
        return min(ttl_ms, left)

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
    """The resolution's buckets with the sample added and buckets past retention dropped,
    ascending by start: the bucket rule of ``statsvr.series`` (``Resolution.start``
    and ``horizon``, on integer ms), as ``stats_series.lua`` does it in Redis; the
    tests hold both engines to one reference model."""
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
