"""The redis engine: many processes and hosts over one Redis.

Key names are in :mod:`.keys`; every write is a Lua script in ``lua/`` whose
header documents its KEYS and ARGV. Behaviour matches the memory engine (the
contract suite runs on both); the differences are what Redis adds or takes away:

- **Round trips.** ``append`` is one script call, rate limits included (the
  counters are hashes under the room's hash tag, pruned as they are read:
  about the sum of the windows' buckets each); ``recall`` is one script
  call too, its notice appended by the append's own Lua function
  (``lua/log_append_fn.lua``); ``pull`` is one pipeline of read-only
  commands for the whole batch; ``touch`` one pipeline.
- **statsvr's tables** are in :mod:`.stats`: a batch is one round trip.
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
  :data:`.keys.NOTIFY_CHANNEL` (:mod:`.notify`); on a cluster, sharded
  channels per room, subscribed for the rooms this node reads
  (:mod:`.sharded`). At most once, like every Redis pub/sub.
- **Operators** (the vip whitelist, ending a broadcast) are in
  :mod:`.operators`, the likes and gifts in :mod:`.counters`, the rooms'
  moderation in :mod:`.moderation`, their review queues in :mod:`.review`,
  the word filter's lists in :mod:`.filters`, the webhooks' outbox in
  :mod:`.outbox`; how scripts run and driver
  errors are mapped, for every module of the engine, in :mod:`.calls`.
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

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.cluster import LoadBalancingStrategy
from redis.exceptions import RedisError

from ...clock import Clock
from ...errors import ConfigError, StoreUnavailable
from ..base import LogPolicy
from . import keys
from .calls import Client, unavailable
from .counters import RedisCounters
from .filters import RedisFilters
from .log import RedisLog
from .moderation import RedisModeration
from .notify import RedisNotifier, pool_options
from .operators import RedisOperators
from .outbox import RedisOutbox
from .review import RedisReview
from .sharded import ShardedNotifier
from .stats import RedisStats

__all__ = ["RedisStore", "cluster_nodes"]

logger = logging.getLogger("liveroom.store.redis")

MAX_CONNECTIONS = 64
"""Command connections per process; more callers wait for a free one."""
POOL_TIMEOUT = 3.0
"""How long a command waits for a free connection before the store counts as down."""
COMMAND_TIMEOUT = 5.0

START_WAIT = 3.0
"""How long ``start()`` waits for the notify channel when Redis answers."""


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
        maint_notifications_config=options["maint_notifications_config"],
        driver_info=options["driver_info"])


class RedisStore:
    """The redis engine: ``--store redis://HOST:PORT/DB`` (one Redis) or
    ``redis+cluster://HOST:PORT[,...]`` (a Redis Cluster, 7 or later).

    On a cluster whose appends wait for replicas (``durable_replicas``), pulls
    read from the replicas: a listener then never sees a message that a
    failover could still lose (a master's write not yet replicated, its seq
    then reused by the next send through the promoted replica). A notify can
    reach a node before the replica applied its write; the fallback pull
    covers that (within ``fallback_pull_interval``).
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
        self.counters = RedisCounters(client, policy)
        self.moderation = RedisModeration(client, policy, sharded=self.cluster)
        self.review = RedisReview(client, policy)
        self.filters = RedisFilters(client)
        self.outbox = RedisOutbox(client)
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
        with contextlib.suppress(StoreUnavailable), unavailable("connecting"):
            if await self._client.exists(keys.VIP_BEFORE) and \
                    await self._client.renamenx(keys.VIP_BEFORE, keys.VIP):
                logger.info("vip whitelist moved from %s to %s", keys.VIP_BEFORE, keys.VIP)

    async def close(self) -> None:
        await self.log.close()
        await self.notifier.close()
        await _close_client(self._client)
        if self._reader is not None:
            await _close_client(self._reader)

    async def ping(self) -> None:
        """On a cluster, every master must answer (a shard failing over is down)."""
        with unavailable("checking its health"):
            if isinstance(self._client, RedisCluster):
                await self._client.ping(target_nodes=RedisCluster.PRIMARIES)
            else:
                await self._client.ping()


async def _close_client(client: Redis | RedisCluster) -> None:
    """Close ``client``'s connections. redis-py waits for each socket's close
    within the connect timeout and raises past it (a loop busy for a second,
    a cluster's many connections closed at once): the sockets are closed by
    then all the same, so a node stopping says so in its log, not by failing."""
    try:
        await client.aclose()
    except RedisError as exc:
        logger.info("closing the Redis connections took long: %s", exc)
