"""Assembling roles into a node: one aiohttp application running proxy,
recvsvr and statsvr in one process, calling each other directly.

This module and :mod:`liveroom.cli` are the only places in the core that
import roles. Background tasks belong to the node's lifecycle (aiohttp's
``cleanup_ctx``): they start before the server listens and stop after it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from aiohttp import web

from proxy import Proxy
from proxy.auth import Tokens
from proxy.context import ContextSigner
from proxy.heartbeats import Heartbeats
from proxy.operators import OperatorRoutes
from proxy.pages import Pages
from proxy.routes import errors_middleware
from proxy.site import FrontSite
from recvsvr import RoomCache, SectLimits, Sects
from recvsvr.build import Retention
from statsvr import StatsLimits, Statsvr

from .clock import Clock, SystemClock
from .errors import ConfigError, StoreUnavailable
from .lograte import ServerLog
from .metrics import Metrics
from .settings import Settings, env_of, flag_of
from .snapshot import Snapshot, sent_per_minute
from .store import Store, open_store
from .whitelist import VipList

logger = logging.getLogger("liveroom.node")

SHUTDOWN_GRACE = 5.0
"""Seconds requests in progress get to finish when a node stops."""

GC_THRESHOLDS = (50_000, 50, 100)
"""The cyclic collector's thresholds in a server process. With Python's default
(a young collection every 700 allocations) a node under load collects a
hundred times a second and, every few seconds, scans its whole heap (rooms,
members, connections): measured, that was a sixth of the CPU of a plain
fan-out. Almost everything a poll allocates is freed by reference counting
before a collection could see it; the rare cycles wait a little longer."""


@dataclass
class Node:
    settings: Settings
    clock: Clock
    store: Store
    metrics: Metrics
    vip_list: VipList
    recvsvr: Sects
    """The node's recvsvr: the normal and the vip sect behind one reader."""
    statsvr: Statsvr
    proxy: Proxy
    operators: OperatorRoutes
    announce: Callable[[Node], None] | None = None
    generated: dict[str, str] = field(default_factory=dict)
    """Tokens this node made up because none was configured (to print them)."""

    async def health(self) -> str | None:
        try:
            await asyncio.wait_for(self.store.ping(), 2.0)
        except (StoreUnavailable, TimeoutError):
            return "the store is unreachable"
        if not self.store.notifier.alive:
            return "the notify channel is down"
        return None


NODE = web.AppKey("node", Node)


def build_node(settings: Settings, clock: Clock | None = None,
               announce: Callable[[Node], None] | None = None) -> Node:
    clock = clock or SystemClock()
    store = open_store(settings.store, settings.log_policy(), clock, node_id=settings.name)
    metrics = Metrics()
    retention = Retention(
        normal_keep=settings.normal_keep,
        important_keep=settings.important_keep,
        important_window_ms=int(settings.important_window * 1000),
        index_keep=settings.index_keep,
    )
    # Reads push a room's expiry back well before it can pass.
    touch_interval = min(settings.touch_interval, settings.room_ttl / 4)
    normal = SectLimits(
        fallback_interval=settings.fallback_pull_interval,
        read_window=settings.read_window,
        batch=settings.pull_batch,
        concurrency=settings.pull_concurrency,
        touch_interval=touch_interval,
        rooms_max=settings.rooms_max,
        first_pull_timeout=settings.first_pull_timeout,
    )
    vip = replace(normal, batch=settings.vip_pull_batch,
                  concurrency=settings.vip_pull_concurrency)
    vip_list = VipList(store.operators, clock, refresh=settings.vip_refresh)
    cache = Sects(RoomCache(store.log, clock, metrics, retention=retention, limits=normal,
                            notifier=store.notifier),
                  RoomCache(store.log, clock, metrics, retention=retention, limits=vip,
                            name="vip", notifier=store.notifier),
                  vip_list.is_vip, clock, metrics=metrics)
    vip_list.on_change(cache.moved)
    statsvr = Statsvr(store.stats, clock, settings.name, is_vip=vip_list.is_vip,
                      metrics=metrics, operators=store.operators,
                      limits=StatsLimits(
                          online_ttl=settings.online_ttl,
                          vip_shards=settings.vip_shards,
                          viewers_threshold=settings.viewers_threshold,
                          history_ttl=settings.history_ttl,
                          write_every=settings.stats_write_every,
                          merge_every=settings.merge_every,
                          keep_for=settings.read_window,
                      ),
                      holding=lambda: (len(cache), proxy.holds.count),
                      rate=lambda room: _rate(cache.peek(room), clock, settings.normal_keep))
    # One process, one statsvr node: every heartbeat is ours.
    heartbeats = Heartbeats([statsvr], clock, flush_every=settings.heartbeat_flush)
    generated: dict[str, str] = {}
    tokens = Tokens(admin=_configured(settings, generated, "admin_token", settings.admin_token),
                    publisher=_configured(settings, generated, "publisher_token",
                                          settings.publisher_token))
    signer = ContextSigner(_configured(settings, generated, "secret", settings.secret))
    proxy = Proxy(settings=settings, reader=cache, heartbeats=heartbeats, stats=statsvr,
                  is_vip=vip_list.is_vip, log=store.log, tokens=tokens, signer=signer,
                  clock=clock, metrics=metrics, health=lambda: node.health())
    operators = OperatorRoutes(store.operators, tokens, clock, settings,
                               stats=statsvr, reader=cache, note_vip=vip_list.note)
    node = Node(settings, clock, store, metrics, vip_list, cache, statsvr, proxy, operators,
                announce, generated)
    return node


