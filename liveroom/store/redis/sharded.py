"""How nodes over a Redis Cluster hear of appends: sharded pub/sub, per room.

An append ``SPUBLISH``es on its room's channel :func:`.keys.notify_channel`,
which lives in the room's slot, so the notify travels only within the room's
shard (one master and its replicas), never across the cluster bus to every
node as a plain ``PUBLISH`` would.

A node subscribes **per room**, to the rooms its recvsvr reads (``watch`` /
``unwatch``, counted, so a room both sects hold stays subscribed until both
let it go). Per room rather than per slot range: with room-affine routing
each node reads a small share of the rooms, and a per-slot subscription would
bring it every notify of every room in those slots, whoever reads them; per
room, subscriptions and notify traffic both follow what the node serves.

One :class:`_Shard` per master holds one connection with that master's rooms
and a probe channel in one of its slots; its probe goes through the cluster
client, so it follows ``MOVED`` to whoever owns the slot now. Whatever goes
wrong on any shard (a dead master, a probe not back, the server dropping a
subscription because its slot moved) re-reads the cluster's layout and
subscribes everything again, then resyncs every room: notifies sent meanwhile
are lost. A room whose subscription is confirmed later than its first pull is
resynced alone once it is.

Limits: at most once, like every Redis pub/sub; while a shard fails over, its
rooms hear nothing (the recvsvr fallback pull covers them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Collection
from typing import Any

from redis import exceptions as rexc
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.crc import key_slot

from ...lifecycle import stop_task
from ..base import OnNotify, OnResync
from . import keys
from .notify import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    PROBE_TIMEOUT,
    ChannelLost,
    ChannelState,
    Probe,
    Subscribers,
    notify,
    pool_options,
    resync,
)

logger = logging.getLogger("liveroom.store.redis")

_ROOM_OF_CHANNEL = len(f"{keys.PREFIX}:{{"), -len("}:n")
"""Where a room's name sits in its channel name."""


def _room_of(channel: bytes) -> str | None:
    start, end = _ROOM_OF_CHANNEL
    try:
        return channel[start:end].decode()
    except UnicodeDecodeError:
        return None


def _slot(channel: str) -> int:
    return key_slot(channel.encode())


def probe_channel(slots: Collection[int]) -> str:
    """A channel in one of ``slots``: its tag is found by counting up (each
    tries lands in a given master's slots with the share it holds)."""
    for i in range(1_000_000):
        channel = keys.notify_channel(f"~probe{i}")
        if _slot(channel) in slots:
            return channel
    raise ValueError("no probe channel found for these slots")


_CHANGES_EVERY = 0.1
"""Longest a shard waits for a message before it sends the subscriptions asked
for meanwhile (a room watched is subscribed within this)."""


class _Moved(Exception):
    """The server dropped a subscription we did not give up: its slot moved."""


