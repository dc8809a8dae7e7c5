"""The store contract: every engine passes these, so the memory engine is a faithful stand-in.

Each test runs once per engine (the ``store`` fixture is parametrized with
``memory`` and ``redis``); the property test at the end runs random histories
through each engine and compares every pull with a plain list model.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from conftest import ENGINES, Notified, fresh_engine_url, hearing, opened, raw_client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liveroom.clock import FakeClock
from liveroom.model import Entry, NewMessage
from liveroom.store import LogPolicy, Pulled, PullRequest, Store
from liveroom.store.redis import keys

WAIT = 5.0
"""Bound on waits for something a real Redis delivers asynchronously."""


def message(clock: FakeClock, n: int, *, important: bool = False,
            cmid: str | None = None) -> NewMessage:
    return NewMessage(uid=f"u{n}", body={"n": n}, important=important,
                      ts=int(clock.time() * 1000), client_msg_id=cmid)


async def fill(store: Store, clock: FakeClock, room: str, count: int, *,
               important_at: frozenset[int] = frozenset()) -> None:
    """Append ``count`` messages numbered from the room's next seq."""
    head = (await pull(store, room, 0, 0)).head
    for n in range(head + 1, head + count + 1):
        await store.log.append(room, message(clock, n, important=n in important_at))


async def pull(store: Store, room: str, after: int, limit: int) -> Pulled:
    (pulled,) = await store.log.pull([PullRequest(room, after, limit)])
    return pulled


def seqs(pulled: Pulled) -> list[int]:
    return [e.seq for e in pulled.entries]


# --- append -------------------------------------------------------------------


async def test_seqs_are_dense_from_one_and_the_epoch_is_stable(
        store: Store, fake_clock: FakeClock) -> None:
    epoch = await store.log.open_room("r")
    appended = [await store.log.append("r", message(fake_clock, n)) for n in range(1, 6)]
    assert [a.seq for a in appended] == [1, 2, 3, 4, 5]
    assert {a.epoch for a in appended} == {epoch}
    assert not any(a.duplicate for a in appended)
    assert await store.log.open_room("r") == epoch


async def test_append_creates_the_room(store: Store, fake_clock: FakeClock) -> None:
    first = await store.log.append("r", message(fake_clock, 1))
    assert first.seq == 1
    assert await store.log.open_room("r") == first.epoch


async def test_rooms_are_independent(store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "a", 3)
    assert (await store.log.append("b", message(fake_clock, 1))).seq == 1
    pa, pb = await store.log.pull([PullRequest("a", 0, 10), PullRequest("b", 0, 10)])
    assert (pa.room, seqs(pa), pb.room, seqs(pb)) == ("a", [1, 2, 3], "b", [1])
    assert pa.epoch != pb.epoch


async def test_client_msg_id_answers_the_first_seq_and_stores_nothing(
        store: Store, fake_clock: FakeClock) -> None:
    first = await store.log.append("r", message(fake_clock, 1, cmid="m-1"))
    await store.log.append("r", message(fake_clock, 2))
    again = await store.log.append("r", message(fake_clock, 99, cmid="m-1"))
    assert (again.seq, again.epoch, again.duplicate) == (1, first.epoch, True)
    other = await store.log.append("r", message(fake_clock, 3, cmid="m-2"))
    assert (other.seq, other.duplicate) == (3, False)
    pulled = await pull(store, "r", 0, 10)
    assert seqs(pulled) == [1, 2, 3]
    assert [e.body for e in pulled.entries] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert pulled.head == 3


async def test_client_msg_id_is_per_room(store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "a", 2)
    await store.log.append("a", message(fake_clock, 3, cmid="same"))
    b = await store.log.append("b", message(fake_clock, 1, cmid="same"))
    assert (b.seq, b.duplicate) == (1, False)


