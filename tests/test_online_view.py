"""The merged online view: counts, pages, reuse, bad blobs (statsvr/view.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from unittest.mock import patch

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import LoopTurns

from liveroom.store.base import ShardEntry
from statsvr.table import shard_of
from statsvr.view import OnlineView, array_size, build_view, union

Part = tuple[ShardEntry, bytes]

uid_strategy = st.text("abcdefghijklmnopqrstuvwxyz0123456789_.-", min_size=1, max_size=6)


def shard_parts(node: str, members: Iterable[str], count: int, version: str = "v1",
                ) -> list[Part]:
    """``node``'s shard keys of a room split into ``count`` shards, as the table writes them."""
    shards: dict[int, list[str]] = {}
    for uid in members:
        shards.setdefault(shard_of(uid, count), []).append(uid)
    return [(ShardEntry(node, index, count, f"{node}-{index}-{version}", len(uids),
                        10**15), msgpack.packb(sorted(uids)))
            for index, uids in sorted(shards.items())]


def entry(node: str, index: int, count: int, version: str, size: int = 1) -> ShardEntry:
    return ShardEntry(node, index, count, version, size, 10**15)


def build(parts: Sequence[Part], previous: OnlineView | None = None) -> OnlineView:
    return asyncio.run(build_view("room", parts, previous))


def page(view: OnlineView, offset: int, limit: int) -> list[str]:
    return asyncio.run(view.page(offset, limit))


# One room seen by a few nodes: each node holds a set of uids (overlapping other
# nodes' sets) and splits it into its own shard count.
node_plans = st.lists(
    st.tuples(st.sets(uid_strategy, max_size=60), st.sampled_from([1, 2, 3, 4, 16])),
    min_size=0, max_size=4)


def plan_parts(plans: Sequence[tuple[set[str], int]]) -> tuple[list[Part], list[str]]:
    parts: list[Part] = []
    everyone: set[str] = set()
    for n, (members, count) in enumerate(plans):
        parts += shard_parts(f"node{n}", members, count)
        everyone |= members
    return parts, sorted(everyone)


@settings(max_examples=200, deadline=None)
@given(plans=node_plans, data=st.data(), slice_size=st.sampled_from([3, 20_000]),
       whole_bytes=st.sampled_from([0, 2 << 20]))
def test_online_is_the_union_and_pages_are_its_sorted_slices(
        plans: list[tuple[set[str], int]], data: st.DataObject, slice_size: int,
        whole_bytes: int) -> None:
    parts, everyone = plan_parts(plans)
    # Small slices and the streaming decoder exercise the sliced paths too.
    with patch("statsvr.view.SLICE", slice_size), \
            patch("statsvr.view._WHOLE_DECODE_BYTES", whole_bytes):
        view = build(parts)
        assert view.online == len(everyone)
        assert view.nodes == {f"node{n}" for n, (members, _) in enumerate(plans) if members}
        for _ in range(4):
            offset = data.draw(st.integers(0, len(everyone) + 3), label="offset")
            limit = data.draw(st.integers(0, len(everyone) + 3), label="limit")
            assert page(view, offset, limit) == everyone[offset:offset + limit]

        async def walk() -> list[str]:
            return [uid async for shard in view.shards() for uid in shard]

        assert sorted(asyncio.run(walk())) == everyone


@settings(max_examples=100, deadline=None)
@given(plans=node_plans, changed=st.sets(uid_strategy, max_size=40),
       count=st.sampled_from([1, 2, 16]))
def test_a_rebuild_reuses_what_did_not_change(plans: list[tuple[set[str], int]],
                                              changed: set[str], count: int) -> None:
    parts, _ = plan_parts(plans)
    before = build(parts)
    # One more node joins; the view built on the previous one says what a
    # fresh build says, and keeps every group whose contributors are the same.
    joining = shard_parts("late", changed, count)
    after = build(parts + joining, before)
    fresh = build(parts + joining)
    everyone = sorted(set().union(*(m for m, _ in plans), changed))
    assert after.online == fresh.online == len(everyone)
    assert page(after, 0, len(everyone) + 1) == everyone
    assert after.versions == fresh.versions
    for index, group in after._groups.items():
        old = before._groups.get(index)
        assert (group is old) == (old is not None and old.key == group.key)


@settings(max_examples=100, deadline=None)
@given(plans=node_plans)
def test_unchanged_versions_are_not_read(plans: list[tuple[set[str], int]]) -> None:
    parts, everyone = plan_parts(plans)
    before = build(parts)
    # Garbage for every blob: a rebuild that read one would count it as empty.
    after = build([(e, b"\xc1 unreadable") for e, _ in parts], before)
    assert after.versions == before.versions
    assert after.online == len(everyone)
    assert page(after, 0, len(everyone)) == everyone
    assert all(after._groups[i] is group for i, group in before._groups.items())


def test_only_the_changed_shard_is_read() -> None:
    members = [f"u{i:05d}" for i in range(3000)]
    parts = shard_parts("a", members, 16)
    before = build(parts)
    changed = shard_parts("a", [*members, "newcomer"], 16, version="v2")
    index = next(i for i, (e, _) in enumerate(changed) if e.version.endswith("v2")
                 and shard_of("newcomer", 16) == e.index)
    rebuilt = [(e, b"\xc1") for e, _ in parts]
    rebuilt[index] = changed[index]
    after = build(rebuilt, before)
    assert after.online == 3001
    assert page(after, 0, 4000) == sorted([*members, "newcomer"])


