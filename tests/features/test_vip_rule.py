"""The automatic vip rule: the pure steps (hypothesis), nodes applying it over
one store (each move decided once, pins beating it), whom it counts (made-up
first polls are online, never trusted), and a room moved by it under held
polls on two nodes."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import aiohttp
import msgpack
from conftest import TEST_POLICY, opened
from hypothesis import given
from hypothesis import strategies as st
from support import (
    ADMIN_HEADERS,
    Listener,
    Running,
    pin,
    poll_once,
    release,
    running_node,
    send,
    until,
)

from liveroom import sects
from liveroom.clock import FakeClock
from liveroom.metrics import Metrics
from liveroom.sects import MOVES_KEPT, NONE, Move, VipRecord, VipRule, decode, encode, observe
from liveroom.whitelist import VipList, read_sects
from proxy.tickets import mint

RULE = VipRule(promote=100, promote_after=60, demote=40, demote_after=600)

counts = st.integers(0, 200)
steps = st.lists(st.tuples(counts, st.integers(0, 120_000)), max_size=60)
"""Observations: an online count, and the milliseconds since the previous one."""


def timeline(observations: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    now = 1_000
    for online, dt in observations:
        now += dt
        yield online, now


@given(steps)
def test_the_rule_moves_only_after_a_crossing_that_lasted(
        observations: list[tuple[int, int]]) -> None:
    record = NONE
    seen: list[tuple[int, int]] = []
    for online, now in timeline(observations):
        before = record
        record = observe(record, online, now, RULE)
        seen.append((online, now))
        if record.vip == before.vip:
            continue
        # A move: this observation and every one back to one at least the
        # delay before it (since the last move) were across the threshold.
        after_ms = (RULE.promote_after if record.vip else RULE.demote_after) * 1000
        across = (lambda c: c >= RULE.promote) if record.vip else (lambda c: c < RULE.demote)
        since_move = [(c, t) for c, t in seen if t >= (before.since_ms or 0)]
        run = []
        for c, t in reversed(since_move):
            if not across(c):
                break
            run.append(t)
        assert run
        assert now - min(run) >= after_ms
        assert record.moves[-1] == Move(now, record.vip, "auto")
        assert record.since_ms == now
        seen = [(online, now)]
    assert len(record.moves) <= MOVES_KEPT


@given(st.integers(0, 99), st.lists(st.integers(0, 200), max_size=30))
def test_a_crossing_that_lasts_moves_the_room(below: int, later: list[int]) -> None:
    record = observe(NONE, below, 1_000, RULE)
    assert record == NONE  # a normal room below the threshold: nothing to keep
    record = observe(record, 150, 2_000, RULE)
    assert (record.vip, record.candidate_ms) == (False, 2_000)
    record = observe(record, 120, 61_999, RULE)
    assert not record.vip
    record = observe(record, 100, 62_000, RULE)
    assert (record.vip, record.candidate_ms, record.reason) == (True, None, "auto")
    # In the vip sect it stays while at or above --vip-demote, whatever else.
    for online in later:
        record = observe(record, max(online, RULE.demote), 70_000, RULE)
    assert record.vip


SETTLING = VipRule(promote=100, promote_after=0, demote=40, demote_after=0, settle=600)


def test_the_rule_moves_a_room_at_most_once_per_settle_period() -> None:
    # One client pushing the count up and letting it fall: promoted once, then
    # left alone for --vip-settle however the count swings.
    record = observe(NONE, 400, 1_000, SETTLING)
    record = observe(record, 400, 1_000, SETTLING)
    assert (record.vip, record.since_ms) == (True, 1_000)
    for now in range(2_000, 601_000, 10_000):
        record = observe(record, 0, now, SETTLING)
        assert record.vip, now
    record = observe(record, 0, 601_000, SETTLING)
    assert not record.vip
    assert [(m.at_ms, m.vip) for m in record.moves] == [(1_000, True), (601_000, False)]
    # An operator's move gives the room back to the rule at once.
    pinned = sects.pin(record, "vip", 602_000)
    record = observe(observe(sects.pin(pinned, None, 603_000), 0, 603_000, SETTLING),
                     0, 603_000, SETTLING)
    assert not record.vip


@given(steps)
def test_no_two_moves_of_the_rule_are_closer_than_the_settle_period(
        observations: list[tuple[int, int]]) -> None:
    record = NONE
    for online, now in timeline(observations):
        record = observe(record, online, now, SETTLING)
    times = [m.at_ms for m in record.moves]
    assert all(b - a >= SETTLING.settle * 1000 for a, b in pairwise(times))


@given(st.sampled_from(["vip", "normal"]), steps)
def test_a_pinned_room_never_moves_by_the_rule(sect: sects.Sect,
                                               observations: list[tuple[int, int]]) -> None:
    record = sects.pin(NONE, sect, 500)
    assert record.vip == (sect == "vip")
    for online, now in timeline(observations):
        assert observe(record, online, now, RULE) == record
    unpinned = sects.pin(record, None, 900)
    assert (unpinned.vip, unpinned.pinned) == (record.vip, None)


records = st.builds(
    VipRecord, st.booleans(), st.sampled_from([None, "vip", "normal"]),
    st.integers(0, 2**53), st.one_of(st.none(), st.integers(0, 2**53)),
    st.lists(st.builds(Move, st.integers(0, 2**53), st.booleans(),
                       st.sampled_from(["auto", "pin", "operator"])),
             max_size=MOVES_KEPT).map(tuple))


@given(records)
def test_a_record_reads_back_as_it_was_stored(record: VipRecord) -> None:
    stored = encode(record)
    assert (stored == b"") == (record == NONE)
    if stored:
        assert decode(stored) == record


def test_bytes_that_are_not_a_record_are_refused() -> None:
    for junk in (b"{", b"[]", b'{"v":1}', b'{"v":1,"p":"x","s":0,"c":null,"m":[]}'):
        try:
            decode(junk)
        except ValueError:
            continue
        raise AssertionError(f"{junk!r} decoded")


# -- nodes applying the rule over one store -------------------------------------------


class Counts:
    """What a node's statsvr would say: the rooms it merged and their counts."""

    def __init__(self) -> None:
        self.online: dict[str, int] = {}

    def merged(self) -> Iterator[tuple[str, int]]:
        return iter(self.online.items())

    def of(self, room: str) -> int | None:
        return self.online.get(room)