async def test_entries_keep_what_was_sent(store: Store, fake_clock: FakeClock) -> None:
    body = {"text": "héllo", "list": [1, 2.5, None, True], "nested": {"k": "v"}}
    await store.log.append("r", NewMessage("alice", body, True, 1_700_000_000_123))
    (entry,) = (await pull(store, "r", 0, 10)).entries
    assert entry == Entry(seq=1, ic=1, uid="alice", important=True, ts=1_700_000_000_123,
                          body=body)


async def test_a_messages_extra_is_kept_with_it_in_both_lanes(
        store: Store, fake_clock: FakeClock) -> None:
    """The send hook's ``extra`` travels with its message through the store
    (a room message and a personal one); a message without one has none."""
    extra = {"badge": "vip", "score": 3, "tags": ["a", "b"]}
    await store.log.append("r", NewMessage("alice", "hi", False, 1_700_000_000_001,
                                           extra=extra))
    await store.log.append("r", NewMessage("bob", "yo", False, 1_700_000_000_002))
    await store.log.append("r", NewMessage("host", "psst", True, 1_700_000_000_003, to="al",
                                           extra={"k": 1}))
    pulled = await pull(store, "r", 0, 10)
    assert [(e.body, e.extra) for e in pulled.entries] == [("hi", extra), ("yo", None)]
    assert [(e.body, e.to, e.extra) for e in pulled.personal] == [("psst", "al", {"k": 1})]


# --- pull ---------------------------------------------------------------------


async def test_a_room_without_a_log_pulls_as_no_epoch(store: Store) -> None:
    assert await pull(store, "nobody", 0, 10) == Pulled("nobody", None, 0, 0, (), True)
    assert await pull(store, "nobody", 7, 10) == Pulled("nobody", None, 0, 0, (), True)


async def test_an_opened_room_is_empty_and_complete(store: Store) -> None:
    epoch = await store.log.open_room("r")
    assert await pull(store, "r", 0, 10) == Pulled("r", epoch, 0, 0, (), True)


async def test_pull_returns_the_newest_limit_entries(
        store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "r", 10)
    newest = await pull(store, "r", 0, 3)
    assert (seqs(newest), newest.head, newest.head_ic, newest.complete) == (
        [8, 9, 10], 10, 0, False)
    exact = await pull(store, "r", 7, 3)
    assert (seqs(exact), exact.complete) == ([8, 9, 10], True)
    short = await pull(store, "r", 8, 3)
    assert (seqs(short), short.complete) == ([9, 10], True)
    assert (seqs(await pull(store, "r", 0, 100)), (await pull(store, "r", 0, 100)).complete) == (
        list(range(1, 11)), True)


async def test_pull_at_or_past_the_head(store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "r", 4)
    for after in (4, 5, 1000):
        pulled = await pull(store, "r", after, 10)
        assert (pulled.entries, pulled.head, pulled.complete) == ((), 4, True)


async def test_pull_with_limit_zero_returns_only_importants(
        store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "r", 6, important_at=frozenset({2, 5}))
    pulled = await pull(store, "r", 0, 0)
    assert (seqs(pulled), pulled.head, pulled.head_ic, pulled.complete) == ([2, 5], 6, 2, False)
    caught_up = await pull(store, "r", 6, 0)
    assert (caught_up.entries, caught_up.complete) == ((), True)


async def test_importants_beyond_the_limit_come_first(
        store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "r", 10, important_at=frozenset({2, 5, 9}))
    pulled = await pull(store, "r", 0, 3)
    assert seqs(pulled) == [2, 5, 8, 9, 10]
    assert [e.ic for e in pulled.entries] == [1, 2, 2, 3, 3]
    assert [e.important for e in pulled.entries] == [True, True, False, True, False]
    assert (pulled.head, pulled.head_ic, pulled.complete) == (10, 3, False)
    assert seqs(await pull(store, "r", 2, 3)) == [5, 8, 9, 10]
    assert seqs(await pull(store, "r", 5, 3)) == [8, 9, 10]


