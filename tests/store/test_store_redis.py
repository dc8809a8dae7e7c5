"""What only the redis engine faces: a store that loses its data, dies, or drops the channel.

Runs against the session's real ``redis-server``; fault tests stop it and start
it again on the same port (the ``redis_url`` fixture restarts it for the next
test if one fails half-way). Waits on the external process are bounded polls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
import redis.asyncio
from conftest import TEST_POLICY, opened

import liveroom.store.redis.log as redis_engine
import liveroom.store.redis.notify as redis_notify
from liveroom.clock import FakeClock
from liveroom.errors import RateLimited, StoreUnavailable
from liveroom.model import NewMessage
from liveroom.ratelimit import RateLimits, Window
from liveroom.store import LogPolicy, Pulled, PullRequest, Store
from liveroom.store.redis import keys
from liveroom.store.redis.log import _build_pulled

if TYPE_CHECKING:
    from conftest import RedisServer

WAIT = 10.0
"""Bound on waits for the notifier to notice a fault and recover (backoff ≤ 2 s)."""


@pytest.fixture
def engine_url(redis_url: str) -> str:
    """Only the redis engine in this module (overrides the parametrized one)."""
    return redis_url


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """A plain client, beside the store, to play the operator or the fault."""
    plain = redis.asyncio.Redis.from_url(redis_url)
    try:
        yield plain
    finally:
        await plain.aclose()


def message(clock: FakeClock, n: int, *, important: bool = False) -> NewMessage:
    return NewMessage(uid="u", body=n, important=important, ts=int(clock.time() * 1000))


async def eventually(condition: Callable[[], bool], within: float = WAIT) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {within} s")
        await asyncio.sleep(0.02)


class Recorder:
    """A notifier subscriber that lets a test await a notify or a resync."""

    def __init__(self) -> None:
        self.notified: list[tuple[str, int]] = []
        self.resyncs = 0
        self._changed = asyncio.Event()

    def on_notify(self, room: str, seq: int) -> None:
        self.notified.append((room, seq))
        self._changed.set()

    def on_resync(self) -> None:
        self.resyncs += 1
        self._changed.set()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT):
            while not condition():
                self._changed.clear()
                await self._changed.wait()


# --- losing the data ------------------------------------------------------------


async def test_a_flushed_store_starts_a_new_epoch_from_seq_one(
        store: Store, fake_clock: FakeClock, client: redis.asyncio.Redis) -> None:
    old = await store.log.open_room("r")
    for n in range(1, 4):
        await store.log.append("r", message(fake_clock, n))
    await client.flushall()
    assert (await store.log.pull([PullRequest("r", 3, 10)]))[0].epoch is None
    appended = await store.log.append("r", message(fake_clock, 1))
    assert (appended.seq, appended.duplicate) == (1, False)
    assert appended.epoch != old
    (pulled,) = await store.log.pull([PullRequest("r", 3, 10)])
    # A cursor from the old epoch: the new epoch tells the reader to reset.
    assert (pulled.epoch, pulled.head, pulled.entries, pulled.complete) == (
        appended.epoch, 1, (), True)
    assert await store.log.open_room("r") == appended.epoch


async def test_open_room_after_a_flush_gives_a_new_epoch(
        store: Store, client: redis.asyncio.Redis) -> None:
    old = await store.log.open_room("r")
    await client.flushall()
    assert await store.log.open_room("r") not in (old, None)


async def test_streams_left_without_meta_are_replaced(
        store: Store, fake_clock: FakeClock, client: redis.asyncio.Redis) -> None:
    for n in range(1, 6):
        await store.log.append("r", message(fake_clock, n, important=n == 2))
    await client.delete(keys.meta("r"))  # as if evicted alone
    appended = await store.log.append("r", message(fake_clock, 1))
    assert appended.seq == 1
    (pulled,) = await store.log.pull([PullRequest("r", 0, 10)])
    assert [(e.seq, e.body) for e in pulled.entries] == [(1, 1)]


@pytest.mark.parametrize("creates", ["open_room", "renew_epoch", "end_broadcast"])
async def test_every_script_that_creates_a_log_drops_leftover_streams(
        store: Store, fake_clock: FakeClock, client: redis.asyncio.Redis, creates: str) -> None:
    """The no-log rule (``log_new.lua``) runs in each script that may create a
    room's log: with the meta evicted alone, the old streams go and seqs
    start from 1 in a new epoch."""
    old = (await store.log.append("r", message(fake_clock, 1, important=True))).epoch
    await store.log.append("r", message(fake_clock, 2))
    await client.delete(keys.meta("r"))
    if creates == "open_room":
        epoch = await store.log.open_room("r")
    elif creates == "renew_epoch":
        epoch = await store.log.renew_epoch("r", old)
    else:
        epoch = (await store.operators.end_broadcast("r", int(fake_clock.time() * 1000),
                                                     60_000)).epoch
    assert epoch != old
    assert await client.exists(keys.log("r"), keys.important("r")) == 0
    appended = await store.log.append("r", message(fake_clock, 3))
    assert (appended.epoch, appended.seq) == (epoch, 1)
    (pulled,) = await store.log.pull([PullRequest("r", 0, 10)])
    assert [(e.seq, e.body) for e in pulled.entries] == [(1, 3)]


async def test_a_client_msg_id_from_a_lost_epoch_is_forgotten(
        store: Store, fake_clock: FakeClock, client: redis.asyncio.Redis) -> None:
    sent = NewMessage("u", "x", False, 1, client_msg_id="m")
    await store.log.append("r", message(fake_clock, 1))
    assert (await store.log.append("r", sent)).seq == 2
    await client.delete(keys.meta("r"))
    again = await store.log.append("r", sent)
    assert (again.seq, again.duplicate) == (1, False)


def test_a_pull_whose_epoch_changed_underneath_is_read_again() -> None:
    request = PullRequest("r", 0, 10)
    assert _build_pulled(request, [[b"e1", b"3", b"0", b"0", b"e1"], [], [], [], b"e2"]) is None
    assert _build_pulled(request, [[None, None, None, None, None], [], [], [], b"e2"]) is None
    assert _build_pulled(request, [[b"e1", b"3", b"0", b"0", b"e1"], [], [], [], None]) is None


async def test_pulls_stay_consistent_while_epochs_are_renewed(
        store: Store, fake_clock: FakeClock) -> None:
    for n in range(1, 21):
        await store.log.append("r", message(fake_clock, n, important=n % 4 == 0))

    async def renew_again_and_again() -> None:
        epoch = await store.log.open_room("r")
        for _ in range(200):
            epoch = await store.log.renew_epoch("r", epoch)

    renewing = asyncio.create_task(renew_again_and_again())
    try:
        while not renewing.done():
            (pulled,) = await store.log.pull([PullRequest("r", 5, 4)])
            assert [e.seq for e in pulled.entries] == [8, 12, 16, 17, 18, 19, 20]
            assert (pulled.head, pulled.head_ic, pulled.complete) == (20, 5, False)
    finally:
        await renewing


async def test_a_room_read_across_an_epoch_change_is_read_again(
        store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(1, 4):
        await store.log.append("a", message(fake_clock, n))
        await store.log.append("b", message(fake_clock, n))
    reads: list[str] = []

    def first_read_of_b_torn(request: PullRequest, replies: list[object]) -> object:
        reads.append(request.room)
        if reads.count("b") == 1 and request.room == "b":
            return None
        return _build_pulled(request, replies)  # type: ignore[arg-type]

    monkeypatch.setattr(redis_engine, "_build_pulled", first_read_of_b_torn)
    a, b = await store.log.pull([PullRequest("a", 1, 10), PullRequest("b", 0, 10)])
    assert reads == ["a", "b", "b"]
    assert ([e.seq for e in a.entries], [e.seq for e in b.entries]) == ([2, 3], [1, 2, 3])


async def test_a_room_that_never_reads_consistently_is_unavailable(
        store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.log.append("r", message(fake_clock, 1))
    monkeypatch.setattr(redis_engine, "_build_pulled", lambda request, replies: None)
    with pytest.raises(StoreUnavailable):
        await store.log.pull([PullRequest("r", 0, 10)])


# --- settings changed under a log ------------------------------------------------


@pytest.mark.parametrize("personal", [False, True])
async def test_a_lowered_hard_cap_trims_down_to_it_at_the_next_send(
        redis_url: str, fake_clock: FakeClock, personal: bool) -> None:
    """A node restarted with a lower cap finds a stream far over it: the next
    send drops the excess by count (young or old), then the old ones it
    uncovers, beyond the keep."""
    def send(n: int, ts: int) -> NewMessage:
        return NewMessage(uid="backend", body=n, important=True, ts=ts,
                          to="a" if personal else None)

    def bodies(pulled: Pulled) -> list[object]:
        return [e.body for e in (pulled.personal if personal else pulled.entries)]

    wide = LogPolicy(log_cap=10, important_keep=3, important_window_ms=60_000,
                     important_hard_cap=500, personal_hard_cap=500)
    async with opened(redis_url, wide, fake_clock) as store:
        for n, ts in [*((n, 30_000) for n in range(1, 201)),
                      *((n, 0) for n in range(201, 301)),
                      *((n, 30_000) for n in range(301, 351))]:
            await store.log.append("r", send(n, ts))
    narrow = replace(wide, important_hard_cap=100, personal_hard_cap=100)
    async with opened(redis_url, narrow, fake_clock) as store:
        await store.log.append("r", send(351, 61_000))
        # 351 held: the 251 oldest go by count (the young 1..200 among them),
        # then the 49 of ts 0 left, by age, up to the young 301.
        (pulled,) = await store.log.pull([PullRequest("r", 0, 0)])
        assert bodies(pulled) == list(range(301, 352))


# --- the notify channel ---------------------------------------------------------


async def test_the_notifier_reconnects_after_its_connection_is_killed(
        store: Store, fake_clock: FakeClock, client: redis.asyncio.Redis) -> None:
    recorder = Recorder()
    store.notifier.subscribe(recorder.on_notify, recorder.on_resync)
    await store.log.append("r", message(fake_clock, 1))
    await recorder.wait_for(lambda: ("r", 1) in recorder.notified)
    resyncs = recorder.resyncs

    assert await client.client_kill_filter(_type="pubsub") >= 1
    await recorder.wait_for(lambda: recorder.resyncs > resyncs)
    await eventually(lambda: store.notifier.alive)
    await store.log.append("r", message(fake_clock, 2))
    await recorder.wait_for(lambda: ("r", 2) in recorder.notified)


async def test_a_silently_dead_channel_is_found_by_the_probe(
        store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_notify, "PROBE_INTERVAL", 0.05)
    monkeypatch.setattr(redis_notify, "PROBE_TIMEOUT", 0.2)
    recorder = Recorder()
    store.notifier.subscribe(recorder.on_notify, recorder.on_resync)
    assert isinstance(store.notifier, redis_notify.RedisNotifier)
    real_publish = store.notifier._publish_probe

    async def lost(payload: bytes) -> None:
        return None  # as if the server stopped delivering to this connection

    monkeypatch.setattr(store.notifier, "_publish_probe", lost)
    await eventually(lambda: not store.notifier.alive)
    resyncs = recorder.resyncs
    await recorder.wait_for(lambda: recorder.resyncs > resyncs)  # it reconnected

    monkeypatch.setattr(store.notifier, "_publish_probe", real_publish)
    await eventually(lambda: store.notifier.alive)
    await store.log.append("r", message(fake_clock, 1))
    await recorder.wait_for(lambda: ("r", 1) in recorder.notified)


async def test_malformed_notifies_and_probes_are_ignored(
        store: Store, fake_clock: FakeClock, client: redis.asyncio.Redis) -> None:
    recorder = Recorder()
    store.notifier.subscribe(recorder.on_notify, recorder.on_resync)
    for junk in (b"", b"12", b"x room", b"-1 room", b"7 ", b"3 \xff\xfe", b"probe other:1"):
        await client.publish(keys.NOTIFY_CHANNEL, junk)
    await store.log.append("r", message(fake_clock, 1))
    await recorder.wait_for(lambda: bool(recorder.notified))
    assert recorder.notified == [("r", 1)]


async def test_a_failing_subscriber_does_not_stop_the_others(
        store: Store, fake_clock: FakeClock) -> None:
    def broken(room: str, seq: int) -> None:
        raise RuntimeError("a bug in one subscriber")

    recorder = Recorder()
    store.notifier.subscribe(broken, lambda rooms=None: None)
    store.notifier.subscribe(recorder.on_notify, recorder.on_resync)
    await store.log.append("r", message(fake_clock, 1))
    await store.log.append("r", message(fake_clock, 2))
    await recorder.wait_for(lambda: len(recorder.notified) == 2)
    assert store.notifier.alive


# --- the store going down and coming back ---------------------------------------


async def test_a_stopped_redis_is_unavailable_and_then_back(
        store: Store, fake_clock: FakeClock, redis_server: RedisServer) -> None:
    recorder = Recorder()
    store.notifier.subscribe(recorder.on_notify, recorder.on_resync)
    epoch = (await store.log.append("r", message(fake_clock, 1))).epoch
    assert store.notifier.alive

    redis_server.stop()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await store.log.append("r", message(fake_clock, 2))
    with pytest.raises(StoreUnavailable):
        await store.log.pull([PullRequest("r", 0, 10)])
    with pytest.raises(StoreUnavailable):
        await store.ping()
    with pytest.raises(StoreUnavailable):
        await store.log.open_room("r")
    with pytest.raises(StoreUnavailable):
        await store.log.touch(["r"])
    assert time.monotonic() - started < 3
    await eventually(lambda: not store.notifier.alive)

    resyncs = recorder.resyncs
    redis_server.start()  # empty: the room's log is lost
    await store.ping()
    appended = await store.log.append("r", message(fake_clock, 1))
    assert appended.seq == 1
    assert appended.epoch != epoch
    await eventually(lambda: store.notifier.alive)
    assert recorder.resyncs > resyncs
    await store.log.append("r", message(fake_clock, 2))
    await recorder.wait_for(lambda: ("r", 2) in recorder.notified)


async def test_a_store_started_while_redis_is_down_comes_up_later(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock) -> None:
    from liveroom.store import LogPolicy, open_store

    redis_server.stop()
    store = open_store(redis_url, LogPolicy(), fake_clock, node_id="late")
    await store.start()
    try:
        assert not store.notifier.alive
        redis_server.start()
        await eventually(lambda: store.notifier.alive)
        assert (await store.log.append("r", message(fake_clock, 1))).seq == 1
    finally:
        await store.close()


async def test_close_is_clean_while_redis_is_down(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock) -> None:
    from liveroom.store import LogPolicy, open_store

    store = open_store(redis_url, LogPolicy(), fake_clock)
    await store.start()
    redis_server.stop()
    await eventually(lambda: not store.notifier.alive)
    await store.close()
    await store.close()  # twice is harmless


async def test_a_user_allowed_only_read_commands_can_serve_pulls(
        redis_store: Store, client: redis.asyncio.Redis, redis_url: str,
        fake_clock: FakeClock) -> None:
    """Pulls use read-only commands: a user with nothing but ``@read`` (and the
    connection commands) reads what the writer reads, so a replica or a
    read-only account can serve them."""
    for i in range(1, 13):
        await redis_store.log.append("ro", message(fake_clock, i, important=i % 4 == 0))
    await redis_store.log.append("ro2", message(fake_clock, 1))
    await client.execute_command("ACL", "SETUSER", "reader", "reset", "on", ">pw", "~*",
                                 "+@read", "+@connection")
    reader = redis.asyncio.Redis.from_url(redis_url.replace("redis://", "redis://reader:pw@"))
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            await reader.set("lr:{ro}:meta", "x")  # the user really cannot write
        log = redis_engine.RedisLog(reader, TEST_POLICY)
        requests = [PullRequest("ro", 0, 5), PullRequest("ro", 6, 0), PullRequest("ro2", 0, 5),
                    PullRequest("none", 0, 5)]
        assert await log.pull(requests) == await redis_store.log.pull(requests)
        pulled = await log.pull([PullRequest("ro", 0, 5)])
        assert pulled[0].head == 12
        assert [e.seq for e in pulled[0].entries] == [4, 8, 9, 10, 11, 12]
    finally:
        await reader.aclose()
        await client.execute_command("ACL", "DELUSER", "reader")


# --- appends of concurrent sends, batched ---------------------------------------------


async def test_concurrent_appends_each_get_their_own_answer(
        store: Store, fake_clock: FakeClock) -> None:
    """Appends asked in one turn of the loop go to Redis in one pipeline; each
    sender still gets its own seq, or its own refusal, in the order asked."""
    limits = RateLimits(per_uid=(Window(5, 60),))
    answers = await asyncio.gather(
        *(store.log.append("batch", message(fake_clock, n), limits) for n in range(1, 9)),
        store.log.append("other", message(fake_clock, 0)),
        return_exceptions=True)
    stored = [a.seq for a in answers[:8] if not isinstance(a, BaseException)]
    assert stored == [1, 2, 3, 4, 5]
    assert all(isinstance(a, RateLimited) for a in answers[5:8])
    other = answers[8]
    assert not isinstance(other, BaseException)
    assert other.seq == 1
    (pulled,) = await store.log.pull([PullRequest("batch", 0, 10)])
    assert [e.body for e in pulled.entries] == [1, 2, 3, 4, 5]


async def test_a_batch_of_appends_that_cannot_reach_redis_fails_every_sender(
        store: Store, fake_clock: FakeClock, redis_server: RedisServer) -> None:
    await store.log.append("r", message(fake_clock, 1))
    redis_server.stop()
    try:
        answers = await asyncio.gather(
            *(store.log.append("r", message(fake_clock, n)) for n in range(2, 6)),
            return_exceptions=True)
        assert all(isinstance(a, StoreUnavailable) for a in answers), answers
    finally:
        redis_server.start()
    await store.ping()
    assert (await store.log.append("r", message(fake_clock, 1))).seq == 1
