"""The members in shard blobs: decoding a blob whole or only its first bytes,
and the sorted union of sorted runs (docs/design.md step 8).

A shard blob is a msgpack array of the shard's uids, sorted and distinct (the
producer's promise, :meth:`statsvr.table.Tables.take_writes`). So the first
bytes of a blob hold its first members: :func:`decode_prefix` reads a page's
worth of a huge shard without the rest.

The event loop. Decoding, unioning and re-splitting run in slices of about
:data:`SLICE` uids with ``await asyncio.sleep(0)`` between them, so no
synchronous stretch is long (a few ms per slice of 16-character uids).

A blob that fails to decode, or is not an array of strings, is logged once and
counted as empty; nothing here raises on bad data. A whole blob that is not
sorted is sorted (and logged); a prefix is trusted to be the smallest members.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import operator
from collections.abc import Iterable, Sequence
from itertools import chain, islice
from typing import Any

import msgpack

from liveroom.store.base import ShardEntry

from .table import shard_of

__all__ = ["SLICE", "Contributor", "contributor", "decode_members", "decode_prefix",
           "resplit", "union"]

logger = logging.getLogger("liveroom.statsvr")

SLICE = 20_000
"""Uids handled between two yields to the event loop (about 2-4 ms of work)."""

_WHOLE_DECODE_BYTES = 2 << 20
"""Blobs up to this size are decoded in one call (about 4 ms for 16-char uids);
larger ones are decoded item by item in slices."""

Contributor = tuple[str, int, int, str]
"""``(node, index, count, version)``: one shard key's identity and version."""


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


def decode_prefix(room: str, head: bytes, source: Contributor) -> tuple[str, ...] | None:
    """The members in ``head``, the first bytes of a blob (not the whole of it):
    every item complete in it, in order; ``None`` for a bad blob (logged).

    Takes the producer's word that the blob is sorted (a page of a huge room
    is read this way; sorting would need the whole blob).
    """
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(head), 1024))
    unpacker.feed(head)
    items: list[Any] = []
    try:
        size = unpacker.read_array_header()
        while len(items) < size:
            items.append(unpacker.unpack())
    except msgpack.OutOfData:
        pass
    except Exception as exc:  # a bad blob never breaks a page
        _report(room, source, f"does not decode ({type(exc).__name__}: {exc})")
        return None
    if not _all_str(items):
        _report(room, source, "holds items that are not strings")
        return None
    return tuple(items)


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


async def resplit(runs: Iterable[tuple[str, ...]],
                  count: int) -> dict[int, list[tuple[str, ...]]]:
    """Sorted runs of members re-split into ``count`` shards (:func:`shard_of`).

    Returns, per index, one sorted run per source run that has members there.
    """
    out: dict[int, list[tuple[str, ...]]] = {}
    for members in runs:
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
            out.setdefault(index, []).append(tuple(bucket))
    return out
