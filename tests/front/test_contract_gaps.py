"""Behaviours of the contract (docs/design.md) that no other test pinned down.

Each test here was seen failing against a one-line bug planted in the product
(the recvsvr's retention, the ``client_msg_id`` window on each engine, the
adaptive hold's interval, the context's binding, the jitter's hash, the
``recent`` bounds). Time is a fake clock wherever the engine lets it be; the
one exception, a Redis TTL, says so.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio
from support import (
    BASE,
    Listener,
    Running,
    answered,
    clean_env,
    poll_once,
    running_node,
    send,
    settle,
)

from liveroom.clock import FakeClock
from liveroom.model import NewMessage
from liveroom.settings import Tier
from liveroom.store.redis import keys
from proxy.polls.context import ContextSigner

# -- the recvsvr's important list ---------------------------------------------------

MINUTE_MS = 60_000


async def important_seqs(node: Running, room: str) -> list[int]:
    """The seqs of the important list in the recvsvr's snapshot after a fresh pull."""
    snap = await node.node.recvsvr.wait_pulled(room)
    return [item.seq for item in snap.important]


async def test_the_important_list_keeps_all_of_the_last_ten_minutes_beyond_its_count() -> None:
    """The window on its own: 1 200 important messages, one every 0.5 s over
    ten minutes. Fifteen minutes after the first, the ones sent in the last
    ten minutes are 601 (more than the 500 the count keeps): all of them stay,
    and none older."""
    clock = FakeClock()
    t0 = int(clock.time() * 1000)
    async with running_node(clock=clock) as node:
        log_ = node.node.store.log
        for i in range(1, 1201):
            await log_.append("imp", NewMessage("publisher", i, True, ts=t0 + i * 500))
        await clock.advance(900)  # now = t0 + 15 min: the window starts at t0 + 5 min
        seqs = await important_seqs(node, "imp")
        # ts >= now - 10 min  <=>  i * 500 >= 300_000  <=>  i >= 600
        assert seqs == list(range(600, 1201))


async def test_the_important_list_keeps_its_count_once_the_window_has_passed() -> None:
    """The count on its own: once every important message is older than the
    window, exactly the newest 500 stay (not 499, not 501)."""
    clock = FakeClock()
    t0 = int(clock.time() * 1000)
    async with running_node(clock=clock) as node:
        log_ = node.node.store.log
        for i in range(1, 601):
            await log_.append("imp", NewMessage("publisher", i, True, ts=t0))
        # All inside the window: all 600 kept, the count is no cap there.
        assert await important_seqs(node, "imp") == list(range(1, 601))
        await clock.advance(11 * 60)
        assert await important_seqs(node, "imp") == list(range(101, 601))
        # A new important message keeps the count where it is.
        await log_.append("imp", NewMessage("publisher", 601, True,
                                            ts=int(clock.time() * 1000)))
        assert await important_seqs(node, "imp") == list(range(102, 602))


# -- the client_msg_id window ---------------------------------------------------------


async def test_a_client_msg_id_is_remembered_ten_minutes_on_the_memory_engine(
        session: aiohttp.ClientSession) -> None:
    """The memory engine's window runs on the fake clock: the default ten minutes."""
    clock = FakeClock()
    # A room of one sender nobody reads expires sooner than ten minutes
    # (empty_room_ttl): this test is about the dedup window only.
    async with running_node(clock=clock, empty_room_ttl=3600) as node:
        first = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        await clock.advance(599.5)
        # Within the window: the first send's seq, and nothing stored.
        assert await send(session, node.url, "dd", "hello", client_msg_id="m-1") == first
        await clock.advance(1)
        # After it: a new message.
        later = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        assert later == {"seq": first["seq"] + 1, "epoch": first["epoch"]}
        await node.node.recvsvr.wait_pulled("dd")
        answer = await Listener(session, "dd").poll(node.url)
        assert [m["seq"] for m in answer["messages"]] == [1, 2]


