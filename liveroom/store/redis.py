"""The redis engine: many processes and hosts over one Redis.

Key names are in :mod:`.keys`; every write is a Lua script in ``lua/`` whose
header documents its KEYS and ARGV. Behaviour matches the memory engine (the
contract suite runs on both); the differences are what Redis adds or takes away:

- **Round trips.** ``append`` is one script call, rate limits included (the
  counters are hashes under the room's hash tag, pruned as they are read:
  about the sum of the windows' buckets each); ``pull`` is one pipeline of
  read-only commands for the whole batch; ``touch`` one pipeline.
- **statsvr's tables** are in :mod:`.redis_stats`: a batch is one round trip.
- **No retries.** The driver never retries a command: a retried append could be
  stored twice. A connection error, timeout or a server that is loading becomes
  :class:`~liveroom.errors.StoreUnavailable`, and so does anything else the
  driver raises (unexpected ones are logged). After a failed append the message
  may or may not be stored: senders retry with a ``client_msg_id``.
- **Consistency of a pull.** The reads of one room are not atomic (they are
  plain pipelined commands, so they work per slot on Redis Cluster). A pull
  reads the room's epoch before and after; when it changed (the log was lost or
  renewed meanwhile) that room is read again. Appends landing between the
  reads only make the answer newer, never wrong.
- **Notify.** On one Redis, one pub/sub connection per process on
  :data:`.keys.NOTIFY_CHANNEL` (:mod:`.redis_notify`); on a cluster, sharded
  channels per room, subscribed for the rooms this node reads
  (:mod:`.redis_sharded`). At most once, like every Redis pub/sub.
- **Operators** (the vip whitelist, ending a broadcast) are in
  :mod:`.redis_operators`; how scripts run and driver errors are mapped, for
  every module of the engine, in :mod:`.redis_calls`.
- **Durability** is what the server's persistence setting promises, and with
  ``LogPolicy.durable_replicas`` N > 0 an append also waits (``WAIT``) until N
  replicas hold it before it is acknowledged: a failover then loses no
  acknowledged message.
- **Redis Cluster** (``redis+cluster://``, Redis 7): every script and pipeline
  touches one room's slot (keys hash-tagged by room); what spans rooms is under
  one fixed tag (:data:`.keys.GLOBAL`). A pull batch is one round trip per
  cluster node (a cluster pipeline sends each node its part, in parallel).
  ``MOVED``/``ASK`` are followed; a command to a failed master is not retried
  and answers 503 until the cluster has promoted its replica.

Redis ≥ 6.2 (exclusive stream ranges, ``XTRIM MINID``); a cluster needs 7
(sharded pub/sub).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterNode, ClusterPipeline
from redis.cluster import LoadBalancingStrategy

from ..clock import Clock
from ..codec import pack_stored, unpack_stored
from ..errors import ConfigError, StoreUnavailable
from ..model import Entry, NewMessage
from ..ratelimit import RateLimits, refusal
from . import keys
from .base import (
    Appended,
    LogPolicy,
    Pulled,
    PullRequest,
    new_epoch,
)
from .redis_calls import Client, Lua, run_durable, run_scripts, text, unavailable
from .redis_notify import RedisNotifier, pool_options
from .redis_operators import RedisOperators
from .redis_sharded import ShardedNotifier
from .redis_stats import RedisStats

logger = logging.getLogger("liveroom.store.redis")

MAX_CONNECTIONS = 64
"""Command connections per process; more callers wait for a free one."""
POOL_TIMEOUT = 3.0
"""How long a command waits for a free connection before the store counts as down."""
COMMAND_TIMEOUT = 5.0

START_WAIT = 3.0
"""How long ``start()`` waits for the notify channel when Redis answers."""
_PULL_ATTEMPTS = 5

_REFUSED = 2
"""``append.lua``'s status of a send refused by a rate window."""


def _room_keys(room: str) -> list[str]:
    return [keys.meta(room), keys.log(room), keys.important(room)]


def _seq_of(stream_id: bytes) -> int:
    return int(stream_id.partition(b"-")[0])