async def test_ic_counts_importants_up_to_each_entry(
        store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "r", 8, important_at=frozenset({1, 3, 4, 8}))
    pulled = await pull(store, "r", 0, 100)
    assert [e.ic for e in pulled.entries] == [1, 1, 2, 3, 3, 3, 3, 4]
    assert pulled.head_ic == 4


async def test_pull_batches_rooms_in_request_order(
        store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "a", 3)
    await fill(store, fake_clock, "b", 5)
    got = await store.log.pull([PullRequest("b", 3, 10), PullRequest("none", 0, 1),
                                PullRequest("a", 0, 2), PullRequest("b", 0, 1)])
    assert [(p.room, seqs(p), p.head) for p in got] == [
        ("b", [4, 5], 5), ("none", [], 0), ("a", [2, 3], 3), ("b", [5], 5)]
    assert await store.log.pull([]) == []


# --- retention ----------------------------------------------------------------


async def test_the_log_cap_trims_the_oldest(store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "r", 60)  # log_cap is 50
    everything = await pull(store, "r", 0, 100)
    assert (seqs(everything), everything.complete) == (list(range(11, 61)), False)
    assert (await pull(store, "r", 9, 100)).complete is False
    from_cap = await pull(store, "r", 10, 100)
    assert (seqs(from_cap), from_cap.complete) == (list(range(11, 61)), True)


async def test_importants_outlive_the_log_within_the_window(
        store: Store, fake_clock: FakeClock) -> None:
    # important_keep 5, window 60 s, log_cap 50.
    await fill(store, fake_clock, "r", 10, important_at=frozenset(range(1, 11)))
    await fill(store, fake_clock, "r", 50)
    young = await pull(store, "r", 0, 100)
    assert seqs(young) == list(range(1, 61))  # 10 importants, then the 50 of the log
    assert young.complete is False  # nothing missing, but the log does not reach back

    await fake_clock.advance(61)
    await store.log.append("r", message(fake_clock, 61, important=True))
    aged = await pull(store, "r", 0, 100)
    # Eleven importants, the ten first past the window: the newest five stay.
    assert seqs(aged)[:5] == [7, 8, 9, 10, 12]
    assert seqs(aged)[5:] == list(range(13, 62))
    assert [e.ic for e in aged.entries][:5] == [7, 8, 9, 10, 10]
    assert aged.head_ic == 11


async def test_importants_within_keep_stay_however_old(
        store: Store, fake_clock: FakeClock) -> None:
    await fill(store, fake_clock, "r", 3, important_at=frozenset({1, 2, 3}))
    await fake_clock.advance(3600)
    await fill(store, fake_clock, "r", 60, important_at=frozenset({4}))
    assert seqs(await pull(store, "r", 0, 1)) == [1, 2, 3, 4, 63]


async def test_the_important_hard_cap_wins_over_the_window(
        engine_url: str, fake_clock: FakeClock) -> None:
    policy = LogPolicy(log_cap=3, important_keep=2, important_window_ms=10**9,
                       important_hard_cap=4)
    async with opened(engine_url, policy, fake_clock) as store:
        await fill(store, fake_clock, "r", 6, important_at=frozenset(range(1, 7)))
        assert seqs(await pull(store, "r", 0, 1)) == [3, 4, 5, 6]


# Importants and personal messages are trimmed by one rule: from the oldest,
# while more than important_keep remain and the oldest is older than the window
# (counted back from the new message's ts) or more than the hard cap remain.
KEPT = ("important", "personal")
T0 = 1_700_000_000_000


async def send_kept(store: Store, kind: str, n: int, ts: int) -> None:
    """Append ``n`` at ``ts`` as an important or a personal message."""
    await store.log.append("r", NewMessage(uid="backend", body=n, important=True, ts=ts,
                                           to="a" if kind == "personal" else None))


async def kept(store: Store, kind: str) -> list[object]:
    """The bodies of the room's retained importants or personal messages."""
    pulled = await pull(store, "r", 0, 0)  # limit 0: the importants alone
    return [e.body for e in (pulled.personal if kind == "personal" else pulled.entries)]


