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
- **Notify.** One pub/sub connection per process on :data:`.keys.NOTIFY_CHANNEL`
  (see :class:`RedisNotifier`); at-most-once, like every Redis pub/sub.
- **Operators** (the vip whitelist, ending a broadcast) are in
  :mod:`.redis_operators`; how scripts run and driver errors are mapped, for
  every module of the engine, in :mod:`.redis_calls`.
- **Durability** is what the server's persistence setting promises.

Redis ≥ 6.2 (exclusive stream ranges, ``XTRIM MINID``). Redis Cluster is not
wired in yet: ``redis+cluster://`` fails at start-up with a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Sequence
from typing import Any

from redis import exceptions as rexc
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.maint_notifications import MaintNotificationsConfig

from ..clock import Clock
from ..codec import pack_stored, unpack_stored
from ..errors import StoreUnavailable
from ..model import Entry, NewMessage
from ..ratelimit import RateLimits, refusal
from . import keys
from .base import (
    Appended,
    LogPolicy,
    OnNotify,
    OnResync,
    Pulled,
    PullRequest,
    new_epoch,
)
from .redis_calls import Lua, run_scripts, script_text, text, unavailable
from .redis_operators import RedisOperators
from .redis_stats import RedisStats

logger = logging.getLogger("liveroom.store.redis")

MAX_CONNECTIONS = 64
"""Command connections per process; more callers wait for a free one."""
POOL_TIMEOUT = 3.0
"""How long a command waits for a free connection before the store counts as down."""
CONNECT_TIMEOUT = 1.0
COMMAND_TIMEOUT = 5.0

PROBE_INTERVAL = 1.0
"""Seconds between two probes of the notify channel."""
PROBE_TIMEOUT = 2.0
"""A probe (or the subscribe confirmation) not back within this kills the channel."""
BACKOFF_MIN = 0.05
BACKOFF_MAX = 2.0
START_WAIT = 3.0
"""How long ``start()`` waits for the notify channel when Redis answers."""
_PULL_ATTEMPTS = 5

def _pool_options() -> dict[str, Any]:
    """What every connection of this engine shares."""
    return {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        # Never retry: a retried append could be stored twice.
        "retry": Retry(NoBackoff(), 0),
        # A plain Redis has no maintenance notifications: spare the round trip
        # redis-py spends asking for them on every new connection.
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
    }


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

    def __init__(self, client: Redis, policy: LogPolicy) -> None:
        self.policy = policy
        self._client = client
        self._append = client.register_script(script_text("append.lua"))
        self._epoch = client.register_script(script_text("epoch.lua"))
        self._touch = Lua("touch.lua")

    async def open_room(self, room: str) -> str:
        with unavailable("open_room"):
            epoch = await self._epoch(
                keys=_room_keys(room),
                args=[new_epoch(), "", self.policy.room_ttl_ms, 1,
                      self.policy.empty_room_ttl_ms])
        return text(epoch)

    async def append(self, room: str, message: NewMessage,
                     limits: RateLimits | None = None) -> Appended:
        """One script call (``lua/append.lua``): dedup, rate windows, append, notify."""
        policy = self.policy
        cmid = message.client_msg_id
        packed = pack_stored(message.uid, message.important, message.ts, message.body)
        per_uid = limits.per_uid if limits is not None else ()
        per_room = limits.room_windows if limits is not None else ()
        windows = (*per_uid, *per_room)
        with unavailable("append"):
            epoch, seq, status, *refused = await self._append(
                keys=[*_room_keys(room), keys.client_msg_id(room, cmid or ""),
                      keys.rate_uid(room, message.uid), keys.rate_room(room)],
                args=[new_epoch(), packed, int(message.important), message.ts,
                      policy.log_cap, policy.important_keep, policy.important_window_ms,
                      policy.important_hard_cap, policy.room_ttl_ms, policy.dedup_ttl_ms,
                      int(cmid is not None), keys.NOTIFY_CHANNEL, room,
                      len(per_uid), len(per_room),
                      *(n for w in windows for n in (w.seconds, w.limit, w.bucket_ms,
                                                     w.buckets))])
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
                async with self._client.pipeline(transaction=False) as pipe:
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
            async with self._client.pipeline(transaction=False) as pipe:
                for i in fresh:
                    pipe.exists(keys.meta(requests[i].room))
                found = await pipe.execute()
        for i, exists in zip(fresh, found, strict=True):
            if not exists:
                done[i] = Pulled(requests[i].room, None, 0, 0, (), complete=True)
        return [i for i in range(len(requests)) if i not in done]

    async def renew_epoch(self, room: str, stale: str) -> str:
        with unavailable("renew_epoch"):
            epoch = await self._epoch(
                keys=_room_keys(room),
                args=[new_epoch(), stale, self.policy.room_ttl_ms, 0,
                      self.policy.empty_room_ttl_ms])
        return text(epoch)

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


