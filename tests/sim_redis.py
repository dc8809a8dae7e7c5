"""The simulator's Redis engine: the redis engine's own code and Lua scripts, on
a real ``redis-server``, in the order the seed chooses.

:mod:`simulation` runs its worlds on a virtual-time loop with no I/O. Here
every command of the redis engine (``liveroom.store.redis``: its pipelines,
its ``EVALSHA`` calls, its batched appends) goes through :class:`SimClient`,
which runs it on a real server over one blocking connection, at the point of
the simulated world the scheduler picked: the caller yields before its request
"leaves" and again before its reply "arrives", so other callbacks run between
(or, drawn from the seed, virtual time passes). The server runs one command
at a time in the order given, so one seed replays exactly.

What the seed draws on top of the memory engine's faults:

- **notifies**: each ``PUBLISH`` the scripts make (read back after each call on
  a subscribed connection, in order, by a ``PING`` on it) reaches each node
  lost, late or at once, like the memory engine's;
- **round trips**: a request or a reply held for a while; a reply lost after
  Redis ran the call (the caller sees a timeout: the write may be stored);
- **Redis restarts**: every call fails while the server is "down" (connection
  refused), the scripts are gone after it (``SCRIPT FLUSH``: the engine must
  load them again), every node's notify channel resyncs when it is back; a
  restart either keeps everything (``appendfsync always``) or loses the writes
  of up to its last second (``everysec``: the data set is put back as it was
  at a moment drawn in that second, by ``DUMP``/``RESTORE`` of every key);
- **a cluster's sharded notifies** (``--engine redis-sharded``): the scripts
  ``SPUBLISH`` on the room's channel and a node hears a room only while it
  watches it, once its subscription is confirmed (a round trip after the
  watch, notifies before it lost; then the room alone is resynced), as
  :mod:`liveroom.store.redis.sharded` promises.

The features' checks (tests/sim_features.py) read a few keys straight off
the server (``SimRedis.conn``: a send's ``client_msg_id``, the counters
before and after a lossy restart): an oracle, outside the world's order,
that changes nothing and draws nothing.

The notify channels are modelled from their contracts
(:class:`liveroom.store.log.Notifier`), not run: their connection code has
its own tests against real servers. Keys' TTLs run on the server's clock
(real time, slower than the virtual one): nothing a world checks expires
within its run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis import exceptions as rexc

from liveroom.store.base import LogPolicy, OnNotify, OnResync
from liveroom.store.redis import keys
from liveroom.store.redis.counters import RedisCounters
from liveroom.store.redis.filters import RedisFilters
from liveroom.store.redis.log import RedisLog
from liveroom.store.redis.moderation import RedisModeration
from liveroom.store.redis.operators import RedisOperators
from liveroom.store.redis.review import RedisReview
from liveroom.store.redis.stats import RedisStats

ENGINES = ("memory", "redis", "redis-sharded")


@dataclass
class RedisFaults:
    """How often the Redis engine's own faults strike (drawn per seed)."""

    request_held: float = 0.0
    """A request's chance to reach Redis only after a while."""
    reply_held: float = 0.0
    """A reply's chance to reach its node only after a while."""
    reply_lost: float = 0.0
    """A node's call's chance to run on Redis and its reply never to arrive."""
    restarts: int = 0
    """Redis restarts that keep every write."""
    lossy_restarts: int = 0
    """Redis restarts that lose the writes of up to their last second."""