@pytest.mark.parametrize("kind", KEPT)
async def test_a_trim_drops_exactly_the_old_ones_and_stops_at_the_first_it_keeps(
        engine_url: str, fake_clock: FakeClock, kind: str) -> None:
    policy = LogPolicy(log_cap=10, important_keep=3, important_window_ms=60_000,
                       important_hard_cap=400, personal_hard_cap=400)
    async with opened(engine_url, policy, fake_clock) as store:
        for n in range(1, 301):
            await send_kept(store, kind, n, T0)
        for n in range(301, 306):
            await send_kept(store, kind, n, T0 + 30_000)
        # Far over the keep, nothing old enough and under the cap: nothing goes.
        assert await kept(store, kind) == list(range(1, 306))
        # The window passes for the first 300: they go at once, the rest stay.
        await send_kept(store, kind, 306, T0 + 61_000)
        assert await kept(store, kind) == list(range(301, 307))
        # A late clock's message stays behind a younger one: the trim stops at
        # the first message it keeps, whatever is older behind it.
        await send_kept(store, kind, 307, T0)
        await send_kept(store, kind, 308, T0 + 61_000)
        assert await kept(store, kind) == list(range(301, 309))
        await send_kept(store, kind, 309, T0 + 95_000)
        assert await kept(store, kind) == [306, 307, 308, 309]
        # Exactly the window's age (306's) is young enough.
        await send_kept(store, kind, 310, T0 + 121_000)
        assert await kept(store, kind) == [306, 307, 308, 309, 310]
        # Everything old: the newest important_keep stay.
        await send_kept(store, kind, 311, T0 + 10**6)
        assert await kept(store, kind) == [309, 310, 311]


@pytest.mark.parametrize("kind", KEPT)
async def test_the_hard_cap_drops_by_count_then_the_window_by_age(
        engine_url: str, fake_clock: FakeClock, kind: str) -> None:
    policy = LogPolicy(log_cap=10, important_keep=2, important_window_ms=60_000,
                       important_hard_cap=6, personal_hard_cap=6)
    async with opened(engine_url, policy, fake_clock) as store:
        for n in range(1, 9):
            await send_kept(store, kind, n, T0)
        assert await kept(store, kind) == [3, 4, 5, 6, 7, 8]  # young, over the cap
        # One over the cap goes by count, then the old ones down to the keep.
        await send_kept(store, kind, 9, T0 + 61_000)
        assert await kept(store, kind) == [8, 9]


# --- epochs ---------------------------------------------------------------------


async def test_renew_epoch_only_replaces_the_stale_epoch(
        store: Store, fake_clock: FakeClock) -> None:
    first = await store.log.open_room("r")
    await fill(store, fake_clock, "r", 2, important_at=frozenset({2}))
    assert await store.log.renew_epoch("r", "not-the-epoch") == first
    second = await store.log.renew_epoch("r", first)
    assert second != first
    assert await store.log.renew_epoch("r", first) == second  # a late caller
    assert await store.log.open_room("r") == second
    appended = await store.log.append("r", message(fake_clock, 3))
    assert (appended.epoch, appended.seq) == (second, 3)
    pulled = await pull(store, "r", 0, 10)
    assert (pulled.epoch, seqs(pulled), pulled.head_ic) == (second, [1, 2, 3], 1)


async def test_renew_epoch_of_a_room_without_a_log_creates_it(store: Store) -> None:
    epoch = await store.log.renew_epoch("r", "whatever")
    assert epoch != "whatever"
    assert await store.log.open_room("r") == epoch
    assert await pull(store, "r", 0, 5) == Pulled("r", epoch, 0, 0, (), True)


