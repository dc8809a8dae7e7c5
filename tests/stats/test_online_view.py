"""The online view and its pages: counts from the index, exact unions of small
rooms, pages in order, what is read and what is kept (statsvr/view.py,
statsvr/member_pages.py, statsvr/members.py), over the memory engine's shard keys."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any
from unittest.mock import patch

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import LoopTurns, in_page_order

from liveroom.clock import FakeClock
from liveroom.store.base import ShardEntry, ShardWrite
from liveroom.store.memory.stats import MemoryStats
from statsvr.member_pages import MemberPages
from statsvr.members import decode_prefix, union
from statsvr.table import shard_of
from statsvr.view import OnlineView, build_view

ROOM = "room"
uid_strategy = st.text("abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=6)


def shard_writes(members: Iterable[str], count: int, version: str) -> list[ShardWrite]:
    """A node's shard keys of the room split into ``count``, as its table writes them."""
    shards: dict[int, list[str]] = {}
    for uid in members:
        shards.setdefault(shard_of(uid, count), []).append(uid)
    return [ShardWrite(ROOM, index, count, f"{index}-{version}", len(uids),
                       msgpack.packb(sorted(uids)))
            for index, uids in sorted(shards.items())]


class Shelf:
    """One room's shard keys in a real memory store, the reads made of them,
    and the views built from them."""

    def __init__(self, *, prefix_up_to: int = 2_000) -> None:
        self.clock = FakeClock()
        self.stats = MemoryStats(self.clock)
        self.reads: list[tuple[list[tuple[str, int]], int | None]] = []
        self.pages = MemberPages(self, self.clock, prefix_up_to=prefix_up_to)  # type: ignore[arg-type]

    async def read_shards(self, room: str, entries: Sequence[ShardEntry],
                          max_bytes: int | None = None) -> list[bytes | None]:
        self.reads.append(([(e.node, e.index) for e in entries], max_bytes))
        return await self.stats.read_shards(room, entries, max_bytes)

    def write(self, node: str, members: Iterable[str], count: int,
              version: str = "v1") -> None:
        self.put(node, shard_writes(members, count, f"{node}-{version}"))

    def put(self, node: str, writes: Sequence[ShardWrite]) -> None:
        now_ms = int(self.clock.time() * 1000)
        asyncio.run(self.stats.write_shards(node, writes, now_ms, 60_000))

    def blob(self, node: str, index: int, count: int, version: str, blob: bytes,
             size: int) -> None:
        """A shard key holding ``blob`` whatever it is, counted as ``size``."""
        self.put(node, [ShardWrite(ROOM, index, count, version, size, blob)])

    def entries(self) -> list[ShardEntry]:
        now_ms = int(self.clock.time() * 1000)
        return asyncio.run(self.stats.shard_index([ROOM], now_ms))[0]

    def build(self, previous: OnlineView | None = None, *,
              exact_up_to: int = 20_000, room: str = ROOM) -> OnlineView:
        return asyncio.run(build_view(room, self.entries(), previous,
                                      fetch=partial(self.read_shards, ROOM),
                                      pages=self.pages, exact_up_to=exact_up_to))


def page(view: OnlineView, offset: int, limit: int) -> list[str]:
    return asyncio.run(view.page(offset, limit))


def everyone(view: OnlineView) -> list[str]:
    return page(view, 0, view.online + 10)


# One room seen by a few nodes: each node holds a set of uids (overlapping other
# nodes' sets) and splits it into its own shard count.
node_plans = st.lists(
    st.tuples(st.sets(uid_strategy, max_size=60), st.sampled_from([1, 2, 3, 4, 16])),
    min_size=0, max_size=4)


def shelve(plans: Sequence[tuple[set[str], int]], **kwargs: Any) -> tuple[Shelf, set[str]]:
    shelf = Shelf(**kwargs)
    for n, (members, count) in enumerate(plans):
        shelf.write(f"node{n}", members, count)
    return shelf, set().union(*(members for members, _ in plans))


