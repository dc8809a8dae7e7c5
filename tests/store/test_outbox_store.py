"""The outbox store contract (``liveroom/store/outbox.py``): events wait in
order until done, one holder at a time reads them, a new holder takes over
what the last one read and did not finish, and given-up events wait in the
failed list until replayed. A room action's event is kept by the action's
own step (``liveroom/events.py``): a node that dies right after the action
leaves it in its room, and the sweep moves it; a move repeated adds it
once; an action that changed nothing keeps none.

Each test runs once per engine (``memory``, ``redis`` and ``cluster``);
what only a shared store has (a lease another process can lose) runs on
the redis engines.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import orjson
import pytest
from conftest import TEST_POLICY, opened

from liveroom.clock import FakeClock
from liveroom.events import SWEEP_GRACE_MS, Events
from liveroom.model import NewMessage
from liveroom.store import Store
from liveroom.store.base import FAILED_LIST_MAX, AuditEntry, Moving, Outgoing, VipSwap

ROOM = "evroom"


def event(n: int) -> tuple[str, bytes]:
    return f"ev_{n:04d}", b'{"id":"ev_%04d","room":"r","n":%d}' % (n, n)


async def add(store: Store, *numbers: int) -> None:
    for n in numbers:
        await store.outbox.add(*event(n))


def ids(events: list[Outgoing]) -> list[str]:
    return [e.event_id for e in events]


async def test_events_are_read_in_order_once_and_leave_when_done(store: Store) -> None:
    outbox = store.outbox
    assert await outbox.lease("a", 5_000)
    assert await outbox.take_over("a", 100) == []
    await add(store, 1, 2, 3)
    assert await outbox.waiting() == 3
    first = await outbox.next("a", 2)
    assert ids(first) == ["ev_0001", "ev_0002"]
    assert first[0].data == event(1)[1]
    assert ids(await outbox.next("a", 10)) == ["ev_0003"]
    assert await outbox.next("a", 10) == []
    await outbox.done([first[0].entry, first[1].entry])
    assert await outbox.waiting() == 1


async def test_a_new_holder_takes_over_what_was_read_and_not_done(store: Store) -> None:
    outbox = store.outbox
    assert await outbox.lease("a", 5_000)
    await outbox.take_over("a", 100)
    await add(store, 1, 2, 3)
    read = await outbox.next("a", 10)
    await outbox.done([read[1].entry])
    await outbox.release("a")
    assert await outbox.lease("b", 5_000)
    assert ids(await outbox.take_over("b", 100)) == ["ev_0001", "ev_0003"]
    await add(store, 4)
    assert ids(await outbox.next("b", 10)) == ["ev_0004"]


async def test_given_up_events_are_listed_and_replayed_under_their_ids(store: Store) -> None:
    outbox = store.outbox
    assert await outbox.lease("a", 5_000)
    await outbox.take_over("a", 100)
    await add(store, 1, 2, 3)
    read = await outbox.next("a", 10)
    await outbox.give_up(read[0], "503", 1_000)
    await outbox.give_up(read[2], "timeout", 2_000)
    failed, count = await outbox.failed(10)
    assert count == 2
    assert [(f.event_id, f.why, f.failed_ms, f.data) for f in failed] == [
        ("ev_0001", "503", 1_000, event(1)[1]), ("ev_0003", "timeout", 2_000, event(3)[1])]
    assert (await outbox.failed(1))[0][0].event_id == "ev_0001"
    assert await outbox.waiting() == 1
    assert await outbox.replay(["ev_0003", "ev_9999"]) == ["ev_0003"]
    assert ids(await outbox.next("a", 10)) == ["ev_0003"]
    assert await outbox.replay(None) == ["ev_0001"]
    assert (await outbox.failed(10)) == ([], 0)
    assert ids(await outbox.next("a", 10)) == ["ev_0001"]


async def test_bad_input_is_refused(store: Store) -> None:
    outbox = store.outbox
    for bad in ("", "a b", "x" * 65, "é"):
        with pytest.raises(ValueError, match="event id"):
            await outbox.add(bad, b"{}")
        with pytest.raises(ValueError, match="event id"):
            await outbox.replay([bad])
    for limit in (0, FAILED_LIST_MAX + 1):
        with pytest.raises(ValueError, match="limit"):
            await outbox.failed(limit)


@pytest.mark.redis_engines
async def test_one_holder_at_a_time_and_a_lost_lease_goes_to_the_next(
        engine_url: str, fake_clock: FakeClock, raw_redis: Any) -> None:
    async with opened(engine_url, TEST_POLICY, fake_clock) as one, \
            opened(engine_url, TEST_POLICY, fake_clock) as other:
        assert await one.outbox.lease("a", 200)
        assert await one.outbox.lease("a", 200)  # renewed
        assert not await other.outbox.lease("b", 200)
        await other.outbox.release("b")  # not its lease: nothing happens
        assert not await other.outbox.lease("b", 200)
        await add(one, 1)
        await one.outbox.take_over("a", 10)
        assert ids(await one.outbox.next("a", 10)) == ["ev_0001"]
        await asyncio.sleep(0.3)  # "a" died: its lease runs out in the store
        assert await other.outbox.lease("b", 5_000)
        assert not await one.outbox.lease("a", 200)
        assert ids(await other.outbox.take_over("b", 10)) == ["ev_0001"]
        if raw_redis is not None:  # the dead consumer is forgotten
            consumers = await raw_redis.xinfo_consumers("lr:{lr}:wh", "deliver")
            assert [c["name"] for c in consumers] == [b"b"]


@pytest.mark.redis_engines
async def test_the_outbox_survives_a_flushed_group(engine_url: str, fake_clock: FakeClock,
                                                   raw_redis: Any) -> None:
    async with opened(engine_url, TEST_POLICY, fake_clock) as store:
        assert await store.outbox.lease("a", 5_000)
        await store.outbox.take_over("a", 10)
        await raw_redis.flushall()
        await add(store, 1)
        assert ids(await store.outbox.next("a", 10)) == ["ev_0001"]


# --- events kept with their actions -----------------------------------------------------


def docs(events: list[Outgoing]) -> list[dict[str, Any]]:
    return [orjson.loads(e.data) for e in events]


async def delivered(store: Store) -> list[dict[str, Any]]:
    """What the delivering node reads now (and finishes)."""
    assert await store.outbox.lease("d", 5_000)
    found = await store.outbox.take_over("d", 100) + await store.outbox.next("d", 100)
    await store.outbox.done([e.entry for e in found])
    return docs(found)


async def test_events_of_a_node_that_died_after_its_actions_are_swept_once(
        store: Store, fake_clock: FakeClock) -> None:
    """A ban, a gift, a recall and a broadcast's end, each kept by its
    store call; the node dies before it moves them (no ``settle``): another
    node's sweep moves them, once the grace passed, and only once."""
    dying = Events(store.outbox, fake_clock)
    at = int(fake_clock.time() * 1000)
    sent = await store.log.append(ROOM, NewMessage("bob", "hi", False, at))
    ahead = await dying.ahead("uid.banned", ROOM, uid="mal", seconds=0, reason="r", by="admin")
    assert ahead is not None
    await store.moderation.act(ROOM, AuditEntry(at, "admin", "ban", "mal", 0, "r"), at,
                               event=ahead.event)
    ahead = await dying.ahead("gift.given", ROOM, uid="fan", gift="rocket", value=30)
    assert ahead is not None
    await store.counters.add_gift(ROOM, "fan", 30, "rocket", at, event=ahead.event)
    ahead = await dying.ahead("message.recalled", ROOM, lane="room", seq=sent.seq, by="admin")
    assert ahead is not None
    await store.log.recall(ROOM, sent.seq, at_ms=at, event=ahead.event)
    ahead = await dying.ahead("broadcast.ended", ROOM)
    assert ahead is not None
    await store.operators.end_broadcast(ROOM, at, 60_000, event=ahead.event)
    assert await store.outbox.waiting() == 0  # none moved: the node died
    assert len(await store.outbox.pending(ROOM)) == 4

    sweeping = Events(store.outbox, fake_clock)
    assert await sweeping.sweep() == 0  # marked a moment ago: the acting node's
    await fake_clock.advance(SWEEP_GRACE_MS / 1000 + 1)
    assert await sweeping.sweep() == 1
    assert await sweeping.sweep() == 0  # the mark is lifted
    assert await store.outbox.pending(ROOM) == []
    got = await delivered(store)
    assert [e["type"] for e in got] == ["uid.banned", "gift.given", "message.recalled",
                                        "broadcast.ended"]
    banned, gift, recalled, ended = got
    assert (banned["uid"], banned["reason"], banned["room"]) == ("mal", "r", ROOM)
    assert (gift["rank"], gift["score"], gift["total"], gift["value"]) == (1, 30, 30, 30)
    assert (recalled["uid"], recalled["to"], recalled["seq"]) == ("bob", None, sent.seq)
    assert ended["broadcast"] == 1
    assert len({e["id"] for e in got}) == 4