async def test_a_pull_says_when_the_store_holds_another_message_at_its_anchors(
        store: Store, fake_clock: FakeClock) -> None:
    """A reader names the ``ts`` of the message its copy ends with (and of
    its last personal one): ``rewritten`` only when the store holds another
    one there, or the tombstone of another one (a message that took a lost
    one's seq, then was recalled: redis-sharded seed 90744); the same one,
    no anchor, or nothing held there (trimmed, past the head) is no
    evidence."""
    await fill(store, fake_clock, "r", 3)
    await fake_clock.advance(1)
    await store.log.append("r", NewMessage(uid="backend", body=1, important=True,
                                           ts=int(fake_clock.time() * 1000), to="bob"))
    (whole,) = await store.log.pull([PullRequest("r", 0, 10)])
    ts, pts = whole.entries[-1].ts, whole.personal[-1].ts
    asked = [PullRequest("r", 3, 10, 1, ts, pts), PullRequest("r", 3, 10, 1),
             PullRequest("r", 3, 10, 1, ts + 1, pts), PullRequest("r", 3, 10, 1, ts, pts + 1),
             PullRequest("r", 4, 10, 2, ts + 1, pts + 1),
             PullRequest("r", 2, 10, 0, ts)]  # seq 2 was sent at ts too
    assert [p.rewritten for p in await store.log.pull(asked)] == [
        False, False, True, True, False, False]
    await store.log.recall("r", 3, at_ms=int(fake_clock.time() * 1000))
    await store.log.recall("r", 1, at_ms=int(fake_clock.time() * 1000), personal=True)
    assert [p.rewritten for p in await store.log.pull([
        PullRequest("r", 3, 10, 1, ts + 1, pts), PullRequest("r", 3, 10, 1, ts, pts),
        PullRequest("r", 3, 10, 1, ts, pts + 1)])] == [True, False, True]


# --- personal messages --------------------------------------------------------------


def personal(clock: FakeClock, to: str, n: int, cmid: str | None = None) -> NewMessage:
    return NewMessage(uid="backend", body={"n": n}, important=True,
                      ts=int(clock.time() * 1000), client_msg_id=cmid, to=to)


async def test_personal_messages_take_their_own_sequence_and_ordinals(
        store: Store, fake_clock: FakeClock) -> None:
    notified = Notified(store)
    await hearing(store, "r")
    await fill(store, fake_clock, "r", 2)
    sent = [await store.log.append("r", personal(fake_clock, to, n))
            for n, to in enumerate(["a", "b", "a"], start=1)]
    assert [a.seq for a in sent] == [1, 2, 3]  # positions, not seqs
    again = await store.log.append("r", personal(fake_clock, "a", 4, cmid="x"))
    seen = await store.log.append("r", personal(fake_clock, "a", 5, cmid="x"))
    assert (again.seq, seen.seq, seen.duplicate) == (4, 4, True)
    # A normal client_msg_id of the same name is another one.
    assert not (await store.log.append("r", message(fake_clock, 3, cmid="x"))).duplicate
    pulled = await pull(store, "r", 0, 10)
    assert (pulled.head, pulled.head_ic, seqs(pulled)) == (3, 0, [1, 2, 3])
    assert pulled.phead == 4
    assert [(e.seq, e.to, e.n, e.body) for e in pulled.personal] == [
        (1, "a", 1, {"n": 1}), (2, "b", 1, {"n": 2}), (3, "a", 2, {"n": 3}),
        (4, "a", 3, {"n": 4})]
    assert all(e.important and e.ic == 0 for e in pulled.personal)
    (later,) = await store.log.pull([PullRequest("r", 3, 10, 2)])
    assert (later.entries, later.phead) == ((), 4)
    assert [e.seq for e in later.personal] == [3, 4]
    # Their notifies carry no seq: 0, "pull me".
    await notified.until(7, WAIT)
    assert [seq for _, seq in notified.got] == [1, 2, 0, 0, 0, 0, 3]