class RedisProcess:
    """One ``redis-server`` for a run of seeds, on a unix socket, no
    persistence of its own (a restart is played by :class:`SimRedis`)."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not on PATH: run scripts/install-test-deps")
        self._dir = tempfile.TemporaryDirectory(prefix="liveroom-sim-redis-")
        # A unix socket: the run is Redis round trips, which it makes about
        # twice as fast as loopback TCP.
        self.socket = str(Path(self._dir.name) / "redis.sock")
        log = Path(self._dir.name) / "redis.log"
        with log.open("ab") as out:
            self._process = subprocess.Popen(
                [binary, "--port", "0", "--unixsocket", self.socket, "--save", "",
                 "--appendonly", "no", "--daemonize", "no", "--dir", self._dir.name],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=_dies_with_parent)
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(unix_socket_path=self.socket,
                                 socket_connect_timeout=0.2) as client:
                    client.ping()
                return
            except (rexc.ConnectionError, FileNotFoundError):
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"redis-server did not start; see {log}") from None
                time.sleep(0.02)

    def connect(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.socket, socket_timeout=10)

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)
        self._dir.cleanup()


_SERVER: RedisProcess | None = None


def _dies_with_parent() -> None:
    """In the redis-server child, before its exec: killed when the run that
    started it dies, even by SIGKILL (a test's timeout kills so), on Linux
    (``prctl(PR_SET_PDEATHSIG, SIGKILL)``); elsewhere nothing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


def _stopped(*_: object) -> None:
    if _SERVER is not None:
        _SERVER.close()
    os._exit(143)


def server() -> RedisProcess:
    """The process's server, started at the first Redis world (seeds share it:
    each starts with an empty data set)."""
    global _SERVER
    if _SERVER is None:
        _SERVER = RedisProcess()
        import atexit
        import signal

        atexit.register(_SERVER.close)
        # A run stopped by SIGTERM (a test's timeout, a kill of a long run):
        # its redis-server must not outlive it (the world in flight is dropped).
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _stopped)
    return _SERVER


class SimRedis:
    """The world's Redis: one blocking connection running every call when the
    scheduler lets it, the notifies its scripts publish, and its restarts."""

    def __init__(self, process: RedisProcess, loop: asyncio.AbstractEventLoop,
                 rng: random.Random, faults: RedisFaults, *, sharded: bool) -> None:
        self.loop = loop
        self.rng = rng
        self.faults = faults
        self.sharded = sharded
        self.conn = process.connect()
        self.conn.flushall()
        self.conn.script_flush()
        self._pubsub = self.conn.pubsub()
        self._subscribed: set[str] = set()
        # Sharded, the rooms' channels come as nodes watch them; the one
        # channel (never published on then) keeps the connection subscribed.
        self._pubsub.subscribe(keys.NOTIFY_CHANNEL)
        self._pubsub.get_message(timeout=5)
        self.down_until = float("-inf")
        self.subscribers: list[tuple[OnNotify, OnResync]] = []
        self.calls = 0
        self.lost_writes = 0
        """Restarts that lost writes (the checker allows what they lost)."""

    @property
    def down(self) -> bool:
        return self.loop.time() < self.down_until

    def hear(self, room: str) -> None:
        """Sharded: read ``room``'s channel from now on (the world hears every
        room it serves; which node hears it is :class:`NodeNotifier`'s)."""
        channel = keys.notify_channel(room)
        if self.sharded and channel not in self._subscribed:
            self._subscribed.add(channel)
            self._pubsub.ssubscribe(channel)
            self._drain()

    def run(self, command: Callable[[redis.Redis], Any], *, publishes: bool = True) -> Any:
        """Run ``command`` on the server now (no fault), then hand the
        notifies it published (``publishes``: it may have) to the nodes."""
        if self.down:
            raise rexc.ConnectionError("simulated: Redis is restarting")
        self.calls += 1
        result = command(self.conn)
        if publishes:
            self._drain()
        return result

    def _drain(self) -> None:
        """Every message published so far, in order: a PING on the subscribed
        connection is answered after them."""
        self._pubsub.ping(b"sim")
        while True:
            message = self._pubsub.get_message(timeout=5)
            if message is None:
                raise RuntimeError("the notify connection did not answer its PING")
            kind = message["type"]
            if kind == "pong":
                return
            if kind in ("message", "smessage"):
                self._notify(message["data"])

    def _notify(self, data: bytes) -> None:
        seq_text, _, room_bytes = data.partition(b" ")
        room, seq = room_bytes.decode(), int(seq_text)
        for on_notify, _ in self.subscribers:
            on_notify(room, seq)

    # -- restarts ----------------------------------------------------------------------

    def snapshot(self) -> dict[bytes, tuple[int, bytes]]:
        """Every key as DUMP gives it, with its remaining TTL (0: none)."""
        saved: dict[bytes, tuple[int, bytes]] = {}
        for key in self.conn.scan_iter(count=1000):
            ttl = self.conn.pttl(key)
            dumped = self.conn.dump(key)
            if dumped is not None and ttl != -2:
                saved[key] = (max(ttl, 0), dumped)
        return saved

    def restart(self, downtime: float, saved: dict[bytes, tuple[int, bytes]] | None) -> None:
        """Go down for ``downtime`` virtual seconds; come back with ``saved``
        (None: with everything) and no script loaded."""
        self.down_until = self.loop.time() + downtime
        self.conn.script_flush()
        if saved is not None:
            self.lost_writes += 1
            self.conn.flushall()
            with self.conn.pipeline(transaction=False) as pipe:
                for key, (ttl, dumped) in saved.items():
                    pipe.restore(key, ttl, dumped, replace=True)
                pipe.execute()
        self.loop.call_later(downtime, self._back)

    def _back(self) -> None:
        for _, on_resync in self.subscribers:
            on_resync(None)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._pubsub.close()
        self.conn.close()


