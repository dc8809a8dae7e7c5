"""The real ``liveroom serve`` process: disconnects, shutdown, two processes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from support import ADMIN_HEADERS, Listener, send, serve


@asynccontextmanager
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=500)) as s:
        yield s


async def metric(session: aiohttp.ClientSession, url: str, name: str) -> float:
    async with session.get(f"{url}/metrics", headers=ADMIN_HEADERS) as resp:
        text = await resp.text()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, name
    return float(found.group(1))


async def test_held_max_0_holds_what_the_open_file_limit_allows() -> None:
    """--held-max 0 (the default) is the open-file limit less its reserve:
    under a limit of 400 files a node holds 144 polls (400 - 256), and the
    next one gets 503 overloaded with Retry-After, never a failed accept."""
    capacity = 400 - 256
    with serve("--held-max", "0", nofile=400) as (url, _):
        async with client() as session:
            await send(session, url, "cap", "first")
            first = Listener(session, "cap")
            await first.poll(url)
            cursor = {"epoch": first.epoch, "seq": first.seq, "iseq": first.iseq}
            held = [asyncio.create_task(Listener(session, "cap", uid=f"u{i}", **cursor)
                                        .poll(url, timeout=30)) for i in range(capacity)]
            async with asyncio.timeout(20):
                while await metric(session, url, "liveroom_held_polls") < capacity:
                    await asyncio.sleep(0.05)
            async with session.get(f"{url}/v1/rooms/cap/poll",
                                   params={"uid": "extra", "timeout": 30, **cursor}) as resp:
                assert resp.status == 503
                assert int(resp.headers["Retry-After"]) >= 1
                assert (await resp.json())["error"] == "overloaded"
            await send(session, url, "cap", "for all")
            answers = await asyncio.gather(*held)
            assert all(a["messages"][0]["body"] == "for all" for a in answers)


async def test_clients_disconnecting_mid_hold_leave_nothing_behind() -> None:
    with serve() as (url, _):
        async with client() as session:
            await Listener(session, "d").poll(url)
            baseline = await metric(session, url, "liveroom_asyncio_tasks")
            async with aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=300)) as quitters:
                listeners = [Listener(quitters, "d", uid=f"q{i}") for i in range(200)]
                await asyncio.gather(*(lst.poll(url) for lst in listeners))
                polls = [asyncio.create_task(lst.poll(url, timeout=60)) for lst in listeners]
                async with asyncio.timeout(10):
                    while await metric(session, url, "liveroom_held_polls") < 200:
                        await asyncio.sleep(0.05)
                for poll in polls:
                    poll.cancel()
                await asyncio.gather(*polls, return_exceptions=True)
            # The clients are gone: every held poll and its tasks are freed.
            async with asyncio.timeout(10):
                while await metric(session, url, "liveroom_held_polls") > 0:
                    await asyncio.sleep(0.05)
                while await metric(session, url, "liveroom_asyncio_tasks") > baseline:
                    await asyncio.sleep(0.05)
            # And the room still works.
            listener = Listener(session, "d", uid="stayer")
            await listener.poll(url)
            await send(session, url, "d", "still works")
            await listener.poll_until(url, 1)


async def test_sigterm_answers_held_polls_then_exits() -> None:
    with serve() as (url, proc):
        async with client() as session:
            listeners = [Listener(session, "s", uid=f"u{i}") for i in range(20)]
            firsts = await asyncio.gather(*(lst.poll(url) for lst in listeners))
            polls = [asyncio.create_task(lst.poll(url, timeout=60)) for lst in listeners]
            async with asyncio.timeout(10):
                while await metric(session, url, "liveroom_held_polls") < 20:
                    await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            answers = await asyncio.wait_for(asyncio.gather(*polls), 10)
        for first, answer in zip(firsts, answers, strict=True):
            assert answer["messages"] == []
            assert answer["important"] == []
            assert (answer["epoch"], answer["seq"]) == (first["epoch"], first["seq"])
        assert await asyncio.to_thread(proc.wait, 10) == 0


async def test_two_serve_processes_over_one_redis_act_as_one(redis_url: str) -> None:
    with serve("--store", redis_url, "--node-id", "a") as (a, _), \
            serve("--store", redis_url, "--node-id", "b") as (b, _):
        async with client() as session:
            listener = Listener(session, "two")
            await listener.poll(a)
            for i in range(20):
                await send(session, (a, b)[i % 3 % 2], "two", i, important=i % 4 == 0)
                await listener.poll((b, a)[i % 2], timeout=5)
            async with asyncio.timeout(20):
                while len(listener.received) < 20:
                    await listener.poll((a, b)[len(listener.answers) % 2], timeout=2)
            assert sorted(m["seq"] for m in listener.received) == list(range(1, 21))
            assert not any(ans["reset"] for ans in listener.answers)


def test_a_port_in_use_is_a_clear_failure() -> None:
    with serve() as (url, _):
        port = url.rsplit(":", 1)[1]
        second = subprocess.run([sys.executable, "-m", "liveroom", "serve", "--port", port],
                                capture_output=True, text=True, timeout=30,
                                env={**os.environ, "LIVEROOM_RATE_LIMITS": "off"})
    assert second.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in second.stderr
    assert "Traceback" not in second.stderr + second.stdout