async def test_personal_messages_are_kept_for_the_window_and_the_hard_cap(
        engine_url: str, fake_clock: FakeClock) -> None:
    policy = LogPolicy(log_cap=100, important_keep=1, important_window_ms=60_000,
                       personal_hard_cap=3)
    async with opened(engine_url, policy, fake_clock) as store:
        for n in range(1, 6):
            await store.log.append("r", personal(fake_clock, "a", n))
        assert [e.n for e in (await pull(store, "r", 0, 0)).personal] == [3, 4, 5]
        await fake_clock.advance(61)
        await store.log.append("r", personal(fake_clock, "b", 6))
        pulled = await pull(store, "r", 0, 0)
        assert [(e.to, e.n) for e in pulled.personal] == [("b", 1)]
        assert pulled.phead == 6
        # A new ordinal goes on from the uid's last one, kept or not.
        await store.log.append("r", personal(fake_clock, "a", 7))
        assert (await pull(store, "r", 0, 0)).personal[-1].n == 6


# --- notify -------------------------------------------------------------------


async def test_a_subscriber_is_notified_of_appends(
        store: Store, fake_clock: FakeClock) -> None:
    notified = Notified(store)
    assert store.notifier.alive
    await hearing(store, "r", "other")
    await store.log.append("r", message(fake_clock, 1))
    await store.log.append("other", message(fake_clock, 1, important=True))
    await notified.until(2, WAIT)
    # Notifies of different rooms carry no order between them: a cluster
    # publishes each room on its own shard's channel.
    assert sorted(notified.got) == [("other", 1), ("r", 1)]


async def test_a_failing_subscriber_does_not_stop_the_others(
        store: Store, fake_clock: FakeClock) -> None:
    got: list[tuple[str, int]] = []
    arrived = asyncio.Event()

    def failing(room: str, seq: int) -> None:
        raise RuntimeError("a subscriber with a bug")

    def on_notify(room: str, seq: int) -> None:
        got.append((room, seq))
        arrived.set()

    store.notifier.subscribe(failing, lambda rooms=None: None)
    store.notifier.subscribe(on_notify, lambda rooms=None: None)
    await hearing(store, "r")
    assert (await store.log.append("r", message(fake_clock, 1))).seq == 1
    await asyncio.wait_for(arrived.wait(), WAIT)
    assert got == [("r", 1)]


async def test_a_duplicate_is_not_notified(store: Store, fake_clock: FakeClock) -> None:
    got: list[tuple[str, int]] = []
    second = asyncio.Event()

    def on_notify(room: str, seq: int) -> None:
        got.append((room, seq))
        if seq == 2:
            second.set()

    store.notifier.subscribe(on_notify, lambda rooms=None: None)
    await hearing(store, "r")
    await store.log.append("r", message(fake_clock, 1, cmid="x"))
    await store.log.append("r", message(fake_clock, 1, cmid="x"))
    await store.log.append("r", message(fake_clock, 2))
    await asyncio.wait_for(second.wait(), WAIT)
    assert got == [("r", 1), ("r", 2)]


# --- expiry -------------------------------------------------------------------


async def test_an_idle_room_expires_and_touch_keeps_it(
        store: Store, fake_clock: FakeClock, engine_url: str) -> None:
    ttl_ms = 86_400_000
    first = await store.log.open_room("kept")
    await fill(store, fake_clock, "kept", 2, important_at=frozenset({1}))
    await fill(store, fake_clock, "idle", 1)
    idle_epoch = await store.log.open_room("idle")
    if store.name == "memory":
        await fake_clock.advance(ttl_ms / 1000 * 0.75)
        await store.log.touch(["kept", "never-used"])
        await fake_clock.advance(ttl_ms / 1000 * 0.5)
        assert (await pull(store, "kept", 0, 10)).epoch == first
        gone = await pull(store, "idle", 0, 10)
        assert gone == Pulled("idle", None, 0, 0, (), True)
        renewed = await store.log.open_room("idle")
        assert renewed != idle_epoch
        assert (await store.log.append("idle", message(fake_clock, 1))).seq == 1
        return
    # A real Redis keeps its own time: check the TTLs it holds instead.
    client = raw_client(engine_url)
    try:
        room_keys = [keys.meta("kept"), keys.log("kept"), keys.important("kept")]
        for key in room_keys:
            await client.pexpire(key, 1000)
        await store.log.touch(["kept", "never-used"])
        for key in room_keys:
            assert ttl_ms - 60_000 < await client.pttl(key) <= ttl_ms
        assert await client.exists(keys.meta("never-used")) == 0
        idle_ttl = await client.pttl(keys.meta("idle"))
        assert ttl_ms - 60_000 < idle_ttl <= ttl_ms
    finally:
        await client.aclose()