async def test_a_client_msg_id_key_lives_ten_minutes_in_redis(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    """Redis expires the key on its own (real) clock, so the default window is
    read off the key's ``PTTL`` rather than waited for."""
    async with running_node(redis_url) as node:
        first = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            ttl_ms = await client.pttl(keys.client_msg_id("dd", "m-1"))
        finally:
            await client.aclose()
        assert 590_000 < ttl_ms <= 600_000
        assert await send(session, node.url, "dd", "hello", client_msg_id="m-1") == first
        other = await send(session, node.url, "dd", "hello", client_msg_id="m-2")
        assert other["seq"] == first["seq"] + 1  # the retry stored nothing


async def test_after_its_window_a_client_msg_id_stores_a_new_message(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    """A short window on both engines: on the fake clock for memory; for Redis a
    real wait of about 0.3 s, until the key has expired."""
    clock = FakeClock()
    async with running_node(engine_url, clock=clock, dedup_ttl=0.3) as node:
        first = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        assert await send(session, node.url, "dd", "hello", client_msg_id="m-1") == first
        if engine_url == "memory":
            await clock.advance(0.31)
        else:
            client = redis.asyncio.Redis.from_url(engine_url)
            try:
                async with asyncio.timeout(5):
                    while await client.exists(keys.client_msg_id("dd", "m-1")):
                        await asyncio.sleep(0.02)
            finally:
                await client.aclose()
        later = await send(session, node.url, "dd", "hello", client_msg_id="m-1")
        assert later == {"seq": first["seq"] + 1, "epoch": first["epoch"]}
        # Remembered again from this send on.
        assert await send(session, node.url, "dd", "hello", client_msg_id="m-1") == later


# -- the adaptive hold and the listener's context ----------------------------------------


async def counted(node: Running, session: aiohttp.ClientSession, clock: FakeClock,
                  room: str, uid: str) -> Listener:
    """A listener that polled ``room`` once (an existing room: polls of a room
    that does not exist count nobody), once the node counts it online."""
    await node.node.store.log.open_room(room)
    listener = Listener(session, room, uid=uid)
    await listener.poll(node.url)

    async def online() -> int:
        async with session.get(f"{node.url}/v1/rooms/{room}/stats") as resp:
            return int((await resp.json())["online"])
    async with asyncio.timeout(30):
        while await online() < 1:
            await clock.advance(0.5)
            await settle()
    return listener


async def test_an_empty_answer_does_not_restart_the_interval(
        session: aiohttp.ClientSession) -> None:
    """The interval counts from the last non-empty answer: three empty answers
    after it (timeouts) leave the next message due 5 s after that answer, not
    5 s after the last empty one."""
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 5.0),)) as node:
        listener = await counted(node, session, clock, "pace", "ann")
        await clock.advance(5)
        await send(session, node.url, "pace", "x")
        answer, took = await answered(clock, listener.poll(node.url))
        assert [m["body"] for m in answer["messages"]] == ["x"]
        # Due long ago: answered at once (the fake seconds it took are real I/O
        # of a loaded machine; the interval starts somewhere in them).
        assert took < 1.0
        started, slack = clock.monotonic() - took, took
        for _ in range(3):
            answer, took = await answered(clock, listener.poll(node.url, timeout=1))
            assert answer["messages"] == []
            assert 1.0 <= took < 2.0
        await send(session, node.url, "pace", "y")
        answer, _ = await answered(clock, listener.poll(node.url), limit=10)
        assert [m["body"] for m in answer["messages"]] == ["y"]
        # Restarted by the empty answers, it would be due 8 s or more after it.
        assert 5.0 <= clock.monotonic() - started <= 5.5 + slack


@pytest.mark.parametrize("ctx_of", ["this poll", "another room", "another uid",
                                    "an hour ahead"])