class _Shard:
    """One master's subscriptions on one connection, probed."""

    def __init__(self, owner: ShardedNotifier, node: ClusterNode, slots: set[int],
                 rooms: set[str]) -> None:
        self.owner = owner
        self.node = node
        self.slots = slots
        self.rooms = rooms
        """Rooms subscribed (or asked to be) on this shard."""
        self.confirmed: set[str] = set()
        """Rooms whose subscription the server confirmed."""
        self.changes: dict[str, bool] = {}
        """Rooms to subscribe (True) or unsubscribe (False) next."""
        self.alive = False
        self.subscribed = False
        self._leaving: set[bytes] = set()

    def want(self, room: str, watched: bool) -> None:
        if watched:
            self.rooms.add(room)
        else:
            self.rooms.discard(room)
            self.confirmed.discard(room)
        self.changes[room] = watched

    async def run(self) -> None:
        """Subscribe and serve this master until something fails (always raises)."""
        client = Redis(host=self.node.host, port=int(self.node.port), socket_timeout=None,
                       **pool_options())
        pubsub = client.pubsub()
        loop = asyncio.get_running_loop()
        probe = probe_channel(self.slots)
        try:
            await asyncio.wait_for(pubsub.ssubscribe(probe), PROBE_TIMEOUT)
            self.changes = dict.fromkeys(self.rooms, True)
            await self._apply(pubsub)
            alive = Probe(loop.time())
            confirmed: list[str] = []
            while True:
                message = await pubsub.get_message(
                    timeout=alive.wait(loop.time(), _CHANGES_EVERY))
                now = loop.time()
                while message is not None:
                    kind, channel, data = message["type"], message["channel"], message["data"]
                    if kind == "ssubscribe":
                        if channel == probe.encode():
                            self.subscribed = True
                            alive.confirmed(now)
                        else:
                            room = _room_of(channel)
                            if room is not None and room in self.rooms:
                                self.confirmed.add(room)
                                confirmed.append(room)
                    elif kind == "smessage" and isinstance(data, bytes):
                        if alive.answered(data):
                            self.alive = True
                            self.owner.shard_alive()
                        elif self.owner.watches(_room_of(channel)):
                            # A room let go is heard no more from that moment,
                            # though its unsubscribe goes out a little later
                            # (or with the next layout).
                            notify(self.owner.subscribers, data)
                    elif kind == "sunsubscribe":
                        if channel in self._leaving:
                            self._leaving.discard(channel)
                        else:
                            raise _Moved(f"subscription {channel!r} dropped by the server")
                    message = await pubsub.get_message(timeout=0)
                if confirmed:
                    # Appends between this room's first pull and now went unheard.
                    resync(self.owner.subscribers, confirmed)
                    confirmed = []
                if self.changes:
                    await self._apply(pubsub)
                if alive.due(now):
                    alive.sent(self.owner.send_probe(probe), now)
        finally:
            self.alive = False
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
            with contextlib.suppress(Exception):
                await client.aclose()

    async def _apply(self, pubsub: Any) -> None:
        """Send the subscription changes asked for: one command per slot (a
        sharded subscription names channels of one slot only)."""
        changes, self.changes = self.changes, {}
        by_slot: dict[tuple[bool, int], list[str]] = defaultdict(list)
        for room, watched in changes.items():
            channel = keys.notify_channel(room)
            by_slot[watched, _slot(channel)].append(channel)
        for (watched, _), channels in by_slot.items():
            if watched:
                await pubsub.ssubscribe(*channels)
            else:
                self._leaving.update(c.encode() for c in channels)
                await pubsub.sunsubscribe(*channels)


