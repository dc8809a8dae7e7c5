"""Pages of members read from the store when someone asks (``/online``).

A view (:mod:`statsvr.view`) holds no members of a big room: a page asks
:meth:`MemberPages.slice` for a slice of one group, the union of every node's
blob of one shard index.

* **The first pages** (``offset + limit`` up to ``prefix_up_to``) read only the
  first bytes of each contributor's blob (``GETRANGE``; a blob is a msgpack
  array of sorted uids, so its head holds its smallest members): about
  ``contributors x (offset + limit) x`` the bytes of a uid, whatever the room's
  size. A head too short for the page is read again, longer.
* **Deeper pages** read the group whole and union it once.

What was read is kept for ``keep_for`` seconds after its last use and within
``budget`` uids (least recently used first out), under the contributors'
versions: a new version is a new key, so nothing stale is ever served, and a
node holds nothing of a room nobody paged. Page reads of one room wait for
each other, so a burst of requests for one page reads the store once.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from liveroom.clock import Clock
from liveroom.store.base import ShardEntry, StatsStore

from .members import Contributor, contributor, decode_members, decode_prefix, union

__all__ = ["MemberPages"]

PREFIX_UP_TO = 2_000
"""Pages ending at most this deep into a group read heads of blobs."""

KEEP_FOR = 10.0
BUDGET = 400_000
"""Uids kept at most (about 30 MB of 16-character uids)."""

_FIRST_GUESS = 24
"""Bytes a uid takes in a blob, before a head has shown it (16 characters)."""

_Key = tuple[str, Contributor] | tuple[str, frozenset[Contributor]]
"""``(room, contributor)``: a blob's head or whole run; ``(room, contributors)``:
a whole group's union."""


@dataclass(slots=True)
class _Kept:
    members: tuple[str, ...]
    whole: bool
    """All of the blob (or group), not a head."""
    head_bytes: int
    """Bytes the head was decoded from (0 when whole)."""
    used_at: float


class MemberPages:
    """Slices of member groups read from ``stats`` on demand, kept a short while."""

    def __init__(self, stats: StatsStore, clock: Clock, *, keep_for: float = KEEP_FOR,
                 budget: int = BUDGET, prefix_up_to: int = PREFIX_UP_TO) -> None:
        self._stats = stats
        self._clock = clock
        self.keep_for = keep_for
        self.budget = budget
        self.prefix_up_to = prefix_up_to
        self._kept: OrderedDict[_Key, _Kept] = OrderedDict()
        self._kept_uids = 0
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def kept_uids(self) -> int:
        """Uids kept now."""
        return self._kept_uids

    async def slice(self, room: str, entries: Sequence[ShardEntry], offset: int,
                    limit: int) -> list[str]:
        """Members ``offset`` to ``offset + limit`` of the sorted union of the
        blobs of ``entries`` (one group of ``room``)."""
        if limit <= 0 or not entries:
            return []
        lock = self._locks.get(room)
        if lock is None:
            lock = self._locks[room] = asyncio.Lock()
        async with lock:
            if offset + limit <= self.prefix_up_to:
                heads = await self._heads(room, entries, offset + limit)
                return _merged(heads, offset, limit)
            members = await self._whole(room, entries)
            return list(members[offset:offset + limit])

    def sweep(self) -> None:
        """Forget what was not used for ``keep_for`` seconds."""
        cutoff = self._clock.monotonic() - self.keep_for
        for key, kept in list(self._kept.items()):
            if kept.used_at < cutoff:
                self._drop(key)
        for room, lock in list(self._locks.items()):
            if not lock.locked():
                del self._locks[room]

    # -- reading ------------------------------------------------------------------

    async def _heads(self, room: str, entries: Sequence[ShardEntry],
                     need: int) -> list[tuple[str, ...]]:
        """Each entry's first ``need`` members (fewer when that is all of it)."""
        out: dict[Contributor, tuple[str, ...]] = {}
        todo: list[ShardEntry] = []
        per_uid = float(_FIRST_GUESS)
        for entry in entries:
            kept = self._get((room, contributor(entry)))
            if kept is not None and (kept.whole or len(kept.members) >= need):
                out[contributor(entry)] = kept.members
            else:
                todo.append(entry)
                if kept is not None and kept.members:
                    per_uid = max(per_uid, kept.head_bytes / len(kept.members))
        while todo:
            max_bytes = 16 + int(need * per_uid * 1.25)
            read = await self._stats.read_shards(room, todo, max_bytes)
            again = []
            for entry, head in zip(todo, read, strict=True):
                source = contributor(entry)
                members: tuple[str, ...] | None
                if head is None:  # gone since the index was read
                    members, whole = (), True
                elif len(head) < max_bytes:
                    members = await decode_members(room, head, source)
                    whole = True
                else:
                    members = decode_prefix(room, head, source)
                    whole = members is None  # a bad blob: empty, whole
                    if members is not None and len(members) < need:
                        again.append(entry)
                        if members:
                            per_uid = max(per_uid, len(head) / len(members))
                members = members or ()
                out[source] = members
                head_bytes = 0 if whole or head is None else len(head)
                self._put((room, source), _Kept(members, whole, head_bytes,
                                                self._clock.monotonic()))
            # Every round at least doubles the bytes, so a round reads a head
            # long enough or the whole blob.
            per_uid *= 2
            todo = again
        return [out[contributor(entry)] for entry in entries]

    async def _whole(self, room: str, entries: Sequence[ShardEntry]) -> tuple[str, ...]:
        """The sorted union of the whole blobs of ``entries``."""
        sources = [contributor(entry) for entry in entries]
        key: _Key = (room, sources[0]) if len(sources) == 1 else (room, frozenset(sources))
        kept = self._get(key)
        if kept is not None and kept.whole:
            return kept.members
        read = await self._stats.read_shards(room, entries)
        runs = [await decode_members(room, blob, source)
                for source, blob in zip(sources, read, strict=True) if blob is not None]
        members = await union(runs)
        self._put(key, _Kept(members, True, 0, self._clock.monotonic()))
        return members

    # -- what is kept -------------------------------------------------------------

    def _get(self, key: _Key) -> _Kept | None:
        kept = self._kept.get(key)
        if kept is not None:
            kept.used_at = self._clock.monotonic()
            self._kept.move_to_end(key)
        return kept

    def _put(self, key: _Key, kept: _Kept) -> None:
        self._drop(key)
        self._kept[key] = kept
        self._kept_uids += len(kept.members)
        while self._kept_uids > self.budget and len(self._kept) > 1:
            oldest = next(iter(self._kept))
            if oldest == key:
                break
            self._drop(oldest)

    def _drop(self, key: _Key) -> None:
        kept = self._kept.pop(key, None)
        if kept is not None:
            self._kept_uids -= len(kept.members)


def _merged(runs: Sequence[tuple[str, ...]], offset: int, limit: int) -> list[str]:
    """Items ``offset`` to ``offset + limit`` of the distinct union of sorted
    runs, each whole or holding at least ``offset + limit`` items.

    Enough: the run whose head ends lowest has ``offset + limit`` items up to
    its end, and every run holds every item of its own below that end.
    """
    if len(runs) == 1:
        return list(runs[0][offset:offset + limit])
    return list(islice(_distinct(heapq.merge(*runs)), offset, offset + limit))


def _distinct(ordered: Iterator[str]) -> Iterator[str]:
    """Sorted items without the repeats."""
    last = None
    for uid in ordered:
        if uid != last:
            last = uid
            yield uid