@settings(max_examples=150, deadline=None)
@given(plans=node_plans, data=st.data(), slice_size=st.sampled_from([3, 20_000]),
       whole_bytes=st.sampled_from([0, 2 << 20]), prefix_up_to=st.sampled_from([0, 2_000]))
def test_a_small_room_is_counted_exactly_and_paged_in_order(
        plans: list[tuple[set[str], int]], data: st.DataObject, slice_size: int,
        whole_bytes: int, prefix_up_to: int) -> None:
    shelf, members = shelve(plans, prefix_up_to=prefix_up_to)
    # Small slices and the streaming decoder exercise the sliced paths too.
    with patch("statsvr.members.SLICE", slice_size), \
            patch("statsvr.members._WHOLE_DECODE_BYTES", whole_bytes):
        view = shelf.build()
        ordered = in_page_order(members, view.shard_count)
        assert view.online == len(members)
        assert view.exact
        assert view.nodes == {f"node{n}" for n, (m, _) in enumerate(plans) if m}
        for _ in range(4):
            offset = data.draw(st.integers(0, len(members) + 3), label="offset")
            limit = data.draw(st.integers(0, len(members) + 3), label="limit")
            assert page(view, offset, limit) == ordered[offset:offset + limit]


@settings(max_examples=150, deadline=None)
@given(plans=node_plans, data=st.data(), prefix_up_to=st.sampled_from([0, 5, 2_000]))
def test_a_big_room_is_counted_from_the_index_and_read_by_the_page(
        plans: list[tuple[set[str], int]], data: st.DataObject, prefix_up_to: int) -> None:
    # exact_up_to=0: every room is "big": nothing is read to count it.
    shelf, members = shelve(plans, prefix_up_to=prefix_up_to)
    view = shelf.build(exact_up_to=0)
    assert shelf.reads == []
    assert view.kept_uids == 0
    assert view.online == sum(len(m) for m, _ in plans if m)
    counts = {count for m, count in plans if m}
    disjoint = sum(len(m) for m, _ in plans) == len(members)
    contributors: dict[tuple[int, int], set[int]] = {}
    for n, (node_members, count) in enumerate(plans):
        for uid in node_members:
            contributors.setdefault((count, shard_of(uid, count)), set()).add(n)
    assert view.exact == (len(counts) <= 1 and all(len(c) == 1 for c in contributors.values()))
    if len(counts) <= 1:
        # One count: the groups are disjoint and each is sorted.
        ordered = in_page_order(members, view.shard_count)
        assert everyone(view) == ordered
        if disjoint:
            for _ in range(3):
                offset = data.draw(st.integers(0, len(members) + 3), label="offset")
                limit = data.draw(st.integers(0, 40), label="limit")
                assert page(view, offset, limit) == ordered[offset:offset + limit]
    else:
        # Nodes that split the room differently: each group sorted, every
        # member listed, none twice within a group.
        listed = everyone(view)
        assert set(listed) == members


def test_a_big_room_with_a_uid_on_two_nodes_counts_it_twice_but_lists_it_once() -> None:
    shelf = Shelf()
    shelf.write("a", ["amy", "bob", "cat"], 1)
    shelf.write("b", ["bob", "dan"], 1)
    summed = shelf.build(exact_up_to=0)
    assert (summed.online, summed.exact) == (5, False)
    assert everyone(summed) == ["amy", "bob", "cat", "dan"]
    exact = shelf.build(exact_up_to=5)
    assert (exact.online, exact.exact) == (4, True)
    assert everyone(exact) == ["amy", "bob", "cat", "dan"]


def test_one_node_of_a_vip_room_is_exact_without_reading() -> None:
    shelf = Shelf()
    members = [f"u{i:05d}" for i in range(3000)]
    shelf.write("a", members, 16)
    view = shelf.build()
    assert (view.online, view.exact, view.shard_count) == (3000, True, 16)
    assert shelf.reads == []
    assert everyone(view) == in_page_order(members, 16)


