"""A room's news (``proxy/polls/news.py``): a new likes total, new top givers
and slow mode turned on or off answer the room's held polls within a couple
of seconds, at most once per room per period, on memory and across two
nodes over Redis (issue 46, item 5).

Every node here runs on one fake clock: the seconds measured are the
clock's, moved in small steps while real I/O happens
(:func:`support.answered`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from support import (
    ADMIN_HEADERS,
    IO_MARGIN,
    SHARED_SECRET,
    STEP,
    Listener,
    Running,
    answered,
    counted_online,
    held_polls,
    running_node,
    send,
    settle,
)

from liveroom.clock import FakeClock
from liveroom.settings import Tier
from proxy.polls.news import news_period

ROOM = "quiet-room"
WITHIN = 2.0
"""Fake seconds within which news reaches a held poll (issue 46: "within a
second or two")."""


@contextlib.asynccontextmanager
async def nodes(engine_url: str, clock: FakeClock,
                **overrides: Any) -> AsyncIterator[tuple[Running, Running]]:
    """The node a listener polls and the node the room's changes go
    through: one node on memory; two over Redis, whose news the listener's
    node learns through the store (the likes flushed there and read back,
    the rankings read, the moderation journal)."""
    async with running_node(engine_url, clock=clock, secret=SHARED_SECRET,
                            **overrides) as listened:
        if engine_url == "memory":
            yield listened, listened
            return
        async with running_node(engine_url, clock=clock, secret=SHARED_SECRET,
                                **overrides) as other:
            yield listened, other


async def call(session: aiohttp.ClientSession, method: str, url: str,
               doc: Any = None) -> tuple[int, Any]:
    """One call with the admin token (an operator's, or the backend's)."""
    async with session.request(method, url, json=doc, headers=ADMIN_HEADERS) as resp:
        return resp.status, await resp.json()


async def held_listener(session: aiohttp.ClientSession, node: Running,
                        uid: str = "listener") -> Listener:
    """A listener of :data:`ROOM` on ``node`` past its first poll."""
    listener = Listener(session, ROOM, uid=uid)
    await listener.poll(node.url)
    return listener


async def pass_time(clock: FakeClock, seconds: float) -> None:
    """Move the fake clock ``seconds`` on, in small steps while real I/O happens."""
    end = clock.monotonic() + seconds - 1e-9
    while clock.monotonic() < end:
        await clock.advance(STEP)
        await settle()


def assert_meta_only(answer: dict[str, Any], before: tuple[Any, ...]) -> None:
    """A news answer is a normal one: the same cursors, no messages."""
    assert (answer["epoch"], answer["seq"], answer["iseq"]) == before
    assert (answer["messages"], answer["important"], answer["reset"]) == ([], [], False)


async def test_likes_answer_a_held_poll_in_a_quiet_room_within_two_seconds(
        engine_url: str) -> None:
    clock = FakeClock()
    async with nodes(engine_url, clock) as (listened, other), aiohttp.ClientSession() as s:
        assert (await call(s, "POST", f"{other.url}/v1/admin/rooms/{ROOM}/start"))[0] == 201
        listener = await held_listener(s, listened)
        before = listener.epoch, listener.seq, listener.iseq
        poll = asyncio.ensure_future(listener.poll(listened.url, timeout=25))
        await held_polls(listened.node.proxy.holds, 1)
        async with s.post(f"{other.url}/v1/rooms/{ROOM}/likes",
                          json={"uid": "fan", "count": 7}) as resp:
            assert resp.status == 202
        answer, took = await answered(clock, poll, limit=WITHIN + 3)
        assert answer["likes"] == 7
        assert took <= WITHIN + IO_MARGIN, took
        assert_meta_only(answer, before)
        # Taps another node wrote to the store: read back at the next refresh.
        before = listener.epoch, listener.seq, listener.iseq
        poll = asyncio.ensure_future(listener.poll(listened.url, timeout=25))
        await held_polls(listened.node.proxy.holds, 1)
        await listened.node.store.counters.add_likes({ROOM: 100}, int(clock.time() * 1000))
        answer, took = await answered(clock, poll, limit=WITHIN + 3)
        assert answer["likes"] == 107
        assert took <= WITHIN + IO_MARGIN, took
        assert_meta_only(answer, before)


async def test_a_gift_answers_a_held_poll_with_the_top_givers_within_two_seconds(
        engine_url: str) -> None:
    clock = FakeClock()
    async with nodes(engine_url, clock) as (listened, other), aiohttp.ClientSession() as s:
        assert (await call(s, "POST", f"{other.url}/v1/admin/rooms/{ROOM}/start"))[0] == 201
        listener = await held_listener(s, listened)
        assert "ranking" not in listener.answers[-1]
        before = listener.epoch, listener.seq, listener.iseq
        poll = asyncio.ensure_future(listener.poll(listened.url, timeout=25))
        await held_polls(listened.node.proxy.holds, 1)
        status, _ = await call(s, "POST", f"{other.url}/v1/rooms/{ROOM}/gifts",
                               {"uid": "giver", "value": 520, "gift": "rocket"})
        assert status == 201
        answer, took = await answered(clock, poll, limit=WITHIN + 3)
        assert answer["ranking"]["top"] == [{"uid": "giver", "score": 520}]
        assert took <= WITHIN + IO_MARGIN, took
        assert_meta_only(answer, before)


async def test_slow_mode_on_and_off_answers_held_polls_within_two_seconds(
        engine_url: str) -> None:
    clock = FakeClock()
    async with nodes(engine_url, clock) as (listened, other), aiohttp.ClientSession() as s:
        assert (await call(s, "POST", f"{other.url}/v1/admin/rooms/{ROOM}/start"))[0] == 201
        listener = await held_listener(s, listened)
        for seconds in (30, 0):
            before = listener.epoch, listener.seq, listener.iseq
            poll = asyncio.ensure_future(listener.poll(listened.url, timeout=25))
            await held_polls(listened.node.proxy.holds, 1)
            status, _ = await call(s, "PUT", f"{other.url}/v1/admin/rooms/{ROOM}/slow",
                                   {"seconds": seconds})
            assert status == 200
            answer, took = await answered(clock, poll, limit=WITHIN + 3)
            assert answer.get("slow", 0) == seconds
            assert took <= WITHIN + IO_MARGIN, (seconds, took)
            assert_meta_only(answer, before)


async def listen_counting(listener: Listener, url: str, answers: list[dict[str, Any]]) -> None:
    """Poll again at once after every answer (as clients do), keeping each."""
    while True:
        answers.append(await listener.poll(url, timeout=25))


async def tap_for(session: aiohttp.ClientSession, running: Running, clock: FakeClock,
                  seconds: float, every: float = 0.1) -> int:
    """Tap once every ``every`` fake seconds for ``seconds`` (each tap a
    fresh uid: the uid windows stay out of it); how many taps."""
    taps = 0
    while taps * every < seconds:
        async with session.post(f"{running.url}/v1/rooms/{ROOM}/likes",
                                json={"uid": f"fan{taps}", "count": 1}) as resp:
            assert resp.status == 202
        taps += 1
        await pass_time(clock, every)
    return taps


@pytest.mark.parametrize(("tiers", "period"), [((), 1.0), ((Tier(1, 3.0),), 3.0)])
async def test_many_taps_answer_a_held_listener_once_a_period_not_once_a_tap(
        tiers: tuple[Tier, ...], period: float) -> None:
    """A room under constant taps answers its quiet listener about once per
    period (1 s; 3 s once the room is in a tier of 3 s: bigger rooms are
    told less often), each answer the newer total, never one a tap."""
    clock = FakeClock()
    async with running_node(clock=clock, tiers=tiers) as node, aiohttp.ClientSession() as s:
        await send(s, node.url, ROOM, "on air")
        listener = Listener(s, ROOM)
        await listener.poll(node.url)
        if tiers:
            await counted_online(node, clock, ROOM)  # from now on in its tier
        assert node.node.proxy.news.period(ROOM) == period
        answers: list[dict[str, Any]] = []
        listening = asyncio.create_task(listen_counting(listener, node.url, answers))
        try:
            await held_polls(node.node.proxy.holds, 1)
            taps = await tap_for(s, node, clock, 6 * period)
            await settle()
        finally:
            listening.cancel()
        assert taps >= 60
        # 6 periods of taps: an answer at the first tick, then one per period.
        assert 5 <= len(answers) <= 7, [a["likes"] for a in answers]
        likes = [a["likes"] for a in answers]
        assert likes == sorted(likes)
        assert len(set(likes)) == len(likes)
        assert all(a["messages"] == [] for a in answers)


async def test_a_poll_held_after_the_change_is_not_answered_again_for_it() -> None:
    """News answers the polls held before it: a listener that a message
    answered meanwhile (its answer carried the new total) is not answered
    again, empty, for the same taps."""
    clock = FakeClock()
    async with running_node(clock=clock) as node, aiohttp.ClientSession() as s:
        await send(s, node.url, ROOM, "on air")
        listener = Listener(s, ROOM)
        await listener.poll(node.url)
        answers: list[dict[str, Any]] = []
        listening = asyncio.create_task(listen_counting(listener, node.url, answers))
        try:
            await held_polls(node.node.proxy.holds, 1)
            async with s.post(f"{node.url}/v1/rooms/{ROOM}/likes",
                              json={"uid": "fan", "count": 4}) as resp:
                assert resp.status == 202
            await send(s, node.url, ROOM, "hello")  # before the news's tick
            async with asyncio.timeout(5):
                while not answers:
                    await asyncio.sleep(0.01)
            await held_polls(node.node.proxy.holds, 1)  # held again, after the taps
            await pass_time(clock, 3)
        finally:
            listening.cancel()
        assert [(a["likes"], [m["body"] for m in a["messages"]]) for a in answers] \
            == [(4, ["hello"])]
        assert node.node.proxy.news.told == 0


def test_the_period_grows_with_the_rooms_tier() -> None:
    assert news_period(1.0, Tier(0, 0.0)) == 1.0
    assert news_period(1.0, Tier(1_000, 1.0)) == 1.0
    assert news_period(1.0, Tier(100_000, 5.0)) == 5.0
    assert news_period(1.0, Tier(1_000_000, 8.0, 2.0)) == 10.0
    assert news_period(3.0, Tier(10_000, 2.0)) == 3.0


async def test_a_change_between_an_answer_and_the_next_poll_reaches_that_poll(
        engine_url: str) -> None:
    """A listener is not held while its answer travels back and its next poll
    comes in: likes, top givers or slow mode changed then reach that next
    poll within a period, not at its timeout (25 s). The answer's ``ctx``
    says which likes and slow mode it showed; ``ranking`` which top givers."""
    clock = FakeClock()
    async with nodes(engine_url, clock) as (listened, other), aiohttp.ClientSession() as s:
        assert (await call(s, "POST", f"{other.url}/v1/admin/rooms/{ROOM}/start"))[0] == 201
        listener = await held_listener(s, listened)
        version: dict[str, Any] = {}

        async def changed_between(change: Any) -> dict[str, Any]:
            # Let the change reach the listener's node with no poll held there.
            await change()
            await pass_time(clock, 1.5)
            assert listened.node.proxy.holds.count == 0
            poll = asyncio.ensure_future(listener.poll(listened.url, timeout=25, **version))
            answer, took = await answered(clock, poll, limit=WITHIN + 3)
            assert took <= WITHIN + IO_MARGIN, took
            if "ranking" in answer:
                version["ranking"] = answer["ranking"]["version"]
            return answer

        async def tap() -> None:
            async with s.post(f"{other.url}/v1/rooms/{ROOM}/likes",
                              json={"uid": "fan", "count": 7}) as resp:
                assert resp.status == 202

        async def gift() -> None:
            status, _ = await call(s, "POST", f"{other.url}/v1/rooms/{ROOM}/gifts",
                                   {"uid": "giver", "value": 520, "gift": "rocket"})
            assert status == 201

        async def slow() -> None:
            status, _ = await call(s, "PUT", f"{other.url}/v1/admin/rooms/{ROOM}/slow",
                                   {"seconds": 30})
            assert status == 200

        assert (await changed_between(tap))["likes"] == 7
        assert (await changed_between(gift))["ranking"]["top"] == [
            {"uid": "giver", "score": 520}]
        assert (await changed_between(slow))["slow"] == 30
        # Nothing changed since: the next poll is held (a listener that saw
        # the news is not answered again for it).
        poll = asyncio.ensure_future(listener.poll(listened.url, timeout=25, **version))
        await held_polls(listened.node.proxy.holds, 1)
        await pass_time(clock, 3 * WITHIN)
        assert not poll.done()
        poll.cancel()
