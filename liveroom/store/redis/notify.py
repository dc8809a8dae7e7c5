"""How nodes over one Redis hear of appends: one pub/sub channel, probed.

:class:`RedisNotifier` serves a single Redis; the cluster's sharded channels
are in :mod:`.sharded`, which shares the payload rules and the
connection options kept here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Collection
from typing import Any

from redis import __version__ as redis_version
from redis import exceptions as rexc
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.maint_notifications import MaintNotificationsConfig

from ...lifecycle import stop_task
from ..base import OnNotify, OnResync
from . import keys

logger = logging.getLogger("liveroom.store.redis")

CONNECT_TIMEOUT = 1.0
PROBE_INTERVAL = 1.0
"""Seconds between two probes of the notify channel."""
PROBE_TIMEOUT = 2.0
"""A probe (or the subscribe confirmation) not back within this kills the channel."""
BACKOFF_MIN = 0.05
BACKOFF_MAX = 2.0

def pool_options() -> dict[str, Any]:
    """What every connection of this engine shares."""
    return {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        # Never retry: a retried append could be stored twice.
        "retry": Retry(NoBackoff(), 0),
        # A plain Redis has no maintenance notifications: spare the round trip
        # redis-py spends asking for them on every new connection.
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
        # Its version as CLIENT SETINFO says it, given: else redis-py looks it up
        # in the installed packages' metadata for every new connection (2 ms each
        # here, three before a node answers its first request).
        "driver_info": DriverInfo(lib_version=redis_version),
    }



class ChannelLost(Exception):
    """The notify channel stopped answering (no subscribe confirmation or probe)."""


Subscribers = list[tuple[OnNotify, OnResync]]


def notify(subscribers: Subscribers, data: bytes) -> None:
    """Call every ``on_notify`` for a ``"<seq> <room>"`` payload; anything
    else (a probe, garbage) is ignored."""
    seq_text, sep, room_bytes = data.partition(b" ")
    if not sep or not room_bytes or not seq_text.isdigit():
        return
    try:
        room = room_bytes.decode()
    except UnicodeDecodeError:
        return
    seq = int(seq_text)
    for on_notify, _ in subscribers:
        try:
            on_notify(room, seq)
        except Exception:
            logger.exception("notify subscriber failed")


def resync(subscribers: Subscribers, rooms: Collection[str] | None) -> None:
    """Call every ``on_resync``: notifies of ``rooms`` (None: every room) may be lost."""
    for _, on_resync in subscribers:
        try:
            if rooms is None:
                on_resync()
            else:
                on_resync(rooms)
        except Exception:
            logger.exception("resync subscriber failed")


class Probe:
    """The liveness probe of one pub/sub connection, on the loop's time.

    The subscription must be confirmed within :data:`PROBE_TIMEOUT` of the
    start; then a probe goes out at once, and again :data:`PROBE_INTERVAL`
    after the previous one was sent once it came back; each must come back
    within :data:`PROBE_TIMEOUT`. :meth:`due` raises :class:`ChannelLost` when
    a deadline is missed.
    """

    __slots__ = ("deadline", "next", "outstanding", "sent_at", "subscribed")

    def __init__(self, now: float) -> None:
        self.subscribed = False
        self.outstanding: bytes | None = None
        self.sent_at = 0.0
        self.deadline = now + PROBE_TIMEOUT  # for the subscribe confirmation
        self.next = math.inf

    def wait(self, now: float, most: float) -> float:
        """How long to wait for a message before :meth:`due` may act (0.01 to ``most`` s)."""
        wake = min(self.deadline if self.outstanding or not self.subscribed else math.inf,
                   self.next) - now
        return min(max(wake, 0.01), most)

    def confirmed(self, now: float) -> None:
        """The subscription is confirmed: probe at once (alive soon after a reconnect)."""
        self.subscribed = True
        self.next = now

    def answered(self, data: bytes) -> bool:
        """Whether ``data`` is the probe in flight (then it is back)."""
        if self.outstanding is None or data != self.outstanding:
            return False
        self.outstanding = None
        self.next = self.sent_at + PROBE_INTERVAL
        return True

    def due(self, now: float) -> bool:
        """Whether a probe goes out now (send it, then :meth:`sent`)."""
        if not self.subscribed:
            if now > self.deadline:
                raise ChannelLost("no subscribe confirmation")
        elif self.outstanding is not None:
            if now > self.deadline:
                raise ChannelLost(f"probe not back within {PROBE_TIMEOUT} s")
        elif now >= self.next:
            return True
        return False

    def sent(self, payload: bytes, now: float) -> None:
        self.outstanding = payload
        self.sent_at = now
        self.deadline = now + PROBE_TIMEOUT


class ChannelState:
    """Whether a notify channel is up, for callers that wait on it, told in the
    log only when it changes: a Redis that stays down must not flood the log."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.up = False
        self._event = asyncio.Event()
        self._reported: bool | None = None

    def set(self, up: bool, reason: str = "", *, log: bool = True) -> None:
        """The channel is ``up`` (``reason``: a detail for the log) or down
        (``reason``: why); ``log=False`` for a quiet change (a close, a session
        ending that its caller reports)."""
        self.up = up
        if up:
            self._event.set()
        else:
            self._event.clear()
        if log and self._reported is not up:
            self._reported = up
            if up:
                logger.info("%s up%s", self.name, f" ({reason})" if reason else "")
            else:
                logger.warning("%s down: %s", self.name, reason)

    async def wait_up(self, within: float) -> None:
        """Return once the channel is up, or after ``within`` s."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), within)


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
        self._subscribers: Subscribers = []
        self._probe_prefix = f"probe {node_id or 'node'}:{uuid.uuid4().hex[:12]}:"
        self._probe_count = 0
        self._state = ChannelState("notify channel")
        self._client: Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self._subscribed = False
        self._probes: set[asyncio.Task[None]] = set()

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None:
        self._subscribers.append((on_notify, on_resync))

    @property
    def alive(self) -> bool:
        return self._state.up

    async def start(self) -> None:
        if self._task is not None:
            return
        # Its own connection: a subscribed connection cannot run commands, and
        # it must not wait behind (or time out like) the command pool.
        pool = ConnectionPool.from_url(self._url, socket_timeout=None, **pool_options())
        self._client = Redis.from_pool(pool)
        self._task = asyncio.create_task(self._run(), name="redis-notify")

    async def wait_alive(self, within: float) -> bool:
        """Wait until the channel answered a probe; False if it did not ``within`` s."""
        await self._state.wait_up(within)
        return self._state.up

    async def close(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(rexc.RedisError):  # slow to close: closed all the same
                await client.aclose()
        self._state.set(False, log=False)

    async def _run(self) -> None:
        backoff = BACKOFF_MIN
        # Until closed: redis-py may swallow the cancel of a read in flight.
        while self._task is not None:
            self._subscribed = False
            try:
                await self._session()
            except (rexc.RedisError, OSError, ChannelLost) as exc:
                self._state.set(False, str(exc) or type(exc).__name__)
            except Exception:
                logger.exception("notify channel failed unexpectedly")
                self._state.set(False, "unexpected error")
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
            probe = Probe(loop.time())
            while True:
                message = await pubsub.get_message(timeout=probe.wait(loop.time(), 1.0))
                now = loop.time()
                if message is not None:
                    kind, data = message["type"], message["data"]
                    if kind == "subscribe":
                        self._subscribed = True
                        probe.confirmed(now)
                        self._resync()
                    elif kind == "message" and isinstance(data, bytes):
                        if probe.answered(data):
                            self._state.set(True)
                        else:
                            self._notify(data)
                if probe.due(now):
                    probe.sent(self._send_probe(), now)
        finally:
            self._state.set(False, log=False)
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
        notify(self._subscribers, data)

    def _resync(self) -> None:
        resync(self._subscribers, None)

    def watch(self, room: str) -> None:
        """Every notify reaches every node on one Redis: nothing to do."""

    def unwatch(self, room: str) -> None:
        """See :meth:`watch`."""

    def hears(self, room: str) -> bool:
        return self._state.up