@settings(max_examples=100, deadline=None)
@given(plans=node_plans, joining=st.sets(uid_strategy, max_size=40),
       count=st.sampled_from([1, 2, 16]))
def test_a_rebuild_reads_only_the_new_blobs(plans: list[tuple[set[str], int]],
                                            joining: set[str], count: int) -> None:
    shelf, members = shelve(plans)
    before = shelf.build()
    read_before = {key for keys, _ in shelf.reads for key in keys}
    shelf.reads.clear()
    # One more node joins: a rebuild on the previous view says what a fresh
    # build says, and reads no blob the previous one read.
    shelf.write("late", joining, count)
    after = shelf.build(before)
    assert not read_before & {key for keys, _ in shelf.reads for key in keys}
    fresh = shelf.build()
    assert after.online == fresh.online == len(members | joining)
    assert after.versions == fresh.versions
    assert everyone(after) == everyone(fresh)


def test_unchanged_versions_are_not_read_again() -> None:
    shelf = Shelf()
    shelf.write("a", [f"a{i}" for i in range(50)], 1)
    shelf.write("b", [f"b{i}" for i in range(50)], 1)
    before = shelf.build()
    assert before.online == 100
    # Garbage under the same versions: a rebuild that read one would count it empty.
    for entry in shelf.entries():
        shelf.blob(entry.node, entry.index, entry.count, entry.version, b"\xc1", entry.size)
    shelf.reads.clear()
    after = shelf.build(before)
    assert shelf.reads == []
    assert after.online == 100
    assert everyone(after) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(50)])


def test_only_the_changed_shard_is_read() -> None:
    shelf = Shelf()
    members = [f"u{i:05d}" for i in range(3000)]
    shelf.write("a", members, 16)
    shelf.write("b", members[:100], 16)
    before = shelf.build()
    index = shard_of("newcomer", 16)
    shelf.put("a", [w for w in shard_writes([*members, "newcomer"], 16, "a-v2")
                    if w.index == index])
    shelf.reads.clear()
    after = shelf.build(before)
    assert shelf.reads == [([("a", index)], None)]
    assert after.online == 3001
    assert everyone(after) == in_page_order([*members, "newcomer"], 16)


def test_a_single_contributor_is_counted_by_its_entry_and_decoded_for_pages() -> None:
    shelf = Shelf()
    # Garbage announced as 3 members: counted from the index, found bad by a page.
    shelf.blob("a", 0, 1, "v-raw", b"\x93\xc1\xc1\xc1", 3)
    view = shelf.build()
    assert view.online == 3
    assert page(view, 0, 10) == []


@pytest.mark.parametrize("blob", [
    b"\xc1", b"\x92\xa1a", msgpack.packb(7), msgpack.packb({"a": 1}),
    msgpack.packb(["a", 3]), msgpack.packb([b"a"]), msgpack.packb(["a"]) + b"\x00",
], ids=["never-used-byte", "truncated", "int", "map", "mixed", "bytes", "trailing"])
def test_a_bad_blob_counts_as_empty(blob: bytes, caplog: pytest.LogCaptureFixture) -> None:
    shelf = Shelf()
    version = f"bad-{blob!r}"
    shelf.blob("a", 0, 1, version, blob, 2)
    shelf.blob("b", 0, 1, "good", msgpack.packb(["x", "y"]), 2)
    # Two contributors to one group: both are decoded at build time.
    with caplog.at_level(logging.WARNING, "liveroom.statsvr"):
        view = shelf.build()
        assert view.online == 2
        assert everyone(view) == ["x", "y"]
        # Rebuilt because the other node changed: not logged again.
        shelf.blob("b", 0, 1, "good2", msgpack.packb(["x", "y"]), 2)
        assert shelf.build(view).online == 2
    assert len([r for r in caplog.records if "bad-" in r.getMessage()]) == 1


