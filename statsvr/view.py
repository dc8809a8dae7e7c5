"""A room's online members, merged from every node's shard keys (docs/design.md step 8).

:func:`build_view` turns the live shard entries of one room and their blobs
(each a msgpack array of uids, sorted) into an :class:`OnlineView`: an immutable
value that the merge task swaps in with one assignment. Queries never lock and
never touch the store.

How shards are merged. ``K`` is the largest shard ``count`` among the entries.
Entries split into ``K`` shards are grouped by ``index``; a uid hashes to one
index on every node (:func:`statsvr.table.shard_of`), so the groups are
disjoint and a room's members are their union.

* A group with one contributor (the common case: each listener heartbeats
  through one node) keeps its blob **undecoded**; its size is read from the
  msgpack array header, an O(1) peek. A 1 000 000-member vip room over 16 shard
  keys of one node builds without decoding anything.
* A group with several contributors (a uid heartbeating through two nodes) is
  decoded and unioned into one sorted tuple without duplicates.
* Entries split into another count (a room being re-sharded, configuration
  drift between nodes) are decoded and re-split into the ``K`` groups.

So :attr:`OnlineView.online` is the exact number of distinct uids, with one
limit: an undecoded blob is counted by its array header, so a blob whose header
is well formed but whose items are not (truncated, not strings) is counted
until :meth:`OnlineView.page` decodes it and finds it empty.

Reuse. A group whose contributors ``(node, index, count, version)`` are the
same as in the previous view is taken over as it is, decoded cache included,
without reading a blob: an unchanged room costs a set comparison.

The event loop. Decoding, unioning and re-splitting run in slices of about
:data:`SLICE` uids with ``await asyncio.sleep(0)`` between them, so no
synchronous stretch is long (a few ms per slice of 16-character uids).

A blob that fails to decode, or is not an array of strings, is logged once and
counted as empty; nothing here raises on bad data. A blob that is not sorted is
sorted (and logged), since the producer promised sorted arrays.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import logging
import operator
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

import msgpack

from liveroom.store.base import ShardEntry

from .table import shard_of

__all__ = ["SLICE", "Contributor", "OnlineView", "build_view", "contributor"]

logger = logging.getLogger("liveroom.statsvr")

SLICE = 20_000
"""Uids handled between two yields to the event loop (about 2-4 ms of work)."""

_WHOLE_DECODE_BYTES = 2 << 20
"""Blobs up to this size are decoded in one call (about 4 ms for 16-char uids);
larger ones are decoded item by item in slices."""

Contributor = tuple[str, int, int, str]
"""``(node, index, count, version)``: one shard key's identity and version."""

_GroupKey = tuple[int, int, frozenset[Contributor]]
"""``(K, index, contributors)``: what a merged shard was built from."""


def contributor(entry: ShardEntry) -> Contributor:
    """The identity of ``entry`` as views compare it."""
    return (entry.node, entry.index, entry.count, entry.version)


# -- bad blobs: logged once --------------------------------------------------

_reported: dict[Contributor, None] = {}
_REPORTED_KEEP = 1024


def _report(room: str, source: Contributor, problem: str) -> None:
    """Log a bad blob once per contributor (a bounded memory of the last ones)."""
    if source in _reported:
        return
    _reported[source] = None
    if len(_reported) > _REPORTED_KEEP:
        del _reported[next(iter(_reported))]
    node, index, count, version = source
    logger.warning("room %s: shard %d/%d of node %s (version %s) %s; counted as empty",
                room, index, count, node, version, problem)


# -- decoding ---------------------------------------------------------------