async def test_nodes_applying_the_rule_together_move_a_room_once(
        engine_url: str, fake_clock: FakeClock) -> None:
    async with opened(engine_url, TEST_POLICY, fake_clock) as store:
        counts = Counts()
        metrics = [Metrics() for _ in range(3)]
        nodes = [VipList(store.operators, fake_clock, vip_refresh=1.0, rule=RULE, metrics=m)
                 for m in metrics]
        for node in nodes:
            node.observe(counts.merged, counts.of)
        counts.online["big"] = 150
        counts.online["small"] = 99

        async def all_decide() -> None:
            for node in nodes:
                await node.refresh(decide=False)
            await asyncio.gather(*(node.decide() for node in nodes))
            for node in nodes:
                await node.refresh(decide=False)

        await all_decide()
        assert (await read_sects(store.operators))["big"].candidate_ms == \
            int(fake_clock.time() * 1000)
        assert "small" not in await read_sects(store.operators)
        await fake_clock.advance(59.9)
        await all_decide()
        assert not any(node.is_vip("big") for node in nodes)
        await fake_clock.advance(0.1)
        await all_decide()
        assert all(node.is_vip("big") for node in nodes)

        def moved(direction: str) -> float:
            return sum(m.vip_moves.labels(direction, "auto")._value.get() for m in metrics)

        assert moved("to_vip") == 1
        # Hysteresis: between the thresholds it stays; below --vip-demote for
        # --vip-demote-after it leaves; the count back up in between starts over.
        counts.online["big"] = 60
        await all_decide()
        counts.online["big"] = 39
        await all_decide()
        await fake_clock.advance(300)
        counts.online["big"] = 41
        await all_decide()
        await fake_clock.advance(599)
        counts.online["big"] = 10
        await all_decide()
        await fake_clock.advance(599)
        await all_decide()
        assert all(node.is_vip("big") for node in nodes)
        await fake_clock.advance(1)
        await all_decide()
        assert not any(node.is_vip("big") for node in nodes)
        assert moved("to_normal") == 1
        record = (await read_sects(store.operators))["big"]
        assert [(m.vip, m.reason) for m in record.moves] == [(True, "auto"), (False, "auto")]
        # A day later, with nothing else to say, the record is dropped.
        await fake_clock.advance(86_401)
        await all_decide()
        assert await read_sects(store.operators) == {}


async def test_a_pin_beats_the_rule_and_an_unpin_gives_the_room_back(
        engine_url: str, fake_clock: FakeClock) -> None:
    rule = VipRule(promote=100, promote_after=0, demote=40, demote_after=0)
    async with opened(engine_url, TEST_POLICY, fake_clock) as store:
        counts = Counts()
        node = VipList(store.operators, fake_clock, vip_refresh=1.0, rule=rule)
        node.observe(counts.merged, counts.of)
        counts.online.update(crowd=500, quiet=0)
        await pin(store, "crowd", "normal")
        await pin(store, "quiet", "vip")
        for _ in range(3):
            await node.refresh()
        assert (node.is_vip("crowd"), node.is_vip("quiet")) == (False, True)
        await pin(store, "crowd", None)
        await node.refresh()
        await node.refresh()
        assert node.is_vip("crowd")
        await pin(store, "quiet", None)
        await node.refresh()
        await node.refresh()
        assert not node.is_vip("quiet")
        # A vip room nobody merges here is asked for (its merge starts).
        counts.online.pop("crowd")
        asked: list[str] = []
        node.observe(counts.merged, lambda room: asked.append(room) or None)
        await node.refresh()
        assert asked == ["crowd"]
        assert node.is_vip("crowd")


