"""What a node shows to whoever reaches its port: ``/metrics`` only to its
token's bearer (or the admin token) unless made public, and ``/healthz`` at
the cost of one store check a second however often it is asked.

(Member lists in ticket mode: ``tests/hostile/test_tickets.py``; the refusal of weak
or equal secrets over Redis: the same file.)
"""

from __future__ import annotations

import asyncio

import aiohttp
import redis.asyncio as aioredis
from conftest import RedisServer
from support import ADMIN, ADMIN_HEADERS, running_node


async def status_of(session: aiohttp.ClientSession, url: str,
                    token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with session.get(url, headers=headers) as resp:
        await resp.read()
        return resp.status


async def test_metrics_are_private_unless_made_public() -> None:
    async with aiohttp.ClientSession() as session:
        async with running_node() as node:  # no metrics token: the admin token reads
            url = f"{node.url}/metrics"
            assert await status_of(session, url) == 401
            assert await status_of(session, url, "guess") == 401
            assert await status_of(session, url, ADMIN) == 200
        async with running_node(metrics_token="m" * 32) as node:
            url = f"{node.url}/metrics"
            assert await status_of(session, url, ADMIN) == 401  # its own token only
            assert await status_of(session, url, "m" * 32) == 200
        async with running_node(metrics_public=True) as node:
            assert await status_of(session, f"{node.url}/metrics") == 200


async def pings(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_ping", {}).get("calls", 0))


async def test_a_flood_of_health_checks_costs_the_store_one_check_a_second(
        redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    connector = aiohttp.TCPConnector(limit=50)
    try:
        async with running_node(redis_url) as node, \
                aiohttp.ClientSession(connector=connector) as session:
            url = f"{node.url}/healthz"
            assert await status_of(session, url) == 200
            loop = asyncio.get_running_loop()
            before, started = await pings(client), loop.time()
            statuses = await asyncio.gather(*(status_of(session, url) for _ in range(2000)))
            took = loop.time() - started
            spent = await pings(client) - before
            assert statuses == [200] * 2000
            # One check a second of the flood (and the notifier's own probes,
            # one a few seconds), not one a request.
            assert spent <= took + 4, (spent, took)
            async with session.get(f"{node.url}/metrics", headers=ADMIN_HEADERS) as resp:
                assert resp.status == 200
    finally:
        await client.aclose()


async def test_health_still_turns_503_within_seconds_when_the_store_dies(
        redis_server: RedisServer, redis_url: str) -> None:
    async with running_node(redis_url) as node, aiohttp.ClientSession() as session:
        url = f"{node.url}/healthz"
        assert await status_of(session, url) == 200
        redis_server.stop()
        try:
            async with asyncio.timeout(10):
                while await status_of(session, url) != 503:
                    await asyncio.sleep(0.1)
        finally:
            redis_server.start()
