"""Messages a minute from a snapshot (``liveroom.snapshot.sent_per_minute``):
exact while the cache holds a minute of the room, an estimate beyond."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from liveroom.snapshot import MINUTE_MS, Item, Snapshot, sent_per_minute

NOW = 1_700_000_000_000


def snapshot(times: list[int], important: set[int], normal_keep: int,
             first_seq: int = 1) -> Snapshot:
    """A room whose messages were sent at ``times`` (ms, ascending), seqs from
    ``first_seq``, those at the indexes in ``important`` important; the cache
    holds the newest ``normal_keep`` normal ones and every important one."""
    items = [Item(first_seq + i, t, b"{}", b"\x80") for i, t in enumerate(times)]
    normal = tuple(it for i, it in enumerate(items) if i not in important)
    kept = normal[-normal_keep:] if normal_keep else ()
    head = first_seq + len(times) - 1 if times else 0
    return Snapshot("r", "e", head, len(important), normal=kept,
                    important=tuple(it for i, it in enumerate(items) if i in important))


def test_an_empty_room_sends_nothing() -> None:
    assert sent_per_minute(Snapshot("r", "0", 0, 0), NOW, 2000) == 0.0


def test_messages_older_than_a_minute_are_not_counted() -> None:
    times = [NOW - 120_000, NOW - 61_000, NOW - 60_000, NOW - 30_000, NOW - 1]
    # The one exactly a minute old is out: 2 in the last minute.
    assert sent_per_minute(snapshot(times, set(), 2000), NOW, 2000) == 2.0
    # Important ones count like the others (one shared sequence).
    assert sent_per_minute(snapshot(times, {3}, 2000), NOW, 2000) == 2.0


def test_a_new_broadcast_counts_only_its_own_messages() -> None:
    # Seqs go on from 501 (an ended broadcast), all sent in the last 10 s.
    snap = snapshot([NOW - 10_000, NOW - 5_000, NOW - 1_000], set(), 2000, first_seq=501)
    assert sent_per_minute(snap, NOW, 2000) == 3.0


def test_the_seqs_between_two_held_messages_count_when_the_cache_dropped_them() -> None:
    # 3000 messages in the last 30 s, the cache keeps 100 normal ones and one
    # important one from two minutes ago: the seqs in between are exact.
    times = [NOW - 120_000] + [NOW - 30_000 + 10 * i for i in range(3000)]
    snap = snapshot(times, {0}, 100)
    assert sent_per_minute(snap, NOW, 100) == 3000.0


def test_a_full_list_younger_than_a_minute_is_scaled_to_one() -> None:
    # 100 a second, the list of 200 spans the last 2 s: the 200 held over
    # the 2 s since the oldest of them, 6000 a minute.
    times = [NOW - 2_000 + 10 * i for i in range(200)]
    assert sent_per_minute(snapshot(times, set(), 200), NOW, 200) == 6000.0


def test_a_full_list_younger_than_a_second_is_scaled_over_a_second() -> None:
    # 10 messages in the last half second: a burst is not taken for a rate of
    # 1200 a minute, the time is counted as a second at least.
    times = [NOW - 500 + 50 * i for i in range(10)]
    assert sent_per_minute(snapshot(times, set(), 10), NOW, 10) == 600.0


# A message: the time since the one before it and whether it is important.
# Gaps are mostly short (bursts) with pauses of up to 70 s, so histories span
# a few minutes in a few dozen messages and the minute's edge falls anywhere:
# after a normal or an important message, inside a burst or a pause.
message = st.tuples(st.one_of(st.integers(0, 3_000), st.integers(15_000, 70_000)),
                    st.booleans())


@settings(max_examples=400)
@given(history=st.lists(message, min_size=1, max_size=60), normal_keep=st.integers(1, 40))
def test_exact_whenever_the_cache_reaches_back_a_minute(history: list[tuple[int, bool]],
                                                        normal_keep: int) -> None:
    times: list[int] = []
    t = NOW
    for gap, _ in reversed(history):
        times.insert(0, t)
        t -= gap
    important = {i for i, (_, flag) in enumerate(history) if flag}
    snap = snapshot(times, important, normal_keep)
    truth = sum(1 for t in times if t > NOW - MINUTE_MS)
    rate = sent_per_minute(snap, NOW, normal_keep)
    held = sorted((*snap.normal, *snap.important))
    held_seqs = {item.seq for item in held}
    old_held = [item for item in held if item.ts <= NOW - MINUTE_MS]
    # Exact when the cache holds every message from the newest one a minute
    # old or more on; with none that old, when its normal list is not full
    # (a full one may have dropped older messages: it cannot tell).
    old = [i for i, t in enumerate(times) if t <= NOW - MINUTE_MS]
    first = old[-1] if old else 0
    knowable = bool(old) or len(snap.normal) < normal_keep
    if knowable and all(i + 1 in held_seqs for i in range(first, len(times))):
        event("exact")
        assert rate == truth
    else:
        event("estimate, a held message a minute old" if old_held else "estimate, all young")
        # Messages the cache dropped may or may not be in the last minute:
        # an estimate, never below the held messages of the last minute, never
        # above the messages after the newest held one a minute old.
        assert rate >= sum(1 for item in held if item.ts > NOW - MINUTE_MS)
        if old_held:
            assert rate <= snap.head - old_held[-1].seq


def test_an_old_important_message_does_not_make_dropped_ones_count_as_recent() -> None:
    # An important message 2 minutes ago, 900 normal ones between 110 and 61 s
    # ago that the cache (keeping 100) dropped, 100 in the last 10 s. Counting
    # every seq since the important one (1000) would call all 900 recent: the
    # cache cannot know when they were sent, so the figure is an estimate from
    # what it holds, at least the 100 it holds of the last minute.
    times = ([NOW - 120_000] + [NOW - 110_000 + 54 * i for i in range(900)]
             + [NOW - 10_000 + 100 * i for i in range(100)])
    rate = sent_per_minute(snapshot(times, {0}, 100), NOW, 100)
    assert 100 <= rate < 1000
    # With the cache keeping them all, it is exact.
    assert sent_per_minute(snapshot(times, {0}, 1000), NOW, 1000) == 100.0


def test_a_dropped_normal_message_after_an_old_important_one_makes_an_estimate() -> None:
    # 1: important, 90 s ago; 2: normal, 58 s ago; 3: important, 55 s ago;
    # 4 and 5: normal, 50 and 5 s ago. The cache keeps 2 normal messages, so
    # it holds 1, 3, 4 and 5: it cannot tell when 2 was sent.
    times = [NOW - 90_000, NOW - 58_000, NOW - 55_000, NOW - 50_000, NOW - 5_000]
    snap = snapshot(times, {0, 2}, 2)
    assert [i.seq for i in snap.normal] == [4, 5]
    # Not the 4 seqs since the old important one (that would count 2 as
    # recent without knowing it): the 2 normal messages from the oldest held
    # one on, over the 50 s since it, is 2.4 a minute, below the 3 held
    # messages of the last minute, which is the figure.
    assert sent_per_minute(snap, NOW, 2) == 3.0