async def test_an_earlier_actions_event_is_swept_when_a_later_ones_move_came_first(
        store: Store, fake_clock: FakeClock) -> None:
    """Two actions of one room mark it; the later one's event is written and
    moved first, then the earlier one writes its event and its node dies
    before moving it: the later move lifted its own mark only, and the sweep
    moves the earlier event (it lifted the room's before: the event stayed
    in the room, never delivered)."""
    events = Events(store.outbox, fake_clock)
    at = int(fake_clock.time() * 1000)
    earlier = await events.ahead("gift.given", ROOM, uid="fan", gift="g", value=5)
    later = await events.ahead("gift.given", ROOM, uid="fan", gift="g", value=7)
    assert earlier is not None
    assert later is not None
    await store.counters.add_gift(ROOM, "fan", 7, "g", at, event=later.event)
    await events.settle(later)
    await store.counters.add_gift(ROOM, "fan", 5, "g", at, event=earlier.event)
    assert len(await store.outbox.pending(ROOM)) == 1  # its node died: no settle
    await fake_clock.advance(SWEEP_GRACE_MS / 1000 + 1)
    assert await events.sweep() == 1
    assert await store.outbox.pending(ROOM) == []
    assert await events.sweep() == 0
    assert [e["value"] for e in await delivered(store)] == [7, 5]


