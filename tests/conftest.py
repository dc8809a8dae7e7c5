"""Shared fixtures: a real redis-server on a free port, a real Redis Cluster,
the fake clock, the stores.

Redis tests run against the ``redis-server`` binary (no Docker here); the
session starts one on a free port and every test that asks for ``redis_url``
gets it running and flushed. Fault tests stop and restart it on the same port.
The store contract suites (:data:`CLUSTER_SUITES`) also run on a local
cluster of six nodes (:mod:`redis_cluster`), started once when first asked
for and flushed before each test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from browser import browser, served  # noqa: F401  (fixtures for every test module)
from redis_cluster import LocalCluster
from support import free_port

from liveroom.clock import FakeClock
from liveroom.store import LogPolicy, Store, open_store


class RedisServer:
    """A ``redis-server`` process of the test session, on a fixed port."""

    def __init__(self, binary: str, port: int, log_dir: Path) -> None:
        self.binary = binary
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self._log_path = log_dir / f"redis-{port}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, wait: float = 10.0) -> None:
        """Start it (empty: no persistence) and wait until it answers PING."""
        if self.running:
            return
        with self._log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--daemonize", "no"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self._log_path}")
            try:
                with redis.Redis(port=self.port, socket_connect_timeout=0.2,
                                 socket_timeout=0.5) as client:
                    client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"redis-server did not answer; see {self._log_path}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """Kill it and wait until it is gone (clients see their connections drop)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def flushall(self) -> None:
        with redis.Redis(port=self.port) as client:
            client.flushall()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not on PATH: run scripts/install-test-deps")
    with tempfile.TemporaryDirectory(prefix="liveroom-redis-") as log_dir:
        server = RedisServer(binary, free_port(), Path(log_dir))
        server.start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's Redis, running (again, if a test stopped it) and empty."""
    redis_server.start()
    redis_server.flushall()
    return redis_server.url


@pytest.fixture
def no_liveroom_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``LIVEROOM_*`` variable of the machine leaks into the test."""
    for name in list(os.environ):
        if name.startswith("LIVEROOM_"):
            monkeypatch.delenv(name)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


TEST_POLICY = LogPolicy(log_cap=50, important_keep=5, important_window_ms=60_000,
                        important_hard_cap=1000, room_ttl_ms=86_400_000,
                        dedup_ttl_ms=600_000)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A Redis Cluster of 3 masters and 3 replicas for the session."""
    with tempfile.TemporaryDirectory(prefix="liveroom-cluster-") as folder:
        cluster = LocalCluster(Path(folder))
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture
def cluster_url(redis_cluster: LocalCluster) -> str:
    """The session's cluster, healthy (again, if a test failed a master over or
    left a node dead) and empty."""
    redis_cluster.revive()
    redis_cluster.wait_healthy()
    redis_cluster.flushall()
    return redis_cluster.url


ENGINES = ("memory", "redis", "cluster")
"""Every engine: ``cluster`` is the redis engine on a Redis Cluster."""
CLUSTER_SUITES = frozenset({"test_store_contract", "test_stats_store", "test_counters_store",
                            "test_moderation_store", "test_review_store",
                            "test_filters_store", "test_operators_store", "test_outbox_store",
                            "test_rate_limits", "test_presence", "test_recall"})
"""The store contract suites: they run on all :data:`ENGINES`, every other
test that takes ``engine_url`` on memory and one Redis."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_url" in metafunc.fixturenames:
        suite = metafunc.module.__name__.rpartition(".")[2]
        engines = ENGINES if suite in CLUSTER_SUITES else ENGINES[:2]
        if metafunc.definition.get_closest_marker("redis_engines") is not None:
            engines = tuple(e for e in engines if e != "memory")  # what only Redis has
        metafunc.parametrize("engine_url", engines, indirect=True)


@pytest.fixture
def engine_url(request: pytest.FixtureRequest) -> str:
    return fresh_engine_url(request.param, request)


def fresh_engine_url(engine: str, request: pytest.FixtureRequest) -> str:
    """The store URL of ``engine``, running and empty; also for a test that
    opens stores itself (a hypothesis test runs many examples in one fixture
    scope)."""
    if engine == "memory":
        return "memory"
    if engine == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        cluster.wait_healthy()
        cluster.flushall()
        return cluster.url
    server: RedisServer = request.getfixturevalue("redis_server")
    server.start()
    server.flushall()
    return server.url


async def hearing(engine: Store, *rooms: str, within: float = 5.0) -> None:
    """Watch ``rooms`` and wait until their notifies reach this store's node (a
    cluster subscribes each room's channel; other engines hear every room)."""
    for room in rooms:
        engine.notifier.watch(room)
    deadline = time.monotonic() + within
    while not all(engine.notifier.hears(room) for room in rooms):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rooms {rooms} not heard within {within} s")
        await asyncio.sleep(0.01)


