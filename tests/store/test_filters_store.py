"""The word filter's store contract (``liveroom/store/filters.py``): lists
put, replaced, deleted and read back alike on every engine, the version a
node follows, the cap on lists, bad input refused with nothing stored.

Each test runs once per engine (``store`` is parametrized with ``memory``,
``redis`` and ``cluster``); the property test runs random puts and deletes
through each engine and compares them with a dict.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from conftest import ENGINES, TEST_POLICY, RoundTrips, fresh_engine_url, opened, raw_client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liveroom.clock import FakeClock
from liveroom.store import Store
from liveroom.store.base import (
    FILTER_ROOMS_MAX,
    FilterLimits,
    FiltersFull,
    WordList,
    made_list,
)
from liveroom.store.redis import keys

LIMITS = FilterLimits(lists=4, words=10_000, word_chars=32)


def spam(name: str = "spam", action: str = "mask", *rooms: str,
         words: tuple[str, ...] = ("spam", "广告"), at_ms: int = 1) -> WordList:
    return made_list(name, action, words, rooms, at_ms)


async def test_a_list_put_is_read_back_with_its_version(store: Store) -> None:
    filters = store.filters
    assert await filters.versions(0) == (0, None)  # nothing yet: nothing changed
    assert await filters.put(spam(), LIMITS) == 1
    assert await filters.put(spam("here", "block", "r2", "r1"), LIMITS) == 2
    assert await filters.versions(0) == (2, {"spam": 1, "here": 2})
    assert await filters.versions(2) == (2, None)
    assert await filters.lists(["here", "gone", "spam"]) == {
        "spam": replace(spam(), version=1),
        "here": WordList("here", "block", ("spam", "广告"), ("r1", "r2"), 1, 2)}
    assert await filters.lists([]) == {}


async def test_putting_a_list_again_replaces_it(store: Store) -> None:
    filters = store.filters
    await filters.put(spam(), LIMITS)
    await filters.put(spam("other"), LIMITS)
    again = made_list("spam", "hold", ["ｂａｄ", "bad"], ["room"], 7)
    assert await filters.put(again, LIMITS) == 3
    assert await filters.versions(2) == (3, {"spam": 3, "other": 2})
    assert (await filters.lists(["spam"]))["spam"] == replace(again, version=3)


async def test_deleting_a_list_bumps_the_version_and_nothing_else_does(store: Store) -> None:
    filters = store.filters
    await filters.put(spam(), LIMITS)
    await filters.put(spam("other"), LIMITS)
    assert await filters.delete("spam") == 3
    assert await filters.delete("spam") is None  # nothing to delete: nothing changed
    assert await filters.delete("never") is None
    assert await filters.versions(2) == (3, {"other": 2})
    assert await filters.lists(["spam", "other"]) == {"other": replace(spam("other"), version=2)}


async def test_the_store_holds_at_most_its_limit_of_lists(store: Store) -> None:
    filters = store.filters
    for n in range(LIMITS.lists):
        await filters.put(spam(f"l{n}"), LIMITS)
    with pytest.raises(FiltersFull):
        await filters.put(spam("one-more"), LIMITS)
    assert await filters.versions(0) == (4, {"l0": 1, "l1": 2, "l2": 3, "l3": 4})
    assert await filters.put(spam("l2", "block"), LIMITS) == 5  # a list replaced is no more
    await filters.delete("l0")
    assert await filters.put(spam("one-more"), LIMITS) == 7


async def test_the_largest_list_round_trips_whole(store: Store) -> None:
    """10 000 words of 32 characters (Chinese: 3 bytes each in UTF-8), on
    1 000 rooms: what a list may be at the default limits."""
    words = tuple(chr(0x4E00 + n % 20_000) * 31 + str(n % 10) for n in range(10_000))
    rooms = tuple(sorted(f"room-{n:04}" for n in range(FILTER_ROOMS_MAX)))
    biggest = WordList("biggest", "hold", words, rooms, 2**53 - 1)
    limits = FilterLimits(1, 10_000, 32)
    assert await store.filters.put(biggest, limits) == 1
    assert await store.filters.lists(["biggest"]) == {"biggest": replace(biggest, version=1)}


BAD: list[tuple[str, WordList]] = [
    ("name", spam("no/slash")),
    ("name", spam("..")),
    ("name", spam("")),
    ("action", spam("a", "drop")),
    ("no words", made_list("a", "mask", [])),
    ("too many words", made_list("a", "mask", [f"w{n}" for n in range(5)])),
    ("too long", made_list("a", "mask", ["x" * 9])),
    ("empty word", made_list("a", "mask", [""])),
    ("no letter", made_list("a", "mask", ["!!! ​ 😀"])),
    ("surrogate", made_list("a", "mask", ["bad\ud800"])),
    ("twice", WordList("a", "mask", ("bad", "bad"))),
    ("not text", WordList("a", "mask", (3,))),  # type: ignore[arg-type]
    ("words not a tuple", WordList("a", "mask", ["bad"])),  # type: ignore[arg-type]
    ("room", spam("a", "mask", "no room")),
    ("room of dots", spam("a", "mask", "..")),
    ("rooms unsorted", WordList("a", "mask", ("bad",), ("b", "a"))),
    ("too many rooms", made_list("a", "mask", ["bad"], [f"r{n}" for n in range(1001)])),
    ("at_ms", spam(at_ms=-1)),
    ("at_ms", spam(at_ms=2**53)),
]


@pytest.mark.parametrize(("why", "bad"), BAD, ids=[why for why, _ in BAD])
async def test_a_bad_list_is_refused_and_nothing_is_stored(
        store: Store, why: str, bad: WordList) -> None:
    limits = FilterLimits(lists=4, words=4, word_chars=8)
    with pytest.raises(ValueError, match=r".") as refused:
        await store.filters.put(bad, limits)
    assert not isinstance(refused.value, FiltersFull), why
    assert await store.filters.versions(0) == (0, None)


async def test_bad_names_and_versions_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="name"):
        await store.filters.delete("no/slash")
    with pytest.raises(ValueError, match="name"):
        await store.filters.lists(["fine", ".."])
    with pytest.raises(ValueError, match="since"):
        await store.filters.versions(-1)


@pytest.mark.redis_engines
async def test_each_call_is_one_round_trip_and_the_keys_share_the_global_slot(
        store: Store, engine_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    filters = store.filters
    await filters.put(spam(), LIMITS)  # the scripts loaded
    await filters.lists(["spam"])
    await filters.versions(0)
    await filters.delete("never")
    trips = RoundTrips(filters._client, monkeypatch)  # type: ignore[attr-defined]
    await filters.put(spam("other"), LIMITS)
    await filters.versions(0)
    await filters.lists(["spam", "other", "gone"])
    await filters.delete("other")
    assert trips.count == 4
    raw = raw_client(engine_url)
    try:
        assert not await raw.ttl(keys.filter_list("spam")) >= 0  # never expires
        assert await raw.hgetall(keys.FILTERS) == {b"spam": b"1"}
    finally:
        await raw.aclose()


@pytest.mark.redis_engines  # the memory engine loses nothing while its node runs
async def test_a_store_that_lost_its_lists_answers_a_lower_version(
        store: Store, engine_url: str) -> None:
    """What a node sees when Redis restarts empty: a version below its own
    (it then reads every list again)."""
    await store.filters.put(spam(), LIMITS)
    await store.filters.put(spam("other"), LIMITS)
    raw = raw_client(engine_url)
    try:
        if engine_url.startswith("redis+cluster://"):
            await raw.delete(keys.FILTERS_VERSION, keys.FILTERS, keys.filter_list("spam"),
                             keys.filter_list("other"))
        else:
            await raw.flushall()
    finally:
        await raw.aclose()
    assert await store.filters.versions(2) == (0, {})


# --- against a model -----------------------------------------------------------------

NAMES = ("a", "b", "c", "d", "e", "f")

steps = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(NAMES), st.sampled_from(["block", "hold", "mask"]),
              st.lists(st.sampled_from(["spam", "广告", "Ｂad", "x.y"]), min_size=1, max_size=3),
              st.lists(st.sampled_from(["r1", "r2"]), max_size=2)),
    st.tuples(st.just("delete"), st.sampled_from(NAMES))), max_size=25)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(given_steps=steps)
def test_the_filters_match_a_dict(engine: str, request: pytest.FixtureRequest,
                                  given_steps: list[tuple[Any, ...]]) -> None:
    asyncio.run(_run_steps(fresh_engine_url(engine, request), given_steps))


async def _run_steps(url: str, given_steps: list[tuple[Any, ...]]) -> None:
    model: dict[str, WordList] = {}
    version = 0
    async with opened(url, TEST_POLICY, FakeClock()) as engine:
        filters = engine.filters
        for step in given_steps:
            if step[0] == "put":
                _, name, action, words, rooms = step
                word_list = made_list(name, action, words, rooms, version)
                if name not in model and len(model) >= LIMITS.lists:
                    with pytest.raises(FiltersFull):
                        await filters.put(word_list, LIMITS)
                    continue
                version += 1
                assert await filters.put(word_list, LIMITS) == version
                model[name] = replace(word_list, version=version)
            else:
                existed = model.pop(step[1], None) is not None
                if existed:
                    version += 1
                assert await filters.delete(step[1]) == (version if existed else None)
            assert await filters.versions(0) == (
                version, None if version == 0 else {n: w.version for n, w in model.items()})
        assert await filters.lists(NAMES) == model
