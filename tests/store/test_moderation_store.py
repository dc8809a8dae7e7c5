"""The moderation store contract: mutes, bans, slow mode, the audit and the
journal of changes behave alike on every engine.

Each test runs once per engine (the ``store`` fixture is parametrized with
``memory``, ``redis`` and ``cluster``); the property test runs random
sequences of actions, clock steps and broadcast ends through each engine and
compares them with a plain-Python model. Sanctions end by the caller's clock
(the fake clock's ``now_ms``); the keys' own expiry is checked through the
TTLs Redis holds.
"""

from __future__ import annotations

import asyncio
import math
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
    raw_client,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

import liveroom.store.redis.moderation as redis_moderation
from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.store import LogPolicy, Store
from liveroom.store.base import (
    AUDIT_KEPT,
    REASON_MAX,
    SANCTION_SECONDS_MAX,
    SANCTIONS_MAX,
    AuditEntry,
    RoomModeration,
    Sanction,
    SanctionsFull,
)
from liveroom.store.redis import calls, keys

ARCHIVE_TTL_MS = 600_000
"""How long an ended broadcast's history is kept in these tests."""


def now_ms(clock: FakeClock) -> int:
    return int(clock.time() * 1000)


def act(action: str, target: str = "", seconds: int = 0, *, at_ms: int,
        by: str = "admin", reason: str = "") -> AuditEntry:
    """An action as a caller gives it (``target`` "" for slow mode)."""
    return AuditEntry(at_ms, by, action, target, seconds, reason)


# --- each action ------------------------------------------------------------------------