async def test_a_room_the_rule_moves_keeps_its_held_polls_and_messages(
        redis_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    flags = {"vip_promote": 2, "vip_promote_after": 0.0, "vip_demote": 1,
             "vip_demote_after": 0.0, "vip_refresh": 0.5}
    async with running_node(redis_url, clock, node_id="a", **flags) as a, \
            running_node(redis_url, clock, node_id="b", **flags) as b:
        await send(session, a.url, "stage", "before")
        listeners = [Listener(session, "stage", uid=f"u{i}") for i in range(2)]
        for listener, node in zip(listeners, (a, b), strict=True):
            await listener.poll(node.url)

        async def both_online() -> bool:
            return all(n.node.statsvr.online("stage") == 2 for n in (a, b))

        # The rule counts a listener that comes back with its ctx to a room
        # whose online count reached --vip-demote (Poll.trusted).
        await until(clock, both_online)
        polls = [asyncio.create_task(x.poll(n.url, timeout=60))
                 for x, n in zip(listeners, (a, b), strict=True)]

        async def both_vip() -> bool:
            return a.node.vip_list.is_vip("stage") and b.node.vip_list.is_vip("stage")

        await until(clock, both_vip, limit=20)
        await asyncio.sleep(0.2)
        assert not any(p.done() for p in polls)  # a move alone answers nobody
        sent = await send(session, b.url, "stage", "after", important=True)
        async with asyncio.timeout(5):
            answers = await asyncio.gather(*polls)
        for answer in answers:
            assert (answer["reset"], answer["gap"], answer["igap"]) == (False, 0, 0)
            assert answer["epoch"] == sent["epoch"]
            assert [m["body"] for m in answer["important"]] == ["after"]
            assert answer["spread"] in range(a.node.settings.vip_spread)
        for listener in listeners:
            assert listener.bodies() == ["before", "after"]
        records = await read_sects(a.node.store.operators)
        assert [(m.vip, m.reason) for m in records["stage"].moves] == [(True, "auto")]


# -- whom the rule counts ------------------------------------------------------------------

CROWD = 400
"""Listeners of the attack seen in open mode (one client, made-up uids)."""
COUNTING = {"vip_promote": 300, "vip_promote_after": 5.0, "vip_demote": 100,
            "vip_demote_after": 5.0, "vip_settle": 0.0, "vip_refresh": 0.5}
TICKET_KEY = "ticket-key-0123456789abcdef-0001"


async def online(session: aiohttp.ClientSession, node: Running, room: str) -> int:
    """The room's online figure as the API shows it."""
    async with session.get(f"{node.url}/v1/rooms/{room}/online", params={"limit": 1},
                           headers=ADMIN_HEADERS) as resp:
        assert resp.status == 200, await resp.text()
        count: int = (await resp.json())["online"]
        return count


async def at_least(session: aiohttp.ClientSession, node: Running, clock: FakeClock,
                   room: str, count: int) -> None:
    """Move the clock until the room's online figure reaches ``count``."""
    async def reached() -> bool:
        return await online(session, node, room) >= count

    await until(clock, reached)


async def test_made_up_first_polls_move_no_room_and_listeners_that_come_back_do(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    # The attack seen: in open mode one client sends 400 first polls of
    # made-up uids; with --vip-promote 300 the room went vip in 9 s.
    clock = FakeClock()
    async with running_node(engine_url, clock, **COUNTING) as node:
        vip_list = node.node.vip_list
        await send(session, node.url, "stage", "hi")
        answers = await asyncio.gather(*(
            poll_once(session, node.url, "stage", {"uid": f"fake{i}"}) for i in range(CROWD)))
        # The online figure counts them, as it always did.
        await at_least(session, node, clock, "stage", CROWD)
        assert await online(session, node, "stage") == CROWD
        # Made-up second polls: every uid with the cursor and ctx of fake0's
        # answer (a ctx is bound to its uid), behind the head so they answer at once.
        await send(session, node.url, "stage", "more")
        replayed = {key: answers[0][key] for key in ("epoch", "seq", "iseq", "ctx")}
        await asyncio.gather(*(poll_once(session, node.url, "stage",
                                         {"uid": f"fake{i}", **replayed})
                               for i in range(CROWD)))
        # The rule counts fake0 alone (it did come back with its own ctx):
        # three times --vip-promote-after later the room is normal and no
        # crossing has even started.
        for _ in range(30):
            await clock.advance(0.5)
            await asyncio.sleep(0.01)
        assert not vip_list.is_vip("stage")
        assert "stage" not in await read_sects(node.node.store.operators)
        assert node.node.statsvr.merge.trusted("stage") == 1
        assert await online(session, node, "stage") == CROWD

        # As many listeners that come back with the ctx they were given count.
        await send(session, node.url, "crowd", "hi")
        fans = [Listener(session, "crowd", uid=f"fan{i}") for i in range(CROWD)]
        await asyncio.gather(*(fan.poll(node.url) for fan in fans))
        await at_least(session, node, clock, "crowd", CROWD)
        await send(session, node.url, "crowd", "again")  # their next polls answer at once
        await asyncio.gather(*(fan.poll(node.url) for fan in fans))

        async def crowd_vip() -> bool:
            return vip_list.is_vip("crowd")

        await until(clock, crowd_vip, limit=30)
        assert node.node.statsvr.merge.trusted("crowd") == CROWD
        assert await online(session, node, "crowd") == CROWD
        assert not vip_list.is_vip("stage")


async def test_in_ticket_mode_every_listener_counts_at_once(
        engine_url: str, session: aiohttp.ClientSession) -> None:
    clock = FakeClock()
    async with running_node(engine_url, clock, auth="ticket", ticket_keys=(TICKET_KEY,),
                            **COUNTING) as node:
        await send(session, node.url, "stage", "hi", important=True)

        async def first_poll(uid: str) -> None:
            ticket = mint(TICKET_KEY, uid, rooms=["stage"], now=clock.time())
            async with session.get(f"{node.url}/v1/rooms/stage/poll",
                                   headers={"Authorization": f"Bearer {ticket}"}) as resp:
                assert resp.status == 200, await resp.text()

        await asyncio.gather(*(first_poll(f"fan{i}") for i in range(CROWD)))

        async def stage_vip() -> bool:
            return node.node.vip_list.is_vip("stage")

        await until(clock, stage_vip, limit=30)
        assert node.node.statsvr.merge.trusted("stage") == CROWD


# -- the routing hint ---------------------------------------------------------------------


async def test_a_vip_rooms_answers_carry_a_stable_hint_and_others_none(
        session: aiohttp.ClientSession) -> None:
    async with running_node(vip_spread=8) as node:
        url = f"{node.url}/v1/rooms/stage/poll"
        await send(session, node.url, "stage", "hi")

        async def answer(**params: str) -> dict[str, Any]:
            async with session.get(url, params={"uid": "alice", **params}) as resp:
                assert resp.status == 200, await resp.text()
                doc: dict[str, Any] = await resp.json()
                return doc

        assert "spread" not in await answer()
        node.node.vip_list.note(await pin(node.node.store, "stage"))
        drawn = zlib.crc32(b"alice") % 8
        assert (await answer())["spread"] == drawn
        # A hint the node did not give is ignored: the answer has the uid's own.
        other = (drawn + 5) % 8
        assert (await answer(spread=str(other)))["spread"] == drawn
        assert (await answer(spread="8"))["spread"] == drawn  # beyond --vip-spread: drawn
        # msgpack answers carry it too (one more field in the map).
        async with session.get(url, params={"uid": "alice", "spread": str(other)},
                               headers={"Accept": "application/msgpack"}) as resp:
            doc = msgpack.unpackb(await resp.read())
        assert doc["spread"] == drawn
        assert doc["messages"][0]["body"] == "hi"
        for bad in ("-1", "4096", "x", ""):
            async with session.get(url, params={"uid": "alice", "spread": bad}) as resp:
                assert resp.status == 400, bad
                assert (await resp.json())["message"].startswith("spread must be")
        node.node.vip_list.note(await release(node.node.store, "stage"))
        assert "spread" not in await answer(spread="5")


async def test_with_the_rule_off_only_operators_move_rooms(
        session: aiohttp.ClientSession) -> None:
    async with running_node(auto_vip="off", vip_promote=1, vip_demote=0,
                            vip_refresh=0.1) as node:
        assert node.node.vip_list.rule is None
        listener = Listener(session, "stage")
        await listener.poll(node.url)
        async with session.get(f"{node.url}/v1/admin/vip", headers=ADMIN_HEADERS) as resp:
            assert (await resp.json())["rule"] is None
        assert await node.node.vip_list.decide() == []
        assert not node.node.vip_list.is_vip("stage")
