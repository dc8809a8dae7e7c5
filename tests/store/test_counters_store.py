"""The counters' store contract: a room's likes (total and series) and gifts
(ranking, total) behave alike on every engine.

Each test runs once per engine (the ``store`` fixture is parametrized with
``memory``, ``redis`` and ``cluster``); the property tests run random batches
through each engine and compare them with a plain dict model.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest
import redis.asyncio
from conftest import ENGINES, TEST_POLICY, RedisServer, RoundTrips, fresh_engine_url, opened
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from liveroom.clock import FakeClock
from liveroom.errors import StoreUnavailable
from liveroom.model import NewMessage
from liveroom.store import LogPolicy, Store
from liveroom.store.base import (
    GIFT_VALUE_MAX,
    RANKING_KEPT,
    RANKING_MAX,
    RENEWALS_KEPT,
    SERIES_RESOLUTIONS,
    GiftRank,
    Ranking,
    series_horizon_ms,
)
from liveroom.store.redis import keys


def now_ms(clock: FakeClock) -> int:
    return int(clock.time() * 1000)


class LikesModel:
    """What the likes of rooms should be: totals, and each resolution's
    buckets (start s -> taps) with the horizon following the newest bucket."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = defaultdict(int)
        self.series: dict[tuple[str, int], dict[int, int]] = defaultdict(dict)

    def add(self, taps: dict[str, int], t_ms: int) -> None:
        for room, n in taps.items():
            self.totals[room] += n
            for step, retention in SERIES_RESOLUTIONS:
                buckets = self.series[room, step]
                start = t_ms // 1000 // step * step
                newest = max([start, *buckets])
                horizon = newest - (retention // step - 1) * step
                if start >= horizon:
                    buckets[start] = buckets.get(start, 0) + n
                for old in [s for s in buckets if s < horizon]:
                    del buckets[old]

    def read(self, room: str, step: int) -> list[tuple[int, int]]:
        return sorted(self.series[room, step].items())


ALL_TIME = (0, 2**40)
"""``low, high`` that take every bucket."""


# --- likes --------------------------------------------------------------------


async def test_likes_add_up_per_room_and_start_at_zero(
        store: Store, fake_clock: FakeClock) -> None:
    counters = store.counters
    assert await counters.likes(["a", "b"]) == {"a": 0, "b": 0}
    await counters.add_likes({"a": 3, "b": 1}, now_ms(fake_clock))
    await counters.add_likes({"a": 100}, now_ms(fake_clock))
    await counters.add_likes({}, now_ms(fake_clock))
    assert await counters.likes(["a", "b", "c"]) == {"a": 103, "b": 1, "c": 0}
    assert await counters.likes([]) == {}


async def test_a_likes_total_says_which_broadcast_it_counts(
        store: Store, fake_clock: FakeClock) -> None:
    """``likes_in`` names the broadcast (its first epoch) each total is of,
    on every engine: a reader that noted another takes none of it (the
    memory engine said "" before the simulator's redis seed 52871 showed a
    tap's read taking the next broadcast's total on both)."""
    counters = store.counters
    first = (await store.log.append("a", NewMessage("p", "hi", False, 0))).epoch
    await counters.add_likes({"a": 5}, now_ms(fake_clock))
    assert await counters.likes_in(["a", "b"]) == {"a": (5, first), "b": (0, "")}
    second = await store.operators.end_broadcast("a", now_ms(fake_clock), 60_000)
    await counters.add_likes({"a": 2}, now_ms(fake_clock))
    assert await counters.likes_in(["a"]) == {"a": (2, second.epoch)}
    assert await counters.likes_in([]) == {}


async def test_a_named_write_tried_again_is_added_once(
        store: Store, fake_clock: FakeClock) -> None:
    """A node whose write's reply was lost tries it again under its name:
    each room that took it takes nothing more, a room that did not takes
    it, another name is another write (and the series counts it once too)."""
    counters = store.counters
    t = now_ms(fake_clock)
    await counters.add_likes({"a": 3}, t, write_id="n1.7")
    await counters.add_likes({"a": 3, "b": 2}, t, write_id="n1.7")
    await counters.add_likes({"a": 3}, t, write_id="n1.8")
    await counters.add_likes({"a": 1}, t)
    await counters.add_likes({"a": 1}, t)
    assert await counters.likes(["a", "b"]) == {"a": 8, "b": 2}
    assert sum(n for _, n in await counters.read_likes("a", 60, *ALL_TIME)) == 8


@pytest.mark.parametrize("taps", [{"a": 0}, {"a": -2}, {"a": 1, "b": 0}, {"a": 1.5},
                                  {"a": True}, {"a": "3"}])
async def test_bad_taps_are_refused_and_nothing_is_added(
        store: Store, fake_clock: FakeClock, taps: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="taps"):
        await store.counters.add_likes(taps, now_ms(fake_clock))
    assert await store.counters.likes(["a", "b"]) == {"a": 0, "b": 0}
    assert await store.counters.read_likes("a", 60, *ALL_TIME) == []


async def test_likes_series_sums_each_bucket_of_every_resolution(
        store: Store, fake_clock: FakeClock) -> None:
    counters = store.counters
    base = 1_700_000_000 // 3_600 * 3_600  # on the hour
    model = LikesModel()
    for offset_s, n in [(0, 2), (10, 3), (59, 1), (60, 4), (299, 5), (300, 6), (3_599, 7),
                        (3_600, 8), (7_300, 9)]:
        taps = {"r": n, "s": 2 * n}
        await counters.add_likes(taps, (base + offset_s) * 1000)
        model.add(taps, (base + offset_s) * 1000)
    assert await counters.read_likes("r", 60, *ALL_TIME) == [
        (base, 6), (base + 60, 4), (base + 240, 5), (base + 300, 6), (base + 3_540, 7),
        (base + 3_600, 8), (base + 7_260, 9)]
    assert await counters.read_likes("r", 300, *ALL_TIME) == [
        (base, 15), (base + 300, 6), (base + 3_300, 7), (base + 3_600, 8), (base + 7_200, 9)]
    assert await counters.read_likes("r", 3_600, *ALL_TIME) == [
        (base, 28), (base + 3_600, 8), (base + 7_200, 9)]
    for room in ("r", "s"):
        for step, _ in SERIES_RESOLUTIONS:
            assert await counters.read_likes(room, step, *ALL_TIME) == model.read(room, step)
    # [low, high] bounds bucket starts, both ends included.
    assert await counters.read_likes("r", 60, base + 60, base + 300) == [
        (base + 60, 4), (base + 240, 5), (base + 300, 6)]
    assert await counters.read_likes("r", 60, base + 61, base + 239) == []
    assert await counters.read_likes("r", 120, *ALL_TIME) == []  # no such resolution
    assert await counters.likes(["r", "s"]) == {"r": 45, "s": 90}


async def test_likes_series_keeps_its_retention_and_late_taps_count_in_the_total(
        store: Store, fake_clock: FakeClock) -> None:
    counters = store.counters
    t0 = 1_700_000_000_000
    await counters.add_likes({"r": 1}, t0)
    await counters.add_likes({"r": 2}, t0 + 86_400_000)  # a day later: the minute is gone
    minutes = await counters.read_likes("r", 60, *ALL_TIME)
    assert minutes == [((t0 + 86_400_000) // 60_000 * 60, 2)]
    assert len(await counters.read_likes("r", 300, *ALL_TIME)) == 2
    # Taps from a node whose clock is a day behind: in the total, not in the minutes.
    await counters.add_likes({"r": 4}, t0)
    assert await counters.read_likes("r", 60, *ALL_TIME) == minutes
    assert sum(n for _, n in await counters.read_likes("r", 300, *ALL_TIME)) == 7
    assert await counters.likes(["r"]) == {"r": 7}


async def test_a_flush_of_many_rooms_is_one_round_trip(
        store: Store, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    counters = store.counters
    rooms = [f"room{i}" for i in range(50)]
    if store.name == "memory":  # never suspends: done at the first step
        adding = counters.add_likes(dict.fromkeys(rooms, 2), now_ms(fake_clock)).__await__()
        with pytest.raises(StopIteration):
            next(adding)
        reading = counters.likes(rooms).__await__()
        with pytest.raises(StopIteration) as done:
            next(reading)
        assert done.value.value == dict.fromkeys(rooms, 2)
        return
    await counters.add_likes({"warm": 1}, now_ms(fake_clock))  # the scripts loaded
    await counters.add_gift("warm", "u", 1, "rose", now_ms(fake_clock))
    trips = RoundTrips(store.counters._client, monkeypatch)  # type: ignore[attr-defined]
    await counters.add_likes(dict.fromkeys(rooms, 2), now_ms(fake_clock))
    assert trips.count == 1
    assert await counters.likes(rooms) == dict.fromkeys(rooms, 2)
    assert trips.count == 2
    await counters.add_gift("r", "u", 3, "rose", now_ms(fake_clock))
    await counters.ranking("r", 10)
    assert trips.count == 4
    assert set(await counters.rankings([*rooms, "r"], 3)) == {"r"}
    assert trips.count == 5


@pytest.mark.redis_engines
async def test_counter_keys_expire_and_share_the_rooms_slot(
        store: Store, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    assert raw_redis is not None  # the redis engines only: keys are theirs
    await store.counters.add_likes({"r": 1}, now_ms(fake_clock))
    await store.counters.add_gift("r", "u", 3, "rose", now_ms(fake_clock))
    history = TEST_POLICY.history_ttl_ms
    for key in (keys.likes("r"), keys.givers("r"), keys.gifts("r")):
        assert history - 5_000 < await raw_redis.pttl(key) <= history
    longest = series_horizon_ms(SERIES_RESOLUTIONS, 0)
    for step, _ in SERIES_RESOLUTIONS:
        assert longest - 5_000 < await raw_redis.pttl(keys.likes_series("r", step)) <= longest
    slot = key_slot(keys.meta("r").encode())
    assert {key_slot(k.encode()) for k in (
        keys.likes("r"), keys.givers("r"), keys.gifts("r"), keys.givers("r", 3),
        *(keys.likes_series("r", step) for step, _ in SERIES_RESOLUTIONS))} == {slot}


async def test_likes_expire_after_the_history_ttl_on_the_memory_engine(
        fake_clock: FakeClock) -> None:
    policy = replace(TEST_POLICY, history_ttl_ms=60_000)
    async with opened("memory", policy, fake_clock) as store:
        counters = store.counters
        await counters.add_likes({"r": 5}, now_ms(fake_clock))
        await counters.add_gift("r", "u", 7, "rose", now_ms(fake_clock))
        await fake_clock.advance(59)
        await counters.add_likes({"r": 1}, now_ms(fake_clock))  # pushes the expiry back
        await counters.add_gift("r", "v", 1, "rose", now_ms(fake_clock))
        await fake_clock.advance(59)
        assert await counters.likes(["r"]) == {"r": 6}
        assert await counters.ranking("r", 5) == Ranking((("u", 7), ("v", 1)), 8, 2)
        await fake_clock.advance(2)
        assert await counters.likes(["r"]) == {"r": 0}
        assert await counters.ranking("r", 5) == Ranking((), 0, 0)
        assert await counters.read_likes("r", 3_600, *ALL_TIME) != []  # the series lives on
        await fake_clock.advance(series_horizon_ms(SERIES_RESOLUTIONS, 0) / 1000)
        assert await counters.read_likes("r", 3_600, *ALL_TIME) == []


# --- gifts -------------------------------------------------------------------


async def test_gifts_rank_givers_and_sum_the_room(
        store: Store, fake_clock: FakeClock) -> None:
    counters = store.counters
    t = now_ms(fake_clock)
    assert await counters.ranking("r", 10) == Ranking((), 0, 0)
    assert await counters.add_gift("r", "ann", 50, "rocket", t) == GiftRank(1, 50, 50)
    assert await counters.add_gift("r", "bob", 20, "rose", t) == GiftRank(2, 20, 70)
    assert await counters.add_gift("r", "bob", 40, "rose", t) == GiftRank(1, 60, 110)
    assert await counters.add_gift("r", "cy", GIFT_VALUE_MAX, "castle", t) == GiftRank(
        1, GIFT_VALUE_MAX, GIFT_VALUE_MAX + 110)
    assert await counters.add_gift("s", "ann", 1, "rose", t) == GiftRank(1, 1, 1)
    assert await counters.ranking("r", 10) == Ranking(
        (("cy", GIFT_VALUE_MAX), ("bob", 60), ("ann", 50)), GIFT_VALUE_MAX + 110, 4)
    assert await counters.ranking("r", 2) == Ranking(
        (("cy", GIFT_VALUE_MAX), ("bob", 60)), GIFT_VALUE_MAX + 110, 4)
    assert await counters.ranking("s", 1) == Ranking((("ann", 1),), 1, 1)


async def test_equal_scores_rank_by_giver_name_descending(
        store: Store, fake_clock: FakeClock) -> None:
    counters = store.counters
    t = now_ms(fake_clock)
    assert await counters.add_gift("r", "b", 5, "rose", t) == GiftRank(1, 5, 5)
    assert await counters.add_gift("r", "a", 5, "rose", t) == GiftRank(2, 5, 10)
    assert await counters.add_gift("r", "c", 5, "rose", t) == GiftRank(1, 5, 15)
    assert await counters.add_gift("r", "é", 5, "rose", t) == GiftRank(1, 5, 20)
    assert (await counters.ranking("r", 10)).top == (("é", 5), ("c", 5), ("b", 5),
                                                         ("a", 5))


async def test_the_leaderboard_lists_at_most_its_limit(
        store: Store, fake_clock: FakeClock) -> None:
    counters = store.counters
    for n in range(RANKING_MAX + 20):
        await counters.add_gift("r", f"u{n:03}", n + 1, "rose", now_ms(fake_clock))
    board = await counters.ranking("r", RANKING_MAX)
    assert len(board.top) == RANKING_MAX
    assert board.top[0] == (f"u{RANKING_MAX + 19:03}", RANKING_MAX + 20)
    assert board.top[-1] == ("u020", 21)
    assert board.count == RANKING_MAX + 20
    assert board.total == sum(range(1, RANKING_MAX + 21))
    assert (await counters.ranking("r", 1)).top == (board.top[0],)


async def test_rankings_read_many_rooms_leaving_out_those_without_gifts(
        store: Store, fake_clock: FakeClock) -> None:
    counters = store.counters
    t = now_ms(fake_clock)
    for room, giver, value in [("r", "a", 5), ("r", "b", 9), ("{s}", "c", 1), ("r", "a", 1)]:
        await counters.add_gift(room, giver, value, "rose", t)
    await counters.add_likes({"liked": 3}, t)
    boards = await counters.rankings(["r", "{s}", "liked", "none"], 1)
    assert boards == {"r": Ranking((("b", 9),), 15, 3), "{s}": Ranking((("c", 1),), 1, 1)}
    assert await counters.rankings(["r"], RANKING_MAX) == {
        "r": await counters.ranking("r", RANKING_MAX)}
    assert await counters.rankings([], 3) == {}
    await store.operators.end_broadcast("r", t, 30_000)
    assert await counters.rankings(["r", "{s}"], 3) == {"{s}": Ranking((("c", 1),), 1, 1)}
    with pytest.raises(ValueError, match="limit"):
        await counters.rankings(["r"], RANKING_MAX + 1)


@pytest.mark.parametrize("value", [0, -1, GIFT_VALUE_MAX + 1, 2.0, True])
async def test_bad_gift_values_are_refused_and_nothing_is_added(
        store: Store, fake_clock: FakeClock, value: int) -> None:
    with pytest.raises(ValueError, match="value"):
        await store.counters.add_gift("r", "u", value, "rose", now_ms(fake_clock))
    assert await store.counters.ranking("r", 5) == Ranking((), 0, 0)


@pytest.mark.parametrize("limit", [0, -1, RANKING_MAX + 1, 1.0])
async def test_bad_leaderboard_limits_are_refused(store: Store, limit: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.counters.ranking("r", limit)


def ranking(scores: dict[str, int]) -> list[tuple[str, int]]:
    """The ledger's givers, best first, ties by name descending."""
    return sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)


gifts = st.lists(
    st.tuples(st.sampled_from(["r", "{s}"]),
              st.sampled_from(["a", "b", "B", "ab", "é", "z", "\U0001f381", "u:1", ""]),
              st.one_of(st.integers(1, 5), st.integers(1, GIFT_VALUE_MAX))),
    max_size=40)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(given_gifts=gifts)
def test_gifts_match_the_ledger(engine: str, request: pytest.FixtureRequest,
                                given_gifts: list[tuple[str, str, int]]) -> None:
    asyncio.run(_run_gifts(fresh_engine_url(engine, request), given_gifts))


async def _run_gifts(url: str, given_gifts: list[tuple[str, str, int]]) -> None:
    base = 1_700_000_000_000
    ledger: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    async with opened(url, TEST_POLICY, FakeClock(base / 1000)) as store:
        for room, giver, value in given_gifts:
            ledger[room][giver] += value
            got = await store.counters.add_gift(room, giver, value, "g", base)
            order = ranking(ledger[room])
            assert got == GiftRank(order.index((giver, ledger[room][giver])) + 1,
                                   ledger[room][giver], sum(ledger[room].values()))
        for room in ("r", "{s}", "t"):
            count = sum(1 for r, _, _ in given_gifts if r == room)
            assert await store.counters.ranking(room, RANKING_MAX) == Ranking(
                tuple(ranking(ledger[room])), sum(ledger[room].values()), count)
            assert (await store.counters.ranking(room, 3)).top == tuple(
                ranking(ledger[room])[:3])


# --- the end of a broadcast -----------------------------------------------------


ARCHIVE_TTL_MS = 30_000


async def test_ending_a_broadcast_archives_its_counters_and_starts_at_zero(
        store: Store, fake_clock: FakeClock) -> None:
    counters = store.counters
    t = now_ms(fake_clock)
    await counters.add_likes({"r": 40, "other": 2}, t)
    for n in range(RANKING_KEPT + 20):
        await counters.add_gift("r", f"u{n:03}", n + 1, "rose", t)
    before = await counters.ranking("r", RANKING_MAX)
    ended = await store.operators.end_broadcast("r", t, ARCHIVE_TTL_MS)
    assert ended.broadcast == 2
    (past,) = await store.operators.broadcasts("r")
    assert (past.broadcast, past.ended_ms) == (1, t)
    assert past.likes == 40
    assert past.gifts == before.total == sum(range(1, RANKING_KEPT + 21))
    assert len(past.ranking) == RANKING_KEPT
    assert past.ranking == before.top[:RANKING_KEPT]
    # The new broadcast starts at zero; another room and the series go on.
    assert await counters.likes(["r", "other"]) == {"r": 0, "other": 2}
    assert await counters.ranking("r", 10) == Ranking((), 0, 0)
    assert sum(n for _, n in await counters.read_likes("r", 60, *ALL_TIME)) == 40
    await counters.add_likes({"r": 5}, t + 1_000)
    assert await counters.add_gift("r", "u000", 3, "rose", t) == GiftRank(1, 3, 3)
    # A broadcast without likes nor gifts archives zeroes; the older archive stays.
    await store.operators.end_broadcast("r", t + 2_000, ARCHIVE_TTL_MS)
    await store.operators.end_broadcast("r", t + 3_000, ARCHIVE_TTL_MS)
    newest, middle, oldest = await store.operators.broadcasts("r")
    assert (newest.broadcast, newest.likes, newest.gifts, newest.ranking) == (3, 0, 0, ())
    assert (middle.broadcast, middle.likes, middle.gifts, middle.ranking) == (
        2, 5, 3, (("u000", 3),))
    assert oldest == past
    assert await counters.likes(["r"]) == {"r": 0}


async def test_taps_acknowledged_in_an_ended_broadcast_are_its_own(
        store: Store, fake_clock: FakeClock) -> None:
    """Issue 45: taps a node acknowledged before ``room end`` and wrote after
    it went into the next broadcast. A tap belongs to the broadcast in which
    it was acknowledged: the epoch it names says which."""
    counters, t = store.counters, now_ms(fake_clock)
    first = await store.log.open_room("r")
    await counters.add_likes({"r": 20}, t, {"r": first})  # written in time
    second = (await store.operators.end_broadcast("r", t, ARCHIVE_TTL_MS)).epoch
    # A node's 17 taps of the first broadcast, written after its end; and taps
    # of the new broadcast, of an epoch the store never ended with, of none.
    await counters.add_likes({"r": 17}, t + 100, {"r": first})
    await counters.add_likes({"r": 3}, t + 100, {"r": second})
    await counters.add_likes({"r": 2}, t + 100, {"r": "never-an-epoch"})
    await counters.add_likes({"r": 1}, t + 100)
    (past,) = await store.operators.broadcasts("r")
    assert past.likes == 37
    assert await counters.likes(["r"]) == {"r": 6}
    assert sum(n for _, n in await counters.read_likes("r", 60, *ALL_TIME)) == 43


async def test_taps_acknowledged_before_a_renewal_are_the_ended_broadcasts(
        store: Store, fake_clock: FakeClock) -> None:
    """Issue 45, seed 119648: taps acknowledged in a broadcast's first
    epoch, then a renewal of that epoch, then ``room end``, then the node's
    write: the ended broadcast's archive showed 0 and the next broadcast
    took the taps. A renewal keeps the broadcast, so its end records every
    epoch it had (the newest ``RENEWALS_KEPT`` renewals)."""
    counters, t = store.counters, now_ms(fake_clock)
    epochs = [await store.log.open_room("r")]
    for _ in range(RENEWALS_KEPT + 1):
        epochs.append(await store.log.renew_epoch("r", epochs[-1]))
    assert len(set(epochs)) == RENEWALS_KEPT + 2
    second = (await store.operators.end_broadcast("r", t, ARCHIVE_TTL_MS)).epoch
    # Taps of each epoch of the first broadcast, written after its end: the
    # last epoch's and the kept renewals' go to it; the oldest's, renewed
    # too long ago, to the next broadcast, as taps of an unknown epoch do.
    for i, epoch in enumerate(epochs):
        await counters.add_likes({"r": 1 + i}, t + 100, {"r": epoch})
    (past,) = await store.operators.broadcasts("r")
    assert past.likes == sum(range(2, RENEWALS_KEPT + 3))
    assert await counters.likes(["r"]) == {"r": 1}
    # The next broadcast starts with no renewal of the first: its own end
    # records only its epochs.
    third = await store.log.renew_epoch("r", second)
    await store.operators.end_broadcast("r", t + 200, ARCHIVE_TTL_MS)
    await counters.add_likes({"r": 5}, t + 300, {"r": second})
    await counters.add_likes({"r": 7}, t + 300, {"r": third})
    await counters.add_likes({"r": 100}, t + 300, {"r": epochs[-2]})
    latest, earlier = sorted(await store.operators.broadcasts("r"),
                             key=lambda b: b.broadcast, reverse=True)
    assert (latest.likes, earlier.likes) == (13, past.likes + 100)


async def test_an_archived_ranking_keeps_ties_in_leaderboard_order(
        store: Store, fake_clock: FakeClock) -> None:
    t = now_ms(fake_clock)
    for n in range(RANKING_KEPT + 5):
        await store.counters.add_gift("r", f"g{n:03}", 7, "rose", t)
    top = (await store.counters.ranking("r", RANKING_MAX)).top
    await store.operators.end_broadcast("r", t, ARCHIVE_TTL_MS)
    (past,) = await store.operators.broadcasts("r")
    assert past.ranking == top == tuple(
        (f"g{n:03}", 7) for n in range(RANKING_KEPT + 4, 4, -1))


async def test_an_archive_expires_with_its_viewers_history(
        store: Store, fake_clock: FakeClock,
        raw_redis: redis.asyncio.Redis | None) -> None:
    t = now_ms(fake_clock)
    await store.counters.add_likes({"r": 1}, t)
    await store.counters.add_gift("r", "u", 2, "rose", t)
    await store.operators.end_broadcast("r", t, ARCHIVE_TTL_MS)
    if raw_redis is None:
        await fake_clock.advance(ARCHIVE_TTL_MS / 1000 + 1)
        assert await store.operators.broadcasts("r") == []
        return
    for key in (keys.givers("r", 1), keys.viewers_meta("r", 1)):
        assert ARCHIVE_TTL_MS - 5_000 < await raw_redis.pttl(key) <= ARCHIVE_TTL_MS
    assert await raw_redis.exists(keys.likes("r"), keys.givers("r"), keys.gifts("r")) == 0


async def test_an_archive_of_before_the_counters_reads_as_zero(
        redis_store: Store, redis_url: str, fake_clock: FakeClock) -> None:
    t = now_ms(fake_clock)
    await redis_store.counters.add_gift("r", "u", 2, "rose", t)
    await redis_store.operators.end_broadcast("r", t, ARCHIVE_TTL_MS)
    client = redis.asyncio.Redis.from_url(redis_url)
    try:  # as an older version left it
        await client.hdel(keys.viewers_meta("r", 1), "likes", "gifts")
        await client.delete(keys.givers("r", 1))
    finally:
        await client.aclose()
    (past,) = await redis_store.operators.broadcasts("r")
    assert (past.broadcast, past.likes, past.gifts, past.ranking) == (1, 0, 0, ())


flushes = st.lists(
    st.tuples(st.dictionaries(st.sampled_from(["a", "b", "c", "{d}", "é"]),
                              st.integers(1, 10**6), max_size=5),
              st.integers(0, 3 * 86_400_000)),
    max_size=25)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=flushes)
def test_likes_match_the_model_over_many_flushes(
        engine: str, request: pytest.FixtureRequest,
        batches: list[tuple[dict[str, int], int]]) -> None:
    asyncio.run(_run_likes(fresh_engine_url(engine, request), batches))


async def _run_likes(url: str, batches: list[tuple[dict[str, int], int]]) -> None:
    base = 1_700_000_000_000
    model = LikesModel()
    async with opened(url, TEST_POLICY, FakeClock(base / 1000)) as store:
        for taps, t in batches:
            await store.counters.add_likes(taps, base + t)
            model.add(taps, base + t)
        rooms = ["a", "b", "c", "{d}", "é", "never"]
        assert await store.counters.likes(rooms) == {r: model.totals[r] for r in rooms}
        for room in rooms:
            for step, _ in SERIES_RESOLUTIONS:
                assert await store.counters.read_likes(room, step, *ALL_TIME) == model.read(
                    room, step)


async def test_every_counters_call_reports_redis_down_as_unavailable(
        redis_server: RedisServer, redis_url: str, fake_clock: FakeClock) -> None:
    async with opened(redis_url, LogPolicy(), fake_clock) as store:
        counters = store.counters
        redis_server.stop()
        try:
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: counters.add_likes({"r": 1}, 0),
                lambda: counters.likes(["r"]),
                lambda: counters.read_likes("r", 60, 0, 1),
                lambda: counters.add_gift("r", "u", 1, "rose", 0),
                lambda: counters.ranking("r", 10),
                lambda: counters.rankings(["r"], 10),
            ]
            for call in calls:
                with pytest.raises(StoreUnavailable):
                    await call()
        finally:
            redis_server.start()


async def test_the_memory_engines_sweep_forgets_the_epochs_of_ended_broadcasts() -> None:
    """Which broadcast an epoch ended lives as long as the ended broadcast is
    kept, as ``p:<epoch>`` does on Redis: one more each ``room end`` that the
    sweep never dropped (one entry a broadcast, for the process's life)."""
    from liveroom.store.memory import MemoryStore

    clock = FakeClock()
    store = MemoryStore(TEST_POLICY, clock)
    for i in range(20):
        await store.log.append("ends", NewMessage("u", i, False, int(clock.time() * 1000)))
        await store.operators.end_broadcast("ends", int(clock.time() * 1000), 1_000)
    counters = store.counters
    assert len(counters._ended_epochs) == 20
    await clock.advance(2)  # past the ended broadcasts' keeping
    counters.sweep()
    assert len(counters._ended_epochs) == 0