def _rate(snap: Snapshot | None, clock: Clock, normal_keep: int) -> float | None:
    """A room's messages a minute from the snapshot this node holds, if any."""
    if snap is None:
        return None
    return round(sent_per_minute(snap, int(clock.time() * 1000), normal_keep), 1)


def _configured(settings: Settings, generated: dict[str, str], name: str,
                configured: str | None) -> str:
    """A token or the context secret: as configured, or made up for the memory
    engine alone (one process: nobody else needs to know it; tokens made up
    are printed). Every node over a shared store must be given the same ones:
    values kept in the store split the nodes when the store loses them (a
    restart without persistence) and the next node makes up new ones."""
    if configured:
        return configured
    if settings.shared_store:
        raise ConfigError(name, f"a node over a shared store needs {name} configured "
                                f"({flag_of(name)} or {env_of(name)})")
    value = secrets.token_urlsafe(24)
    if name != "secret":
        generated[name] = value
    return value


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    node = app[NODE]
    await node.store.start()
    try:
        # Which sect serves a room is known before the first poll is answered.
        await node.vip_list.start()
        node.store.notifier.subscribe(node.recvsvr.on_notify, node.recvsvr.on_resync)
        await node.recvsvr.start()
        await node.statsvr.start()
        await node.proxy.start()
        if node.announce is not None:
            node.announce(node)
        yield
    finally:
        await node.proxy.stop()
        await node.vip_list.stop()
        await node.recvsvr.stop()
        await node.statsvr.stop()
        await node.store.close()


async def _release_held_polls(app: web.Application) -> None:
    """Answer held polls, then let the front's requests in progress finish
    (within the shutdown grace) and close its connections."""
    proxy = app[NODE].proxy
    proxy.holds.release_all()
    await proxy.front.shutdown(SHUTDOWN_GRACE)


def build_app(settings: Settings, clock: Clock | None = None,
              announce: Callable[[Node], None] | None = None) -> web.Application:
    """The aiohttp application of one node running every role."""
    node = build_node(settings, clock, announce)
    app = web.Application(middlewares=[errors_middleware],
                          client_max_size=node.proxy.sends.body_limit)
    app[NODE] = node
    node.proxy.add_routes(app)
    node.operators.add_routes(app)
    Pages().add_routes(app)
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_release_held_polls)
    app.on_response_prepare.append(_our_server_header)
    return app


async def _our_server_header(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp's answers name liveroom, as the front's do (not Python's version)."""
    response.headers["Server"] = "liveroom"


def node_runner(app: web.Application) -> web.AppRunner:
    """The runner of a node's application (the lifecycle and aiohttp's connections)."""
    node = app[NODE]
    # No automatic decompression: a compressed body is refused (415) before
    # anything of it is inflated. aiohttp's own errors (a malformed request
    # after the front handed the connection over) are one throttled line.
    return web.AppRunner(app, handler_cancellation=True,
                         keepalive_timeout=node.settings.keepalive_timeout,
                         shutdown_timeout=SHUTDOWN_GRACE, access_log=None,
                         auto_decompress=False,
                         logger=ServerLog(logging.getLogger("aiohttp.server")))


def node_site(runner: web.AppRunner, host: str | None, port: int, *,
              sock: socket.socket | None = None, reuse_port: bool = False) -> FrontSite:
    """The node's listening socket: the front, handing aiohttp what is not a
    poll or a send (call after ``runner.setup()``, then ``start()``)."""
    return FrontSite(runner, runner.app[NODE].proxy.front, host, port, sock=sock,
                     reuse_port=reuse_port)


def new_loop() -> asyncio.AbstractEventLoop:
    """A uvloop event loop (the stdlib's where uvloop is missing)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


async def serve(settings: Settings, *, announce: Callable[[Node], None] | None = None,
                reuse_port: bool = False, stop: asyncio.Event | None = None,
                freeze: bool = False) -> None:
    """Serve one node on ``settings.host:settings.port`` until ``stop`` is set
    (or SIGTERM / SIGINT arrive, when ``stop`` is not given).

    ``announce`` runs once the node listens. Shutdown is graceful: the socket
    stops accepting, held polls are answered (empty, same cursors), requests in
    progress get :data:`SHUTDOWN_GRACE` seconds, then the node's tasks stop.
    ``reuse_port`` lets several processes listen on one port (``SO_REUSEPORT``).
    ``freeze`` moves what start-up built out of the collector's sight
    (``gc.freeze``): the process's own server, not a test's.
    """
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
    ready: list[Node] = []
    runner = node_runner(build_app(settings, announce=ready.append))
    await runner.setup()
    try:
        await node_site(runner, settings.host, settings.port, reuse_port=reuse_port).start()
        if freeze:
            gc.collect()
            gc.freeze()
        if announce is not None:
            announce(ready[0])
        await stop.wait()
    finally:
        await runner.cleanup()


def raise_open_files() -> int:
    """Raise this process's open-file limit to its hard limit (every held
    poll keeps a connection open); return the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # some systems cap it below RLIM_INFINITY
            logger.warning("could not raise the open-file limit above %d", soft)
    return soft


def run(settings: Settings, *, announce: Callable[[Node], None] | None = None,
        reuse_port: bool = False) -> None:
    """:func:`serve` on a new uvloop loop, until SIGTERM or SIGINT, with the
    collector tuned for a server (:data:`GC_THRESHOLDS`) and the open-file
    limit raised to the hard limit."""
    gc.set_threshold(*GC_THRESHOLDS)
    raise_open_files()
    loop = new_loop()
    try:
        loop.run_until_complete(serve(settings, announce=announce, reuse_port=reuse_port,
                                      freeze=True))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