def test_a_decoded_page_is_cached_for_the_next_view() -> None:
    members = [f"u{i:04d}" for i in range(1000)]
    first = build(shard_parts("a", members, 16))
    assert page(first, 10, 5) == sorted(members)[10:15]
    # Same versions, garbage blobs: the next view reuses the decoded groups.
    second = build([(e, b"") for e, _ in shard_parts("a", members, 16)], first)
    assert page(second, 990, 20) == sorted(members)[990:]


def test_single_contributor_groups_are_not_decoded() -> None:
    # An array header announcing 3 items followed by garbage: counted by its
    # header, decoded (and found bad) only when a page needs it.
    view = build([(entry("a", 0, 1, "v-raw"), b"\x93\xc1\xc1\xc1")])
    assert view.online == 3
    assert page(view, 0, 10) == []


@pytest.mark.parametrize("blob", [
    b"", b"\xc1", b"\x92\xa1a", msgpack.packb(7), msgpack.packb({"a": 1}),
    msgpack.packb(["a", 3]), msgpack.packb([b"a"]), msgpack.packb(["a"]) + b"\x00",
], ids=["empty", "never-used-byte", "truncated", "int", "map", "mixed", "bytes", "trailing"])
def test_a_bad_blob_counts_as_empty(blob: bytes, caplog: pytest.LogCaptureFixture) -> None:
    good = msgpack.packb(["x", "y"])
    # Two contributors to one group: both are decoded at build time.
    parts = [(entry("a", 0, 1, f"bad-{blob!r}"), blob), (entry("b", 0, 1, "good"), good)]
    with caplog.at_level(logging.WARNING, "liveroom.statsvr"):
        view = build(parts)
        assert view.online == 2
        assert page(view, 0, 10) == ["x", "y"]
        # Rebuilt because the other node changed: not logged again.
        again = build([parts[0], (entry("b", 0, 1, "good2"), good)], view)
        assert again.online == 2
    assert len([r for r in caplog.records if "bad-" in r.getMessage()]) == 1


def test_a_bad_blob_alone_counts_as_empty_unless_its_header_looks_right() -> None:
    assert build([(entry("a", 0, 1, "alone-1"), b"\xc1")]).online == 0
    assert build([(entry("a", 0, 1, "alone-2"), msgpack.packb("abc"))]).online == 0
    assert build([(entry("a", 0, 1, "alone-3"), b"")]).online == 0


def test_an_unsorted_blob_is_sorted(caplog: pytest.LogCaptureFixture) -> None:
    blob = msgpack.packb(["c", "a", "b", "a"])
    view = build([(entry("a", 0, 1, "unsorted"), blob), (entry("b", 0, 1, "x"),
                                                        msgpack.packb(["d"]))])
    assert view.online == 4
    assert page(view, 0, 10) == ["a", "b", "c", "d"]
    alone = build([(entry("a", 0, 1, "unsorted-alone"), blob)])
    assert page(alone, 0, 10) == ["a", "b", "c"]
    assert any("not sorted" in r.getMessage() for r in caplog.records)


def test_resharding_counts_each_uid_once() -> None:
    members = [f"user-{i}" for i in range(500)]
    # Node a moved the room to 16 shards; b still has one shard of half of it.
    parts = shard_parts("a", members, 16) + shard_parts("b", members[::2], 1)
    view = build(parts)
    assert view.online == 500
    assert view.shard_count == 16
    assert page(view, 100, 50) == sorted(members)[100:150]
    # Nothing changed: every group is reused, the re-split included.
    again = build(parts, view)
    assert all(again._groups[i] is g for i, g in view._groups.items())
    # b changes: rebuilt, still exact.
    b2 = shard_parts("b", [*members[:10], "new"], 1, version="v2")
    third = build(shard_parts("a", members, 16) + b2, again)
    assert third.online == 501
    assert page(third, 0, 1000) == sorted([*members, "new"])


def test_empty_and_edges() -> None:
    empty = OnlineView.empty("room")
    assert empty.online == 0
    assert empty.versions == frozenset()
    assert page(empty, 0, 10) == []
    assert build([]).online == 0
    view = build(shard_parts("a", ["a", "b", "c"], 1))
    assert page(view, 3, 10) == []
    assert page(view, 1, 0) == []
    with pytest.raises(ValueError, match="negative"):
        page(view, -1, 10)


def test_a_view_of_another_room_is_not_reused() -> None:
    parts = shard_parts("a", ["x"], 1)
    other = asyncio.run(build_view("other", parts))
    mine = build([(e, msgpack.packb(["y"])) for e, _ in parts], other)
    assert page(mine, 0, 10) == ["y"]


def test_array_size_reads_only_the_header() -> None:
    for n in (0, 1, 15, 16, 65_535, 65_536):
        assert array_size(msgpack.packb(["a"] * n)) == n
    assert array_size(b"") is None
    assert array_size(b"\xdc\x00") is None
    assert array_size(msgpack.packb("abc")) is None


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.sets(uid_strategy, max_size=50), max_size=5),
       slice_size=st.sampled_from([1, 2, 7, 20_000]))
def test_union_of_sorted_runs(runs: list[set[str]], slice_size: int) -> None:
    with patch("statsvr.view.SLICE", slice_size):
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
