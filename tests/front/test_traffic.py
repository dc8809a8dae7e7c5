"""The adaptive hold end to end: tiers, the signed context, ticks and cut-through.

Time is a fake clock shared by the node and the test: the room's ticker, the
heartbeat flush and the statsvr merge all sleep on it, so multi-second
intervals pass in a few real milliseconds. The listeners are real HTTP clients
over real sockets; a test moves time in small steps and lets the I/O that
follows each step happen.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import (
    IO_MARGIN,
    PUBLISHER,
    STEP,
    Listener,
    Running,
    advance_until,
    answered,
    poll_once,
    running_node,
    send,
    settle,
)

from liveroom.clock import FakeClock
from liveroom.ratelimit import RateLimits
from liveroom.settings import DEFAULT_RATE_LIMITS, Tier
from proxy.polls.context import ContextSigner
from proxy.polls.tiers import PLAIN, TierTable


async def tiered(node: Running, session: aiohttp.ClientSession, clock: FakeClock,
                 room: str, online: int) -> None:
    """Wait (fake time) until the node counts ``online`` listeners in ``room``."""
    async def count() -> int:
        async with session.get(f"{node.url}/v1/rooms/{room}/stats") as resp:
            return int((await resp.json())["online"])
    async with asyncio.timeout(30):
        while await count() < online:
            await clock.advance(0.5)
            await settle()


async def exists(node: Running, room: str) -> None:
    """Make ``room`` exist (an empty log, as an operator action does): polls of
    a room that does not exist count nobody online, so it never gets a tier."""
    await node.node.store.log.open_room(room)


async def counted(node: Running, session: aiohttp.ClientSession, clock: FakeClock,
                  room: str, uid: str = "listener") -> Listener:
    """A listener that polled ``room`` once (answered at once, as a plain room:
    nobody was counted yet), after the node counts it online."""
    await exists(node, room)
    listener = Listener(session, room, uid=uid)
    first = await listener.poll(node.url)
    assert first["interval_ms"] == 0
    await tiered(node, session, clock, room, 1)
    return listener


class Clocked:
    """A listener polling in the background, recording the fake time of each answer."""

    def __init__(self, listener: Listener, node: Running, clock: FakeClock,
                 timeout: int = 25) -> None:
        self.listener = listener
        self.node = node
        self.clock = clock
        self.timeout = timeout
        self.times: list[float] = []
        self.answers: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            answer = await self.listener.poll(self.node.url, timeout=self.timeout)
            self.times.append(self.clock.time())
            self.answers.append(answer)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._task

    def delivered(self) -> list[tuple[float, dict[str, Any]]]:
        return [(t, a) for t, a in zip(self.times, self.answers, strict=True)
                if a["messages"] or a["important"] or a["gap"] or a["igap"]]


def bodies(listener: Listener) -> list[Any]:
    return [m["body"] for m in listener.received]


# -- the tier table -------------------------------------------------------------


def test_the_default_tiers() -> None:
    table = TierTable((Tier(1_000, 1.0), Tier(10_000, 2.0), Tier(100_000, 5.0),
                       Tier(1_000_000, 8.0, 2.0)))
    assert table.tier(0) == PLAIN
    assert table.tier(999) == PLAIN
    assert table.tier(1_000).interval == 1.0
    assert table.tier(9_999).interval == 1.0
    assert table.tier(10_000).interval == 2.0
    assert table.tier(100_000).interval == 5.0
    assert table.tier(1_000_000) == Tier(1_000_000, 8.0, 2.0)
    assert table.pace(1_000_000, "u", 0).interval_ms == 10_000
    assert table.pace(5, "u", 123).plain
    # A plain pace keeps the listener's last answer: an empty answer signs it
    # into the ctx, and the room's tier may rise before the next poll.
    pace = table.pace(5, "u", 123)
    assert (pace.tier, pace.last_ms, pace.due_ms, pace.interval_ms) == (PLAIN, 123, 123, 0)


@given(online=st.integers(0, 10**8), uid=st.text(min_size=1, max_size=8),
       last_ms=st.integers(0, 2**50))
def test_a_pace_is_due_within_its_tier_whatever_order_the_tiers_are_given_in(
        online: int, uid: str, last_ms: int) -> None:
    tiers = (Tier(10, 1.0), Tier(1_000, 8.0, 2.0))
    pace = TierTable(tiers).pace(online, uid, last_ms)
    again = TierTable(list(reversed(tiers))).pace(online, uid, last_ms)
    assert pace == again
    low = round(pace.tier.interval * 1000)
    assert last_ms + low <= pace.due_ms <= last_ms + pace.interval_ms
    assert pace.tier == (tiers[1] if online >= 1_000 else tiers[0] if online >= 10 else PLAIN)


_PACES = """
import json, sys
from liveroom.settings import Tier
from proxy.polls.tiers import TierTable
table = TierTable((Tier(1, 8.0, 2.0),))
print(json.dumps([table.pace(5, uid, last).due_ms for uid, last in json.loads(sys.argv[1])]))
"""


def test_a_pace_is_the_same_on_every_node() -> None:
    """Nodes are processes: two of them, each with its own hash salt, draw the
    same jitter for the same listener and answer."""
    cases = [(f"u{i}", 1_700_000_000_000 + 37 * i) for i in range(50)]
    dues = []
    for salt in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", _PACES, json.dumps(cases)],
                             capture_output=True, check=True, timeout=60,
                             env={**os.environ, "PYTHONHASHSEED": salt},
                             cwd=Path(__file__).resolve().parents[2])
        dues.append(json.loads(out.stdout))
    assert dues[0] == dues[1]
    assert len(set(dues[0])) > 40  # and it is a jitter: listeners differ


def test_jitter_spreads_listeners_answered_together() -> None:
    table = TierTable((Tier(1, 8.0, 2.0),))
    dues = {table.pace(5, f"u{i}", 1_000_000).due_ms for i in range(200)}
    assert len(dues) > 150
    assert min(dues) - 1_000_000 < 8_300
    assert max(dues) - 1_000_000 > 9_700


# -- at most once per interval, nothing lost -------------------------------------


@pytest.mark.parametrize("tier", [Tier(1, 1.0), Tier(1, 2.0), Tier(1, 5.0), Tier(1, 8.0, 2.0)])
async def test_a_listener_gets_at_most_one_answer_per_interval_and_loses_nothing(
        tier: Tier, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(tier,)) as node:
        listener = await counted(node, session, clock, "flow", uid="ann")
        clocked = Clocked(listener, node, clock)
        clocked.start()
        sent = 0
        span = 3 * (tier.interval + tier.jitter) + 1
        moved = 0.0
        async with asyncio.timeout(60):
            while moved < span:  # one message every 0.25 s, without pause
                if moved >= sent * 0.25:
                    await send(session, node.url, "flow", sent, uid=f"s{sent % 7}")
                    sent += 1
                await clock.advance(STEP)
                moved += STEP
                await settle()
            # Then quiet until the last message arrived.
            while len(listener.received) < sent:
                await clock.advance(STEP)
                await settle()
        await clocked.stop()
        assert bodies(listener) == list(range(sent))  # all, in order, once
        delivered = clocked.delivered()
        assert len(delivered) >= 3
        times = [t for t, _ in delivered]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= tier.interval - 1e-6
        assert max(gaps) <= tier.interval + tier.jitter + 0.3  # due, then the next tick
        assert all(a["interval_ms"] == round((tier.interval + tier.jitter) * 1000)
                   for _, a in delivered)
        assert all(a["gap"] == 0 for _, a in delivered)


async def test_a_quiet_tiered_room_answers_empty_at_the_timeout(
        session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 2.0),)) as node:
        listener = await counted(node, session, clock, "quiet")
        cursors = (listener.epoch, listener.seq, listener.iseq)
        poll = asyncio.create_task(listener.poll(node.url, timeout=3))
        await settle()
        took = await advance_until(clock, poll.done, limit=5)
        answer = poll.result()
        assert 3.0 <= took <= 3.0 + IO_MARGIN
        assert answer["messages"] == []
        assert (answer["epoch"], answer["seq"], answer["iseq"]) == cursors


async def test_a_message_waiting_at_the_timeout_is_delivered_when_due(
        session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 5.0),)) as node:
        listener = await counted(node, session, clock, "late")
        await clock.advance(5)
        await send(session, node.url, "late", "x")
        _, took = await answered(clock, listener.poll(node.url))
        assert took <= IO_MARGIN  # due long ago: at once
        poll = asyncio.create_task(listener.poll(node.url, timeout=1))
        await settle()
        await send(session, node.url, "late", "y")
        answer, took = await answered(clock, poll, limit=7)
        # Not empty at the 1 s timeout: held past it until due, 5 s after the last answer.
        assert 5.0 <= took <= 5.0 + IO_MARGIN
        assert [m["body"] for m in answer["messages"]] == ["y"]


# -- important messages cut through -----------------------------------------------


async def test_an_important_message_reaches_a_held_listener_within_a_second(
        session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 8.0, 2.0),)) as node:
        listener = await counted(node, session, clock, "top", uid="held")
        await clock.advance(10)
        await send(session, node.url, "top", "before")
        _, took = await answered(clock, listener.poll(node.url))
        assert took <= IO_MARGIN  # a non-empty answer: the 8-10 s interval starts
        poll = asyncio.create_task(listener.poll(node.url))
        await settle()
        await send(session, node.url, "top", "chat")
        for _ in range(int(2 / STEP)):  # chat alone waits for the interval
            await clock.advance(STEP)
            await settle()
        assert not poll.done()
        await send(session, node.url, "top", "co-host joined", important=True)
        took = await advance_until(clock, poll.done, limit=2)
        assert took <= 1.0 + IO_MARGIN  # within a second, not the 8-10 s interval
        answer = poll.result()
        assert [m["body"] for m in answer["important"]] == ["co-host joined"]
        assert [m["body"] for m in answer["messages"]] == ["chat"]


async def test_a_flood_of_important_messages_releases_a_room_about_twice_a_second(
        session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 8.0, 2.0),),
                            rate_limits=RateLimits(per_uid=())) as node:
        await exists(node, "flood")
        listeners = [Listener(session, "flood", uid=f"l{i}") for i in range(5)]
        for listener in listeners:
            await listener.poll(node.url)
        await tiered(node, session, clock, "flood", 5)
        clocked = [Clocked(listener, node, clock) for listener in listeners]
        for c in clocked:
            c.start()
        await settle()
        sent = 0
        async with asyncio.timeout(60):
            for _step in range(int(5 / STEP)):  # 20 signals a second for 5 s
                await send(session, node.url, "flood", sent, important=True)
                sent += 1
                await clock.advance(STEP)
                await settle()
            while any(len(listener.received) < sent for listener in listeners):
                await clock.advance(STEP)
                await settle()
        for c in clocked:
            await c.stop()
        for c, listener in zip(clocked, listeners, strict=True):
            assert bodies(listener) == list(range(sent))  # none lost
            times = [t for t, _ in c.delivered()]
            assert len(times) <= 5 * 2 + 2
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert min(gaps) >= 0.5 - 1e-6


# -- the signed context ------------------------------------------------------------


async def _held_for(session: aiohttp.ClientSession, node: Running, clock: FakeClock,
                    params: dict[str, Any]) -> float:
    answer, took = await answered(clock, poll_once(session, node.url, "ctx", params))
    assert answer["messages"]
    return took


@pytest.mark.parametrize("forgery", ["replayed", "other secret", "none", "garbage"])
async def test_a_replayed_or_forged_context_counts_as_an_answer_just_now(
        forgery: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 5.0),)) as node:
        listener = await counted(node, session, clock, "ctx", uid="eve")
        old_ctx = listener.ctx
        await send(session, node.url, "ctx", "one")
        await answered(clock, listener.poll(node.url))
        await clock.advance(6)  # the interval since that answer has passed
        await send(session, node.url, "ctx", "two")
        base = {"uid": "eve", "epoch": listener.epoch, "seq": listener.seq,
                "iseq": listener.iseq, "timeout": 25}
        # With its genuine context the poll is due: answered at once.
        took = await _held_for(session, node, clock, {**base, "ctx": listener.ctx})
        assert took <= IO_MARGIN
        assert listener.seq is not None
        assert listener.iseq is not None
        assert listener.epoch is not None
        fake = {
            "replayed": old_ctx,
            "other secret": ContextSigner("not-the-secret").sign(
                "ctx", "eve", listener.epoch, listener.seq, listener.iseq, 0, 0, 0),
            "none": "",
            "garbage": "xx.yy",
        }[forgery]
        assert fake is not None
        took = await _held_for(session, node, clock, {**base, "ctx": fake})
        assert 5.0 <= took <= 5.0 + IO_MARGIN


# -- tiers follow the online count -------------------------------------------------


async def test_rooms_move_between_tiers_as_their_online_count_crosses_thresholds(
        session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(2, 1.0), Tier(3, 5.0))) as node:
        async def interval(uid: str) -> int:
            # A first poll in a tiered room is paced: move time until it is due.
            answer, _ = await answered(clock, Listener(session, "grow", uid=uid).poll(node.url))
            return int(answer["interval_ms"])
        await exists(node, "grow")
        assert await interval("a") == 0
        await tiered(node, session, clock, "grow", 1)
        assert await interval("b") == 0  # counts 1 until b's heartbeat is merged
        await tiered(node, session, clock, "grow", 2)
        assert await interval("c") == 1000
        await tiered(node, session, clock, "grow", 3)
        assert await interval("a") == 5000
        # a keeps polling, b and c leave: the room falls back to a plain long poll.
        async with asyncio.timeout(30):
            while await interval("a") != 0:
                await clock.advance(5)
                await settle()


async def test_held_tiered_polls_answer_empty_on_shutdown(
        session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(clock=clock, tiers=(Tier(1, 5.0),)) as node:
        listener = await counted(node, session, clock, "bye")
        poll = asyncio.create_task(listener.poll(node.url))
        await settle()
        async with asyncio.timeout(5):
            while node.node.proxy.held_polls() == 0:
                await asyncio.sleep(0.005)
        await node.stop()
        answer = await asyncio.wait_for(poll, 10)
        assert answer["messages"] == []


async def test_a_publisher_is_not_rate_limited_but_a_listener_is(
        session: aiohttp.ClientSession, engine_url: str) -> None:
    async with running_node(engine_url, rate_limits=DEFAULT_RATE_LIMITS) as node:
        url = f"{node.url}/v1/rooms/rl/messages"
        for i in range(5):
            await send(session, node.url, "rl", i, uid="chatty")
        async with session.post(url, json={"uid": "chatty", "body": 5}) as resp:
            assert resp.status == 429
            assert int(resp.headers["Retry-After"]) >= 1
            doc = await resp.json()
            assert doc["error"] == "rate_limited"
            assert doc["message"]
        headers = {"Authorization": f"Bearer {PUBLISHER}"}
        for i in range(10):
            async with session.post(url, json={"uid": "chatty", "body": i},
                                    headers=headers) as resp:
                assert resp.status == 201
        async with session.post(url, json={"uid": "chatty", "body": 0},
                                headers={"Authorization": "Bearer wrong"}) as resp:
            assert resp.status == 401