async def test_a_context_counts_only_for_its_room_and_uid_and_never_ahead_of_now(
        ctx_of: str, session: aiohttp.ClientSession) -> None:
    """A genuine context (signed with the nodes' secret) of another room or
    another uid is ignored: an answer just now, so a poll with messages pending
    waits the whole interval. A context whose time is ahead of the server's
    clock counts as now, not as a wait until then."""
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 5.0),)) as node:
        listener = await counted(node, session, clock, "ctx", "eve")
        await clock.advance(6)
        await send(session, node.url, "ctx", "one")
        await answered(clock, listener.poll(node.url))
        last_ms = int(clock.time() * 1000)
        await clock.advance(6)  # the interval since that answer has passed
        await send(session, node.url, "ctx", "two")
        assert listener.epoch is not None
        assert listener.seq is not None
        assert listener.iseq is not None
        room, uid, when = {
            "this poll": ("ctx", "eve", last_ms),
            "another room": ("other", "eve", last_ms),
            "another uid": ("ctx", "bob", last_ms),
            "an hour ahead": ("ctx", "eve", int(clock.time() * 1000) + 3_600_000),
        }[ctx_of]
        assert BASE.secret is not None
        ctx = ContextSigner(BASE.secret).sign(room, uid, listener.epoch, listener.seq,
                                              listener.iseq, 0, 0, when)
        params: dict[str, Any] = {"uid": "eve", "epoch": listener.epoch,
                                  "seq": listener.seq, "iseq": listener.iseq, "ctx": ctx}

        answer, took = await answered(clock, poll_once(session, node.url, "ctx", params))
        assert [m["body"] for m in answer["messages"]] == ["two"]
        if ctx_of == "this poll":
            assert took < 2.0  # due: the interval since ``last_ms`` has passed
        else:
            assert 5.0 <= took <= 6.0


# -- the jitter, drawn the same on every process ---------------------------------------

ROOT = Path(__file__).resolve().parents[2]
DUE_TIMES = """
import json
from liveroom.settings import Tier
from proxy.polls.tiers import TierTable
tier = Tier(1, 8.0, 2.0)
table = TierTable((tier,))
print(json.dumps([table.pace_in(tier, f"u{i}", 1_700_000_000_000 + 7 * i).due_ms
                  for i in range(200)]))
"""


def due_times_in_a_process(hash_seed: str) -> list[int]:
    """Due times of 200 listeners computed by a new Python process (a node),
    its ``str`` hashes salted with ``hash_seed``."""
    done = subprocess.run([sys.executable, "-c", DUE_TIMES], cwd=ROOT,
                          env=clean_env(PYTHONHASHSEED=hash_seed), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    dues: list[int] = json.loads(done.stdout)
    return dues


def test_the_jitter_is_drawn_the_same_in_two_processes() -> None:
    """Two nodes compute the same due time from the same signed context: two
    processes (with different hash salts, as two nodes have) agree on every
    listener, and the jitter still spreads them over the tier's 2 s."""
    one, other = due_times_in_a_process("1"), due_times_in_a_process("2")
    assert one == other
    offsets = [due - (1_700_000_000_000 + 7 * i) for i, due in enumerate(one)]
    assert all(8_000 <= offset < 10_000 for offset in offsets)
    assert len(set(offsets)) > 150


# -- recent messages of a first poll ------------------------------------------------------


async def test_a_first_poll_gets_20_recent_messages_by_default_and_at_most_100(
        session: aiohttp.ClientSession) -> None:
    async with running_node() as node:
        for i in range(1, 121):
            await send(session, node.url, "rc", i)
        await node.node.recvsvr.wait_pulled("rc")
        default = await Listener(session, "rc", uid="a").poll(node.url)
        assert [m["body"] for m in default["messages"]] == list(range(101, 121))
        most = await Listener(session, "rc", uid="b").poll(node.url, recent=100)
        assert [m["body"] for m in most["messages"]] == list(range(21, 121))
        async with session.get(f"{node.url}/v1/rooms/rc/poll",
                               params={"uid": "c", "recent": 101}) as resp:
            assert resp.status == 400
            doc = await resp.json()
        assert "recent" in doc["message"]


async def test_a_personal_message_cuts_through_the_pace_for_its_listener(
        session: aiohttp.ClientSession) -> None:
    """In a paced room a listener just answered is not due for 10 s; its own
    personal message is delivered at once, with what was pending for it."""
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 10.0),)) as node:
        ann = await counted(node, session, clock, "pace", "ann")
        await send(session, node.url, "pace", "chat")
        answer, _ = await answered(clock, ann.poll(node.url, timeout=60), limit=20)
        assert [m["body"] for m in answer["messages"]] == ["chat"]  # its interval starts
        await send(session, node.url, "pace", "more chat")
        await send(session, node.url, "pace", {"gift": "rocket"}, to="ann")
        answer, took = await answered(clock, ann.poll(node.url, timeout=60), limit=20)
        assert [m["body"] for m in answer["personal"]] == [{"gift": "rocket"}]
        assert [m["body"] for m in answer["messages"]] == ["more chat"]
        assert took < 1.0  # not the 10 s of its pace
