"""A room's online members as one merge pass saw them (docs/design.md step 8).

The merge reads a room's shard index every pass: one entry per shard key of
every node, with its size. :func:`build_view` turns those entries into an
:class:`OnlineView`, an immutable value the merge swaps in with one assignment.
What it costs does not grow with the room:

**Groups.** Entries are grouped by ``(count, index)``: a uid hashes to one
index on every node that splits a room alike (:func:`statsvr.table.shard_of`),
so groups of the room's largest count ``K`` are disjoint.

**The count.** A group with one contributor (each listener heartbeats through
one node; a vip room over one node) counts its entry's size: exact, nothing
read. A group with several contributors (a room that is not vip, served by
several nodes, is one group with a contributor per node) is unioned exactly
while the room has at most ``exact_up_to`` members by the index (default
:data:`EXACT_UP_TO`): only blobs the previous view did not hold are read,
decoded and kept, so a pass reads at most about ``exact_up_to`` uids. Above
that the group counts the sum of its sizes, from the index alone: still exact
while every listener heartbeats through one node, while a listener that moved
to another node counts twice until its old node drops it (``online_ttl``).
:attr:`OnlineView.exact` says which. Entries split into another count than
``K`` (a room being re-sharded, nodes that disagree on its sect) are decoded
and re-split into the ``K`` groups below the limit, and are groups of their
own above it.

**Trusted.** :attr:`OnlineView.trusted`, the members the automatic vip rule
counts, is the sum of the entries' trusted counts (each node counts its own,
:mod:`statsvr.table`), never more than :attr:`OnlineView.online`: read from
the index alone, whatever the room's size.

**Pages.** Members are listed group by group (the ``K`` groups by index, then
any others), sorted by uid within a group: a room that is not vip is one group,
so its members are simply sorted. A group the view does not hold is read from
the store when a page needs it (:class:`~statsvr.member_pages.MemberPages`: the first
bytes of each contributor's blob for the first pages, the whole group beyond),
so a node keeps no member list of a room whose members nobody asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from liveroom.store.base import ShardEntry

from .member_pages import MemberPages
from .members import Contributor, contributor, decode_members, resplit, union

__all__ = ["EXACT_UP_TO", "Fetch", "Group", "OnlineView", "build_view", "trusted_of"]

EXACT_UP_TO = 20_000
"""Members (by the index) up to which a room's shared groups are read and
unioned for an exact count: about 0.4 MB read at most per pass."""

Fetch = Callable[[Sequence[ShardEntry]], Awaitable[Sequence[bytes | None]]]
"""Reads whole blobs of entries of one room (``None``: gone meanwhile)."""

_GroupKey = tuple[int, int]
"""``(count, index)``."""


@dataclass(frozen=True, slots=True)
class Group:
    """One group of a view: the members of shard ``index`` of ``count``."""

    count: int
    index: int
    entries: tuple[ShardEntry, ...]
    """Its contributors, by node (empty for a group re-split from others)."""
    size: int
    """Its members: exact when kept in the view or single; else the sum of the sizes."""
    members: tuple[str, ...] | None
    """The sorted union, when the view holds it."""

    @property
    def sources(self) -> tuple[Contributor, ...]:
        return tuple(map(contributor, self.entries))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class OnlineView:
    """One room's online members as one merge pass saw them. Immutable.

    :attr:`online` needs no I/O; :meth:`page` reads from the store what the
    view does not hold. Two views of a room with equal :attr:`versions` were
    built from the same shard versions.
    """

    room: str
    online: int
    trusted: int
    """Members the automatic vip rule counts (a ticket's uid, or one that came
    back with its signed ``ctx``): at most :attr:`online`."""
    versions: frozenset[Contributor]
    """The ``(node, index, count, version)`` of every live shard key."""
    nodes: frozenset[str]
    """The statsvr nodes whose shard keys are live."""
    shard_count: int
    """``K``: the largest count the room is split into (0 when empty)."""
    exact: bool
    """:attr:`online` is the number of distinct uids (else a sum of shard
    sizes, which counts a uid on two nodes twice)."""
    groups: tuple[Group, ...]
    """In page order."""
    _runs: Mapping[Contributor, tuple[str, ...]]
    """Decoded blobs of shared groups, reused by the next build."""
    _pages: MemberPages | None

    def __repr__(self) -> str:
        return (f"<OnlineView {self.room!r} online={self.online} trusted={self.trusted} "
                f"{'exact' if self.exact else 'summed'} nodes={sorted(self.nodes)} "
                f"shards={self.shard_count}>")

    @classmethod
    def empty(cls, room: str, pages: MemberPages | None = None) -> OnlineView:
        """The view of a room with nobody online (and of a room not merged yet)."""
        return cls(room, 0, 0, frozenset(), frozenset(), 0, True, (), {}, pages)

    def with_trusted(self, entries: Sequence[ShardEntry]) -> OnlineView:
        """This view, its trusted count taken anew from ``entries`` (the same
        shard versions: a refresh may change the count alone)."""
        trusted = trusted_of(entries, self.online)
        return self if trusted == self.trusted else replace(self, trusted=trusted)

    @property
    def kept_uids(self) -> int:
        """Uids this view keeps in memory (groups and decoded blobs)."""
        return sum(len(g.members or ()) for g in self.groups) + sum(map(len, self._runs.values()))

    async def page(self, offset: int, limit: int) -> list[str]:
        """Members ``offset`` to ``offset + limit`` (exclusive) in page order.

        Skips whole groups by their size, then slices one or a few groups,
        reading from the store (:class:`~statsvr.member_pages.MemberPages`) those the
        view does not hold; raises :class:`~liveroom.errors.StoreUnavailable`
        when it cannot. A summed group may hold fewer members than its size:
        the page then goes on with the next group. An ``offset`` past the end
        gives ``[]``.
        """
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        out: list[str] = []
        for group in self.groups:
            if len(out) >= limit:
                break
            if offset >= group.size:
                offset -= group.size
                continue
            want = limit - len(out)
            if group.members is not None:
                out.extend(group.members[offset:offset + want])
            elif self._pages is not None:
                out.extend(await self._pages.slice(self.room, group.entries, offset, want))
            offset = 0
        return out


def _order(key: _GroupKey, count: int) -> tuple[bool, int, int]:
    """The ``K`` groups first, by index; then the others."""
    return (key[0] != count, key[0], key[1])


async def build_view(room: str, entries: Sequence[ShardEntry],
                     previous: OnlineView | None = None, *, fetch: Fetch | None = None,
                     pages: MemberPages | None = None,
                     exact_up_to: int = EXACT_UP_TO) -> OnlineView:
    """The view of ``room`` from its live shard ``entries``.

    Entries repeated with the same ``(node, index, count, version)`` count
    once. ``fetch`` reads the blobs of shared groups while the room has at
    most ``exact_up_to`` members (without it, or above, counts are summed);
    blobs ``previous`` decoded are not read again. ``pages`` is where
    :meth:`OnlineView.page` reads the groups the view does not hold. Never
    raises on bad blobs (they count as empty); raises what ``fetch`` raises.
    """
    unique: dict[Contributor, ShardEntry] = {}
    for entry in entries:
        unique.setdefault(contributor(entry), entry)
    if not unique:
        return OnlineView.empty(room, pages)
    count = max(entry.count for entry in unique.values())
    grouped: dict[_GroupKey, list[ShardEntry]] = {}
    for entry in unique.values():
        grouped.setdefault((entry.count, entry.index), []).append(entry)
    for members in grouped.values():
        members.sort(key=lambda entry: entry.node)
    # Page order, for both kinds of view.
    grouped = dict(sorted(grouped.items(), key=lambda kv: _order(kv[0], count)))
    mixed = any(c != count or not 0 <= i < count for c, i in grouped)
    shared = any(len(g) > 1 for g in grouped.values())
    nodes = frozenset(entry.node for entry in unique.values())
    total = sum(entry.size for entry in unique.values())
    if (mixed or shared) and fetch is not None and total <= exact_up_to:
        before = previous if previous is not None and previous.room == room else None
        groups, runs = await _exact(room, count, grouped, mixed, before, fetch)
        online = sum(g.size for g in groups)
        return OnlineView(room, online, trusted_of(unique.values(), online),
                          frozenset(unique), nodes, count, True, groups, runs, pages)
    groups = tuple(Group(c, i, tuple(g), sum(e.size for e in g), None)
                   for (c, i), g in grouped.items())
    return OnlineView(room, total, trusted_of(unique.values(), total), frozenset(unique),
                      nodes, count, not (mixed or shared), groups, {}, pages)


def trusted_of(entries: Iterable[ShardEntry], online: int) -> int:
    """The trusted members of a room whose live shard ``entries`` (each
    contributor once) hold ``online`` members: the sum of their trusted
    counts, at most ``online`` (a uid that moved to another node may be
    counted by both until its old node drops it)."""
    return min(online, sum(entry.trusted for entry in entries))


async def _exact(room: str, count: int, grouped: Mapping[_GroupKey, list[ShardEntry]],
                 mixed: bool, before: OnlineView | None,
                 fetch: Fetch) -> tuple[tuple[Group, ...], dict[Contributor, tuple[str, ...]]]:
    """The groups of a small room (``grouped`` in page order), shared ones
    unioned from their blobs."""
    old_runs = before._runs if before is not None else {}
    need = [e for g in grouped.values() if mixed or len(g) > 1 for e in g]
    missing = [e for e in need if contributor(e) not in old_runs]
    fetched = await fetch(missing) if missing else []
    blobs = dict(zip(map(contributor, missing), fetched, strict=True))
    runs: dict[Contributor, tuple[str, ...]] = {}
    for entry in need:
        source = contributor(entry)
        if source in old_runs:
            runs[source] = old_runs[source]
        elif (blob := blobs[source]) is not None:  # None: dropped since the index was read
            runs[source] = await decode_members(room, blob, source)
    if mixed:
        split = await resplit(runs.values(), count)
        groups = []
        for index in sorted(split):
            members = await union(split[index])
            groups.append(Group(count, index, (), len(members), members))
        return tuple(groups), runs
    old_groups = {(g.count, g.index): g for g in before.groups} if before is not None else {}
    out = []
    for (c, i), members_of in grouped.items():
        group_entries = tuple(members_of)
        if len(group_entries) == 1:
            out.append(Group(c, i, group_entries, group_entries[0].size, None))
            continue
        old = old_groups.get((c, i))
        sources = tuple(map(contributor, group_entries))
        if old is not None and old.members is not None and old.sources == sources:
            out.append(Group(c, i, group_entries, old.size, old.members))
            continue
        members = await union([runs[s] for s in sources if s in runs])
        out.append(Group(c, i, group_entries, len(members), members))
        await asyncio.sleep(0)
    return tuple(out), runs