class ShardedNotifier:
    """:class:`~liveroom.store.base.Notifier` over a Redis Cluster's sharded
    pub/sub (see the module docstring).

    ``alive`` once every master's connection answered its probe. Probes and
    backoff run on real time, like :class:`.notify.RedisNotifier`'s.
    """

    def __init__(self, cluster: RedisCluster, node_id: str) -> None:
        self._cluster = cluster
        self.subscribers: Subscribers = []
        self._counts: dict[str, int] = {}
        self._shards: dict[str, _Shard] = {}
        """By master name; empty while the layout is being read."""
        self._probe_prefix = f"probe {node_id or 'node'}:{uuid.uuid4().hex[:12]}:"
        self._probe_count = 0
        self._state = ChannelState("sharded notify channels")
        self._task: asyncio.Task[None] | None = None
        self._relayout = asyncio.Event()
        self._probes: set[asyncio.Task[None]] = set()

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None:
        self.subscribers.append((on_notify, on_resync))

    @property
    def alive(self) -> bool:
        return bool(self._shards) and all(s.alive for s in self._shards.values())

    # -- the rooms this node reads ------------------------------------------------

    def hears(self, room: str) -> bool:
        try:
            node = self._cluster.get_node_from_key(keys.notify_channel(room))
        except (rexc.RedisClusterException, rexc.RedisError):
            return False
        shard = self._shards.get(node.name) if node is not None else None
        return shard is not None and shard.alive and room in shard.confirmed

    def watches(self, room: str | None) -> bool:
        """Whether ``room`` is watched now (its notifies are passed on)."""
        return room in self._counts

    def watch(self, room: str) -> None:
        """Hear of ``room``'s appends from now on (counted: one ``unwatch`` each)."""
        count = self._counts.get(room, 0)
        self._counts[room] = count + 1
        if not count:
            self._route(room, True)

    def unwatch(self, room: str) -> None:
        count = self._counts.get(room, 0)
        if count <= 1:
            if self._counts.pop(room, None) is not None:
                self._route(room, False)
        else:
            self._counts[room] = count - 1

    def _route(self, room: str, watched: bool) -> None:
        if not self._shards:
            return  # the next layout subscribes what is watched then
        try:
            node = self._cluster.get_node_from_key(keys.notify_channel(room))
        except (rexc.RedisClusterException, rexc.RedisError):
            node = None
        shard = self._shards.get(node.name) if node is not None else None
        if shard is None:
            # A slot of no master we know: read the layout again.
            self._relayout.set()
            return
        shard.want(room, watched)

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="redis-sharded-notify")

    async def wait_alive(self, within: float) -> bool:
        await self._state.wait_up(within)
        return self.alive

    async def close(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)
        for probe in list(self._probes):
            probe.cancel()
        self._state.set(False, log=False)

    async def _run(self) -> None:
        backoff = BACKOFF_MIN
        first = True
        # Until closed: redis-py may swallow the cancel of a read in flight.
        while self._task is not None:
            healthy = False
            try:
                shards = await self._layout(fresh=not first)
                first = False
                healthy = await self._serve(shards)
            except (rexc.RedisError, rexc.RedisClusterException, OSError, ChannelLost,
                    _Moved) as exc:
                self._state.set(False, str(exc) or type(exc).__name__)
            except Exception:
                logger.exception("sharded notify channel failed unexpectedly")
                self._state.set(False, "unexpected error")
            finally:
                self._shards = {}
            if healthy:
                backoff = BACKOFF_MIN
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _layout(self, *, fresh: bool) -> dict[str, _Shard]:
        """Read which master serves which slots, and share the rooms among them."""
        if fresh:
            await self._cluster.nodes_manager.initialize()
        else:
            await self._cluster.initialize()
        slots: dict[str, set[int]] = defaultdict(set)
        nodes: dict[str, ClusterNode] = {}
        for slot, holders in self._cluster.nodes_manager.slots_cache.items():
            if holders:
                nodes[holders[0].name] = holders[0]
                slots[holders[0].name].add(slot)
        rooms: dict[str, set[str]] = {name: set() for name in nodes}
        for room in self._counts:
            node = self._cluster.get_node_from_key(keys.notify_channel(room))
            if node is None:
                raise rexc.SlotNotCoveredError(f"no master serves room {room}'s slot")
            rooms.setdefault(node.name, set()).add(room)
        return {name: _Shard(self, node, slots[name], rooms.get(name, set()))
                for name, node in nodes.items()}

    async def _serve(self, shards: dict[str, _Shard]) -> bool:
        """Run every shard until one fails or the layout must be read again;
        True when every shard had got subscribed (a healthy run)."""
        self._relayout.clear()
        self._shards = shards
        tasks = [asyncio.create_task(s.run(), name=f"redis-sharded-notify-{name}")
                 for name, s in shards.items()]
        watcher = asyncio.create_task(self._relayout.wait(), name="redis-sharded-layout")
        try:
            done, _ = await asyncio.wait([*tasks, watcher],
                                         return_when=asyncio.FIRST_COMPLETED)
            healthy = all(s.subscribed for s in shards.values())
            for task in done:
                if task is not watcher:
                    task.result()  # raises what ended it
            return healthy
        finally:
            for task in [*tasks, watcher]:
                task.cancel()
            for task in [*tasks, watcher]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._state.set(False, "layout changed")
            # Every room subscribes again: notifies meanwhile are lost.
            resync(self.subscribers, None)

    def shard_alive(self) -> None:
        if not self._state.up and self.alive:
            self._state.set(True, f"{len(self._shards)} masters")

    def send_probe(self, channel: str) -> bytes:
        self._probe_count += 1
        payload = f"{self._probe_prefix}{self._probe_count}".encode()
        task = asyncio.create_task(self._publish_probe(channel, payload),
                                   name="redis-sharded-probe")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)
        return payload

    async def _publish_probe(self, channel: str, payload: bytes) -> None:
        # A failed publish is a probe that never comes back: the deadline acts.
        with contextlib.suppress(rexc.RedisError, rexc.RedisClusterException, OSError):
            await self._cluster.execute_command("SPUBLISH", channel, payload)
