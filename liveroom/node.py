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
from functools import partial
from typing import Any

from aiohttp import web

from proxy import FrontSite, Proxy
from recvsvr import Recvsvr
from statsvr import Statsvr

from .clock import Clock, SystemClock
from .errors import ConfigError, StoreUnavailable
from .events import Events
from .lograte import ServerLog
from .metrics import Metrics
from .review import ReviewQueue
from .settings import Settings, env_of, flag_of
from .store import Store, open_store
from .webhooks import Webhooks
from .whitelist import VipList

logger = logging.getLogger("liveroom.node")

GC_THRESHOLDS = (50_000, 50, 100)
"""The cyclic collector's thresholds in a server process. With Python's default
(a young collection every 700 allocations) a node under load collects a
hundred times a second and, every few seconds, scans its whole heap (rooms,
members, connections): measured, that was a sixth of the CPU of a plain
fan-out. Almost everything a poll allocates is freed by reference counting
before a collection could see it; the rare cycles wait a little longer."""


@dataclass
class Node:
    """One node's roles, the store they share, and the node's own parts."""

    settings: Settings
    """As given, with the tokens and the secret this node made up (memory only)."""
    clock: Clock
    store: Store
    metrics: Metrics
    vip_list: VipList
    recvsvr: Recvsvr
    statsvr: Statsvr
    proxy: Proxy
    review: ReviewQueue
    """Where held messages wait for a moderator (the proxy's too)."""
    events: Events
    """Where the roles' actions write their events (to the store's outbox)."""
    webhooks: Webhooks | None
    """This node's part in delivering them (``None``: no ``--webhook``)."""
    announce: Callable[[Node], None] | None = None
    generated: dict[str, str] = field(default_factory=dict)
    """Tokens this node made up because none was configured (to print them)."""


async def store_health(store: Store) -> str | None:
    """``None`` when the store answers and its notify channel is up, else
    what is wrong (a ping waits 2 s at most)."""
    try:
        await asyncio.wait_for(store.ping(), 2.0)
    except (StoreUnavailable, TimeoutError):
        return "the store is unreachable"
    if not store.notifier.alive:
        return "the notify channel is down"
    return None


NODE = web.AppKey("node", Node)


def build_node(settings: Settings, clock: Clock | None = None,
               announce: Callable[[Node], None] | None = None, *,
               store: Store | None = None) -> Node:
    """Build the roles ``settings`` describe over one store and wire them
    through their entry points: recvsvr reads the store's log, statsvr keeps
    the figures, the proxy reads both and answers HTTP. ``store``: one already
    built (several nodes of one process over one memory engine, as the
    simulator runs them), else the one ``settings.store`` names."""
    clock = clock or SystemClock()
    settings, generated = made_up_secrets(settings)
    if store is None:
        store = open_store(settings.store, settings.log_policy(), clock,
                           node_id=settings.name)
    metrics = Metrics()
    # Every action that has an event writes it through ``events``; with
    # --webhook this node also takes its turn delivering them.
    events = Events(store.outbox if settings.webhook else None, clock, metrics=metrics)
    webhooks = Webhooks(settings, store.outbox, clock, metrics=metrics, sweep=events.sweep) \
        if settings.webhook else None
    if webhooks is not None:
        events.on_added.append(webhooks.wake)
    vip_list = VipList(store.operators, clock, vip_refresh=settings.vip_refresh,
                       rule=settings.vip_rule(), metrics=metrics, events=events)
    recvsvr = Recvsvr.configured(settings, store.log, store.notifier, vip_list.is_vip,
                                 clock, metrics)
    vip_list.on_change(recvsvr.moved)
    statsvr = Statsvr.configured(settings, store.stats, store.operators, vip_list.is_vip,
                                 clock, metrics, counters=store.counters,
                                 rooms_cached=recvsvr.__len__,
                                 rate=recvsvr.rate)
    # Where the send path holds what a word filter or the send hook keeps
    # back, and the moderators find it.
    review = ReviewQueue(store.review, metrics=metrics, events=events)
    proxy = Proxy(settings, reader=recvsvr, stats=statsvr, sink=statsvr,
                  vip_list=vip_list, log=store.log, operators=store.operators,
                  counters=store.counters, moderation=store.moderation, review=review,
                  filters=store.filters, clock=clock, metrics=metrics,
                  health=partial(store_health, store), forget=statsvr.forget,
                  events=events, outbox=store.outbox, webhooks=webhooks)
    statsvr.count_held_polls(proxy.held_polls)
    # A renewed epoch is the same broadcast: its likes and top givers go on.
    recvsvr.on_renewed(proxy.renewed)
    # The automatic vip rule reads the merged trusted counts, not the online ones.
    vip_list.observe(statsvr.merge.trusted_counts, statsvr.merge.trusted)
    return Node(settings, clock, store, metrics, vip_list, recvsvr, statsvr, proxy, review,
                events, webhooks, announce, generated)


