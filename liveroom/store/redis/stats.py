"""statsvr's tables on Redis: shard index and shards, viewers history, online
series, the node registry (live nodes and what each announced).

Keys are in :mod:`.keys` (shard index and shard keys, viewers set, flag and
sketches, the broadcast number, online series resolutions, the live node list).
Every write is a script of ``lua/`` sent as ``EVALSHA``, a whole batch in one
pipeline: one round trip, two when a script is not loaded yet; shards are
stored with plain commands first (a vip room's shard keys are in other slots
than its index), then recorded by a script. Which shards and
nodes are live follows the caller's clock (``expires_ms`` in the index); Redis
expiry of those keys only collects garbage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from ..base import (
    Announcement,
    NodeLoad,
    NodeState,
    OnlineSample,
    RankedRoom,
    SeriesRow,
    ShardEntry,
    ShardWrite,
    ViewersState,
    biggest,
    series_horizon_ms,
)
from . import keys
from .calls import Call, Client, Lua, blob, run_scripts, text, unavailable


def viewers_state(exact: int, flag: bytes | None, by_node: dict[bytes, bytes],
                  broadcast: int) -> ViewersState:
    """A viewers history from its replies: SCARD of the exact set, the
    ``complete`` flag, the sketches by node (ordered by node)."""
    return ViewersState(int(exact), flag != b"0", tuple(by_node[n] for n in sorted(by_node)),
                        broadcast)


def _shard_entry(field: bytes, value: bytes) -> ShardEntry | None:
    """An index entry from its field and value; None when it does not parse.

    A value an older node wrote has no leading ``t<trusted>`` (its versions
    are hex): every member of it counts as trusted, as all did then."""
    try:
        node, index, count = field.decode().rsplit("/", 2)
        text = value.decode()
        trusted: int | None = None
        if text.startswith("t"):
            head, text = text.split(" ", 1)
            trusted = int(head[1:])
        version, size, expires_ms = text.rsplit(" ", 2)
        return ShardEntry(node, int(index), int(count), version, int(size), int(expires_ms),
                          int(size) if trusted is None else trusted)
    except ValueError:  # UnicodeDecodeError included
        return None


def _series_row(member: bytes) -> SeriesRow:
    start, low, high, total, count = (int(part) for part in member.split(b":"))
    return start, low, high, total, count


class RedisStats:
    """statsvr's tables on Redis (keys in :mod:`.keys`, scripts in ``lua/``).

    Every batch is one pipeline, so a batch costs one round trip (two the
    first time a script runs on a fresh server; two for shards). Scripts touch
    keys of one slot only (a room's, or ``lr:{lr}:stats:nodes`` alone), so they
    run unchanged on Redis Cluster; the reads are plain pipelined commands.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._shards = Lua("stats_shards.lua")
        self._viewers = Lua("stats_viewers.lua")
        self._series = Lua("stats_series.lua")
        self._announce = Lua("stats_announce.lua")

    # -- shards ------------------------------------------------------------------

    async def write_shards(self, node: str, writes: Sequence[ShardWrite],
                           now_ms: int, ttl_ms: int) -> list[tuple[str, int]]:
        """Two round trips: the shard keys in one pipeline (a vip room's keys
        are in other slots than its index), then one ``lua/stats_shards.lua`` call
        per room, all in one pipeline, that records them in the room's index.

        A reader may see a key's new members before its index entry: it then
        holds newer members under the older version, until the entry changes.
        """
        if not writes:
            return []
        gc_ms = 2 * ttl_ms
        with unavailable("storing online members"):
            async with self._client.pipeline(transaction=False) as pipe:
                for w in writes:
                    key = keys.shard(w.room, node, w.index, w.count)
                    if w.size == 0:
                        pipe.delete(key)
                    elif w.members is not None:
                        pipe.set(key, w.members, px=gc_ms)
                    else:
                        pipe.pexpire(key, gc_ms)
                stored = await pipe.execute()
        by_room: dict[str, list[Any]] = {}
        gone: list[tuple[str, int]] = []
        for w, reply in zip(writes, stored, strict=True):
            if w.size == 0:
                mode = "d"
            elif w.members is not None or reply:
                mode = "w"
            else:  # a refresh of a key that is gone: the caller writes it whole
                mode = "x"
                gone.append((w.room, w.index))
            by_room.setdefault(w.room, []).extend(
                [mode, keys.shard_field(node, w.index, w.count), w.version, w.size,
                 w.trusted])
        calls: list[Call] = [
            (self._shards, [keys.shard_index(room)], [now_ms, now_ms + ttl_ms, gc_ms, *args])
            for room, args in by_room.items()]
        with unavailable("storing online members"):
            await run_scripts(self._client, calls)
        return gone

    async def shard_index(self, rooms: Sequence[str], now_ms: int) -> list[list[ShardEntry]]:
        if not rooms:
            return []
        with unavailable("reading the online shard index"):
            async with self._client.pipeline(transaction=False) as pipe:
                for room in rooms:
                    pipe.hgetall(keys.shard_index(room))
                replies: list[dict[bytes, bytes]] = await pipe.execute()
        listed = []
        for fields in replies:
            entries = [e for e in (_shard_entry(f, v) for f, v in fields.items())
                       if e is not None and e.expires_ms >= now_ms]
            entries.sort(key=lambda e: (e.node, e.index, e.count))
            listed.append(entries)
        return listed

    async def read_shards(self, room: str, entries: Sequence[ShardEntry],
                          max_bytes: int | None = None) -> list[bytes | None]:
        """One pipeline of ``GET`` (``GETRANGE`` with ``max_bytes``); on a
        cluster it goes to every master that holds one of the keys."""
        if not entries:
            return []
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        with unavailable("reading online members"):
            async with self._client.pipeline(transaction=False) as pipe:
                for e in entries:
                    key = keys.shard(room, e.node, e.index, e.count)
                    if max_bytes is None:
                        pipe.get(key)
                    else:
                        pipe.getrange(key, 0, max_bytes - 1)
                blobs = await pipe.execute()
        # GETRANGE of a missing key is empty; a stored blob never is.
        return [blob(b) or None for b in blobs]

    # -- viewers -----------------------------------------------------------------

    async def add_viewers(self, room: str, node: str, uids: Sequence[str],
                          sketch: bytes | None, threshold: int,
                          ttl_ms: int) -> tuple[int, bool, int]:
        """One script call; see ``lua/stats_viewers.lua``."""
        call: Call = (
            self._viewers,
            [keys.viewers_exact(room), keys.viewers_meta(room), keys.viewers_sketches(room),
             keys.broadcasts(room), keys.meta(room)],
            [threshold, ttl_ms, node, int(sketch is not None), sketch or b"", *uids])
        with unavailable("counting viewers"):
            ((size, complete, broadcast),) = await run_scripts(self._client, [call])
        return int(size), bool(complete), int(broadcast)

    async def load_sketch(self, room: str, node: str) -> bytes | None:
        with unavailable("reading a viewers sketch"):
            sketch = await self._client.hget(keys.viewers_sketches(room), node)
        return blob(sketch)

    async def viewers(self, rooms: Sequence[str], *,
                      sketches: Sequence[bool]) -> list[ViewersState]:
        """One pipeline; each room's sketches come ordered by node."""
        if len(rooms) != len(sketches):
            raise ValueError("viewers() needs one sketches flag per room")
        if not rooms:
            return []
        with unavailable("reading viewers"):
            async with self._client.pipeline(transaction=False) as pipe:
                for room, with_sketches in zip(rooms, sketches, strict=True):
                    pipe.scard(keys.viewers_exact(room))
                    pipe.hget(keys.viewers_meta(room), "complete")
                    pipe.hget(keys.broadcasts(room), "n")
                    if with_sketches:
                        pipe.hgetall(keys.viewers_sketches(room))
                replies = iter(await pipe.execute())
        states = []
        for with_sketches in sketches:
            exact, flag, broadcast = next(replies), next(replies), next(replies)
            by_node: dict[bytes, bytes] = next(replies) if with_sketches else {}
            states.append(viewers_state(exact, flag, by_node, int(broadcast or 1)))
        return states

    # -- series ------------------------------------------------------------------

    async def record_online(self, samples: Sequence[OnlineSample],
                            resolutions: Sequence[tuple[int, int]], min_gap_ms: int) -> int:
        """One script call per sample, all in one pipeline; see ``lua/stats_series.lua``."""
        keep_ms = series_horizon_ms(resolutions, min_gap_ms)
        if not samples or not resolutions:
            return 0
        resolution_args = [n for resolution in resolutions for n in resolution]
        calls: list[Call] = [
            (self._series,
             [keys.series_last(s.room), keys.meta(s.room),
              *(keys.series(s.room, step) for step, _ in resolutions)],
             [s.t_ms, s.online, min_gap_ms, keep_ms, *resolution_args])
            for s in samples]
        with unavailable("recording the online series"):
            taken = await run_scripts(self._client, calls)
        return sum(int(t) for t in taken)

    async def read_online(self, room: str, step: int, low: int, high: int) -> list[SeriesRow]:
        with unavailable("reading the online series"):
            members: list[Any] = await self._client.zrangebyscore(
                keys.series(room, step), low, high)
        return [_series_row(m) for m in members]

    # -- nodes -------------------------------------------------------------------

    async def announce(self, node: str, now_ms: int, ttl_ms: int,
                       announcement: Announcement | None = None) -> list[str]:
        """One script call; see ``lua/stats_announce.lua``."""
        packed = pack_announcement(now_ms, announcement or Announcement())
        call: Call = (self._announce, [keys.STATS_NODES], [now_ms, now_ms + ttl_ms, node, packed])
        with unavailable("announcing this node"):
            (live,) = await run_scripts(self._client, [call])
        return sorted(text(n) for n in live)

    async def withdraw(self, node: str) -> None:
        with unavailable("withdrawing this node"):
            await self._client.hdel(keys.STATS_NODES, node)

    async def nodes(self, now_ms: int) -> list[NodeState]:
        with unavailable("reading the node registry"):
            registry = await self._client.hgetall(keys.STATS_NODES)
        states = []
        for field, value in registry.items():
            expires, _, packed = (blob(value) or b"").partition(b" ")
            if not expires.isdigit() or int(expires) < now_ms:
                continue
            at, announcement = unpack_announcement(packed)
            states.append(NodeState(text(field), at, int(expires), announcement))
        states.sort(key=lambda state: state.node)
        return states

    async def biggest_rooms(self, now_ms: int, limit: int) -> list[RankedRoom]:
        states = await self.nodes(now_ms)
        return biggest((state.announcement for state in states), limit)


def pack_announcement(now_ms: int, announcement: Announcement) -> bytes:
    """An announcement as ``lr:{lr}:stats:nodes`` keeps it after the expiry (see :mod:`.keys`)."""
    load = announcement.load
    packed: bytes = msgpack.packb([
        now_ms, [load.rooms_cached, load.held_polls, load.members, load.rooms_merged],
        [[r.room, r.online, r.per_minute] for r in announcement.rooms]])
    return packed


def unpack_announcement(value: bytes) -> tuple[int, Announcement]:
    """``(announced_ms, announcement)`` from a stored value; an empty one (at 0)
    for a value that does not parse (an older node's plain ``expires_ms``), so
    one bad entry never hides the others."""
    try:
        at, load, rooms = msgpack.unpackb(value)
        return int(at), Announcement(
            NodeLoad(*(int(n) for n in load)),
            tuple(RankedRoom(str(room), int(online),
                             None if per_minute is None else float(per_minute))
                  for room, online, per_minute in rooms))
    except (ValueError, TypeError, msgpack.UnpackException):
        return 0, Announcement()
