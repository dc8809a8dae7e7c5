"""The review store contract: held messages wait per room, bounded, until
one decision takes each; a retried approval answers the same; the queue
expires with the room's ttl and survives a node's restart on Redis.

Each test runs once per engine (the ``store`` fixture is parametrized with
``memory``, ``redis`` and ``cluster``); the property test runs random holds
and decisions through each engine and compares them with a plain-Python
model. The keys' own expiry is checked through the TTLs Redis holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import redis.asyncio
from conftest import (
    ENGINES,
    TEST_POLICY,
    RedisServer,
    RoundTrips,
    fresh_engine_url,
    opened,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.model import NewMessage
from liveroom.store import Store
from liveroom.store.base import WHY_MAX, Held, Holding, Verdict
from liveroom.store.redis import keys

T = 1_790_000_000_000
SMALL = replace(TEST_POLICY, review_max=3)
"""Three held messages a room, and three decisions remembered."""


def said(uid: str = "bob", body: Any = "hi", *, ts: int = T, important: bool = False,
         to: str | None = None, cmid: str | None = None) -> NewMessage:
    return NewMessage(uid, body, important or to is not None, ts, cmid, to)


@pytest.fixture
async def small(engine_url: str, fake_clock: FakeClock) -> Any:
    """A started store of each engine whose rooms hold three messages."""
    async with opened(engine_url, SMALL, fake_clock) as engine:
        yield engine


# --- holding and listing ------------------------------------------------------------------


async def test_held_messages_are_listed_oldest_first_with_what_they_are(store: Store) -> None:
    review = store.review
    assert await review.held("r", 10) == ([], 0)
    assert await review.hold("r", said("bob", {"text": "darn"}), "word: darn") == \
        Holding("1", again=False)
    assert (await review.hold("r", said("host", [1, 2.5, None], ts=T + 1, important=True),
                              "")).id == "2"
    assert (await review.hold("r", said("sys", "for you", ts=T + 2, to="al", cmid="c-1"),
                              "hook: é 🎁")).id == "3"
    assert (await review.hold("other", said(), "x")).id == "1"  # ids are per room
    assert await review.held("r", 10) == ([
        Held("1", "bob", "normal", {"text": "darn"}, T, "word: darn"),
        Held("2", "host", "important", [1, 2.5, None], T + 1, ""),
        Held("3", "sys", "personal", "for you", T + 2, "hook: é 🎁", to="al",
             client_msg_id="c-1")], 3)
    listed, count = await review.held("r", 2)
    assert ([h.id for h in listed], count) == (["1", "2"], 3)


async def test_a_full_queue_drops_its_oldest_and_says_which(small: Store) -> None:
    review = small.review
    for n in range(1, 4):
        assert (await review.hold("r", said(body=n, cmid=f"m{n}"), "w")).dropped == ()
    holding = await review.hold("r", said(body=4), "w")
    assert holding == Holding("4", again=False, dropped=(
        Held("1", "bob", "normal", 1, T, "w", client_msg_id="m1"),))
    assert [h.body for h in (await review.held("r", 10))[0]] == [2, 3, 4]
    assert await review.decide("r", "1", "approve") is None  # gone for good
    # Its client_msg_id is free again: the same send is a new message.
    assert await review.hold("r", said(body=1, cmid="m1"), "w") == Holding(
        "5", again=False, dropped=(Held("2", "bob", "normal", 2, T, "w", client_msg_id="m2"),))


async def test_a_send_held_again_answers_its_first_id(store: Store) -> None:
    review = store.review
    first = await review.hold("r", said(body="a", cmid="retry-1"), "w")
    assert await review.hold("r", said(body="a", cmid="retry-1"), "w") == Holding(
        first.id, again=True)
    assert (await review.held("r", 10))[1] == 1
    await review.decide("r", first.id, "deny")
    assert await review.hold("r", said(body="a", cmid="retry-1"), "w") == Holding(
        first.id, again=True)  # decided: still the same send
    assert (await review.hold("other", said(cmid="retry-1"), "w")).again is False


# --- deciding -----------------------------------------------------------------------------


async def test_an_approval_keeps_the_body_until_settled_and_answers_the_same(
        store: Store) -> None:
    review = store.review
    await review.hold("r", said("bob", {"t": 1}), "w")
    held = Held("1", "bob", "normal", {"t": 1}, T, "w")
    assert await review.decide("r", "1", "approve") == Verdict(held, "approve", True)
    assert await review.held("r", 10) == ([], 0)
    # Not settled yet: a retry is told the body again, to store it.
    assert await review.decide("r", "1", "approve") == Verdict(held, "approve", False)
    assert await review.decide("r", "1", "deny") == Verdict(held, "approve", False)
    await review.settle("r", "1", "ep0ch", 42)
    settled = Verdict(replace(held, body=None), "approve", False, "ep0ch", 42)
    assert await review.decide("r", "1", "approve") == settled
    await review.settle("r", "1", "ep0ch", 42)  # settling again changes nothing
    assert await review.decide("r", "1", "deny") == settled


async def test_a_denial_drops_the_body_at_once_and_stands(store: Store) -> None:
    review = store.review
    await review.hold("r", said("bob", "rude", to="al"), "w")
    denied = Verdict(Held("1", "bob", "personal", None, T, "w", to="al"), "deny", True)
    assert await review.decide("r", "1", "deny") == denied
    assert await review.decide("r", "1", "approve") == replace(denied, first=False)
    await review.settle("r", "1", "e", 1)  # no approval: nothing to settle
    assert await review.decide("r", "1", "approve") == replace(denied, first=False)


async def test_find_reads_a_message_while_it_waits(store: Store) -> None:
    review = store.review
    await review.hold("r", said("bob", {"t": 1}, to="al"), "w")
    await review.hold("r", said("eve", 2), "w")
    assert await review.find("r", "1") == Held("1", "bob", "personal", {"t": 1}, T, "w",
                                               to="al")
    await review.decide("r", "1", "approve")
    assert await review.find("r", "1") is None  # decided: no longer waiting
    assert (await review.find("r", "2")) is not None
    assert await review.find("r", "3") is None
    assert await review.find("elsewhere", "2") is None


async def test_unknown_ids_are_none_and_change_nothing(store: Store) -> None:
    review = store.review
    assert await review.decide("r", "1", "approve") is None
    await review.hold("r", said(), "w")
    assert await review.decide("r", "2", "deny") is None
    assert await review.decide("elsewhere", "1", "deny") is None
    await review.settle("r", "9", "e", 1)
    assert (await review.held("r", 10))[1] == 1


async def test_of_an_approval_and_a_denial_racing_one_wins(store: Store) -> None:
    review = store.review
    for n in range(20):
        await review.hold("race", said(body=n), "w")
    for n in range(1, 21):
        one, two = await asyncio.gather(review.decide("race", str(n), "approve"),
                                        review.decide("race", str(n), "deny"))
        assert one is not None
        assert two is not None
        assert (one.first, two.first) in ((True, False), (False, True))
        assert one.verdict == two.verdict


async def test_a_room_remembers_its_newest_decisions_only(small: Store) -> None:
    review = small.review
    for n in range(1, 5):
        await review.hold("r", said(body=n, cmid=f"m{n}"), "w")  # the first dropped
    for n in ("2", "3", "4"):
        assert (await review.decide("r", n, "deny")) is not None
    await review.hold("r", said(body=5), "w")
    assert (await review.decide("r", "5", "approve")) is not None
    assert await review.decide("r", "2", "deny") is None  # forgotten: the oldest
    assert (await review.decide("r", "3", "approve")).verdict == "deny"  # type: ignore[union-attr]
    # A forgotten decision frees its client_msg_id.
    assert (await review.hold("r", said(cmid="m2"), "w")).again is False
    assert (await review.hold("r", said(cmid="m3"), "w")).again is True


# --- rules and limits --------------------------------------------------------------------


async def test_bad_input_is_refused_and_nothing_is_stored(store: Store) -> None:
    review = store.review
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: review.hold("..", said(), "w"),
        lambda: review.hold("r", said("bad uid"), "w"),
        lambda: review.hold("r", said(to="bad to"), "w"),
        lambda: review.hold("r", said(ts=-1), "w"),
        lambda: review.hold("r", said(ts=2**53), "w"),
        lambda: review.hold("r", said(), "x" * (WHY_MAX + 1)),
        lambda: review.hold("r", said(), "\ud800"),
        lambda: review.hold("r", "hi", "w"),  # type: ignore[arg-type]
        lambda: review.held("r", 0),
        lambda: review.held("r", 1001),
        lambda: review.held("bad room", 1),
        lambda: review.find("r", "0"),
        lambda: review.find("r r", "1"),
        lambda: review.decide("r", "0", "approve"),
        lambda: review.decide("r", "01x", "approve"),
        lambda: review.decide("r", "", "deny"),
        lambda: review.decide("r", "1", "maybe"),
        lambda: review.settle("r", "1", "", 1),
        lambda: review.settle("r", "1", "e", 0),
    ]
    for call in calls:
        with pytest.raises(ValueError):  # noqa: PT011 (each message is the rule's own)
            await call()
    assert await review.held("r", 10) == ([], 0)
    assert (await review.hold("r", said(), "x" * WHY_MAX)).id == "1"


async def test_every_call_is_one_round_trip(store: Store,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    review = store.review
    if store.name == "memory":  # never suspends: done at the first step
        holding = review.hold("r", said(), "w").__await__()
        with pytest.raises(StopIteration):
            next(holding)
        return
    await review.hold("r", said(), "w")  # the scripts loaded
    await review.held("r", 1)
    await review.decide("r", "1", "approve")
    await review.settle("r", "1", "e", 1)
    trips = RoundTrips(store.review._client, monkeypatch)  # type: ignore[attr-defined]
    for n in range(2, 12):
        await review.hold("r", said(body=n), "w")
    assert trips.count == 10
    assert len((await review.held("r", 100))[0]) == 10
    assert trips.count == 11
    await review.decide("r", "5", "approve")
    await review.settle("r", "5", "e", 2)
    assert trips.count == 13
    assert await review.find("r", "6") is not None
    assert trips.count == 14


async def test_a_queue_expires_with_the_rooms_ttl(memory_store: Store,
                                                  fake_clock: FakeClock) -> None:
    """The memory engine on its clock; the redis engines' TTLs below."""
    review = memory_store.review
    ttl = TEST_POLICY.room_ttl_ms / 1000
    await review.hold("r", said(), "w")
    await fake_clock.advance(ttl - 1)
    await review.hold("r", said(), "w")  # a hold pushes it back
    await fake_clock.advance(ttl - 1)
    assert (await review.held("r", 10))[1] == 2
    await review.decide("r", "1", "approve")  # so does a decision
    await fake_clock.advance(ttl - 1)
    assert (await review.held("r", 10))[1] == 1
    await fake_clock.advance(2)
    assert await review.held("r", 10) == ([], 0)
    assert await review.decide("r", "1", "approve") is None
    assert (await review.hold("r", said(), "w")).id == "1"  # a new queue


