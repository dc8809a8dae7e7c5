"""The owner's table: the members of each room that heartbeat through this statsvr node.

docs/design.md steps 6 and 7. A heartbeat touches memory only: a dict assignment
``uid -> tick`` in the uid's shard of the room. A room is one shard, or
``vip_shards`` for a vip room, split by :func:`shard_of`. The statsvr's write
loop then:

1. :meth:`Tables.sweep` drops members quiet for ``online_ttl`` (every few
   seconds, a room at a time);
2. :meth:`Tables.take_writes` hands over one :class:`~liveroom.store.base.ShardWrite`
   per shard that changed (a join or a leave: the sorted member list, packed
   whole), a refresh (no members) for a shard whose trusted count alone
   changed or that is unchanged for ``refresh_every``, plus the uids that
   joined since the last take (for the viewers history).

So store traffic follows joins and leaves, not heartbeats. Ticks are whole
seconds of the monotonic clock: one shared int object per ingested batch, so
a member costs its uid string and one dict slot.

**Trusted members.** A heartbeat the proxy vouches for (``trusted``: a
ticket's uid, or a poll that came back with the signed ``ctx`` it was given,
see :mod:`proxy.polls.poll`) makes its member trusted until it leaves: the only
members the automatic vip rule counts. The mark costs no memory: a trusted
member's tick is stored as ``~tick`` (negative), and each shard counts its
trusted members as they come and go. A member becoming trusted changes no
member list: its shard is written as a refresh carrying the new count.

Limits: a member's last heartbeat is known to the second; a member leaves at
the first sweep after ``online_ttl`` of silence (so up to ``sweep_every`` later).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import msgpack

from liveroom.clock import Clock
from liveroom.model import name_slot
from liveroom.settings import ONLINE_TTL, VIP_SHARDS
from liveroom.store.base import ShardWrite

logger = logging.getLogger("liveroom.statsvr.table")

BIG_SHARD = 20_000
"""Packing a shard of more members than this yields to the event loop after it."""


def shard_of(uid: str, count: int) -> int:
    """The shard of ``uid`` in a room split into ``count`` shards
    (:func:`~liveroom.model.name_slot`): nodes that split a room alike put a
    uid in the same shard, so a merge can union shard by shard."""
    return name_slot(uid, count)


@dataclass(slots=True)
class _Shard:
    members: dict[str, int] = field(default_factory=dict)
    """uid -> tick of its last heartbeat (``~tick``, negative, for a trusted member)."""
    trusted: int = 0
    """Members whose tick is marked trusted."""
    trust_changed: bool = False
    """``trusted`` changed since the last write while the members did not."""
    added: list[str] = field(default_factory=list)
    """Uids that joined since the last write (may repeat after a leave and rejoin)."""
    written: list[str] = field(default_factory=list)
    """The sorted members as last written (shares the uid strings)."""
    dirty: bool = False
    """Membership changed since the last write."""
    version: str = ""
    written_at: float = 0.0
    """Monotonic time of the last write or refresh (0: never written)."""


@dataclass(slots=True)
class _RoomMembers:
    """The members of one room, in its shards, and what to write of them next."""

    shards: list[_Shard]
    joined: list[str] = field(default_factory=list)
    """Uids that joined since the last take, for the viewers history."""
    dropped: list[tuple[int, int]] = field(default_factory=list)
    """(index, count) of shards the room no longer has (re-sharded), to delete."""

    @property
    def count(self) -> int:
        return len(self.shards)


class Tables:
    """One statsvr node's members of every room, in memory.

    Not thread-safe: heartbeats, sweeps and takes all run on the event loop.
    """

    def __init__(self, clock: Clock, *, online_ttl: float = ONLINE_TTL,
                 vip_shards: int = VIP_SHARDS,
                 is_vip: Callable[[str], bool] = lambda room: False,
                 refresh_every: float = 15.0) -> None:
        if vip_shards < 1:
            raise ValueError("vip_shards must be at least 1")
        self._clock = clock
        self.online_ttl = online_ttl
        self.vip_shards = vip_shards
        self.is_vip = is_vip
        self.refresh_every = refresh_every
        self._rooms: dict[str, _RoomMembers] = {}
        # Versions must never repeat across restarts of a node with the same id:
        # a reader skips a shard whose version it has already read.
        self._boot = secrets.token_hex(4)
        self._serial = 0
        self.heartbeats = 0
        """Heartbeats taken since start (a counter for metrics)."""

    # -- heartbeats ------------------------------------------------------------

    def ingest(self, batch: bytes) -> int:
        """Take a batch as a proxy sends it: msgpack ``[{room: [uid, ...]},
        {room: [uid, ...]}]``, the heartbeats and then the trusted ones (a
        bare ``{room: [uid, ...]}``, as an older proxy sends, is heartbeats
        alone).

        Returns how many heartbeats it held. A malformed batch (or a malformed
        room entry in it) is logged and skipped: the proxy validated every name
        already, so this only guards the boundary.
        """
        try:
            decoded = msgpack.unpackb(batch, use_list=False)
        except (ValueError, msgpack.UnpackException) as exc:
            logger.warning("dropped a heartbeat batch that is not msgpack: %s", exc)
            return 0
        if isinstance(decoded, dict):
            decoded = (decoded,)
        if not (isinstance(decoded, tuple) and 1 <= len(decoded) <= 2
                and all(isinstance(part, dict) for part in decoded)):
            logger.warning("dropped a heartbeat batch that is not one or two maps")
            return 0
        taken = 0
        for trusted, rooms in enumerate(decoded):
            for room, uids in rooms.items():
                if isinstance(room, str) and isinstance(uids, tuple):
                    taken += self.beat(room, uids, trusted=bool(trusted))
        return taken

    def beat(self, room: str, uids: Sequence[str], *, trusted: bool = False) -> int:
        """Record a heartbeat of every uid in ``uids`` (non-str entries are
        skipped); ``trusted``: each is trusted from now until it leaves. A
        heartbeat that is not trusted leaves a trusted member trusted."""
        state = self._rooms.get(room)
        count = self.vip_shards if self.is_vip(room) else 1
        if state is None:
            state = self._rooms[room] = _RoomMembers([_Shard() for _ in range(count)])
        elif state.count != count:
            self._reshard(state, count)
        tick = int(self._clock.monotonic())
        mark = ~tick
        value = mark if trusted else tick
        joined = state.joined
        taken = 0
        if count == 1:
            shard = state.shards[0]
            members = shard.members
            get = members.get
            added = shard.added
            for uid in uids:
                old = get(uid)
                if old is None:
                    if type(uid) is not str:
                        continue
                    added.append(uid)
                    joined.append(uid)
                    shard.dirty = True
                    if trusted:
                        shard.trusted += 1
                elif old < 0:  # trusted already, whatever this heartbeat says
                    members[uid] = mark
                    taken += 1
                    continue
                elif trusted:
                    shard.trusted += 1
                    shard.trust_changed = True
                members[uid] = value
                taken += 1
        else:
            shards = state.shards
            # name_slot inlined: this loop runs once per heartbeat.
            crc32 = zlib.crc32
            for uid in uids:
                if type(uid) is not str:
                    continue
                shard = shards[crc32(uid.encode()) % count]
                old = shard.members.get(uid)
                if old is None:
                    shard.added.append(uid)
                    joined.append(uid)
                    shard.dirty = True
                    if trusted:
                        shard.trusted += 1
                elif old < 0:
                    shard.members[uid] = mark
                    taken += 1
                    continue
                elif trusted:
                    shard.trusted += 1
                    shard.trust_changed = True
                shard.members[uid] = value
                taken += 1
        self.heartbeats += taken
        return taken

    def _reshard(self, state: _RoomMembers, count: int) -> None:
        """Split the room anew (it became vip or stopped being one)."""
        old = state.shards
        state.dropped.extend((i, len(old)) for i, s in enumerate(old) if s.written_at)
        state.shards = [_Shard() for _ in range(count)]
        for shard in old:
            for uid, tick in shard.members.items():
                new = state.shards[shard_of(uid, count)]
                new.members[uid] = tick
                new.added.append(uid)
                new.dirty = True
                if tick < 0:
                    new.trusted += 1

    def forget(self, room: str, uid: str) -> bool:
        """Drop ``uid`` from the room's members now (a ban), as if it had
        gone quiet: the next write leaves it out. False if it was not a member."""
        state = self._rooms.get(room)
        if state is None:
            return False
        for shard in state.shards:
            tick = shard.members.pop(uid, None)
            if tick is not None:
                if tick < 0:
                    shard.trusted -= 1
                shard.dirty = True
                return True
        return False

    # -- reading ---------------------------------------------------------------

    def online(self, room: str) -> int:
        """This node's members of ``room`` (not the merged figure)."""
        state = self._rooms.get(room)
        return sum(len(s.members) for s in state.shards) if state else 0

    def trusted(self, room: str) -> int:
        """This node's trusted members of ``room``."""
        state = self._rooms.get(room)
        return sum(s.trusted for s in state.shards) if state else 0

    def members(self, room: str) -> set[str]:
        """This node's members of ``room`` (a copy)."""
        state = self._rooms.get(room)
        out: set[str] = set()
        if state:
            for shard in state.shards:
                out.update(shard.members)
        return out

    def rooms(self) -> list[str]:
        return list(self._rooms)

    def __len__(self) -> int:
        """Members over all rooms."""
        return sum(len(s.members) for r in self._rooms.values() for s in r.shards)

    # -- the write loop's side ---------------------------------------------------

    async def sweep(self) -> int:
        """Drop members quiet for ``online_ttl``; returns how many left.

        Yields to the event loop after each big shard, so a room of a million
        members is swept in slices.
        """
        cutoff = self._clock.monotonic() - self.online_ttl
        # A tick ``t`` is quiet when t < cutoff; a trusted one is stored as
        # ~t = -t - 1, quiet when above -cutoff - 1. Both in one comparison:
        low = -cutoff - 1
        gone = 0
        for room in list(self._rooms):
            state = self._rooms.get(room)
            if state is None:
                continue
            for shard in state.shards:
                members = shard.members
                quiet = [uid for uid, tick in members.items() if low < tick < cutoff]
                if quiet:
                    for uid in quiet:
                        if members.pop(uid) < 0:
                            shard.trusted -= 1
                    shard.dirty = True
                    gone += len(quiet)
                if len(members) > BIG_SHARD:
                    await asyncio.sleep(0)
        return gone

    async def take_writes(self) -> tuple[list[ShardWrite], dict[str, list[str]]]:
        """What to store now, and the uids that joined each room since the last take.

        Every changed shard comes whole (sorted, packed); a shard whose
        trusted count alone changed, or unchanged for ``refresh_every``, comes
        as a refresh (with its trusted count); an emptied shard as a drop (size
        0), after which a room with no members left is forgotten. The caller
        must hand back what it could not store with :meth:`restore`.
        """
        now = self._clock.monotonic()
        writes: list[ShardWrite] = []
        joined: dict[str, list[str]] = {}
        for room in list(self._rooms):
            state = self._rooms.get(room)
            if state is None:
                continue
            if state.joined:
                joined[room] = state.joined
                state.joined = []
            for index, count in state.dropped:
                writes.append(ShardWrite(room, index, count, "", 0, None))
            state.dropped.clear()
            count = state.count
            for index, shard in enumerate(state.shards):
                if shard.dirty and len(shard.added) > BIG_SHARD:
                    await self._presort(shard)
                write = self._take(room, index, count, shard, now)
                if write is not None:
                    writes.append(write)
                    if write.size > BIG_SHARD:
                        await asyncio.sleep(0)
            if not any(s.members or s.dirty for s in state.shards):
                del self._rooms[room]
        return writes, joined

    @staticmethod
    async def _presort(shard: _Shard) -> None:
        """Sort a big batch of joins in slices, yielding between them; the
        take then merges the sorted runs in linear time."""
        added = shard.added
        runs: list[str] = []
        for i in range(0, len(added), BIG_SHARD):
            runs.extend(sorted(added[i:i + BIG_SHARD]))
            await asyncio.sleep(0)
        runs.sort()  # timsort merges the sorted runs
        shard.added = runs

    def _take(self, room: str, index: int, count: int, shard: _Shard,
              now: float) -> ShardWrite | None:
        members = shard.members
        if shard.dirty:
            shard.dirty = False
            shard.trust_changed = False
            if not members:
                shard.written = []
                shard.added = []
                if not shard.written_at:
                    return None  # never stored: nothing to drop
                shard.written_at = 0.0
                return ShardWrite(room, index, count, "", 0, None)
            # The last written list is sorted: keep who stayed, add who joined,
            # and let timsort merge the two runs (linear, not n log n).
            kept = [uid for uid in shard.written if uid in members]
            kept.extend(sorted(uid for uid in shard.added if uid in members))
            kept.sort()
            if len(kept) != len(members):
                kept = list(dict.fromkeys(kept))  # a uid that left and came back
            shard.written = kept
            shard.added = []
            shard.written_at = now
            self._serial += 1
            shard.version = f"{self._boot}.{self._serial}"
            return ShardWrite(room, index, count, shard.version, len(kept),
                              msgpack.packb(kept), shard.trusted)
        if members and (shard.trust_changed or now - shard.written_at >= self.refresh_every):
            shard.trust_changed = False
            shard.written_at = now
            return ShardWrite(room, index, count, shard.version, len(members), None,
                              shard.trusted)
        return None

    def restore(self, writes: Iterable[ShardWrite]) -> None:
        """Hand back writes that were not stored: their shards are taken again,
        whole, at the next take (a drop is retried as a drop)."""
        for write in writes:
            state = self._rooms.get(write.room)
            if write.size == 0:
                if state is None:
                    state = self._rooms[write.room] = _RoomMembers([_Shard()])
                state.dropped.append((write.index, write.count))
            elif state is not None and write.count == state.count:
                self.rewrite(write.room, write.index)

    def rewrite(self, room: str, index: int) -> None:
        """Have shard ``index`` of ``room`` written whole at the next take."""
        state = self._rooms.get(room)
        if state is not None and index < state.count:
            state.shards[index].dirty = True
