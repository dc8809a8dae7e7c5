"""How a recvsvr builds a room's next snapshot from a pull (``recvsvr/next_snapshot.py``):
what it keeps when the store's head moved without entries, and how important
messages are trimmed. The counting it must keep exact through every pull is
held by the properties of ``test_snapshot``."""

from __future__ import annotations

import msgpack
import orjson

from liveroom.model import Entry
from liveroom.store.base import Pulled
from recvsvr.next_snapshot import Retention, advance

MINUTE_MS = 60_000


def entries(flags: str, first_seq: int = 1, ic: int = 0, ts: int = 0) -> list[Entry]:
    """Entries from ``first_seq`` on, ``I`` important and ``n`` normal, sent at ``ts``,
    with ``ic`` important messages before them."""
    out = []
    for n, flag in enumerate(flags):
        ic += flag == "I"
        out.append(Entry(first_seq + n, ic, "u", flag == "I", ts, first_seq + n))
    return out


def pulled(got: list[Entry], head: int, head_ic: int, *, complete: bool = True) -> Pulled:
    return Pulled("r", "e", head, head_ic, tuple(got), complete)


def test_each_message_is_encoded_once_in_both_answer_formats() -> None:
    snap = advance(None, pulled(entries("nI", ts=7), 2, 1), 0, Retention(), 0)
    doc = {"seq": 2, "uid": "u", "important": True, "ts": 7, "body": 2}
    (item,) = snap.important
    assert orjson.loads(item.json) == doc
    assert msgpack.unpackb(item.mp) == doc


def test_a_head_that_moved_with_nothing_returned_counts_from_the_head_only() -> None:
    keep = Retention()
    first = advance(None, pulled(entries("nIn"), 3, 1), 0, keep, 0)
    assert (first.room, first.epoch, first.important_count(0)) == ("r", "e", 0)
    # The store's head is at 10 with 4 important messages, and the read found
    # none of 4-10 (dropped, or undecodable): the snapshot knows nothing below
    # the new head, and still holds the messages it had.
    snap = advance(first, pulled([], 10, 4, complete=False), 3, keep, 0)
    assert (snap.head, snap.head_ic) == (10, 4)
    assert snap.important_count(10) == 4
    assert snap.important_count(9) is None
    assert [i.seq for i in snap.normal] == [1, 3]


def test_important_messages_over_the_keep_are_trimmed_by_age_and_the_hard_cap() -> None:
    keep = Retention(important_keep=2, important_window_ms=MINUTE_MS, important_hard_cap=4)
    # Six important messages at time 0, all inside the window: kept up to the
    # hard cap, the oldest dropped first.
    snap = advance(None, pulled(entries("IIIIII"), 6, 6), 0, keep, 0)
    assert [i.seq for i in snap.important] == [3, 4, 5, 6]
    assert (snap.room, snap.epoch) == ("r", "e")
    # A pull with nothing new, once they are older than the window: trimmed
    # to the newest important_keep, the counts unchanged.
    later = advance(snap, pulled([], 6, 6), 6, keep, MINUTE_MS + 1)
    assert [i.seq for i in later.important] == [5, 6]
    assert (later.room, later.epoch, later.important_count(2)) == ("r", "e", 2)


def test_the_important_index_is_capped_by_moving_the_anchor() -> None:
    keep = Retention(index_keep=2)
    # 1 n, 2 I, 3 I, 4 n, 5 I: the index of 2, 3, 5 is over its cap of 2, so
    # the anchor moves to 2 (1 important up to it) and the index keeps 3, 5.
    snap = advance(None, pulled(entries("nIInI"), 5, 3), 0, keep, 0)
    assert (snap.anchor_seq, snap.anchor_ic, snap.index) == (2, 1, (3, 5))
    assert [snap.important_count(p) for p in range(6)] == [None, None, 1, 2, 2, 3]
    # An index at its cap keeps the anchor where it was.
    snap = advance(None, pulled(entries("nIn"), 3, 1), 0, Retention(index_keep=1), 0)
    assert (snap.anchor_seq, snap.index, snap.important_count(0)) == (0, (2,), 0)