async def test_a_move_repeated_adds_each_event_once(store: Store,
                                                    fake_clock: FakeClock) -> None:
    """Two movers read the room's events before either took them out (or
    one died between the outbox taking them in and the room letting them
    go, and the sweep moves them again): the outbox has each once."""
    events = Events(store.outbox, fake_clock)
    at = int(fake_clock.time() * 1000)
    aheads = []
    for value in (5, 7):
        ahead = await events.ahead("gift.given", ROOM, uid="fan", gift="g", value=value)
        assert ahead is not None
        await store.counters.add_gift(ROOM, "fan", value, "g", at, event=ahead.event)
        aheads.append(ahead)
    kept = await store.outbox.pending(ROOM)
    moving = [Moving(k, orjson.loads(k)["id"], k) for k in kept]
    await store.outbox.move(ROOM, moving, None)
    await store.outbox.move(ROOM, moving, None)
    assert await store.outbox.pending(ROOM) == []
    assert await store.outbox.waiting() == 2
    for ahead in aheads:  # nothing left to move; each lifts its mark
        await events.settle(ahead)
    assert await store.outbox.waiting() == 2
    assert await store.outbox.marked(at + 10**9, 10) == []
    assert [e["total"] for e in await delivered(store)] == [5, 12]


async def test_an_action_that_changed_nothing_keeps_no_event(store: Store,
                                                             fake_clock: FakeClock) -> None:
    """A recall repeated, a lift of no sanction, a retried act: no event."""
    events = Events(store.outbox, fake_clock)
    at = int(fake_clock.time() * 1000)
    sent = await store.log.append(ROOM, NewMessage("bob", "hi", False, at))
    for _ in range(2):
        ahead = await events.ahead("message.recalled", ROOM, lane="room", seq=sent.seq,
                                   by="admin")
        assert ahead is not None
        await store.log.recall(ROOM, sent.seq, at_ms=at, event=ahead.event)
        await events.settle(ahead)
    for action, kind in (("unban", "uid.unbanned"), ("ban", "uid.banned"),
                         ("ban", "uid.banned"), ("unban", "uid.unbanned"),
                         ("unban", "uid.unbanned")):
        ahead = await events.ahead(kind, ROOM, uid="mal", seconds=0, reason="", by="admin")
        assert ahead is not None
        # The same entry twice: the second ban is a retry of the first.
        await store.moderation.act(ROOM, AuditEntry(at, "admin", action, "mal", 0, ""), at,
                                   event=ahead.event)
        await events.settle(ahead)
    assert [e["type"] for e in await delivered(store)] == \
        ["message.recalled", "uid.banned", "uid.unbanned"]
    assert await store.outbox.marked(at + 10**9, 10) == []


async def test_a_started_broadcast_keeps_its_number_epoch_and_whether_it_opened_the_room(
        store: Store, fake_clock: FakeClock) -> None:
    events = Events(store.outbox, fake_clock)
    for _ in range(2):
        ahead = await events.ahead("broadcast.started", ROOM)
        started = await store.operators.start_broadcast(
            ROOM, event=None if ahead is None else ahead.event)
        await events.settle(ahead)
    got = await delivered(store)
    assert [(e["broadcast"], e["epoch"], e["created"]) for e in got] == \
        [(1, started.epoch, True), (1, started.epoch, False)]


async def test_webhooks_off_keep_nothing(store: Store, fake_clock: FakeClock) -> None:
    events = Events(None, fake_clock)
    assert await events.ahead("gift.given", ROOM, uid="fan", gift="g", value=1) is None
    await store.counters.add_gift(ROOM, "fan", 1, "g", 0, event=None)
    assert await store.outbox.pending(ROOM) == []
    assert await events.sweep() == 0