async def test_mutes_and_bans_are_read_back_sorted_by_uid(
        store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    assert await mod.rooms(["r", "quiet"], t) == {}
    assert await mod.act("r", act("mute", "bob", 60, at_ms=t, reason="spam"), t) == 1
    assert await mod.act("r", act("mute", "al", 30, at_ms=t - 5, by="publisher"), t) == 2
    assert await mod.act("r", act("ban", "eve", 0, at_ms=t, by="uid:host"), t) == 3
    assert await mod.act("r", act("ban", "zed", SANCTION_SECONDS_MAX, at_ms=t), t) == 4
    assert await mod.act("other", act("ban", "bob", 5, at_ms=t), t) == 5
    assert await mod.rooms(["r", "quiet", "other"], t) == {
        "r": RoomModeration(
            muted=(Sanction("al", t + 30_000, "", "publisher", t - 5),
                   Sanction("bob", t + 60_000, "spam", "admin", t)),
            banned=(Sanction("eve", 0, "", "uid:host", t),
                    Sanction("zed", t + SANCTION_SECONDS_MAX * 1000, "", "admin", t)),
            slow=0, version=4),
        "other": RoomModeration((), (Sanction("bob", t + 5_000, "", "admin", t),), 0, 5)}
    assert await mod.rooms([], t) == {}


async def test_a_new_sanction_replaces_the_uids_own_and_a_mute_and_a_ban_are_apart(
        store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    await mod.act("r", act("mute", "bob", 600, at_ms=t, reason="first"), t)
    await mod.act("r", act("mute", "bob", 10, at_ms=t + 1, reason="second"), t + 1)
    await mod.act("r", act("ban", "bob", 0, at_ms=t + 2), t + 2)
    (state,) = (await mod.rooms(["r"], t + 2)).values()
    assert state.muted == (Sanction("bob", t + 10_001, "second", "admin", t + 1),)
    assert state.banned == (Sanction("bob", 0, "", "admin", t + 2),)
    await mod.act("r", act("unmute", "bob", at_ms=t + 3), t + 3)
    (state,) = (await mod.rooms(["r"], t + 3)).values()
    assert (state.muted, state.banned, state.version) == (
        (), (Sanction("bob", 0, "", "admin", t + 2),), 4)
    await mod.act("r", act("unban", "bob", at_ms=t + 4), t + 4)
    assert await mod.rooms(["r"], t + 4) == {}


async def test_sanctions_end_by_the_callers_clock(store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    await mod.act("r", act("mute", "bob", 60, at_ms=t), t)
    await mod.act("r", act("ban", "eve", 0, at_ms=t), t)
    await mod.act("r", act("ban", "cy", 1, at_ms=t), t)
    assert [s.uid for s in (await mod.rooms(["r"], t + 999))["r"].banned] == ["cy", "eve"]
    await fake_clock.advance(59)
    (state,) = (await mod.rooms(["r"], now_ms(fake_clock))).values()
    assert ([s.uid for s in state.muted], [s.uid for s in state.banned]) == (["bob"], ["eve"])
    await fake_clock.advance(1)  # until_ms == now_ms: ended
    (state,) = (await mod.rooms(["r"], now_ms(fake_clock))).values()
    assert (state.muted, [s.uid for s in state.banned]) == ((), ["eve"])
    # The reader's clock decides, whatever the store's says.
    assert [s.uid for s in (await mod.rooms(["r"], t))["r"].muted] == ["bob"]
    # A room whose sanctions all ended has no moderation.
    await mod.act("s", act("mute", "bob", 1, at_ms=t), t)
    assert await mod.rooms(["s"], t + 1_000) == {}
    assert await mod.rooms(["s"], t + 999) != {}
    # A later act prunes what ended: then no clock sees it any more.
    await mod.act("r", act("ban", "cy", 0, at_ms=now_ms(fake_clock)), now_ms(fake_clock))
    (state,) = (await mod.rooms(["r"], t)).values()
    assert ([s.uid for s in state.muted], [s.uid for s in state.banned]) == ([], ["cy", "eve"])


async def test_lifting_what_is_not_there_is_no_error_and_is_recorded(
        store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    assert await mod.act("r", act("unmute", "nobody", at_ms=t), t) == 1
    assert await mod.act("r", act("unban", "nobody", at_ms=t), t) == 2
    assert await mod.rooms(["r"], t) == {}
    assert [e.action for e in await mod.audit("r", 10)] == ["unban", "unmute"]
    assert await mod.changed(0) == (2, ["r"])


async def test_slow_mode_is_set_changed_and_lifted(store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    await mod.act("r", act("slow", "", 5, at_ms=t), t)
    assert await mod.rooms(["r"], t) == {"r": RoomModeration((), (), 5, 1)}
    await mod.act("r", act("slow", "", SANCTION_SECONDS_MAX, at_ms=t), t)
    assert (await mod.rooms(["r"], t))["r"].slow == SANCTION_SECONDS_MAX
    await mod.act("r", act("mute", "bob", 60, at_ms=t), t)
    await mod.act("r", act("slow", "", 0, at_ms=t), t)
    (state,) = (await mod.rooms(["r"], t)).values()
    assert (state.slow, [s.uid for s in state.muted], state.version) == (0, ["bob"], 4)
    await mod.act("r", act("unmute", "bob", at_ms=t), t)
    assert await mod.rooms(["r"], t) == {}


async def test_a_recall_is_only_recorded(store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    entry = act("recall", "room:42", at_ms=t, by="publisher", reason="off topic")
    assert await mod.act("r", entry, t) == 1
    assert await mod.rooms(["r"], t) == {}
    assert await mod.audit("r", 5) == [entry]
    assert await mod.changed(0) == (1, ["r"])


async def test_a_review_decision_is_only_recorded(store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    approved = act("approve", "bob:3", at_ms=t, reason="word: darn")
    denied = act("deny", "eve.x:12", at_ms=t + 1)
    assert await mod.act("r", approved, t) == 1
    assert await mod.act("r", denied, t + 1) == 2
    assert await mod.rooms(["r"], t + 1) == {}
    assert await mod.audit("r", 5) == [denied, approved]


# --- the audit --------------------------------------------------------------------------


async def test_the_audit_is_newest_first_and_limited(
        store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    given = [act("mute", "bob", 60, at_ms=t, reason="spam"),
             act("slow", "", 3, at_ms=t + 1, by="publisher"),
             act("recall", "p.1:7", at_ms=t + 2, by="uid:mod-1"),
             act("unmute", "bob", at_ms=t + 3, reason="é ✓ 🎁" * 10)]
    for entry in given:
        await mod.act("r", entry, entry.at_ms)
    assert await mod.audit("r", AUDIT_KEPT) == given[::-1]
    assert await mod.audit("r", 2) == given[:1:-1]
    assert await mod.audit("r", 1) == [given[-1]]
    assert await mod.audit("other", 10) == []


async def test_the_audit_keeps_the_newest_thousand(store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    for n in range(AUDIT_KEPT + 5):
        await mod.act("r", act("recall", f"room:{n}", at_ms=t), t)
    audit = await mod.audit("r", AUDIT_KEPT)
    assert len(audit) == AUDIT_KEPT
    assert (audit[0].target, audit[-1].target) == (f"room:{AUDIT_KEPT + 4}", "room:5")


async def test_a_retried_act_is_recorded_once(store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    entry = act("ban", "bob", 60, at_ms=t)
    assert await mod.act("r", entry, t) == 1
    assert await mod.act("r", entry, t + 10) == 2  # the same state again, a new version
    assert await mod.audit("r", 10) == [entry]
    assert (await mod.rooms(["r"], t))["r"].banned == (
        Sanction("bob", t + 60_010, "", "admin", t),)  # counted from the retry
    other = act("slow", "", 2, at_ms=t)
    await mod.act("r", other, t)
    await mod.act("r", entry, t)  # not the newest: recorded again
    assert await mod.audit("r", 10) == [entry, other, entry]


# --- the journal ------------------------------------------------------------------------


async def test_changed_names_the_rooms_changed_after_a_version(
        store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    assert await mod.changed(0) == (0, [])
    for room in ("a", "b", "c", "a"):
        await mod.act(room, act("slow", "", 1, at_ms=t), t)
    assert await mod.changed(0) == (4, ["b", "c", "a"])
    assert await mod.changed(1) == (4, ["b", "c", "a"])
    assert await mod.changed(2) == (4, ["c", "a"])
    assert await mod.changed(3) == (4, ["a"])
    assert await mod.changed(4) == (4, [])
    # A version from before the journal was lost reads as 0.
    assert await mod.changed(5) == await mod.changed(10**12) == (4, ["b", "c", "a"])


async def test_the_journal_forgets_rooms_whose_moderation_ended(
        engine_url: str, fake_clock: FakeClock) -> None:
    """A room leaves the journal at the first act after its moderation's
    keeping ended, on the caller's clock, whichever room that act is of."""
    policy = replace(TEST_POLICY, history_ttl_ms=60_000)
    async with opened(engine_url, policy, fake_clock) as store:
        mod, t = store.moderation, now_ms(fake_clock)
        await mod.act("slow", act("slow", "", 5, at_ms=t), t)  # kept until t + 60 s
        await mod.act("muted", act("mute", "bob", 120, at_ms=t), t)  # until t + 120 s
        await mod.act("banned", act("ban", "bob", 0, at_ms=t), t)  # until lifted
        await mod.act("late", act("recall", "room:1", at_ms=t + 59_999), t + 59_999)
        assert await mod.changed(0) == (4, ["slow", "muted", "banned", "late"])
        await mod.act("late", act("recall", "room:2", at_ms=t + 60_000), t + 60_000)
        assert await mod.changed(0) == (5, ["muted", "banned", "late"])
        await mod.act("other", act("recall", "room:3", at_ms=t + 120_000), t + 120_000)
        assert await mod.changed(0) == (6, ["banned", "other"])
        assert await mod.changed(3) == (6, ["other"])


# --- broadcasts ---------------------------------------------------------------------------


async def test_ending_a_broadcast_archives_the_audit_and_keeps_the_sanctions(
        store: Store, fake_clock: FakeClock) -> None:
    mod, t = store.moderation, now_ms(fake_clock)
    for entry in (act("mute", "bob", 600, at_ms=t), act("ban", "eve", 0, at_ms=t),
                  act("slow", "", 4, at_ms=t), act("recall", "room:9", at_ms=t)):
        await mod.act("r", entry, t)
    audit, before = await mod.audit("r", AUDIT_KEPT), await mod.rooms(["r"], t)
    await store.operators.end_broadcast("r", t, ARCHIVE_TTL_MS)
    (past,) = await store.operators.broadcasts("r")
    assert past.moderation == tuple(audit)
    assert await mod.audit("r", 10) == []
    assert await mod.rooms(["r"], t) == before
    assert await mod.changed(4) == (4, [])  # the audit is not the room's moderation
    # The next broadcast's audit, archived at its end; a broadcast with none
    # archives an empty one.
    entry = act("unban", "eve", at_ms=t + 1)
    await mod.act("r", entry, t + 1)
    await store.operators.end_broadcast("r", t + 2, ARCHIVE_TTL_MS)
    await store.operators.end_broadcast("r", t + 3, ARCHIVE_TTL_MS)
    assert [p.moderation for p in await store.operators.broadcasts("r")] == [
        (), (entry,), tuple(audit)]
    assert [s.uid for s in (await mod.rooms(["r"], t + 3))["r"].muted] == ["bob"]
    # A room that never had moderation archives none.
    await store.operators.end_broadcast("quiet", t, ARCHIVE_TTL_MS)
    assert [p.moderation for p in await store.operators.broadcasts("quiet")] == [()]


async def test_an_archive_of_before_moderation_reads_as_empty(
        redis_store: Store, redis_url: str, fake_clock: FakeClock) -> None:
    t = now_ms(fake_clock)
    await redis_store.moderation.act("r", act("slow", "", 1, at_ms=t), t)
    await redis_store.operators.end_broadcast("r", t, ARCHIVE_TTL_MS)
    async with raw_client(redis_url) as client:  # as an older version left it
        await client.delete(keys.audit("r", 1))
    (past,) = await redis_store.operators.broadcasts("r")
    assert (past.broadcast, past.moderation) == (1, ())


# --- bad input ---------------------------------------------------------------------------


T = 1_700_000_000_000
BAD_ACTS: list[tuple[str, object]] = [
    ("", act("mute", "bob", 60, at_ms=T)),
    ("..", act("mute", "bob", 60, at_ms=T)),
    ("a b", act("mute", "bob", 60, at_ms=T)),
    ("r" * 65, act("mute", "bob", 60, at_ms=T)),
    ("r", act("kick", "bob", 60, at_ms=T)),
    ("r", act("mute", "", 60, at_ms=T)),
    ("r", act("mute", "b:ob", 60, at_ms=T)),
    ("r", act("ban", "x" * 65, 60, at_ms=T)),
    ("r", act("unmute", "bo b", at_ms=T)),
    ("r", act("mute", "bob", 0, at_ms=T)),
    ("r", act("mute", "bob", -1, at_ms=T)),
    ("r", act("ban", "bob", SANCTION_SECONDS_MAX + 1, at_ms=T)),
    ("r", act("slow", "", SANCTION_SECONDS_MAX + 1, at_ms=T)),
    ("r", act("slow", "", -1, at_ms=T)),
    ("r", act("slow", "bob", 5, at_ms=T)),
    ("r", act("unban", "bob", 5, at_ms=T)),
    ("r", act("recall", "room:1", 5, at_ms=T)),
    ("r", act("recall", "room", at_ms=T)),
    ("r", act("recall", "room:x", at_ms=T)),
    ("r", act("recall", ":1", at_ms=T)),
    ("r", act("approve", "bob", at_ms=T)),
    ("r", act("approve", "bob:x", at_ms=T)),
    ("r", act("deny", "a b:1", at_ms=T)),
    ("r", act("deny", "bob:1", 5, at_ms=T)),
    ("r", act("mute", "bob", True, at_ms=T)),
    ("r", act("mute", "bob", 1.5, at_ms=T)),  # type: ignore[arg-type]
    ("r", act("mute", "bob", 60, at_ms=T, reason="x" * (REASON_MAX + 1))),
    ("r", act("mute", "bob", 60, at_ms=T, reason="\ud800")),
    ("r", act("mute", "bob", 60, at_ms=T, reason=None)),  # type: ignore[arg-type]
    ("r", act("mute", "bob", 60, at_ms=T, by="root")),
    ("r", act("mute", "bob", 60, at_ms=T, by="uid:")),
    ("r", act("mute", "bob", 60, at_ms=T, by="uid:a b")),
    ("r", act("mute", "bob", 60, at_ms=-1)),
    ("r", act("mute", "bob", 60, at_ms=2**53)),
    ("r", ("mute", "bob", 60)),
]


@pytest.mark.parametrize(("room", "entry"), BAD_ACTS)
async def test_bad_acts_are_refused_and_nothing_is_stored(
        store: Store, room: str, entry: AuditEntry) -> None:
    mod = store.moderation
    with pytest.raises(ValueError, match=r"room|action|target|seconds|reason|by|at_ms|entry"):
        await mod.act(room, entry, T)
    assert await mod.changed(0) == (0, [])
    assert await mod.rooms(["r"], T) == {}
    assert await mod.audit("r", AUDIT_KEPT) == []


async def test_bad_reads_and_clocks_are_refused(store: Store) -> None:
    mod = store.moderation
    for limit in (0, -1, AUDIT_KEPT + 1, 1.0, True):
        with pytest.raises(ValueError, match="limit"):
            await mod.audit("r", limit)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="room"):
        await mod.audit("a/b", 1)
    with pytest.raises(ValueError, match="room"):
        await mod.rooms(["r", "."], T)
    for since in (-1, 1.0, None):
        with pytest.raises(ValueError, match="since"):
            await mod.changed(since)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="now_ms"):
        await mod.act("r", act("slow", "", 1, at_ms=T), -5)
    assert await mod.changed(0) == (0, [])


async def test_a_room_holds_at_most_its_cap_of_mutes_and_as_many_bans(
        store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    # The engines' cap, smaller: the rule is the same at 200 as at 10 000, and
    # 10 000 mutes of three steps each on a cluster outlast a socket's timeout
    # on a loaded machine.
    cap = 200
    for engine in ("memory", "redis"):
        monkeypatch.setattr(f"liveroom.store.{engine}.moderation.SANCTIONS_MAX", cap)
    assert cap < SANCTIONS_MAX
    mod, t = store.moderation, now_ms(fake_clock)
    # A few connections: 64 new ones at once timed out on a loaded machine.
    gate = asyncio.Semaphore(8)

    async def mute(uid: str, seconds: int) -> None:
        async with gate:
            await mod.act("r", act("mute", uid, seconds, at_ms=t), t)

    await asyncio.gather(*(mute(f"u{n}", 1 if n % 2 else 600) for n in range(cap)))
    version, audit = (await mod.changed(0))[0], await mod.audit("r", AUDIT_KEPT)
    with pytest.raises(SanctionsFull):
        await mod.act("r", act("mute", "one-more", 600, at_ms=t), t)
    assert ((await mod.changed(0))[0], await mod.audit("r", AUDIT_KEPT)) == (version, audit)
    assert len((await mod.rooms(["r"], t))["r"].muted) == cap
    # A uid muted already is muted again; bans are counted apart.
    await mod.act("r", act("mute", "u0", 60, at_ms=t), t)
    await mod.act("r", act("ban", "one-more", 0, at_ms=t), t)
    # Ended mutes do not count: half of them lasted a second.
    t += 1_000
    await mod.act("r", act("mute", "one-more", 600, at_ms=t), t)
    (state,) = (await mod.rooms(["r"], t)).values()
    assert (len(state.muted), len(state.banned)) == (cap // 2 + 1, 1)


# --- Redis: keys, round trips, outages ---------------------------------------------------


async def test_every_call_is_one_round_trip(
        store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rooms`` of many rooms, ``changed`` and ``audit`` are one round trip
    (a cluster's pipeline sends a batch per node, together); ``act`` one on
    one Redis, three on a cluster (the room's, the journal's, the stamp; a
    fourth only when another act came between, see below)."""
    mod, t = store.moderation, now_ms(fake_clock)
    rooms = [f"room{i}" for i in range(50)]
    if store.name == "memory":  # never suspends: done at the first step
        acting = mod.act("r", act("slow", "", 1, at_ms=t), t).__await__()
        with pytest.raises(StopIteration):
            next(acting)
        reading = mod.rooms(["r", *rooms], t).__await__()
        with pytest.raises(StopIteration) as done:
            next(reading)
        assert done.value.value == {"r": RoomModeration((), (), 1, 1)}
        return
    await mod.act("r", act("slow", "", 1, at_ms=t), t)  # the scripts loaded
    await mod.changed(0)
    for room in rooms:
        await mod.act(room, act("mute", "bob", 60, at_ms=t), t)
    trips = RoundTrips(store.moderation._client, monkeypatch)  # type: ignore[attr-defined]
    assert len(await mod.rooms(rooms, t)) == 50
    assert trips.count == 1
    assert (await mod.changed(0))[0] == 51
    assert trips.count == 2
    assert len(await mod.audit("room7", 10)) == 1
    assert trips.count == 3
    await mod.act("room7", act("unmute", "bob", at_ms=t), t)
    assert trips.count == 4 + (2 if store.name == "redis-cluster" else 0)


@pytest.mark.redis_engines
async def test_moderation_keys_live_as_long_as_their_sanctions_in_the_rooms_slot(
        engine_url: str, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    assert raw_redis is not None  # the redis engines only: keys are theirs
    history = 60_000
    async with opened(engine_url, replace(TEST_POLICY, history_ttl_ms=history),
                      fake_clock) as store:
        mod, t = store.moderation, now_ms(fake_clock)
        room_keys = (keys.moderation("r"), keys.moderation_ends("r"), keys.audit("r"))

        async def lives() -> list[int]:
            return [await raw_redis.pttl(key) for key in room_keys]

        await mod.act("r", act("slow", "", 3, at_ms=t), t)
        ttl = await raw_redis.pttl(keys.moderation("r"))
        assert history - 5_000 < ttl <= history
        assert await raw_redis.pttl(keys.audit("r")) == pytest.approx(ttl, abs=5_000)
        await mod.act("r", act("mute", "bob", 3_600, at_ms=t), t)  # longer than the history
        assert all(3_595_000 < ms <= 3_600_000 for ms in await lives())
        await mod.act("r", act("ban", "eve", 0, at_ms=t), t)
        assert await lives() == [-1, -1, -1]  # kept while the ban holds
        await mod.act("r", act("unban", "eve", at_ms=t + 600_000), t + 600_000)
        assert all(2_995_000 < ms <= 3_000_000 for ms in await lives())
        await mod.act("r", act("unmute", "bob", at_ms=t), t)
        kept = [await raw_redis.pttl(key) for key in (keys.moderation("r"), keys.audit("r"))]
        assert all(history - 5_000 < ms <= history for ms in kept)
        assert await raw_redis.exists(keys.moderation_ends("r")) == 0  # no sanction left
        for key in (keys.MODERATION_VERSION, keys.MODERATION_JOURNAL, keys.MODERATION_ENDS):
            assert await raw_redis.pttl(key) == -1  # pruned by acts, never expired
        slot = key_slot(keys.meta("r").encode())
        assert {key_slot(k.encode()) for k in (*room_keys, keys.audit("r", 3))} == {slot}
        assert {key_slot(k.encode()) for k in (
            keys.MODERATION_VERSION, keys.MODERATION_JOURNAL, keys.MODERATION_ENDS,
            keys.VIP)} == {key_slot(keys.VIP.encode())}


@pytest.mark.redis_engines
async def test_records_that_do_not_decode_are_left_out(
        store: Store, fake_clock: FakeClock, raw_redis: redis.asyncio.Redis | None) -> None:
    assert raw_redis is not None
    mod, t = store.moderation, now_ms(fake_clock)
    await mod.act("r", act("mute", "bob", 60, at_ms=t), t)
    await raw_redis.hset(keys.moderation("r"), mapping={"m:junk": b"\xc1", "b:x": b"[1]"})
    await raw_redis.lpush(keys.audit("r"), b"not msgpack \xc1")
    (state,) = (await mod.rooms(["r"], t)).values()
    assert ([s.uid for s in state.muted], state.banned) == (["bob"], ())
    assert [e.target for e in await mod.audit("r", 10)] == ["bob"]


async def test_an_act_on_a_cluster_whose_later_step_failed_is_retried_harmlessly(
        cluster_url: str, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The room's step done, the journal's (then the stamp's) failing: the
    caller is told the store is unavailable, and its retry gives the same
    state, one audit entry, and the change in the journal."""
    async with opened(cluster_url, TEST_POLICY, fake_clock) as store:
        mod, t = store.moderation, now_ms(fake_clock)
        assert await mod.act("r", act("slow", "", 1, at_ms=t), t) == 1
        run_scripts = calls.run_scripts
        failing: list[str] = []

        async def flaky(client: Any, batch: Any) -> list[Any]:
            if batch[0][0].name in failing:
                failing.remove(batch[0][0].name)
                raise redis.exceptions.ConnectionError("lost on the way")
            return await run_scripts(client, batch)

        monkeypatch.setattr(redis_moderation, "run_scripts", flaky)
        entry = act("mute", "bob", 60, at_ms=t)
        failing.append("moderation_journal.lua")
        with pytest.raises(StoreUnavailable):
            await mod.act("r", entry, t)
        assert await mod.changed(1) == (1, [])  # applied, not yet noted
        assert [s.uid for s in (await mod.rooms(["r"], t))["r"].muted] == ["bob"]
        assert await mod.act("r", entry, t) == 2
        assert await mod.changed(1) == (2, ["r"])
        assert await mod.audit("r", 10) == [entry, act("slow", "", 1, at_ms=t)]
        assert (await mod.rooms(["r"], t))["r"].version == 2
        failing.append("moderation_stamp.lua")
        with pytest.raises(StoreUnavailable):
            await mod.act("r", act("unmute", "bob", at_ms=t), t)
        assert await mod.changed(2) == (3, ["r"])  # noted; the room's version behind
        assert (await mod.rooms(["r"], t))["r"] == RoomModeration((), (), 1, 2)
        assert await mod.act("r", act("unmute", "bob", at_ms=t), t) == 4
        assert (await mod.rooms(["r"], t))["r"] == RoomModeration((), (), 1, 4)
        assert len(await mod.audit("r", 10)) == 3


async def test_a_cluster_journal_keeps_the_later_end_when_an_earlier_acts_note_comes_last(
        cluster_url: str, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster an act is noted in the journal after its room's step: a
    mute's step, then a longer ban's whole act, then the mute's note. The
    journal keeps the ban's end, so the room stays in it (and a node that
    starts reads it) for as long as the ban lasts, not the mute."""
    # Kept a short while past their last act: the sanctions' ends rule.
    policy = replace(TEST_POLICY, history_ttl_ms=30_000)
    async with opened(cluster_url, policy, fake_clock) as store:
        mod, t = store.moderation, now_ms(fake_clock)
        run_scripts = calls.run_scripts
        ban = act("ban", "mal", 600, at_ms=t)

        async def later_act_first(client: Any, batch: Any) -> list[Any]:
            if batch[0][0].name == "moderation_journal.lua" and ban is not None:
                monkeypatch.undo()
                await mod.act("r", ban, t)  # the later act, whole, before this note
            return await run_scripts(client, batch)

        monkeypatch.setattr(redis_moderation, "run_scripts", later_act_first)
        await mod.act("r", act("mute", "bob", 60, at_ms=t), t)
        await fake_clock.advance(61)
        t = now_ms(fake_clock)
        await mod.act("other", act("slow", "", 1, at_ms=t), t)  # an act prunes the journal
        assert [s.uid for s in (await mod.rooms(["r"], t))["r"].banned] == ["mal"]
        assert "r" in (await mod.changed(0))[1]


async def test_every_moderation_call_reports_redis_down_as_unavailable(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, LogPolicy(), fake_clock) as store:
        mod = store.moderation
        redis_server.stop()
        try:
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: mod.act("r", act("slow", "", 1, at_ms=T), T),
                lambda: mod.rooms(["r"], T),
                lambda: mod.changed(0),
                lambda: mod.audit("r", 10),
            ]
            for call in calls:
                with pytest.raises(StoreUnavailable):
                    await call()
        finally:
            redis_server.start()


# --- against a model ---------------------------------------------------------------------


@dataclass
class RoomModel:
    sanctions: dict[tuple[str, str], Sanction] = field(default_factory=dict)
    slow: int = 0
    version: int = 0
    audit: list[AuditEntry] = field(default_factory=list)
    """Newest first."""
    archives: list[tuple[AuditEntry, ...]] = field(default_factory=list)
    """Ended broadcasts' audits, newest first."""


class ModerationModel:
    """What the moderation of rooms should be, written plainly: every rule of
    ``ModerationStore`` but the store's own expiry of keys (the tests' clock
    steps stay far below the history's ttl)."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.version = 0
        self.rooms: dict[str, RoomModel] = {}
        self.journal: dict[str, int] = {}
        self.ends: dict[str, float] = {}

    def act(self, room: str, entry: AuditEntry, now: int) -> int:
        state = self.rooms.setdefault(room, RoomModel())
        state.sanctions = {k: s for k, s in state.sanctions.items()
                           if s.until_ms == 0 or s.until_ms > now}
        kind = {"mute": "m", "unmute": "m", "ban": "b", "unban": "b"}.get(entry.action)
        if entry.action in ("mute", "ban"):
            until = now + entry.seconds * 1000 if entry.seconds else 0
            state.sanctions[kind, entry.target] = Sanction(  # type: ignore[index]
                entry.target, until, entry.reason, entry.by, entry.at_ms)
        elif entry.action in ("unmute", "unban"):
            state.sanctions.pop((kind, entry.target), None)  # type: ignore[arg-type]
        elif entry.action == "slow":
            state.slow = entry.seconds
        if not state.audit or state.audit[0] != entry:
            state.audit = [entry, *state.audit][:AUDIT_KEPT]
        self.version += 1
        state.version = self.version
        untils = [s.until_ms for s in state.sanctions.values()]
        ends = math.inf if 0 in untils else now + max([self.ttl_ms, *(u - now for u in untils)])
        self.journal.pop(room, None)
        self.journal[room] = self.version
        self.ends[room] = ends
        for gone in [r for r, end in self.ends.items() if end <= now]:
            del self.journal[gone], self.ends[gone]
        return self.version

    def end_broadcast(self, room: str) -> None:
        state = self.rooms.setdefault(room, RoomModel())
        state.archives.insert(0, tuple(state.audit))
        state.audit = []

    def read(self, now: int) -> dict[str, RoomModeration]:
        found = {}
        for room, state in self.rooms.items():
            live = [(k, s) for k, s in sorted(state.sanctions.items(), key=lambda i: i[0][1])
                    if s.until_ms == 0 or s.until_ms > now]
            muted = tuple(s for (kind, _), s in live if kind == "m")
            banned = tuple(s for (kind, _), s in live if kind == "b")
            if muted or banned or state.slow:
                found[room] = RoomModeration(muted, banned, state.slow, state.version)
        return found

    def changed(self, since: int) -> tuple[int, list[str]]:
        since = 0 if since > self.version else since
        return self.version, [r for r, v in self.journal.items() if v > since]


ROOMS = ["a", "b", "c.d"]
UIDS = ["u1", "u2", "U-3"]
BY = ["admin", "publisher", "uid:u1"]


@st.composite
def actions(draw: st.DrawFn) -> tuple[Any, ...]:
    action = draw(st.sampled_from(["mute", "unmute", "ban", "unban", "slow", "recall"]))
    room, by = draw(st.sampled_from(ROOMS)), draw(st.sampled_from(BY))
    reason = draw(st.sampled_from(["", "spam", "é 🎁"]))
    if action in ("mute", "ban"):
        low = 1 if action == "mute" else 0
        seconds = draw(st.one_of(st.integers(low, 5), st.sampled_from(
            [60, 3_600, SANCTION_SECONDS_MAX])))
        return ("act", room, action, draw(st.sampled_from(UIDS)), seconds, by, reason)
    if action == "slow":
        return ("act", room, action, "", draw(st.integers(0, 3)), by, reason)
    if action == "recall":
        return ("act", room, action, f"room:{draw(st.integers(1, 9))}", 0, by, reason)
    return ("act", room, action, draw(st.sampled_from(UIDS)), 0, by, reason)


steps = st.lists(st.one_of(
    actions(), actions(),
    st.tuples(st.just("tick"), st.integers(0, 6_000)),
    st.tuples(st.just("again")),
    st.tuples(st.just("end"), st.sampled_from(ROOMS))), max_size=30)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(given_steps=steps)
def test_moderation_matches_the_model(engine: str, request: pytest.FixtureRequest,
                                      given_steps: list[tuple[Any, ...]]) -> None:
    asyncio.run(_run_steps(fresh_engine_url(engine, request), given_steps))


async def _run_steps(url: str, given_steps: list[tuple[Any, ...]]) -> None:
    clock = FakeClock(T / 1000)
    model = ModerationModel(TEST_POLICY.history_ttl_ms)
    last: tuple[str, AuditEntry] | None = None
    seen_versions = [0]
    async with opened(url, TEST_POLICY, clock) as store:
        mod = store.moderation
        for step in given_steps:
            t = now_ms(clock)
            if step[0] == "act":
                _, room, action, target, seconds, by, reason = step
                last = (room, AuditEntry(t, by, action, target, seconds, reason))
            if step[0] in ("act", "again") and last is not None:
                room, entry = last
                assert await mod.act(room, entry, t) == model.act(room, entry, t)
                seen_versions.append(model.version)
            elif step[0] == "tick":
                await clock.advance(step[1] / 1000)
            elif step[0] == "end":
                await store.operators.end_broadcast(step[1], t, ARCHIVE_TTL_MS)
                model.end_broadcast(step[1])
            t = now_ms(clock)
            assert await mod.rooms([*ROOMS, "never"], t) == model.read(t)
        for since in {0, *seen_versions[::3], model.version + 1}:
            assert await mod.changed(since) == model.changed(since)
        for room in ROOMS:
            state = model.rooms.get(room, RoomModel())
            assert await mod.audit(room, AUDIT_KEPT) == state.audit
            assert await mod.audit(room, 2) == state.audit[:2]
            assert [p.moderation for p in await store.operators.broadcasts(room)] == \
                state.archives