@pytest.mark.parametrize("prefix_up_to", [0, 2_000])
def test_a_bad_blob_read_for_a_page_gives_nothing(prefix_up_to: int) -> None:
    for n, blob in enumerate([b"\xc1", msgpack.packb("abc"), msgpack.packb([1, 2])]):
        shelf = Shelf(prefix_up_to=prefix_up_to)
        shelf.blob("a", 0, 1, f"alone-{n}-{prefix_up_to}", blob, 2)
        assert page(shelf.build(), 0, 10) == []


def test_an_unsorted_blob_is_sorted(caplog: pytest.LogCaptureFixture) -> None:
    blob = msgpack.packb(["c", "a", "b", "a"])
    shelf = Shelf()
    shelf.blob("a", 0, 1, "unsorted", blob, 4)
    shelf.blob("b", 0, 1, "x", msgpack.packb(["d"]), 1)
    view = shelf.build()
    assert view.online == 4
    assert everyone(view) == ["a", "b", "c", "d"]
    alone = Shelf(prefix_up_to=0)  # read whole: sorted; a head is trusted
    alone.blob("a", 0, 1, "unsorted-alone", blob, 4)
    assert page(alone.build(), 0, 10) == ["a", "b", "c"]
    assert any("not sorted" in r.getMessage() for r in caplog.records)


def test_resharding_counts_each_uid_once_in_a_small_room() -> None:
    shelf = Shelf()
    members = [f"user-{i}" for i in range(500)]
    # Node a moved the room to 16 shards; b still has one shard of half of it.
    shelf.write("a", members, 16)
    shelf.write("b", members[::2], 1)
    view = shelf.build()
    assert (view.online, view.shard_count, view.exact) == (500, 16, True)
    assert page(view, 100, 50) == in_page_order(members, 16)[100:150]
    shelf.write("b", [*members[:10], "new"], 1, version="v2")
    third = shelf.build(view)
    assert third.online == 501
    assert everyone(third) == in_page_order([*members, "new"], 16)
    # Big: the old split is a group of its own, counted by its size.
    big = shelf.build(exact_up_to=0)
    assert (big.online, big.exact) == (511, False)
    assert set(everyone(big)) == {*members, "new"}


def test_empty_and_edges() -> None:
    empty = OnlineView.empty(ROOM)
    assert (empty.online, empty.versions, empty.exact) == (0, frozenset(), True)
    assert page(empty, 0, 10) == []
    shelf = Shelf()
    assert shelf.build().online == 0
    shelf.write("a", ["a", "b", "c"], 1)
    view = shelf.build()
    assert page(view, 3, 10) == []
    assert page(view, 1, 0) == []
    with pytest.raises(ValueError, match="negative"):
        page(view, -1, 10)


def test_a_view_of_another_room_is_not_reused() -> None:
    shelf = Shelf()
    shelf.write("a", ["x"], 1)
    shelf.write("b", ["y"], 1)
    other = shelf.build(room="other")
    shelf.reads.clear()
    shelf.build(other)
    assert len(shelf.reads) == 1


# -- pages of a big room --------------------------------------------------------


def big_shelf(nodes: int = 20, per_node: int = 500, count: int = 4,
              **kwargs: Any) -> tuple[Shelf, list[str]]:
    shelf = Shelf(**kwargs)
    members = [f"listener{i:08d}" for i in range(nodes * per_node)]
    for n in range(nodes):
        shelf.write(f"n{n:02d}", members[n::nodes], count)
    return shelf, in_page_order(members, count)


def test_the_first_page_reads_only_the_heads_of_one_group() -> None:
    shelf, ordered = big_shelf()
    view = shelf.build(exact_up_to=0)
    assert page(view, 0, 100) == ordered[:100]
    (keys, max_bytes), = shelf.reads
    assert sorted(keys) == [(f"n{n:02d}", 0) for n in range(20)]
    assert max_bytes is not None
    assert max_bytes < 100 * 17 * 2
    # The next page of the group is served from what was read, or reads a
    # little more of the heads.
    assert page(view, 100, 100) == ordered[100:200]
    assert all(max_bytes is not None for _, max_bytes in shelf.reads)
    kept = shelf.pages.kept_uids
    assert 0 < kept <= 20 * 250