_PUBLISHING = frozenset({"EVAL", "PUBLISH", "SPUBLISH", "FCALL"})


def _publishes(command: tuple[tuple[Any, ...], Any]) -> bool:
    """Whether a pipelined command may publish a notify: a script publishes
    only by the command it is handed (``keys.notify_how``), so a script
    without one (a pull, a refresh's version check) needs no drain after it,
    which is most of a run's calls."""
    args = command[0]
    if args[0] != "EVALSHA":
        return args[0] in _PUBLISHING
    return any(isinstance(a, str) and a.startswith(("PUBLISH ", "SPUBLISH ")) for a in args)


class SimPipeline:
    """``client.pipeline()`` of :class:`SimClient`: commands buffered on a
    blocking pipeline, run on ``execute`` when the scheduler lets them."""

    def __init__(self, client: SimClient) -> None:
        self._client = client
        self._pipe = client.redis.conn.pipeline(transaction=False)

    async def __aenter__(self) -> SimPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._pipe.reset()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        pipe = self._pipe
        publishes = any(map(_publishes, pipe.command_stack))
        try:
            result: list[Any] = await self._client.call(
                lambda _: pipe.execute(raise_on_error=raise_on_error), publishes=publishes)
        finally:
            pipe.reset()
        return result


class SimClient:
    """A redis.asyncio client as the redis engine uses it, over :class:`SimRedis`.

    Each call yields before it reaches Redis and before its reply reaches its
    caller (other callbacks run meanwhile), each possibly held for a while;
    ``faulty`` clients (the nodes') may also lose a reply of a call Redis ran.
    """

    def __init__(self, sim: SimRedis, *, faulty: bool) -> None:
        self.redis = sim
        self._faulty = faulty

    def pipeline(self, transaction: bool = False) -> SimPipeline:
        return SimPipeline(self)

    async def call(self, command: Callable[[redis.Redis], Any], *,
                   publishes: bool = True) -> Any:
        sim, rng = self.redis, self.redis.rng
        faults = sim.faults if self._faulty else RedisFaults()
        await self._hop(faults.request_held)
        result = sim.run(command, publishes=publishes)
        if rng.random() < faults.reply_lost:
            await asyncio.sleep(rng.uniform(0.0, 2.0))
            raise rexc.TimeoutError("simulated: the reply was lost")
        await self._hop(faults.reply_held)
        return result

    async def _hop(self, held: float) -> None:
        rng = self.redis.rng
        if rng.random() < held:
            await asyncio.sleep(rng.uniform(0.001, 1.0))
        else:
            await asyncio.sleep(0)

    async def aclose(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        """``await client.hget(...)`` and the like: the blocking method, run as a call."""
        method = getattr(redis.Redis, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self.call(lambda conn: method(conn, *args, **kwargs),
                                   publishes=name.upper() in _PUBLISHING)

        return call


class NodeNotifier:
    """One node's notify channel over :class:`SimRedis` (the contract of
    :class:`liveroom.store.log.Notifier`): alive while Redis is up; sharded,
    it hears a room only while watched, from its subscription's confirmation."""

    def __init__(self, sim: SimRedis, rng: random.Random,
                 on_resync: Callable[[list[str]], None]) -> None:
        self._sim = sim
        self._rng = rng
        self._on_resync = on_resync
        self._watched: dict[str, int] = {}
        self._confirmed: set[str] = set()

    @property
    def alive(self) -> bool:
        return not self._sim.down

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None:
        """The world delivers this node's notifies (:class:`SimNode`)."""

    def watch(self, room: str) -> None:
        count = self._watched.get(room, 0)
        self._watched[room] = count + 1
        if count == 0 and self._sim.sharded:
            self._sim.hear(room)
            self._sim.loop.call_later(self._rng.uniform(0.0, 0.05), self._confirm, room)

    def _confirm(self, room: str) -> None:
        if self._watched.get(room) and room not in self._confirmed:
            self._confirmed.add(room)
            self._on_resync([room])

    def unwatch(self, room: str) -> None:
        count = self._watched.get(room, 0) - 1
        if count <= 0:
            self._watched.pop(room, None)
            self._confirmed.discard(room)
        else:
            self._watched[room] = count

    def hears(self, room: str) -> bool:
        return not self._sim.sharded or room in self._confirmed


@dataclass
class RedisParts:
    """The redis engine's parts over one client (as ``RedisStore`` builds them)."""

    client: SimClient
    policy: LogPolicy
    sharded: bool
    log: RedisLog = field(init=False)
    stats: RedisStats = field(init=False)
    counters: RedisCounters = field(init=False)
    moderation: RedisModeration = field(init=False)
    review: RedisReview = field(init=False)
    filters: RedisFilters = field(init=False)
    operators: RedisOperators = field(init=False)

    def __post_init__(self) -> None:
        client: Any = self.client
        self.log = RedisLog(client, self.policy, sharded=self.sharded)
        self.stats = RedisStats(client)
        self.counters = RedisCounters(client, self.policy)
        self.moderation = RedisModeration(client, self.policy, sharded=self.sharded)
        self.review = RedisReview(client, self.policy)
        self.filters = RedisFilters(client)
        self.operators = RedisOperators(client, self.policy, self.log, sharded=self.sharded)


class SimRedisStore:
    """The world's own view of the store (the publishers', the strikes' and
    the checker's): the redis engine's parts over a client with no fault."""

    name = "redis"

    def __init__(self, sim: SimRedis, policy: LogPolicy) -> None:
        self.sim = sim
        self.policy = policy
        parts = RedisParts(SimClient(sim, faulty=False), policy, sim.sharded)
        self.log, self.stats, self.counters = parts.log, parts.stats, parts.counters
        self.moderation, self.operators = parts.moderation, parts.operators
        self.review = parts.review
        self.filters = parts.filters
        self.notifier = self

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None:
        self.sim.subscribers.append((on_notify, on_resync))

    def node_parts(self) -> RedisParts:
        """A node's parts, over a client of its own with the node's faults."""
        return RedisParts(SimClient(self.sim, faulty=True), self.policy, self.sim.sharded)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self.log.close()
        self.sim.close()


@contextlib.contextmanager
def drawn_from(rng: random.Random) -> Iterator[None]:
    """What the nodes and the redis engine make up at random, drawn from the
    seed instead, so that a replay makes up the same: the epochs and each
    node's boot id (``statsvr.table``, which goes into the store's values)."""
    import secrets

    from liveroom.store.redis import log as redis_log
    from liveroom.store.redis import operators as redis_operators

    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    saved = redis_log.new_epoch, redis_operators.new_epoch, secrets.token_hex

    def made_up() -> str:
        return "".join(rng.choice(alphabet) for _ in range(12))

    def token_hex(nbytes: int | None = None) -> str:
        return rng.randbytes(nbytes or 32).hex()

    redis_log.new_epoch = redis_operators.new_epoch = made_up
    secrets.token_hex = token_hex
    try:
        yield
    finally:
        redis_log.new_epoch, redis_operators.new_epoch, secrets.token_hex = saved