def array_size(blob: bytes) -> int | None:
    """The length a msgpack array header at the start of ``blob`` announces.

    ``None`` when ``blob`` does not start with an array header. Reads at most 5
    bytes: the items are not looked at.
    """
    if not blob:
        return None
    first = blob[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    if first == 0xDC and len(blob) >= 3:
        return int.from_bytes(blob[1:3], "big")
    if first == 0xDD and len(blob) >= 5:
        return int.from_bytes(blob[1:5], "big")
    return None


def _all_str(items: Sequence[Any]) -> bool:
    return set(map(type, items)) <= {str}


def _strictly_ascending(items: Sequence[str]) -> bool:
    return all(map(operator.lt, items, islice(items, 1, None)))


async def decode_members(room: str, blob: bytes, source: Contributor) -> tuple[str, ...]:
    """The uids of one shard blob, sorted and distinct; ``()`` for a bad blob.

    Yields to the event loop between slices when the blob is large.
    """
    items: tuple[Any, ...]
    try:
        if len(blob) <= _WHOLE_DECODE_BYTES:
            decoded = msgpack.unpackb(blob, use_list=False)
            if not isinstance(decoded, tuple):
                _report(room, source, "is not an array")
                return ()
            items = decoded
            if not _all_str(items):
                _report(room, source, "holds items that are not strings")
                return ()
        else:
            unpacker = msgpack.Unpacker(max_buffer_size=len(blob))
            unpacker.feed(blob)
            size = unpacker.read_array_header()
            parts: list[Any] = []
            while len(parts) < size:
                piece = [unpacker.unpack() for _ in range(min(SLICE, size - len(parts)))]
                if not _all_str(piece):
                    _report(room, source, "holds items that are not strings")
                    return ()
                parts.extend(piece)
                await asyncio.sleep(0)
            if unpacker.tell() != len(blob):
                raise ValueError("extra data after the array")
            items = tuple(parts)
    except Exception as exc:  # a bad blob never breaks a merge
        _report(room, source, f"does not decode ({type(exc).__name__}: {exc})")
        return ()
    return await _ascending(room, items, source)


async def _ascending(room: str, items: tuple[str, ...], source: Contributor) -> tuple[str, ...]:
    """``items`` if sorted and distinct (the producer's promise), else made so."""
    for start in range(0, len(items), SLICE):
        # Overlap one item so the pair across two slices is compared too.
        if not _strictly_ascending(items[start:start + SLICE + 1]):
            break
        if start:
            await asyncio.sleep(0)
    else:
        return items
    _report(room, source, "is not sorted")
    runs = []
    for start in range(0, len(items), SLICE):
        runs.append(tuple(dict.fromkeys(sorted(items[start:start + SLICE]))))
        await asyncio.sleep(0)
    return await union(runs)


async def union(runs: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    """The sorted distinct union of sorted distinct tuples, built in slices.

    Works by value ranges: each step takes, from every run, the items below a
    boundary chosen so that a step holds at most about :data:`SLICE` items, and
    sorts that range alone (Timsort merges the runs in C). Equal uids always
    fall in the same range, so dropping adjacent duplicates is enough.
    """
    live = [run for run in runs if run]
    if not live:
        return ()
    if len(live) == 1:
        return live[0]
    total = sum(map(len, live))
    if total <= SLICE:
        return tuple(dict.fromkeys(sorted(chain.from_iterable(live))))
    step = max(1, SLICE // len(live))
    positions = [0] * len(live)
    out: list[str] = []
    while True:
        candidates = [run[pos + step] for run, pos in zip(live, positions, strict=True)
                      if pos + step < len(run)]
        if candidates:
            # Every run contributes fewer than ``step`` items below the smallest
            # candidate, and the run it came from exactly ``step``.
            bound = min(candidates)
            ends = [bisect.bisect_left(run, bound, pos)
                    for run, pos in zip(live, positions, strict=True)]
        else:
            ends = [len(run) for run in live]
        chunk = sorted(chain.from_iterable(
            run[pos:end] for run, pos, end in zip(live, positions, ends, strict=True)))
        out.extend(dict.fromkeys(chunk))
        positions = ends
        if not candidates:
            return tuple(out)
        await asyncio.sleep(0)


async def _resplit(room: str, parts: Sequence[tuple[ShardEntry, bytes]],
                   count: int) -> dict[int, list[tuple[str, ...]]]:
    """Members of shards split into another count, re-split into ``count`` shards.

    Returns, per new index, one sorted run per source shard.
    """
    runs: dict[int, list[tuple[str, ...]]] = {}
    for entry, blob in parts:
        members = await decode_members(room, blob, contributor(entry))
        buckets: dict[int, list[str]] = {}
        for start in range(0, len(members), SLICE):
            for uid in members[start:start + SLICE]:
                index = shard_of(uid, count)
                bucket = buckets.get(index)
                if bucket is None:
                    buckets[index] = [uid]
                else:
                    bucket.append(uid)
            await asyncio.sleep(0)
        for index, bucket in buckets.items():
            runs.setdefault(index, []).append(tuple(bucket))
    return runs


# -- the view ---------------------------------------------------------------


class _Group:
    """One merged shard of a view: the members of one index of ``K``.

    Holds either one undecoded blob (``raw``) or the decoded sorted tuple
    (``members``); decoding a raw group caches the tuple here, which every
    later view reusing the group shares. That cache is the only thing that
    changes after a view is built, and it never changes what the view says.
    """

    __slots__ = ("count", "key", "members", "raw", "source")

    def __init__(self, key: _GroupKey, count: int, *, raw: bytes | None = None,
                 source: Contributor | None = None,
                 members: tuple[str, ...] | None = None) -> None:
        self.key = key
        self.count = count
        self.raw = raw
        self.source = source
        self.members = members

    @property
    def index(self) -> int:
        return self.key[1]

    async def sorted_members(self, room: str) -> tuple[str, ...]:
        """The members, sorted; decodes a raw blob the first time."""
        if self.members is None:
            assert self.raw is not None
            assert self.source is not None
            members = await decode_members(room, self.raw, self.source)
            if self.members is None:
                self.members = members
        return self.members


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class OnlineView:
    """One room's online members as one merge saw them. Immutable; reads never wait
    on the store.

    :attr:`online` is the number of distinct uids; :meth:`page` lists them in
    sorted order. Two views of a room with equal :attr:`versions` were built
    from the same shard versions and hold the same members.
    """

    room: str
    online: int
    versions: frozenset[Contributor]
    """The ``(node, index, count, version)`` of every shard key merged in."""
    nodes: frozenset[str]
    """The statsvr nodes whose shard keys were merged in."""
    shard_count: int
    """``K``: the number of merged shards the members are split into (0 when empty)."""
    _groups: Mapping[int, _Group]
    _blobs: Mapping[Contributor, bytes]
    _resplit: frozenset[Contributor]
    _resplit_indices: frozenset[int]

    def __repr__(self) -> str:
        return (f"<OnlineView {self.room!r} online={self.online} "
                f"nodes={sorted(self.nodes)} shards={self.shard_count}>")

    @classmethod
    def empty(cls, room: str) -> OnlineView:
        """The view of a room with nobody online (and of a room not merged yet)."""
        return cls(room, 0, frozenset(), frozenset(), 0, {}, {}, frozenset(), frozenset())

    def blob(self, entry: ShardEntry | Contributor) -> bytes | None:
        """The blob this view was built from for ``entry``, if it was merged in.

        The merge task passes it back to :func:`build_view` so that an
        unchanged shard key is not read again when another key of its group
        changed.
        """
        key = contributor(entry) if isinstance(entry, ShardEntry) else entry
        return self._blobs.get(key)

    async def page(self, offset: int, limit: int) -> list[str]:
        """Members ``offset`` to ``offset + limit`` (exclusive) in sorted order.

        Decodes raw groups the first time (cached, so later pages are cheap),
        yielding between groups. Finds the member of rank ``offset`` by binary
        searches across the sorted, disjoint groups (about ``k² log² n``
        comparisons for ``k`` groups), then merges only ``limit`` items: meant
        for pages of up to a few thousand; use :meth:`shards` to walk everyone.
        An ``offset`` past the end gives ``[]``.
        """
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        if limit == 0 or not self._groups:
            return []
        runs = []
        for group in self._groups.values():
            decoded = group.members is None
            members = await group.sorted_members(self.room)
            if members:
                runs.append(members)
            if decoded:
                await asyncio.sleep(0)
        if len(runs) == 1:
            return list(runs[0][offset:offset + limit])
        starts = _rank_positions(runs, offset)
        if starts is None:
            return []
        tails = [map(run.__getitem__, range(start, len(run)))
                 for run, start in zip(runs, starts, strict=True)]
        return list(islice(heapq.merge(*tails), limit))

    async def shards(self) -> AsyncIterator[tuple[str, ...]]:
        """Every merged shard's members (sorted within a shard, shards by index),
        decoding raw ones as needed and yielding to the event loop between them.

        The way to walk a whole big room (e.g. to feed the viewers history)
        without one long stretch of work.
        """
        for group in self._groups.values():
            members = await group.sorted_members(self.room)
            if members:
                yield members
            await asyncio.sleep(0)


def _rank_positions(runs: Sequence[tuple[str, ...]], offset: int) -> list[int] | None:
    """Where each sorted, disjoint run splits so the heads hold ``offset`` items
    and every head item sorts before every tail item; ``None`` past the end."""
    if offset == 0:
        return [0] * len(runs)
    if offset >= sum(map(len, runs)):
        return None
    for run in runs:
        low, high = 0, len(run)
        while low < high:
            mid = (low + high) // 2
            rank = sum(bisect.bisect_left(other, run[mid]) for other in runs)
            if rank < offset:
                low = mid + 1
            elif rank > offset:
                high = mid
            else:
                pivot = run[mid]
                return [bisect.bisect_left(other, pivot) for other in runs]
    raise AssertionError("the member of a rank below the total is in some run")


# -- building ---------------------------------------------------------------


async def build_view(room: str, parts: Sequence[tuple[ShardEntry, bytes]],
                     previous: OnlineView | None = None) -> OnlineView:
    """Merge the live shard entries of ``room`` and their blobs into a view.

    ``parts`` holds every live entry with its blob (entries repeated with the
    same ``(node, index, count, version)`` count once). Groups whose
    contributors are the same as in ``previous`` are taken from it unread.
    Single-contributor groups stay undecoded; the rest are decoded and unioned
    in slices, yielding to the event loop. Never raises on bad blobs.
    """
    unique: dict[Contributor, tuple[ShardEntry, bytes]] = {}
    for entry, blob in parts:
        unique.setdefault(contributor(entry), (entry, blob))
    if not unique:
        return OnlineView.empty(room)
    count = max(entry.count for entry, _ in unique.values())
    own: dict[int, list[tuple[Contributor, bytes]]] = {}
    other: list[tuple[ShardEntry, bytes]] = []
    for source, (entry, blob) in unique.items():
        if entry.count == count and 0 <= entry.index < count:
            own.setdefault(entry.index, []).append((source, blob))
        else:
            other.append((entry, blob))
    other_keys = frozenset(contributor(entry) for entry, _ in other)

    before = previous if previous is not None and previous.room == room else None
    old_groups: Mapping[int, _Group] = before._groups if before is not None else {}
    resplit: dict[int, list[tuple[str, ...]]] | None = None
    indices = set(own)
    if other:
        if before is not None and before.shard_count == count \
                and before._resplit == other_keys:
            # The same re-split shards land in the same indices as last time.
            resplit_indices = before._resplit_indices
        else:
            resplit = await _resplit(room, other, count)
            resplit_indices = frozenset(resplit)
        indices |= resplit_indices
    else:
        resplit_indices = frozenset()

    groups: dict[int, _Group] = {}
    for index in sorted(indices):
        mine = own.get(index, [])
        group_key: _GroupKey = (count, index, frozenset(k for k, _ in mine) | other_keys)
        old = old_groups.get(index)
        if old is not None and old.key == group_key:
            groups[index] = old
            continue
        extra: list[tuple[str, ...]] = []
        if index in resplit_indices:
            if resplit is None:
                resplit = await _resplit(room, other, count)
            extra = resplit.get(index, [])
        if len(mine) == 1 and not extra:
            source, blob = mine[0]
            size = array_size(blob)
            if size is not None:
                groups[index] = _Group(group_key, size, raw=blob, source=source)
                continue
            members = await decode_members(room, blob, source)  # logs and gives ()
        else:
            decoded = [await decode_members(room, blob, source) for source, blob in mine]
            members = await union(decoded + extra)
        groups[index] = _Group(group_key, len(members), members=members)
        await asyncio.sleep(0)

    return OnlineView(
        room=room,
        online=sum(group.count for group in groups.values()),
        versions=frozenset(unique),
        nodes=frozenset(source[0] for source in unique),
        shard_count=count,
        _groups=groups,
        _blobs={key: blob for key, (_, blob) in unique.items()},
        _resplit=other_keys,
        _resplit_indices=resplit_indices,
    )