def test_a_deep_page_reads_its_group_whole_and_keeps_it() -> None:
    shelf, ordered = big_shelf()
    view = shelf.build(exact_up_to=0)
    sizes = [g.size for g in view.groups]
    assert sizes[3] > 2_300
    offset = sum(sizes[:3]) + 2_200  # in group 3, beyond what heads are read for
    assert page(view, offset, 50) == ordered[offset:offset + 50]
    assert [(len(keys), max_bytes) for keys, max_bytes in shelf.reads] == [(20, None)]
    assert page(view, offset + 50, 50) == ordered[offset + 50:offset + 100]
    assert len(shelf.reads) == 1
    assert shelf.pages.kept_uids == sizes[3]


def test_what_a_page_read_is_forgotten_after_a_while_and_within_a_budget() -> None:
    shelf, ordered = big_shelf(prefix_up_to=0)
    shelf.pages.budget = 6_000
    view = shelf.build(exact_up_to=0)
    sizes = [g.size for g in view.groups]
    assert page(view, 0, 10) == ordered[:10]
    assert page(view, sizes[0], 10) == ordered[sizes[0]:sizes[0] + 10]
    assert shelf.pages.kept_uids == sizes[0] + sizes[1]
    start = sizes[0] + sizes[1]
    assert page(view, start, 10) == ordered[start:start + 10]
    assert shelf.pages.kept_uids <= 6_000  # the least recently used group went
    asyncio.run(shelf.clock.advance(shelf.pages.keep_for + 1))
    shelf.pages.sweep()
    assert shelf.pages.kept_uids == 0


def test_a_burst_of_one_page_reads_the_store_once() -> None:
    shelf, ordered = big_shelf()
    view = shelf.build(exact_up_to=0)

    async def burst() -> list[list[str]]:
        return await asyncio.gather(*(view.page(0, 100) for _ in range(50)))

    assert asyncio.run(burst()) == [ordered[:100]] * 50
    assert len(shelf.reads) == 1


def test_heads_too_short_for_long_uids_are_read_again() -> None:
    shelf = Shelf()
    members = [f"{'x' * 60}{i:04d}" for i in range(400)]
    shelf.write("a", members[::2], 1)
    shelf.write("b", members[1::2], 1)
    view = shelf.build(exact_up_to=0)
    assert page(view, 0, 300) == sorted(members)[:300]
    assert len(shelf.reads) >= 2
    assert all(max_bytes is not None for _, max_bytes in shelf.reads)


# -- decoding -------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(members=st.lists(uid_strategy, unique=True, max_size=40), data=st.data())
def test_any_head_of_a_blob_decodes_to_its_first_members(members: list[str],
                                                         data: st.DataObject) -> None:
    members.sort()
    blob = msgpack.packb(members)
    cut = data.draw(st.integers(0, len(blob)), label="cut")
    head = decode_prefix(ROOM, blob[:cut], ("n", 0, 1, "v"))
    assert head is not None
    assert list(head) == members[:len(head)]
    if cut == len(blob):
        assert list(head) == members


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.sets(uid_strategy, max_size=50), max_size=5),
       slice_size=st.sampled_from([1, 2, 7, 20_000]))
def test_union_of_sorted_runs(runs: list[set[str]], slice_size: int) -> None:
    with patch("statsvr.members.SLICE", slice_size):
        merged = asyncio.run(union([tuple(sorted(run)) for run in runs]))
    assert list(merged) == sorted(set().union(*runs))


def test_a_big_union_lets_other_tasks_run() -> None:
    a = tuple(f"{i:08d}" for i in range(0, 200_000, 2))
    b = tuple(f"{i:08d}" for i in range(0, 200_000, 3))

    async def run() -> tuple[int, int]:
        async with LoopTurns() as loop:
            merged = await union([a, b])
        return loop.turns, len(merged)

    turns, size = asyncio.run(run())
    assert size == len(set(a) | set(b))
    assert turns > 5
