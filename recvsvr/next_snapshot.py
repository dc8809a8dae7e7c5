"""Building a room's next snapshot from the last one and a pull.

Pure functions: given the snapshot a recvsvr holds and what the store returned,
return the snapshot to swap in. Messages are encoded here, once each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from liveroom.codec import encode_message
from liveroom.model import Entry, recalled_target, tombstone_of
from liveroom.personal import NodeCap, Personal
from liveroom.settings import (
    IMPORTANT_HARD_CAP,
    IMPORTANT_KEEP,
    IMPORTANT_WINDOW,
    INDEX_KEEP,
    NORMAL_KEEP,
    PERSONAL_HARD_CAP,
)
from liveroom.snapshot import Item, Snapshot
from liveroom.store.base import Pulled


@dataclass(frozen=True, slots=True)
class Retention:
    normal_keep: int = NORMAL_KEEP
    important_keep: int = IMPORTANT_KEEP
    important_window_ms: int = int(IMPORTANT_WINDOW * 1000)
    important_hard_cap: int = IMPORTANT_HARD_CAP
    personal_hard_cap: int = PERSONAL_HARD_CAP
    index_keep: int = INDEX_KEEP
    node_cap: NodeCap | None = None
    """Bounds the personal messages of all rooms together (``None``: only per room)."""


def _item(entry: Entry) -> Item:
    target = recalled_target(entry)
    if target:  # a recall's notice: listed in answers' ``recalled``, not as a message
        return Item(entry.seq, entry.ts, b"", b"", target)
    js, mp = encode_message(entry)
    # orjson returns bytes in an over-allocated buffer (a 69-byte message held
    # about 1 KiB in a measure): a copy is exact-sized, and a snapshot keeps
    # its messages for minutes.
    return Item(entry.seq, entry.ts, bytes(memoryview(js)), mp)


def _contiguous_tail(entries: tuple[Entry, ...]) -> int:
    """Index where the run of consecutive seqs that ends the entries starts."""
    i = len(entries) - 1
    while i > 0 and entries[i - 1].seq == entries[i].seq - 1:
        i -= 1
    return max(i, 0)


def advance(old: Snapshot | None, pulled: Pulled, after: int, keep: Retention,
            now_ms: int) -> Snapshot:
    """The snapshot after applying ``pulled`` (a read of entries after ``after``).

    ``old`` must be of the same epoch as ``pulled`` (or ``None`` to start
    afresh, then ``after`` is 0). When the pull is complete the counting anchor
    stays; otherwise the anchor moves to the start of the contiguous run of
    new entries, the last stretch this node knows every message of.

    Personal messages go to the room's :class:`~liveroom.personal.Personal`,
    shared with ``old`` (a new one for a new epoch) and trimmed here.
    """
    assert pulled.epoch is not None
    entries = pulled.entries
    personal = old.personal if old is not None else None
    phead = max(pulled.phead, old.phead) if old is not None else pulled.phead
    news = pulled.personal
    if news:
        if old is not None:
            news = tuple(e for e in news if e.seq > old.phead)
        if personal is None:
            personal = Personal(keep=keep.important_keep, hard_cap=keep.personal_hard_cap,
                                window_ms=keep.important_window_ms, node_cap=keep.node_cap)
        personal.add(news, _item)
    if personal is not None:
        personal.trim(now_ms)
    if old is not None and not entries and pulled.head == old.head:
        if phead != old.phead:  # new personal messages only (a first one brings its store)
            old = replace(old, phead=phead, personal=personal, memo={})
        return _trim_important(old, keep, now_ms)
    new_normal = [_item(e) for e in entries if not e.important]
    new_important = [_item(e) for e in entries if e.important]
    if old is None:
        normal: list[Item] = new_normal
        important: list[Item] = new_important
    else:
        normal = [*old.normal, *new_normal]
        important = [*old.important, *new_important]
    tombstones = {t.seq: t for t in (tombstone_of(e) for e in entries if recalled_target(e))}
    if tombstones:  # recalled: each message this node holds becomes its tombstone
        normal = _buried(normal, tombstones)
        important = _buried(important, tombstones)
    if pulled.complete and old is not None:
        anchor_seq, anchor_ic = old.anchor_seq, old.anchor_ic
        index = [*old.index, *(e.seq for e in entries if e.important)]
    elif pulled.complete:
        anchor_seq, anchor_ic = after, pulled.head_ic - sum(e.important for e in entries)
        index = [e.seq for e in entries if e.important]
    elif entries:
        start = entries[_contiguous_tail(entries)]
        anchor_seq, anchor_ic = start.seq - 1, start.ic - start.important
        index = [e.seq for e in entries if e.important and e.seq > anchor_seq]
    else:  # the store's head moved but returned nothing: know nothing below it
        anchor_seq, anchor_ic, index = pulled.head, pulled.head_ic, []
    if len(index) > keep.index_keep:
        drop = len(index) - keep.index_keep
        anchor_seq, anchor_ic = index[drop - 1], anchor_ic + drop
        index = index[drop:]
    if len(normal) > keep.normal_keep:
        normal = normal[len(normal) - keep.normal_keep:]
    snap = Snapshot(
        room=pulled.room,
        epoch=pulled.epoch,
        head=pulled.head,
        head_ic=pulled.head_ic,
        normal=tuple(normal),
        important=tuple(important),
        anchor_seq=anchor_seq,
        anchor_ic=anchor_ic,
        index=tuple(index),
        phead=phead,
        personal=personal,
        root=pulled.root,
        born_ms=now_ms if old is None else old.born_ms,
    )
    return _trim_important(snap, keep, now_ms)


def _buried(items: list[Item], tombstones: dict[int, Entry]) -> list[Item]:
    """``items`` with each message a tombstone names replaced by it."""
    return [_item(tombstones[i.seq]) if i.seq in tombstones and not i.recall else i
            for i in items]


def _trim_important(snap: Snapshot, keep: Retention, now_ms: int) -> Snapshot:
    """Keep important messages among the newest ``important_keep`` or inside the window."""
    imp = snap.important
    excess = len(imp) - keep.important_keep
    if excess <= 0:
        return snap
    oldest_ok = now_ms - keep.important_window_ms
    drop = 0
    while drop < excess and (imp[drop].ts < oldest_ok
                             or len(imp) - drop > keep.important_hard_cap):
        drop += 1
    if not drop:
        return snap
    return replace(snap, important=imp[drop:], memo={})
