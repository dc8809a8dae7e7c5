"""Every route of the cost table attacked alike (issue 44): the suite reads
``proxy/route_costs.py`` and knows no route by name, so a new row is
attacked as soon as it exists.

For each row, on memory in ``open`` mode and on Redis in ``ticket`` mode:

- **made-up rooms and uids**: a flood, each request a new room and uid, with
  the credential the row's caller has (an any-room ticket, or a uid of its
  own) or, for the backend's and the operators' rows, none. No answer is a
  5xx; nothing is written to the store for a made-up room unless the row
  may create rooms (then no more than the new-room window of one address);
  the node keeps at most the row's ``keeps`` bytes per request; and a real
  listener is served after it (a message reaches its poll, its like counts);
- **a reset once the request is read**, for every row that writes: whatever
  the client does then, the write runs to its end (nothing left in flight,
  no error logged), and the same bounds hold;
- **clients that never read**, for every row that reads: pipelined requests
  with nothing taken; the node lets them go by its write deadline;
- **a flood past the limits, from one address**: its windows lowered, one
  uid's requests past them get 429 with ``Retry-After``, never a 5xx, and
  another client (another address) is served.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from route_attacks import (
    ROWS,
    TICKET_KEY,
    Credentials,
    exchange,
    is_public,
    request_bytes,
    reset_after,
    stalled,
)
from support import ADMIN, PUBLISHER, Running, running_node

from liveroom.clock import FakeClock
from liveroom.ratelimit import Window, parse_windows
from liveroom.settings import Settings
from proxy.route_costs import ANY, CREATES, EXISTS, RouteCost

MODES = ("memory-open", "redis-ticket")
FLOOD = 40
"""Made-up rooms per row and mode (the slow lane's bench goes further)."""


NOISE = 2048
"""Bytes a request seems to keep that are not the node's state: the event
loop's cancelled timers (kept until they fall due), the URL parser's and
the allocator's caches, all bounded; 150 to 1 500 bytes a request over a
flood of 40 distinct paths (a made-up room's 1.8 KiB of likes state, the
finding, came on top of its room cache entry)."""


def _id(row: RouteCost) -> str:
    return row.route.replace(" ", "_")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def attacked(mode: str, request: pytest.FixtureRequest,
                   **overrides: Any) -> AsyncIterator[tuple[Running, Credentials, str | None]]:
    """A node in ``mode``, the attacker's credentials, and the Redis URL (None: memory)."""
    clock = FakeClock() if overrides.pop("fake_clock", False) else None
    # New-room windows low enough for a flood of 40 to pass them.
    overrides = {"rooms_per_uid": parse_windows("3/m"),
                 "rooms_per_address": parse_windows("5/m"), **overrides}
    if mode == "memory-open":
        async with running_node(clock=clock, **overrides) as node:
            yield node, Credentials(ADMIN, PUBLISHER), None
        return
    url = str(request.getfixturevalue("redis_url"))
    async with running_node(url, clock, auth="ticket", ticket_keys=(TICKET_KEY,),
                            **overrides) as node:
        now = clock.time() if clock is not None else time.time()
        yield node, Credentials(ADMIN, PUBLISHER, ticket_mode=True, now=now), url


def _port(node: Running) -> int:
    return int(node.url.rpartition(":")[2])


async def _store_keys(url: str | None, node: Running, marker: str) -> set[str]:
    """Store keys naming ``marker`` (a made-up room's prefix)."""
    if url is None:
        return {room for room in await _memory_rooms(node) if marker in room}
    redis = aioredis.from_url(url)
    async with redis:
        return {key.decode() async for key in redis.scan_iter(match=f"*{marker}*")}


async def _memory_rooms(node: Running) -> set[str]:
    """Rooms the memory engine holds anything of: every table of every part
    of the store, keyed by room (or by a tuple that starts with one)."""
    store: Any = node.node.store
    found: set[str] = set()
    for part in (store.log, store.counters, store.moderation, store.operators, store.stats):
        # dir(), not vars(): a compiled part (mypyc) is a native object without a __dict__.
        for name in dir(part):
            value = getattr(part, name, None)
            if name.startswith("__") or callable(value):
                continue
            table = getattr(value, "_items", value)
            if not isinstance(table, dict):
                continue
            for key in table:
                first = key[0] if isinstance(key, tuple) and key else key
                if isinstance(first, str):
                    found.add(first)
    return found


def _creates_at_most(row: RouteCost, settings: Settings) -> int:
    """Rooms a flood from one address may create through ``row``."""
    if row.room != CREATES or not is_public(row):
        return 0
    windows: tuple[Window, ...] = settings.rooms_per_address or settings.rooms_per_uid
    return min((w.limit for w in windows), default=FLOOD)


async def _probe(node: Running, creds: Credentials) -> None:
    """A real listener is served: a message reaches its poll, its like counts."""
    room = "probe-room"
    publisher = {"Authorization": f"Bearer {PUBLISHER}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{node.url}/v1/rooms/{room}/messages", headers=publisher,
                                json={"uid": "host", "body": "still here"}) as resp:
            assert resp.status == 201, await resp.text()
        headers = creds.header("listener", "prober")
        uid = "" if creds.ticket_mode else "uid=prober&"
        query = f"{uid}recent=5"
        for _ in range(3):  # a node that held the room as absent learns it exists
            async with session.get(f"{node.url}/v1/rooms/{room}/poll?{query}",
                                   headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                answer = await resp.json()
            if "still here" in json.dumps(answer):
                break
            query = (f"{uid}epoch={answer['epoch']}&seq={answer['seq']}&iseq={answer['iseq']}"
                     f"&ctx={answer['ctx']}&timeout=5")
        assert "still here" in json.dumps(answer)
        doc = {"count": 1} if creds.ticket_mode else {"uid": "prober", "count": 1}
        async with session.post(f"{node.url}/v1/rooms/{room}/likes", json=doc,
                                headers=headers) as resp:
            assert resp.status == 202, await resp.text()


def _uid(creds: Credentials, n: int) -> str:
    """The flood's nth uid: made up in ``open`` mode; in ``ticket`` mode the
    one ticket's (the attacker holds one any-room ticket: each ticket is
    the backend's to give, and a ticket the node verified is kept in its
    bounded cache)."""
    return "mallory" if creds.ticket_mode else f"mallory{n}"


def _retained() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def _settled(node: Running) -> None:
    """Writes whose client left have ended (the front's and aiohttp's)."""
    proxy = node.node.proxy
    async with asyncio.timeout(10):
        while proxy.front.finishing or proxy.bounds.finishing:
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("row", ROWS, ids=_id)
async def test_made_up_rooms_and_uids_cost_what_the_row_allows(
        row: RouteCost, mode: str, request: pytest.FixtureRequest) -> None:
    async with attacked(mode, request) as (node, creds, url):
        port = _port(node)
        given = creds if is_public(row) else None
        marker = "made-up-"
        statuses: list[int] = []
        # Warm up with a flood like the measured one: what the first requests
        # build once (lazy tables, the allocator's arenas) is not counted.
        for n in range(FLOOD):
            await exchange(port, request_bytes(row, f"warm-{n}", _uid(creds, n), given))
        # pytest keeps every log record for its report: not the node's memory.
        logging.disable(logging.INFO)
        tracemalloc.start()
        try:
            before = _retained()
            for n in range(FLOOD):
                status, headers, body = await exchange(port, request_bytes(
                    row, f"{marker}{n}", _uid(creds, n), given))
                assert status < 500 or (status == 503 and "retry-after" in headers), (
                    status, body)
                statuses.append(status)
            del body, headers  # the client's copy of the last answer is not the node's
            await _settled(node)
            kept = (_retained() - before) / FLOOD
        finally:
            tracemalloc.stop()
            logging.disable(logging.NOTSET)
        keys = await _store_keys(url, node, marker)
        rooms = {key.split("{")[-1].split("}")[0] if "{" in key else key for key in keys}
        allowed = _creates_at_most(row, node.node.settings)
        assert len(rooms) <= allowed, (row.route, sorted(rooms)[:5], statuses)
        if row.room in (EXISTS, ANY) and is_public(row):
            assert not rooms, (row.route, sorted(keys)[:5])
        assert kept <= row.keeps + NOISE, (row.route, f"{kept:.0f} bytes kept per request",
                                           statuses)
        await _probe(node, creds)


WRITES = [row for row in ROWS if row.finishes]


@pytest.mark.parametrize("row", WRITES, ids=_id)
async def test_a_reset_once_the_request_is_read_leaves_nothing_half_done(
        row: RouteCost, mode: str, request: pytest.FixtureRequest,
        caplog: pytest.LogCaptureFixture) -> None:
    async with attacked(mode, request) as (node, creds, url):
        port = _port(node)
        given = creds if is_public(row) else None
        marker = "reset-"
        redis = None if url is None else aioredis.from_url(url)
        with caplog.at_level(logging.ERROR):
            if redis is not None:
                # The node's writes wait at the store while their clients
                # reset: the reset comes with the write in flight.
                await redis.execute_command("CLIENT", "PAUSE", "400", "WRITE")
            for n in range(FLOOD // 2):
                await reset_after(port, request_bytes(row, f"{marker}{n}", _uid(creds, n),
                                                      given))
            for n in range(FLOOD // 2):  # the real room, as the caller does
                await reset_after(port, request_bytes(row, "probe-room", _uid(creds, n),
                                                      given))
            await _settled(node)
        if redis is not None:
            await redis.aclose()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
        keys = await _store_keys(url, node, marker)
        rooms = {key.split("{")[-1].split("}")[0] if "{" in key else key for key in keys}
        assert len(rooms) <= _creates_at_most(row, node.node.settings), sorted(rooms)[:5]
        await _probe(node, creds)


READS = [row for row in ROWS if not row.finishes]


@pytest.mark.parametrize("row", READS, ids=_id)
async def test_clients_that_never_read_are_let_go(row: RouteCost, mode: str,
                                                   request: pytest.FixtureRequest) -> None:
    async with attacked(mode, request, write_timeout=1.0) as (node, creds, _):
        port = _port(node)
        given = creds if is_public(row) else None
        socks = [stalled(port, request_bytes(row, "probe-room", f"slow{n}", given,
                                             keep_alive=True), 200)
                 for n in range(10)]
        try:
            front = node.node.proxy.front
            async with asyncio.timeout(20):
                while front.open_connections:
                    await asyncio.sleep(0.05)
            await _probe(node, creds)
        finally:
            for sock in socks:
                sock.close()


_LOW = parse_windows("3/m")


def _lowered(row: RouteCost) -> dict[str, Any]:
    """The row's window settings, each lowered to 3 a minute."""
    fields = Settings.__dataclass_fields__
    low: dict[str, Any] = {}
    for name in row.bounds:
        default = fields[name].default
        if isinstance(default, tuple) and default and isinstance(default[0], Window):
            low[name] = _LOW
    if "rate_limits" in row.bounds:
        low["rate_limits"] = replace(Settings().rate_limits, per_uid=_LOW)  # type: ignore[arg-type]
    return low


LIMITED = [row for row in ROWS if is_public(row) and _lowered(row)]


@pytest.mark.parametrize("row", LIMITED, ids=_id)
async def test_a_flood_past_the_limits_is_429_and_others_are_served(
        row: RouteCost, mode: str, request: pytest.FixtureRequest) -> None:
    async with attacked(mode, request, **_lowered(row)) as (node, creds, _):
        port = _port(node)
        await _probe(node, creds)  # the room exists
        statuses = []
        for _ in range(12):
            status, headers, body = await exchange(port, request_bytes(
                row, "probe-room", "mallory", creds))
            assert status < 500, (status, body)
            if status == 429:
                assert float(headers["retry-after"]) > 0
            statuses.append(status)
        assert 429 in statuses, statuses
        # Another client, another address and uid, is not limited by it (a
        # recall of the probe's message is hers to refuse: 403, not 429).
        status, _, body = await exchange(port, request_bytes(
            row, "probe-room", "someone-else", creds), source="127.0.0.2")
        assert status < 500, (status, body)
        assert status != 429, body