def _entry(stream_id: bytes, fields: dict[bytes, bytes]) -> Entry | None:
    """The entry, or None when it cannot be decoded (written by something else,
    or corrupt): one bad entry must cost its own message, never the room."""
    try:
        return unpack_stored(_seq_of(stream_id), int(fields[b"c"]), fields[b"m"])
    except Exception:  # whatever garbage raises: msgpack, int(), a missing field
        return None


class RedisLog:
    """The message log on Redis: a meta hash and two streams per room."""

    def __init__(self, client: Client, policy: LogPolicy, *, sharded: bool = False,
                 reader: Client | None = None) -> None:
        self.policy = policy
        self.sharded = sharded
        self._client = client
        self._reader = reader or client
        self.reads_replicas = reader is not None
        """Where pulls read: the replicas, when appends wait for them (see
        :class:`RedisStore`)."""
        self._append = Lua("append.lua")
        self._epoch = Lua("epoch.lua")
        self._touch = Lua("touch.lua")

    async def _room_epoch(self, what: str, room: str, stale: str, extend: int) -> str:
        with unavailable(what):
            (epoch,) = await run_scripts(self._client, [(
                self._epoch, _room_keys(room),
                [new_epoch(), stale, self.policy.room_ttl_ms, extend,
                 self.policy.empty_room_ttl_ms])])
        return text(epoch)

    async def open_room(self, room: str) -> str:
        return await self._room_epoch("open_room", room, "", 1)

    async def append(self, room: str, message: NewMessage,
                     limits: RateLimits | None = None) -> Appended:
        """One script call (``lua/append.lua``): dedup, rate windows, append, notify."""
        policy = self.policy
        cmid = message.client_msg_id
        packed = pack_stored(message.uid, message.important, message.ts, message.body)
        per_uid = limits.per_uid if limits is not None else ()
        per_room = limits.room_windows if limits is not None else ()
        windows = (*per_uid, *per_room)
        call = (self._append,
                [*_room_keys(room), keys.client_msg_id(room, cmid or ""),
                 keys.rate_uid(room, message.uid), keys.rate_room(room)],
                [new_epoch(), packed, int(message.important), message.ts,
                 policy.log_cap, policy.important_keep, policy.important_window_ms,
                 policy.important_hard_cap, policy.room_ttl_ms, policy.dedup_ttl_ms,
                 int(cmid is not None), keys.notify_how(room, sharded=self.sharded), room,
                 len(per_uid), len(per_room),
                 *(n for w in windows for n in (w.seconds, w.limit, w.bucket_ms,
                                                w.buckets))])
        replicas = policy.durable_replicas
        with unavailable("append"):
            if replicas:
                reply, acked = await run_durable(self._client, call, replicas,
                                                 policy.durable_timeout_ms)
            else:
                (reply,), acked = await run_scripts(self._client, [call]), 0
        epoch, seq, status, *refused = reply
        if status != _REFUSED and acked < replicas:
            # Stored on the master (or seen before), not yet on enough replicas:
            # a failover now could lose it, so it is not acknowledged. The
            # sender retries with its client_msg_id and is answered its seq once
            # the replicas have it.
            raise StoreUnavailable(
                f"the message reached {acked} of {replicas} replicas within "
                f"{policy.durable_timeout_ms} ms; retry with its client_msg_id")
        if status == _REFUSED:
            position, free_ms = int(refused[0]), int(refused[1])
            uid = message.uid if position <= len(per_uid) else None
            raise refusal(room, uid, windows[position - 1], free_ms, message.ts)
        return Appended(text(epoch), int(seq), duplicate=bool(status))

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        """One pipeline for the whole batch: four read-only commands a room.

        It reads every retained important entry after ``after`` (at most
        ``important_hard_cap``), also those the log part returns as well; a
        room read across an epoch change is read again in a further pipeline.
        """
        done: dict[int, Pulled] = {}
        todo = await self._drop_absent(requests, done)
        for _ in range(_PULL_ATTEMPTS):
            if not todo:
                break
            with unavailable("pull"):
                async with self._reader.pipeline(transaction=False) as pipe:
                    for i in todo:
                        _queue_pull(pipe, requests[i])
                    replies = await pipe.execute()
            again = []
            pos = 0
            for i in todo:
                request = requests[i]
                n = 4 if request.limit > 0 else 3
                pulled = _build_pulled(request, replies[pos:pos + n])
                pos += n
                if pulled is None:
                    again.append(i)
                else:
                    done[i] = pulled
            todo = again
        if todo:
            # Only a room whose log is replaced again and again gets here.
            raise StoreUnavailable("room logs kept changing during a pull; try again")
        return [done[i] for i in range(len(requests))]

    async def _drop_absent(self, requests: Sequence[PullRequest],
                           done: dict[int, Pulled]) -> list[int]:
        """Answer the first pulls (``after`` 0) of rooms with no log from one
        read of their meta each, into ``done``; return the requests left.

        A node pulls a room from 0 once when it starts serving it, and a
        name nobody ever sent to (a made-up one) would otherwise cost the
        four reads of a full pull. A room created between this read and the
        full pull is seen by the notify of its creation.
        """
        fresh = [i for i, r in enumerate(requests) if r.after == 0]
        if not fresh:
            return list(range(len(requests)))
        with unavailable("pull"):
            async with self._reader.pipeline(transaction=False) as pipe:
                for i in fresh:
                    pipe.exists(keys.meta(requests[i].room))
                found = await pipe.execute()
        for i, exists in zip(fresh, found, strict=True):
            if not exists:
                done[i] = Pulled(requests[i].room, None, 0, 0, (), complete=True)
        return [i for i in range(len(requests)) if i not in done]

    async def renew_epoch(self, room: str, stale: str) -> str:
        return await self._room_epoch("renew_epoch", room, stale, 0)

    async def touch(self, rooms: Sequence[str]) -> None:
        """One pipeline of ``lua/touch.lua`` calls: a room with no message yet
        keeps the short expiry it was created with, a room with no log stays
        without one."""
        if not rooms:
            return
        args = [self.policy.room_ttl_ms]
        with unavailable("touch"):
            await run_scripts(self._client, [(self._touch, _room_keys(room), args)
                                             for room in rooms])