async def test_a_sect_swap_writes_its_event_to_the_outbox_only_when_it_applies(
        store: Store, fake_clock: FakeClock) -> None:
    """The sect records share the outbox's slot: the swap's own step writes
    the event, and a swap that lost the race (its ``before`` is stale)
    writes none."""
    events = Events(store.outbox, fake_clock)
    made = events.made("room.sect_changed", ROOM, sect="vip", reason="pin")
    assert made is not None
    assert await store.operators.vip_swap([VipSwap(ROOM, b"", b"rec1", True, *made)]) == [True]
    stale = events.made("room.sect_changed", ROOM, sect="normal", reason="pin")
    assert stale is not None
    assert await store.operators.vip_swap([VipSwap(ROOM, b"", b"rec2", False, *stale)]) == \
        [False]
    got = await delivered(store)
    assert [(e["id"], e["type"], e["sect"], e["reason"]) for e in got] == \
        [(made[0], "room.sect_changed", "vip", "pin")]


@pytest.mark.parametrize("personal", [False, True])
async def test_the_review_queue_keeps_its_events_with_its_steps(
        engine_url: str, fake_clock: FakeClock, personal: bool) -> None:
    """A hold keeps its message.held (not a hold repeated by its
    client_msg_id) and a message.dropped for the message it pushed out of
    a full queue; a first denial its message.denied (a second none); an
    approval's first settle its message.approved (a second none)."""
    async with opened(engine_url, replace(TEST_POLICY, review_max=2), fake_clock) as store:
        events = Events(store.outbox, fake_clock)
        review = store.review
        to = "amy" if personal else None

        async def hold(n: int) -> str:
            message = NewMessage("bob", f"darn {n}", False, 1_000 + n, to=to,
                                 client_msg_id=f"c{n}")
            ahead = await events.ahead("message.held", ROOM, uid="bob", body=message.body)
            assert ahead is not None
            holding = await review.hold(ROOM, message, "word: darn", event=ahead.event,
                                        dropped=events.several("message.dropped", ROOM))
            await events.settle(ahead)
            return holding.id

        first, second = await hold(1), await hold(2)
        assert await hold(2) == second  # the same send again: nothing held
        third = await hold(3)  # the queue holds 2: the first is dropped
        for _ in range(2):
            ahead = await events.ahead("message.denied", ROOM, held_id=second, by="admin")
            assert ahead is not None
            await review.decide(ROOM, second, "deny", event=ahead.event)
            await events.settle(ahead)
        await review.decide(ROOM, third, "approve")
        for seq in (7, 7):
            ahead = await events.ahead("message.approved", ROOM, held_id=third, seq=seq)
            assert ahead is not None
            await review.settle(ROOM, third, "e1", seq, event=ahead.event)
            await events.settle(ahead)
        got = await delivered(store)
    assert [(e["type"], e["held_id"]) for e in got] == [
        ("message.held", first), ("message.held", second), ("message.held", third),
        ("message.dropped", first), ("message.denied", second),
        ("message.approved", third)]
    dropped = got[3]
    assert dropped["id"].startswith("ev_")
    assert len(dropped["id"]) == 27
    assert dropped["id"] not in {e["id"] for e in got[:3] + got[4:]}
    assert (dropped["uid"], dropped["kind"], dropped["to"], dropped["why"]) == \
        ("bob", "personal" if personal else "normal", to, "word: darn")
    assert (got[4]["uid"], got[4]["kind"]) == ("bob", "personal" if personal else "normal")


async def test_a_room_with_more_events_than_one_move_takes_stays_marked_until_all_moved(
        memory_store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    import liveroom.events
    import liveroom.store.memory.outbox

    for module in (liveroom.events, liveroom.store.memory.outbox):
        monkeypatch.setattr(module, "MOVE_MAX", 2)
    events = Events(memory_store.outbox, fake_clock)
    aheads = []
    for value in (1, 2, 3):
        ahead = await events.ahead("gift.given", ROOM, uid="fan", gift="g", value=value)
        assert ahead is not None
        await memory_store.counters.add_gift(ROOM, "fan", value, "g", 0, event=ahead.event)
        aheads.append(ahead)
    await events.settle(aheads[-1])  # moves two of three: the mark stays
    assert len(await memory_store.outbox.pending(ROOM)) == 1
    await fake_clock.advance(SWEEP_GRACE_MS / 1000 + 1)
    assert await events.sweep() == 1
    assert await memory_store.outbox.pending(ROOM) == []
    assert await events.sweep() == 0
    assert [e["value"] for e in await delivered(memory_store)] == [1, 2, 3]