def made_up_secrets(settings: Settings) -> tuple[Settings, dict[str, str]]:
    """``settings`` with the tokens and the context secret each as
    configured, or made up for the memory engine alone (one process: nobody
    else needs to know it), and the tokens made up (to print them). Every
    node over a shared store must be given the same ones: values kept in the
    store split the nodes when the store loses them (a restart without
    persistence) and the next node makes up new ones."""
    unset = settings.unset_secrets()
    if unset and settings.shared_store:
        name = unset[0]
        raise ConfigError(name, f"a node over a shared store needs {name} configured "
                                f"({flag_of(name)} or {env_of(name)})")
    made: dict[str, Any] = {name: secrets.token_urlsafe(24) for name in unset}
    generated = {name: value for name, value in made.items() if name != "secret"}
    return replace(settings, **made), generated


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
        if node.webhooks is not None:
            await node.webhooks.start()
        if node.announce is not None:
            node.announce(node)
        yield
    finally:
        if node.webhooks is not None:
            await node.webhooks.stop()
        await node.proxy.stop()
        await node.vip_list.stop()
        await node.recvsvr.stop()
        await node.statsvr.stop()
        await node.store.close()


def build_app(settings: Settings, clock: Clock | None = None,
              announce: Callable[[Node], None] | None = None) -> web.Application:
    """The aiohttp application of one node running every role."""
    node = build_node(settings, clock, announce)
    app = node.proxy.application()
    app[NODE] = node
    app.cleanup_ctx.append(_lifecycle)
    return app


def node_runner(app: web.Application) -> web.AppRunner:
    """The runner of a node's application (the lifecycle and aiohttp's connections)."""
    node = app[NODE]
    # No automatic decompression: a compressed body is refused (415) before
    # anything of it is inflated. aiohttp's own errors (a malformed request
    # after the front handed the connection over) are one throttled line.
    return web.AppRunner(app, handler_cancellation=True,
                         keepalive_timeout=node.settings.keepalive_timeout,
                         shutdown_timeout=node.settings.shutdown_grace, access_log=None,
                         auto_decompress=False,
                         logger=ServerLog(logging.getLogger("aiohttp.server")))


def node_site(runner: web.AppRunner, host: str | None, port: int, *,
              sock: socket.socket | None = None, reuse_port: bool = False) -> FrontSite:
    """The node's listening socket: the front, handing aiohttp what is not a
    poll, a send or a like (call after ``runner.setup()``, then ``start()``)."""
    return runner.app[NODE].proxy.site(runner, host, port, sock=sock, reuse_port=reuse_port)


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
    progress get ``settings.shutdown_grace`` seconds, then the node's tasks stop.
    ``reuse_port`` lets several processes listen on one port (``SO_REUSEPORT``).
    ``freeze`` moves what start-up built out of the collector's sight
    (``gc.freeze``) and turns the collector on (:func:`run` starts with it
    off): the process's own server, not a test's. No collection comes first:
    at that point one found 0 to 5 unreachable objects of some 48 000 and took
    15 ms of the start, before the first request could be answered (issue 33).
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
            gc.freeze()
            gc.enable()
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
    limit raised to the hard limit.

    The collector is off until the node listens and :func:`serve` has frozen
    what start-up built (``liveroom serve`` turns it off before it imports
    this module): start-up makes hardly any garbage (0 to 5 unreachable
    objects of 48 000), and the collections its allocations would trigger,
    scanning objects that live as long as the process, cost some 10 ms of it.
    """
    gc.disable()
    gc.set_threshold(*GC_THRESHOLDS)
    raise_open_files()
    loop = new_loop()
    try:
        loop.run_until_complete(serve(settings, announce=announce, reuse_port=reuse_port,
                                      freeze=True))
    finally:
        gc.enable()  # serve() turned it on, unless it failed before it listened
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