def _queue_pull(pipe: Pipeline | ClusterPipeline, request: PullRequest) -> None:
    """Queue the reads of one room: 3 commands, 4 when ``limit`` > 0."""
    room = request.room
    after = f"({request.after}-0"
    pipe.hmget(keys.meta(room), ["epoch", "seq", "ic"])
    if request.limit > 0:
        pipe.xrevrange(keys.log(room), "+", after, count=request.limit)
    pipe.xrange(keys.important(room), after, "+")
    pipe.hget(keys.meta(room), "epoch")


def _build_pulled(request: PullRequest, replies: list[Any]) -> Pulled | None:
    """One room's Pulled from its replies, or None when its epoch changed meanwhile.

    Mirrors :meth:`MemoryLog._pull_one`: the log returned is the newest
    ``limit`` entries after ``after``, then every retained important entry
    between ``after`` and the oldest of them.
    """
    (epoch, meta_seq, meta_ic), *rest = replies
    newest_first: list[Any] = rest[0] if request.limit > 0 else []
    important, epoch_again = rest[-2], rest[-1]
    if epoch != epoch_again:
        return None
    if epoch is None:
        return Pulled(request.room, None, 0, 0, (), complete=True)
    head = int(meta_seq or 0)
    head_ic = int(meta_ic or 0)
    decoded = [_entry(sid, fields) for sid, fields in reversed(newest_first)]
    picked = [e for e in decoded if e is not None]
    undecodable = len(decoded) - len(picked)
    if picked and picked[-1].seq >= head:
        # Appends that landed after the meta was read: the log is newer.
        head, head_ic = picked[-1].seq, picked[-1].ic
    after = request.after
    floor = picked[0].seq if picked else head + 1
    extra = []
    for sid, fields in important:
        entry = _entry(sid, fields)
        if entry is None:
            undecodable += 1
            continue
        if entry.seq >= floor:
            break
        extra.append(entry)
    # An undecodable entry is missing from the answer like a trimmed one: the
    # pull is not complete, and readers count it in ``gap``.
    complete = (picked[0].seq == after + 1 if picked else after >= head) \
        and not undecodable
    return Pulled(request.room, text(epoch), head, head_ic, tuple(extra + picked),
                  complete=complete, undecodable=undecodable)


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The seed nodes of a ``redis+cluster://HOST:PORT[,HOST:PORT...]`` URL."""
    rest = url.removeprefix("redis+cluster://").partition("/")[0].partition("?")[0]
    nodes = []
    for part in rest.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError("store", f"bad cluster node {part!r} in {url!r}: use "
                                       f"redis+cluster://HOST:PORT[,HOST:PORT...]")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