@pytest.mark.redis_engines
async def test_the_queues_keys_live_the_rooms_ttl_in_its_slot(
        engine_url: str, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    assert raw_redis is not None
    ttl = 120_000
    async with opened(engine_url, replace(TEST_POLICY, room_ttl_ms=ttl), fake_clock) as store:
        review = store.review
        room_keys = (keys.review("r"), keys.review_waiting("r"), keys.review_decided("r"))
        await review.hold("r", said(), "w")
        await review.hold("r", said(), "w")
        await review.decide("r", "1", "deny")
        for key in room_keys:
            assert ttl - 5_000 < await raw_redis.pttl(key) <= ttl, key
        assert {key_slot(k.encode()) for k in room_keys} == {key_slot(keys.meta("r").encode())}


@pytest.mark.redis_engines
async def test_held_messages_survive_a_restart_of_the_node(engine_url: str,
                                                           fake_clock: FakeClock) -> None:
    async with opened(engine_url, TEST_POLICY, fake_clock) as store:
        await store.review.hold("r", said(body={"kept": True}, cmid="c"), "w")
        await store.review.hold("r", said(body=2), "w")
        await store.review.decide("r", "2", "approve")
    async with opened(engine_url, TEST_POLICY, fake_clock) as store:
        assert await store.review.held("r", 10) == (
            [Held("1", "bob", "normal", {"kept": True}, T, "w", client_msg_id="c")], 1)
        assert (await store.review.decide("r", "2", "deny")) == Verdict(
            Held("2", "bob", "normal", 2, T, "w"), "approve", False)


@pytest.mark.redis_engines
async def test_records_that_do_not_decode_are_left_out(
        store: Store, raw_redis: redis.asyncio.Redis | None) -> None:
    assert raw_redis is not None
    await store.review.hold("r", said(), "w")
    await raw_redis.hset(keys.review("r"), mapping={"7": b"\xc1", "8": b"[1]", "b:8": b"\xc0"})
    await raw_redis.zadd(keys.review_waiting("r"), {"7": 0, "8": 0})
    listed, count = await store.review.held("r", 10)
    assert ([h.id for h in listed], count) == (["1"], 3)
    assert await store.review.decide("r", "7", "approve") is None
    assert await store.review.find("r", "8") is None


async def test_every_review_call_reports_redis_down_as_unavailable(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, TEST_POLICY, fake_clock) as store:
        review = store.review
        redis_server.stop()
        try:
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: review.hold("r", said(), "w"),
                lambda: review.held("r", 10),
                lambda: review.find("r", "1"),
                lambda: review.decide("r", "1", "approve"),
                lambda: review.settle("r", "1", "e", 1),
            ]
            for call in calls:
                with pytest.raises(StoreUnavailable):
                    await call()
        finally:
            redis_server.start()


