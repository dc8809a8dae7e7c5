"""Sender rate limits inside the append, on both engines.

Each test runs once per engine (the ``store`` fixture); sends carry explicit
timestamps, the time the windows count by. The property test at the end runs
random send sequences under random windows through each engine and compares
every answer with a reference model written from the rule's words: a list of
accepted timestamps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import redis.asyncio
from conftest import ENGINES, TEST_POLICY, fresh_engine_url, opened, raw_client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liveroom.clock import FakeClock
from liveroom.errors import RateLimited
from liveroom.model import NewMessage
from liveroom.ratelimit import (
    ListTally,
    RateLimits,
    SenderTally,
    Window,
    count_send,
    freed_at,
    horizon_ms,
    parse_windows,
    prune,
    refused_until,
    sender_tally,
    span,
    tally_empty,
)
from liveroom.store import LogPolicy, PullRequest, Store
from liveroom.store.redis import keys

T0 = 1_699_999_200_000
"""A timestamp on a whole hour (a boundary of every bucket below)."""
DEFAULT = RateLimits()
"""5 a second, 30 a minute, 300 an hour per uid; no room cap."""


def msg(ts: int, uid: str = "u1", cmid: str | None = None) -> NewMessage:
    return NewMessage(uid=uid, body="hi", important=False, ts=ts, client_msg_id=cmid)


async def send(store: Store, ts: int, uid: str = "u1", *, room: str = "r",
               limits: RateLimits | None = DEFAULT, cmid: str | None = None) -> int:
    """Append one message; its seq."""
    return (await store.log.append(room, msg(ts, uid, cmid), limits)).seq


async def refused(store: Store, ts: int, uid: str = "u1", *, room: str = "r",
                  limits: RateLimits | None = DEFAULT) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        await store.log.append(room, msg(ts, uid), limits)
    return caught.value


async def head(store: Store, room: str = "r") -> int:
    (pulled,) = await store.log.pull([PullRequest(room, 0, 0)])
    return pulled.head


# --- the default windows at their counts ------------------------------------------


async def test_five_in_a_second_then_the_sixth_is_refused(store: Store) -> None:
    for i in range(5):
        assert await send(store, T0 + 10 * i) == i + 1
    error = await refused(store, T0 + 500)
    assert error.status == 429
    assert error.temporary
    # The oldest bucket (index T0 // 100) leaves the window at T0 + 1000.
    assert error.retry_after == pytest.approx(0.5)
    assert error.message == "uid u1 over 5 sends per 1 s in room r; retry in 0.5 s"
    assert await head(store) == 5
    assert await send(store, T0 + 1000) == 6


async def test_thirty_a_minute(store: Store) -> None:
    # One send every 2 s stays under 5/s; the 31st within the minute is refused.
    for i in range(30):
        await send(store, T0 + 2000 * i)
    error = await refused(store, T0 + 59_000)
    # Buckets of 1 s: the first send's bucket leaves at T0 + 60 s.
    assert error.retry_after == pytest.approx(1.0)
    assert "30 sends per 1 min" in error.message
    await refused(store, T0 + 59_999)
    assert await send(store, T0 + 60_000) == 31
    # The window slid by one bucket: the next frees with the second send's.
    assert (await refused(store, T0 + 61_000)).retry_after == pytest.approx(1.0)
    assert await send(store, T0 + 62_000) == 32


async def test_three_hundred_an_hour(store: Store, fake_clock: FakeClock) -> None:
    # 30 a minute, in 10 minutes: 300 sends; then the hour is full.
    for minute in range(10):
        for i in range(30):
            await send(store, T0 + minute * 60_000 + i * 1000)
        await fake_clock.advance(60)
    at = T0 + 20 * 60_000
    error = await refused(store, at)
    assert "300 sends per 1 h" in error.message
    # Buckets of 1 min: the first minute's 30 sends leave at T0 + 1 h.
    assert error.retry_after == pytest.approx(40 * 60)
    await refused(store, T0 + 3_600_000 - 1)
    assert await send(store, T0 + 3_600_000) == 301


async def test_bucket_granularity_frees_exactly_the_oldest_bucket(store: Store) -> None:
    limits = RateLimits(per_uid=(Window(5, 1),))
    # One send in each of buckets 0, 2, 4, 6, 8 (100 ms each).
    for i in range(5):
        await send(store, T0 + 200 * i + 50, limits=limits)
    error = await refused(store, T0 + 950, limits=limits)
    assert error.retry_after == pytest.approx(0.05)
    await refused(store, T0 + 999, limits=limits)
    # Bucket 10 starts: bucket 0 left, exactly one send freed.
    await send(store, T0 + 1000, limits=limits)
    error = await refused(store, T0 + 1001, limits=limits)
    # Bucket 2 leaves at T0 + 1200.
    assert error.retry_after == pytest.approx(0.199)


async def test_retry_after_drops_whole_buckets_until_below_the_limit(store: Store) -> None:
    limits = RateLimits(per_uid=(Window(4, 1),))
    # Two sends in bucket 0, one in bucket 3, one in bucket 5.
    for ts in (T0, T0 + 50, T0 + 300, T0 + 500):
        await send(store, ts, limits=limits)
    # Dropping bucket 0 brings 4 to 2 < 4: free when bucket 0 leaves.
    assert (await refused(store, T0 + 700, limits=limits)).retry_after == pytest.approx(0.3)
    # The limit lowered to 2 (a new setting): buckets 0 and 3 must go.
    lowered = RateLimits(per_uid=(Window(2, 1),))
    assert (await refused(store, T0 + 700, limits=lowered)).retry_after == pytest.approx(0.6)
    await refused(store, T0 + 1299, limits=lowered)
    assert await send(store, T0 + 1300, limits=lowered) == 5


async def test_retry_after_is_the_latest_of_the_full_windows(store: Store) -> None:
    limits = RateLimits(per_uid=(Window(2, 1), Window(3, 60)))
    for ts in (T0, T0 + 5_000, T0 + 5_010):
        await send(store, ts, limits=limits)
    # Both full at T0 + 5020: the second frees at T0 + 6000, the minute at T0 + 60 s.
    error = await refused(store, T0 + 5_020, limits=limits)
    assert error.retry_after == pytest.approx(54.98)
    assert "3 sends per 1 min" in error.message
    # Past the second window only the minute is full.
    assert (await refused(store, T0 + 7_000, limits=limits)).retry_after == pytest.approx(53)


# --- what counts ----------------------------------------------------------------------


async def test_refused_sends_are_not_counted(store: Store) -> None:
    limits = RateLimits(per_uid=(Window(2, 1),))
    await send(store, T0, limits=limits)
    await send(store, T0 + 10, limits=limits)
    for i in range(20):
        await refused(store, T0 + 20 + i, limits=limits)
    # Had the refused ones counted, the window would stay full long after.
    assert await send(store, T0 + 1000, limits=limits) == 3
    assert await send(store, T0 + 1001, limits=limits) == 4
    assert await head(store) == 4


async def test_a_repeated_client_msg_id_is_neither_counted_nor_limited(store: Store) -> None:
    limits = RateLimits(per_uid=(Window(2, 1),))
    first = await send(store, T0, cmid="m1", limits=limits)
    # Retries of a stored send: the same seq, and not counted.
    assert await send(store, T0 + 1, cmid="m1", limits=limits) == first
    assert await send(store, T0 + 2, cmid="m1", limits=limits) == first
    await send(store, T0 + 3, cmid="m2", limits=limits)
    # Now full, yet a retry still answers its first seq.
    await refused(store, T0 + 4, limits=limits)
    assert await send(store, T0 + 5, cmid="m1", limits=limits) == first


async def test_no_limits_means_no_counting(store: Store) -> None:
    for i in range(50):
        await send(store, T0 + i, limits=None)
    for i in range(10):
        await send(store, T0 + 50 + i, limits=RateLimits(per_uid=()))
    assert await head(store) == 60
    # Nothing was counted either: the first limited sends are accepted.
    for i in range(5):
        await send(store, T0 + 100 + i)
    await refused(store, T0 + 105)


async def test_uids_and_rooms_are_counted_apart(store: Store) -> None:
    for i in range(5):
        await send(store, T0 + i, uid="a")
    await refused(store, T0 + 10, uid="a")
    # Another uid in the same room, and the same uid in another room.
    for i in range(5):
        await send(store, T0 + 20 + i, uid="b")
        await send(store, T0 + 20 + i, uid="a", room="other")
    await refused(store, T0 + 30, uid="b")
    await refused(store, T0 + 30, uid="a", room="other")
    assert await head(store, "other") == 5


async def test_the_room_cap_counts_every_sender(store: Store) -> None:
    limits = RateLimits(per_uid=(Window(5, 1),), room_per_second=3)
    for uid in ("a", "b", "c"):
        await send(store, T0 + 100, uid=uid, limits=limits)
    error = await refused(store, T0 + 150, uid="d", limits=limits)
    assert error.message == "room r over 3 sends per 1 s from all senders; retry in 0.95 s"
    assert error.retry_after == pytest.approx(0.95)
    # Other rooms have caps of their own; publishers (no limits) pass.
    await send(store, T0 + 150, uid="d", room="other", limits=limits)
    await send(store, T0 + 150, uid="d", limits=None)
    assert await send(store, T0 + 1100, uid="d", limits=limits) == 5


async def test_a_refused_send_creates_no_log(
        store: Store, fake_clock: FakeClock, engine_url: str) -> None:
    limits = RateLimits(per_uid=(Window(1, 3 * 86_400),))
    await send(store, T0, limits=limits)
    # The log goes (idle past its TTL, or lost), the counter stays.
    if store.name == "memory":
        await fake_clock.advance(TEST_POLICY.room_ttl_ms / 1000 + 1)
    else:
        client = raw_client(engine_url)
        try:
            await client.delete(keys.meta("r"), keys.log("r"), keys.important("r"))
        finally:
            await client.aclose()
    await refused(store, T0 + 1000, limits=limits)
    (pulled,) = await store.log.pull([PullRequest("r", 0, 10)])
    assert pulled.epoch is None
    assert await send(store, T0 + 1000, limits=None) == 1


async def test_a_send_that_knows_fewer_windows_keeps_the_others_counts(store: Store) -> None:
    """Slow mode adds a window (one send per N s) that the node it went
    through applies at once and the others within a second: a send through
    one of those, counted without it, must not wipe what the slow window
    counted (found by the simulator, seed 21816 at f7bd46f: a uid's two
    sends 0.34 s apart were both stored in a 5 s slow mode)."""
    slowed = RateLimits(per_uid=(*DEFAULT.per_uid, Window(1, 5)))
    assert await send(store, T0, limits=slowed) == 1
    assert await send(store, T0 + 100, limits=DEFAULT) == 2  # a node not slow yet
    refusal = await refused(store, T0 + 340, limits=slowed)
    assert refusal.retry_after == pytest.approx(4.5, abs=0.51)
    assert await send(store, T0 + 5_000, limits=slowed) == 3


async def test_counters_stay_bounded_and_expire_on_redis(
        redis_store: Store, redis_url: str) -> None:
    limits = RateLimits(per_uid=(Window(5, 1), Window(30, 60)), room_per_second=100)
    # A send every 700 ms for ten minutes (the minute's limit refuses some):
    # many buckets come and go.
    for i in range(860):
        with contextlib.suppress(RateLimited):
            await send(redis_store, T0 + 700 * i, limits=limits)
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        uid_key, room_key = keys.rate_uid("r", "u1"), keys.rate_room("r")
        fields = await client.hkeys(uid_key)
        assert 0 < len(fields) <= 10 + 60
        assert {f.split(b":")[0] for f in fields} <= {b"1", b"60"}
        assert len(await client.hkeys(room_key)) <= 10
        # The longest window plus a bucket, from the last accepted send.
        assert 50_000 < await client.pttl(uid_key) <= 61_000
        assert 0 < await client.pttl(room_key) <= 1_100
        assert await client.exists(keys.rate_uid("r", "never")) == 0
    finally:
        await client.aclose()


async def test_memory_counters_expire_on_the_store_clock(
        memory_store: Store, fake_clock: FakeClock) -> None:
    limits = RateLimits(per_uid=(Window(1, 3600),))
    await send(memory_store, T0, limits=limits)
    await refused(memory_store, T0 + 1000, limits=limits)
    # After the horizon the counter is gone, whatever the message's time says.
    await fake_clock.advance(horizon_ms(limits.per_uid) / 1000 + 1)
    await send(memory_store, T0 + 2000, limits=limits)


# --- the pure rule ------------------------------------------------------------------


def test_the_rule_over_plain_counts() -> None:
    second, minute = Window(3, 1), Window(4, 60)
    counts: dict[tuple[int, int], int] = {}
    for ts in (T0, T0 + 10, T0 + 250):
        count_send(counts, [second, minute, Window(9, 1)], ts)
    # Windows of one length share buckets: counted once.
    assert counts == {(1, T0 // 100): 2, (1, T0 // 100 + 2): 1, (60, T0 // 1000): 3}
    assert freed_at(counts, second, T0 + 300) == T0 + 1000
    assert freed_at(counts, minute, T0 + 300) is None
    assert refused_until(counts, [minute, second], T0 + 300) == (second, T0 + 1000)
    assert refused_until(counts, [minute], T0 + 300) is None
    prune(counts, [minute], T0 + 60_000)
    assert counts == {}
    # A window reads only its own length's buckets, and only its last
    # ``buckets`` of them: the one just before is already out.
    cur = T0 // 100
    assert freed_at({(60, cur): 9, (1, cur - 10): 9, (1, cur - 99): 9}, second, T0) is None
    assert freed_at({(1, cur - 9): 3}, second, T0) == (cur + 1) * 100
    assert horizon_ms([second, minute]) == 61_000
    assert horizon_ms([]) == 0
    assert [span(s) for s in (1, 45, 60, 90, 7200, 86_400)] == [
        "1 s", "45 s", "1 min", "90 s", "2 h", "1 d"]


# --- the windows as operators write them -----------------------------------------------


def test_windows_are_read_as_written_and_sorted_by_length() -> None:
    assert parse_windows("5/s,30/m,300/h") == (Window(5, 1), Window(30, 60), Window(300, 3600))
    assert parse_windows(" 1000/d , 100/10m ") == (Window(100, 600), Window(1000, 86_400))
    assert parse_windows("3/2h,1/s,7/45s") == (Window(1, 1), Window(7, 45), Window(3, 7200))
    for none in ("", "  ", "off", "none", " off "):
        assert parse_windows(none) == ()


@pytest.mark.parametrize("bad", [
    "5", "5/", "/s", "5/x", "5/10", "a/s", "5/1.5m", "-1/s", "5/s,", "5/ms", "5/s;3/m",
    "5 /s", "5/s/m", "5/m5",
])
def test_a_malformed_window_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match=r"bad rate window .*LIMIT/\[N\]UNIT"):
        parse_windows(bad)


@pytest.mark.parametrize("bad", ["0/s", "5/0m"])
def test_an_empty_window_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="positive limit and length"):
        parse_windows(bad)


def test_a_window_is_written_in_its_largest_whole_unit() -> None:
    assert [str(w) for w in (Window(5, 1), Window(5, 60), Window(100, 600), Window(2, 90),
                             Window(3, 7200), Window(1, 86_400), Window(4, 172_800),
                             Window(9, 45))] == [
        "5/s", "5/m", "100/10m", "2/90s", "3/2h", "1/d", "4/2d", "9/45s"]


@given(limit=st.integers(1, 10**6), seconds=st.integers(1, 10 * 86_400))
def test_a_window_reads_back_from_its_written_form(limit: int, seconds: int) -> None:
    window = Window(limit, seconds)
    assert parse_windows(str(window)) == (window,)


# --- property: every engine against a list of accepted timestamps ---------------------


@dataclass
class Model:
    """The rule from its words: per (uid) and for the room, the accepted times."""

    limits: RateLimits
    accepted: dict[str | None, list[int]] = field(default_factory=dict)

    @staticmethod
    def _free(times: list[int], w: Window, now: int) -> int | None:
        b = w.bucket_ms
        cur = now // b
        inside = sorted(t // b for t in times if cur - w.buckets < t // b <= cur)
        if len(inside) < w.limit:
            return None
        # Drop whole buckets, oldest first, until below the limit.
        left = len(inside)
        for j in sorted(set(inside)):
            left -= inside.count(j)
            if left < w.limit:
                return (j + w.buckets) * b
        raise AssertionError("unreachable")

    def send(self, uid: str, now: int) -> float | None:
        """None when accepted; else retry_after."""
        frees = [self._free(self.accepted.get(uid, []), w, now) for w in self.limits.per_uid]
        frees += [self._free(self.accepted.get(None, []), w, now)
                  for w in self.limits.room_windows]
        full = [f for f in frees if f is not None]
        if full:
            return (max(full) - now) / 1000
        self.accepted.setdefault(uid, []).append(now)
        self.accepted.setdefault(None, []).append(now)
        return None


windows = st.lists(st.builds(Window, st.integers(1, 4), st.sampled_from([1, 2, 60, 120, 3600])),
                   max_size=3)
# Steps that land just before, on and just after bucket and window edges.
steps = st.one_of(
    st.sampled_from([0, 1, 99, 100, 101, 900, 999, 1000, 1001, 1999, 2000, 59_999, 60_000,
                     60_001, 119_999, 3_540_000, 3_599_999, 3_600_000]),
    st.integers(0, 2_500))
sends = st.lists(st.tuples(st.sampled_from(["a", "b"]), steps,
                           st.sampled_from([False, False, False, True])), max_size=40)


@settings(max_examples=500, deadline=None)
@given(per_uid=windows, room_cap=st.sampled_from([0, 0, 1, 3]),
       start=st.sampled_from([0, 1, 50, 99, 59_999]), ops=sends)
def test_the_bucket_functions_match_the_accepted_times_model(
        per_uid: list[Window], room_cap: int, start: int,
        ops: list[tuple[str, int, bool]]) -> None:
    """The functions the memory engine counts with, on many more examples."""
    limits = RateLimits(tuple(per_uid), room_cap)
    model = Model(limits)
    counts: dict[str | None, dict[tuple[int, int], int]] = {}
    now = T0 + start
    for uid, step, _ in ops:
        now += step
        checked = [(uid, limits.per_uid), (None, limits.room_windows)]
        for who, its_windows in checked:
            prune(counts.setdefault(who, {}), its_windows, now)
        full = [f for who, its_windows in checked
                if (f := refused_until(counts[who], its_windows, now)) is not None]
        retry = model.send(uid, now)
        if retry is None:
            assert not full
            for who, its_windows in checked:
                count_send(counts[who], its_windows, now)
        else:
            assert max(free for _, free in full) == now + retry * 1000
        for who, its_windows in checked:
            assert len(counts[who]) <= sum(w.buckets for w in its_windows)


# Each send names some of these windows (a slow mode's 5 s one comes and goes),
# sometimes two of one length; time mostly goes on, sometimes back.
tally_windows = st.lists(st.sampled_from([Window(2, 1), Window(3, 1), Window(1, 5),
                                          Window(4, 60), Window(6, 3600)]),
                         max_size=4).map(lambda ws: tuple(sorted(ws, key=lambda w: w.seconds)))
tally_ops = st.lists(st.tuples(tally_windows, st.one_of(steps, st.integers(-3_000, -1)),
                               st.integers(0, 3)), max_size=60)


def _tally_kinds() -> list[Callable[[], SenderTally]]:
    """The senders' tallies of this build: the list one, and the C one where
    the install built it (the compiled run)."""
    kinds: list[Callable[[], SenderTally]] = [ListTally]
    if sender_tally() is not ListTally:
        kinds.append(sender_tally())
    return kinds


@pytest.mark.parametrize("kind", _tally_kinds(), ids=lambda kind: kind.__name__)
@settings(max_examples=500, deadline=None)
@given(start=st.sampled_from([0, 1, 50, 99, 59_999]), ops=tally_ops)
def test_a_senders_tally_answers_as_the_bucket_functions_over_its_counts(
        kind: Callable[[], SenderTally], start: int,
        ops: list[tuple[tuple[Window, ...], int, int]]) -> None:
    """The memory engine's tally of this build (:func:`sender_tally`: the list
    one, :data:`~liveroom.ratelimit.Tally` and its functions, or its C twin)
    against the reference functions over a plain dict: the same refusals
    (held places too), the same counts after each send, whatever windows
    each send names and however the clock moves."""
    tally, counts = kind(), {}
    now = T0 + start
    for its_windows, step, held in ops:
        now += step
        prune(counts, its_windows, now)
        expected = refused_until(counts, its_windows, now, held)
        assert tally.refused(its_windows, now, held) == expected
        assert tally.counts() == counts
        if expected is None and not held:
            count_send(counts, its_windows, now)
            tally.count(its_windows, now)
            assert tally.counts() == counts
        tally.expires_ms = now + 1
        assert tally.expires_ms == now + 1
        if isinstance(tally, ListTally):
            runs, i = tally.runs, 1  # each run's total is the sum of its buckets
            while i < len(runs):
                n = runs[i + 2]
                assert runs[i + 1] == sum(runs[i + 4:i + 3 + 2 * n:2])
                i += 3 + 2 * n
    if isinstance(tally, ListTally):
        assert tally_empty(tally.runs) == (not counts)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(per_uid=windows, room_cap=st.sampled_from([0, 0, 1, 3]),
       start=st.sampled_from([0, 1, 50, 99, 59_999]), ops=sends)
def test_engines_match_the_accepted_times_model(
        engine: str, request: pytest.FixtureRequest, per_uid: list[Window], room_cap: int,
        start: int, ops: list[tuple[str, int, bool]]) -> None:
    asyncio.run(_run_model(fresh_engine_url(engine, request),
                           RateLimits(tuple(per_uid), room_cap), T0 + start, ops))


async def _run_model(url: str, limits: RateLimits, now: int,
                     ops: list[tuple[str, int, bool]]) -> None:
    model = Model(limits)
    seq = 0
    async with opened(url, LogPolicy(), FakeClock()) as store:
        for uid, step, with_cmid in ops:
            now += step
            # A send that repeats the previous stored send's client_msg_id
            # answers its seq: never limited, never counted.
            if with_cmid and seq:
                again = await store.log.append("r", msg(now, uid, f"m{seq}"), limits)
                assert (again.seq, again.duplicate) == (seq, True)
                continue
            retry = model.send(uid, now)
            if retry is None:
                got = await store.log.append("r", msg(now, uid, f"m{seq + 1}"), limits)
                seq += 1
                assert (got.seq, got.duplicate) == (seq, False)
            else:
                with pytest.raises(RateLimited) as caught:
                    await store.log.append("r", msg(now, uid, "refused"), limits)
                assert caught.value.retry_after == retry
                assert caught.value.retry_after > 0