def _cluster_client(url: str, *, replicas: bool = False) -> RedisCluster:
    """A cluster client that never retries a command (like the pool of one
    Redis) but follows ``MOVED``/``ASK``: a redirected command was not run.
    With ``replicas``, it reads from a replica of each slot (its master when
    it has none)."""
    options = pool_options()
    return RedisCluster(
        load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN_REPLICAS if replicas
        else None,
        startup_nodes=[ClusterNode(host, port) for host, port in cluster_nodes(url)],
        socket_timeout=COMMAND_TIMEOUT, max_connections=MAX_CONNECTIONS,
        socket_connect_timeout=options["socket_connect_timeout"], retry=options["retry"],
        # Answer for the slots that are served while another shard fails over.
        require_full_coverage=False,
        maint_notifications_config=options["maint_notifications_config"])


class RedisStore:
    """The redis engine: ``--store redis://HOST:PORT/DB`` (one Redis) or
    ``redis+cluster://HOST:PORT[,...]`` (a Redis Cluster, 7 or later).

    On a cluster whose appends wait for replicas (``durable_replicas``), pulls
    read from the replicas: a listener then never sees a message that a
    failover could still lose (a master's write not yet replicated, its seq
    then reused by the next send through the promoted replica). A notify can
    reach a node before the replica applied its write; the fallback pull
    covers that (within ``fallback_interval``).
    """

    name = "redis"

    def __init__(self, url: str, policy: LogPolicy, clock: Clock, node_id: str = "") -> None:
        self._clock = clock
        self.cluster = url.startswith("redis+cluster://")
        client: Client
        if self.cluster:
            self.name = "redis-cluster"
            client = _cluster_client(url)
        else:
            pool = BlockingConnectionPool.from_url(
                url, max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT,
                socket_timeout=COMMAND_TIMEOUT, **pool_options())
            client = Redis.from_pool(pool)
        self._client = client
        self._reader: RedisCluster | None = None
        if self.cluster and policy.durable_replicas:
            self._reader = _cluster_client(url, replicas=True)
        self.log = RedisLog(client, policy, sharded=self.cluster, reader=self._reader)
        self.notifier: RedisNotifier | ShardedNotifier
        if isinstance(client, RedisCluster):
            self.notifier = ShardedNotifier(client, node_id)
        else:
            self.notifier = RedisNotifier(url, client, node_id)
        self.stats = RedisStats(client)
        self.operators = RedisOperators(client, policy, self.log, sharded=self.cluster)

    async def start(self) -> None:
        """Start the notify channel; wait (a little) for it when Redis answers.

        Never fails because Redis is down: the channel keeps reconnecting and
        ``ping`` / ``notifier.alive`` report the state meanwhile.
        """
        await self.notifier.start()
        try:
            await self.ping()
        except StoreUnavailable as exc:
            logger.warning("redis not reachable at start: %s", exc.message)
            return
        if not self.cluster:
            await self._move_whitelist()
        if not await self.notifier.wait_alive(START_WAIT):
            logger.warning("notify channel not up after %s s; still trying", START_WAIT)

    async def _move_whitelist(self) -> None:
        """Rename the vip whitelist kept under its name of before :data:`.keys.GLOBAL`
        (one Redis: both names are on the one server)."""
        with contextlib.suppress(StoreUnavailable), unavailable("start"):
            if await self._client.exists(keys.VIP_BEFORE) and \
                    await self._client.renamenx(keys.VIP_BEFORE, keys.VIP):
                logger.info("vip whitelist moved from %s to %s", keys.VIP_BEFORE, keys.VIP)

    async def close(self) -> None:
        await self.notifier.close()
        await self._client.aclose()
        if self._reader is not None:
            await self._reader.aclose()

    async def ping(self) -> None:
        """On a cluster, every master must answer (a shard failing over is down)."""
        with unavailable("ping"):
            if isinstance(self._client, RedisCluster):
                await self._client.ping(target_nodes=RedisCluster.PRIMARIES)
            else:
                await self._client.ping()