# --- health ---------------------------------------------------------------------


async def test_ping_answers(store: Store) -> None:
    await store.ping()


# --- property: every engine against a list model --------------------------------

MODEL_POLICY = LogPolicy(log_cap=6, important_keep=2, important_window_ms=1000,
                         important_hard_cap=4, room_ttl_ms=86_400_000, dedup_ttl_ms=600_000)


@dataclass
class Model:
    """A room's log as plain lists, written from the contract's words."""

    policy: LogPolicy
    history: list[Entry] = field(default_factory=list)
    important: list[Entry] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)

    def append(self, important: bool, ts: int, cmid: str | None) -> tuple[int, bool]:
        if cmid is not None and cmid in self.sent:
            return self.sent[cmid], True
        seq = len(self.history) + 1
        ic = (self.history[-1].ic if self.history else 0) + important
        entry = Entry(seq, ic, "u", important, ts, seq)
        self.history.append(entry)
        if important:
            kept = [*self.important, entry]
            # Keep the newest important_keep; beyond them drop from the oldest
            # while it is older than the window or over the hard cap.
            while len(kept) > self.policy.important_keep and (
                    kept[0].ts < ts - self.policy.important_window_ms
                    or len(kept) > self.policy.important_hard_cap):
                kept.pop(0)
            self.important = kept
        if cmid is not None:
            self.sent[cmid] = seq
        return seq, False

    def pull(self, after: int, limit: int) -> tuple[int, int, list[Entry], bool]:
        log = self.history[-self.policy.log_cap:]
        head = len(self.history)
        head_ic = self.history[-1].ic if self.history else 0
        newer = [e for e in log if e.seq > after]
        picked = newer[-limit:] if limit else []
        floor = picked[0].seq if picked else head + 1
        extra = [e for e in self.important if after < e.seq < floor]
        log_start = log[0].seq if log else head + 1
        complete = len(picked) == len(newer) and log_start <= after + 1
        return head, head_ic, extra + picked, complete


appends = st.tuples(st.just("append"), st.booleans(), st.integers(-100, 800),
                    st.sampled_from([None, None, None, "a", "b", "c"]))
pulls = st.tuples(st.just("pull"), st.integers(0, 30), st.integers(0, 8))


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.one_of(appends, pulls), max_size=40))
def test_engines_match_the_model(engine: str, request: pytest.FixtureRequest,
                                 ops: list[tuple[object, ...]]) -> None:
    asyncio.run(_run_model(fresh_engine_url(engine, request), ops))


async def _run_model(url: str, ops: list[tuple[object, ...]]) -> None:
    clock = FakeClock()
    model = Model(MODEL_POLICY)
    ts = 1_700_000_000_000
    async with opened(url, MODEL_POLICY, clock) as store:
        epoch = await store.log.open_room("r")
        for op in ops:
            if op[0] == "append":
                _, important, step, cmid = op
                assert isinstance(important, bool)
                assert isinstance(step, int)
                assert cmid is None or isinstance(cmid, str)
                ts += step
                got = await store.log.append(
                    "r", NewMessage("u", len(model.history) + 1, important, ts, cmid))
                assert (got.epoch, got.seq, got.duplicate) == (
                    epoch, *model.append(important, ts, cmid))
            else:
                _, after, limit = op
                assert isinstance(after, int)
                assert isinstance(limit, int)
                pulled = await pull(store, "r", after, limit)
                head, head_ic, entries, complete = model.pull(after, limit)
                assert pulled == Pulled("r", epoch, head, head_ic, tuple(entries), complete)