# --- against a model ---------------------------------------------------------------------


@dataclass
class QueueModel:
    given: int = 0
    waiting: dict[str, Held] = field(default_factory=dict)
    decided: dict[str, Verdict] = field(default_factory=dict)
    cmids: dict[str, str] = field(default_factory=dict)


class ReviewModel:
    """What the contract says, in plain Python (no expiry: the clock stands)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.rooms: dict[str, QueueModel] = {}

    def hold(self, room: str, message: NewMessage, why: str) -> Holding:
        q = self.rooms.setdefault(room, QueueModel())
        cmid = message.client_msg_id
        if cmid in q.cmids:
            return Holding(q.cmids[cmid], again=True)
        q.given += 1
        held_id = str(q.given)
        kind = "personal" if message.to else "important" if message.important else "normal"
        q.waiting[held_id] = Held(held_id, message.uid, kind, message.body, message.ts, why,
                                  message.to, cmid)
        if cmid is not None:
            q.cmids[cmid] = held_id
        dropped = []
        while len(q.waiting) > self.keep:
            gone = q.waiting.pop(next(iter(q.waiting)))
            q.cmids.pop(gone.client_msg_id or "", None)
            dropped.append(gone)
        return Holding(held_id, again=False, dropped=tuple(dropped))

    def decide(self, room: str, held_id: str, verdict: str) -> Verdict | None:
        q = self.rooms.get(room, QueueModel())
        if held_id in q.decided:
            return replace(q.decided[held_id], first=False)
        held = q.waiting.pop(held_id, None)
        if held is None:
            return None
        if verdict == "deny":
            held = replace(held, body=None)
        q.decided[held_id] = Verdict(held, verdict, True)
        while len(q.decided) > self.keep:
            gone = q.decided.pop(next(iter(q.decided)))
            q.cmids.pop(gone.held.client_msg_id or "", None)
        return q.decided[held_id]

    def settle(self, room: str, held_id: str, epoch: str, seq: int) -> None:
        q = self.rooms.get(room, QueueModel())
        done = q.decided.get(held_id)
        if done is not None and done.verdict == "approve":
            q.decided[held_id] = Verdict(replace(done.held, body=None), "approve", True, epoch,
                                         seq)


ROOMS = ["r1", "r2"]
steps = st.lists(st.one_of(
    st.tuples(st.just("hold"), st.sampled_from(ROOMS), st.sampled_from(["a", "b"]),
              st.sampled_from([None, "c1", "c2", "c3"]), st.booleans(),
              st.sampled_from([None, "al"])),
    st.tuples(st.just("decide"), st.sampled_from(ROOMS), st.integers(1, 8),
              st.sampled_from(["approve", "deny"])),
    st.tuples(st.just("settle"), st.sampled_from(ROOMS), st.integers(1, 8),
              st.integers(1, 99))), max_size=30)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(given_steps=steps)
def test_review_matches_the_model(engine: str, request: pytest.FixtureRequest,
                                  given_steps: list[tuple[Any, ...]]) -> None:
    asyncio.run(_run_steps(fresh_engine_url(engine, request), given_steps))


async def _run_steps(url: str, given_steps: list[tuple[Any, ...]]) -> None:
    model = ReviewModel(SMALL.review_max)
    async with opened(url, SMALL, FakeClock(T / 1000)) as store:
        review = store.review
        for n, step in enumerate(given_steps):
            if step[0] == "hold":
                _, room, uid, cmid, important, to = step
                message = said(uid, {"n": n}, ts=T + n, important=important, to=to, cmid=cmid)
                assert await review.hold(room, message, f"why {n}") == \
                    model.hold(room, message, f"why {n}")
            elif step[0] == "decide":
                _, room, held_id, verdict = step
                got = await review.decide(room, str(held_id), verdict)
                wanted = model.decide(room, str(held_id), verdict)
                if got is not None and wanted is not None and not got.first:
                    wanted = replace(wanted, first=False)
                assert got == wanted
            else:
                _, room, held_id, seq = step
                await review.settle(room, str(held_id), "ep", seq)
                model.settle(room, str(held_id), "ep", seq)
            for room in ROOMS:
                queue = model.rooms.get(room, QueueModel())
                assert await review.held(room, 10) == (list(queue.waiting.values()),
                                                       len(queue.waiting))
                for held_id in map(str, range(1, 9)):
                    assert await review.find(room, held_id) == queue.waiting.get(held_id)