def _queue_pull(pipe: Pipeline, request: PullRequest) -> None:
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


class _ChannelLost(Exception):
    """The notify channel stopped answering (no subscribe confirmation or probe)."""


class RedisNotifier:
    """Notifies over one pub/sub connection per process, probed and reconnected.

    A background task subscribes to :data:`.keys.NOTIFY_CHANNEL` on a connection
    of its own and calls every subscriber's ``on_notify(room, seq)`` for each
    ``"<seq> <room>"`` message (malformed ones are ignored). After every
    subscribe, the first one included, it calls every ``on_resync``: notifies
    sent while it was away are gone.

    A pub/sub connection can die silently (a proxy or NAT drops it, the server
    stops sending), so every :data:`PROBE_INTERVAL` it publishes a probe of its
    own from the command connections and expects it back within
    :data:`PROBE_TIMEOUT`; otherwise it drops the connection and reconnects, for
    ever, with a backoff from :data:`BACKOFF_MIN` doubling to :data:`BACKOFF_MAX`.
    The probe and backoff run on real time, not the injected clock: they watch a
    real connection.

    Limits: at most once; a notify published during a reconnect is lost.
    """

    def __init__(self, url: str, publisher: Redis, node_id: str) -> None:
        self._url = url
        self._publisher = publisher
        self._subscribers: list[tuple[OnNotify, OnResync]] = []
        self._probe_prefix = f"probe {node_id or 'node'}:{uuid.uuid4().hex[:12]}:"
        self._probe_count = 0
        self._alive = False
        self._alive_event = asyncio.Event()
        self._reported: bool | None = None
        self._client: Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self._subscribed = False
        self._probes: set[asyncio.Task[None]] = set()

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None:
        self._subscribers.append((on_notify, on_resync))

    @property
    def alive(self) -> bool:
        return self._alive

    async def start(self) -> None:
        if self._task is not None:
            return
        # Its own connection: a subscribed connection cannot run commands, and
        # it must not wait behind (or time out like) the command pool.
        pool = ConnectionPool.from_url(self._url, socket_timeout=None, **_pool_options())
        self._client = Redis.from_pool(pool)
        self._task = asyncio.create_task(self._run(), name="redis-notify")

    async def wait_alive(self, within: float) -> bool:
        """Wait until the channel answered a probe; False if it did not ``within`` s."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._alive_event.wait(), within)
        return self._alive

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        self._set_alive(False, "closed", log=False)

    async def _run(self) -> None:
        backoff = BACKOFF_MIN
        while True:
            self._subscribed = False
            try:
                await self._session()
            except (rexc.RedisError, OSError, _ChannelLost) as exc:
                self._set_alive(False, str(exc) or type(exc).__name__)
            except Exception:
                logger.exception("notify channel failed unexpectedly")
                self._set_alive(False, "unexpected error")
            # A session that got subscribed was healthy until now: reconnect at once.
            if self._subscribed:
                backoff = BACKOFF_MIN
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _session(self) -> None:
        """Subscribe and serve the channel until it fails (it always raises)."""
        assert self._client is not None
        loop = asyncio.get_running_loop()
        pubsub = self._client.pubsub()
        try:
            # The handshake reads without a socket timeout: bound it here.
            await asyncio.wait_for(pubsub.subscribe(keys.NOTIFY_CHANNEL), PROBE_TIMEOUT)
            outstanding: bytes | None = None
            sent_at = 0.0
            deadline = loop.time() + PROBE_TIMEOUT  # for the subscribe confirmation
            next_probe = math.inf
            while True:
                wake = min(deadline if outstanding or not self._subscribed else math.inf,
                           next_probe) - loop.time()
                message = await pubsub.get_message(timeout=min(max(wake, 0.01), 1.0))
                now = loop.time()
                if message is not None:
                    kind, data = message["type"], message["data"]
                    if kind == "subscribe":
                        self._subscribed = True
                        next_probe = now  # probe at once: alive soon after a reconnect
                        self._resync()
                    elif kind == "message" and isinstance(data, bytes):
                        if data == outstanding:
                            outstanding = None
                            next_probe = sent_at + PROBE_INTERVAL
                            self._set_alive(True, "")
                        else:
                            self._notify(data)
                if not self._subscribed:
                    if now > deadline:
                        raise _ChannelLost("no subscribe confirmation")
                elif outstanding is not None:
                    if now > deadline:
                        raise _ChannelLost(f"probe not back within {PROBE_TIMEOUT} s")
                elif now >= next_probe:
                    outstanding = self._send_probe()
                    sent_at = now
                    deadline = now + PROBE_TIMEOUT
        finally:
            self._alive = False
            self._alive_event.clear()
            for task in list(self._probes):
                task.cancel()
            for task in list(self._probes):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py

    def _send_probe(self) -> bytes:
        self._probe_count += 1
        payload = f"{self._probe_prefix}{self._probe_count}".encode()
        task = asyncio.create_task(self._publish_probe(payload), name="redis-notify-probe")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)
        return payload

    async def _publish_probe(self, payload: bytes) -> None:
        # A failed publish is a probe that never comes back: the deadline acts.
        with contextlib.suppress(rexc.RedisError, OSError):
            await self._publisher.publish(keys.NOTIFY_CHANNEL, payload)

    def _notify(self, data: bytes) -> None:
        seq_text, sep, room_bytes = data.partition(b" ")
        if not sep or not room_bytes or not seq_text.isdigit():
            return  # a probe (ours was matched before) or garbage
        try:
            room = room_bytes.decode()
        except UnicodeDecodeError:
            return
        seq = int(seq_text)
        for on_notify, _ in self._subscribers:
            try:
                on_notify(room, seq)
            except Exception:
                logger.exception("notify subscriber failed")

    def _resync(self) -> None:
        for _, on_resync in self._subscribers:
            try:
                on_resync()
            except Exception:
                logger.exception("resync subscriber failed")

    def _set_alive(self, alive: bool, reason: str, *, log: bool = True) -> None:
        self._alive = alive
        if alive:
            self._alive_event.set()
        else:
            self._alive_event.clear()
        # Log state changes only: a Redis that stays down must not flood the log.
        if log and self._reported is not alive:
            self._reported = alive
            if alive:
                logger.info("notify channel up")
            else:
                logger.warning("notify channel down: %s", reason)


class RedisStore:
    """The redis engine (``--store redis://HOST:PORT/DB``)."""

    name = "redis"

    def __init__(self, url: str, policy: LogPolicy, clock: Clock, node_id: str = "") -> None:
        if url.startswith("redis+cluster://"):
            raise ValueError("redis+cluster:// is not supported yet: use redis://")
        self._clock = clock
        pool = BlockingConnectionPool.from_url(
            url, max_connections=MAX_CONNECTIONS, timeout=POOL_TIMEOUT,
            socket_timeout=COMMAND_TIMEOUT, **_pool_options())
        self._client = Redis.from_pool(pool)
        self.log = RedisLog(self._client, policy)
        self.notifier = RedisNotifier(url, self._client, node_id)
        self.stats = RedisStats(self._client)
        self.operators = RedisOperators(self._client, policy, self.log)

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
        if not await self.notifier.wait_alive(START_WAIT):
            logger.warning("notify channel not up after %s s; still trying", START_WAIT)

    async def close(self) -> None:
        await self.notifier.close()
        await self._client.aclose()

    async def ping(self) -> None:
        with unavailable("ping"):
            await self._client.ping()