class Notified:
    """Every notify a store delivers to one subscriber, in order (``got``)."""

    def __init__(self, engine: Store) -> None:
        self.got: list[tuple[str, int]] = []
        self._arrived = asyncio.Event()
        engine.notifier.subscribe(self._on_notify, lambda rooms=None: None)

    def _on_notify(self, room: str, seq: int) -> None:
        self.got.append((room, seq))
        self._arrived.set()

    async def until(self, count: int, within: float = 5.0) -> None:
        """Wait until ``count`` notifies arrived in all (a real Redis delivers
        them asynchronously)."""
        async with asyncio.timeout(within):
            while True:
                self._arrived.clear()
                if len(self.got) >= count:
                    return
                await self._arrived.wait()


@contextlib.asynccontextmanager
async def opened(url: str, policy: LogPolicy, clock: FakeClock) -> AsyncIterator[Store]:
    """A started store, closed on exit."""
    engine = open_store(url, policy, clock, node_id="test")
    await engine.start()
    try:
        yield engine
    finally:
        await engine.close()


class RoundTrips:
    """Counts the round trips a redis engine's client makes (``client``: a
    part's, e.g. ``store.counters._client``): each pipeline it sends and
    each command sent alone (the real client still runs them, on the real
    server)."""

    def __init__(self, client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        pipeline, execute = client.pipeline, client.execute_command

        def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return pipeline(*args, **kwargs)

        async def counted_execute(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await execute(*args, **kwargs)

        monkeypatch.setattr(client, "pipeline", counted_pipeline)
        monkeypatch.setattr(client, "execute_command", counted_execute)


@pytest.fixture
async def store(engine_url: str, fake_clock: FakeClock) -> AsyncIterator[Store]:
    """A started store of each engine with :data:`TEST_POLICY`."""
    async with opened(engine_url, TEST_POLICY, fake_clock) as engine:
        yield engine


@pytest.fixture
async def memory_store(fake_clock: FakeClock) -> AsyncIterator[Store]:
    """The memory engine alone, for what only it does (expiry on the fake clock)."""
    async with opened("memory", TEST_POLICY, fake_clock) as engine:
        yield engine


@pytest.fixture
async def redis_store(redis_url: str, fake_clock: FakeClock) -> AsyncIterator[Store]:
    """The redis engine alone, for what only it does (keys, many processes)."""
    async with opened(redis_url, TEST_POLICY, fake_clock) as engine:
        yield engine


def raw_client(url: str) -> redis.asyncio.Redis:
    """A plain client of a redis engine's server, or of its cluster."""
    if url.startswith("redis+cluster://"):
        host, _, port = url.removeprefix("redis+cluster://").split(",")[0].partition(":")
        # Typed as the plain client: the tests' commands name one room's keys.
        return redis.asyncio.RedisCluster(host=host, port=int(port))  # type: ignore[return-value]
    return redis.asyncio.Redis.from_url(url)


async def dumped(client: redis.asyncio.Redis, match: str = "*") -> dict[bytes, bytes]:
    """The keys matching ``match`` as DUMP gives them: what a Redis restart
    that loses its last writes keeps (see :func:`restored`)."""
    return {key: await client.dump(key) async for key in client.scan_iter(match)}


async def restored(client: redis.asyncio.Redis, saved: dict[bytes, bytes],
                   match: str = "*") -> None:
    """The keys matching ``match`` as they were when :func:`dumped` saved
    them: the writes since are lost, as by such a restart."""
    gone = [key async for key in client.scan_iter(match)]
    if gone:
        await client.delete(*gone)
    for key, data in saved.items():
        await client.restore(key, 0, data)


@pytest.fixture
async def raw_redis(engine_url: str) -> AsyncIterator[redis.asyncio.Redis | None]:
    """A plain client of the redis engine's server (None for the memory engine)."""
    if engine_url == "memory":
        yield None
        return
    client = raw_client(engine_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client for end-to-end tests."""
    async with aiohttp.ClientSession() as client:
        yield client


# -- markers: what a test needs, so a run can pick (scripts/test -m "not slow") ----------

BROWSER_SUITES = frozenset({"test_room_page", "test_pages", "test_dashboard"})
NODE_SUITES = frozenset({"test_liveroom_js"})
SLOW_SUITES = frozenset({"test_api_fuzz", "test_redis_faults", "test_cluster",
                         "test_workers", "test_serve_process", "test_front_streams"})
"""Suites of whole processes, faults or generated examples: each takes more
than a few seconds (CI prints the slowest tests, ``--durations``)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by what it needs: ``cluster`` (a Redis Cluster),
    ``browser`` (Chromium), ``node`` (Node.js or npm), ``slow``."""
    for item in items:
        suite = item.module.__name__.rpartition(".")[2] if item.module else ""
        names = getattr(item, "fixturenames", ())
        params = getattr(getattr(item, "callspec", None), "params", {})
        if ("redis_cluster" in names or "cluster_url" in names
                or params.get("engine_url") == "cluster"):
            item.add_marker(pytest.mark.cluster)
        if suite in BROWSER_SUITES or "browser" in names:
            item.add_marker(pytest.mark.browser)
        if suite in NODE_SUITES:
            item.add_marker(pytest.mark.node)
        if suite in SLOW_SUITES:
            item.add_marker(pytest.mark.slow)
