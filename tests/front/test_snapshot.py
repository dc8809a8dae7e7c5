"""Properties of snapshot slicing: exact counting wherever the cursor stands.

A room's history is replayed into the memory engine and pulled into a real
RoomCache at random moments (so pulls skip, overlap the caps and cross epoch
changes); then every cursor from before the floor to past the head is read and
checked against a plain model of the history.
"""

from __future__ import annotations

import asyncio

from hypothesis import event, given, settings, target
from hypothesis import strategies as st

from liveroom.clock import FakeClock
from liveroom.metrics import Metrics
from liveroom.model import NewMessage
from liveroom.snapshot import ABSENT_EPOCH, Item, Snapshot, _fit, absent, read, recent
from liveroom.store.base import LogPolicy
from liveroom.store.memory import MemoryStore
from recvsvr import RoomCache, SectLimits
from recvsvr.next_snapshot import Retention

ROOM = "r"

# A step: append a message (True = important), pull, or lose the log. Weighted
# like a live room: mostly chat, some signals and pulls, a lost log now and
# then, so histories outgrow every cap of the test (the log's, the lists', the
# answer's) and a reset still happens in a few plans.
step = st.sampled_from([False] * 12 + [True] * 3 + ["pull"] * 4 + ["lose"])
steps = st.integers(1, 120).flatmap(
    lambda n: st.lists(step, min_size=n, max_size=n))
def important_count(history: list[bool], position: int) -> int:
    return sum(history[:position])


async def replay(plan: list[object], keep: Retention, log_cap: int,
                 bodies: dict[int, object] | None = None) -> tuple[Snapshot, list[bool]]:
    """Run ``plan`` against the memory engine and a real RoomCache; message
    ``n`` (from 1) has the body ``bodies[n]``, else ``n``."""
    clock = FakeClock()
    store = MemoryStore(LogPolicy(log_cap=log_cap, important_keep=keep.important_keep,
                                  important_window_ms=0), clock)
    cache = RoomCache(store.log, clock, Metrics(), retention=keep,
                      limits=SectLimits(pull_concurrency=1))
    store.notifier.subscribe(lambda room, seq: None, lambda rooms=None: None)
    await cache.start()
    history: list[bool] = []
    try:
        await cache.snapshot(ROOM)
        for step in plan:
            if step == "pull":
                await cache.wait_pulled(ROOM)
            elif step == "lose":
                store.log._rooms.pop(ROOM, None)
                history = []
            else:
                assert isinstance(step, bool)
                n = len(history) + 1
                body = n if bodies is None else bodies.get(n, n)
                await store.log.append(ROOM, NewMessage("u", body, step, ts=0))
                history.append(step)
        snap = await cache.wait_pulled(ROOM)
    finally:
        await cache.stop()
    return snap, history


@settings(max_examples=150, deadline=None)
@given(plan=steps, normal_keep=st.integers(1, 12), important_keep=st.integers(1, 6),
       log_cap=st.integers(3, 40), limit=st.integers(1, 8), index_keep=st.integers(1, 60),
       data=st.data())
def test_reading_any_cursor_counts_exactly(plan: list[object], normal_keep: int,
                                           important_keep: int, log_cap: int, limit: int,
                                           index_keep: int, data: st.DataObject) -> None:
    # index_keep: a small index cap moves the counting anchor up in long plans.
    keep = Retention(normal_keep=normal_keep, important_keep=important_keep,
                     important_window_ms=0, index_keep=index_keep)
    snap, history = asyncio.run(replay(plan, keep, log_cap))
    head = len(history)
    target(float(head), label="history length")
    event("history longer than the log's cap" if head > log_cap else "history within the log's cap")
    if "lose" in plan:
        event("the log was lost")
    assert snap.head == head
    assert snap.head_ic == sum(history)
    # Lists hold what the retention promises, and only messages of the history.
    assert len(snap.normal) <= normal_keep
    assert len(snap.important) <= important_keep  # the window is 0 here
    assert all(not history[i.seq - 1] for i in snap.normal)
    assert all(history[i.seq - 1] for i in snap.important)
    assert [i.seq for i in snap.normal] == sorted(i.seq for i in snap.normal)
    newest_normals = [s for s in range(1, head + 1) if not history[s - 1]]
    # A pull reads the newest normal_keep + important_keep entries at most, so
    # the newest normal message is held whenever it is among them and the log
    # (capped at log_cap entries) still had it.
    if newest_normals and newest_normals[-1] > head - min(normal_keep + important_keep,
                                                          log_cap):
        assert snap.normal[-1].seq == newest_normals[-1]

    seq = data.draw(st.integers(0, head + 2), label="seq")
    iseq = data.draw(st.integers(0, head + 2), label="iseq")
    use_hint = data.draw(st.booleans(), label="hint")
    hint_seq = important_count(history, min(seq, head)) if use_hint else None
    hint_iseq = important_count(history, min(iseq, head)) if use_hint else None
    if seq > head or iseq > head:
        return  # past the head: the proxy confirms with the store, then resets
    d = read(snap, seq, iseq, limit=limit, seq_ic=hint_seq, iseq_ic=hint_iseq)
    if d.gap:
        event("normal messages counted in gap (past the answer's limit or evicted)")
    if len(d.messages) == limit:
        event("an answer at its limit")

    pending_normal = [s for s in range(seq + 1, head + 1) if not history[s - 1]]
    pending_important = [s for s in range(iseq + 1, head + 1) if history[s - 1]]
    delivered_normal = [i.seq for i in d.messages]
    delivered_important = [i.seq for i in d.important]
    held_normal = [i.seq for i in snap.normal if i.seq > seq]
    held_important = [i.seq for i in snap.important if i.seq > iseq]
    assert delivered_important == held_important
    assert delivered_normal == held_normal[-limit:]
    assert set(delivered_normal) <= set(pending_normal)
    assert set(delivered_important) <= set(pending_important)
    exact = use_hint or (snap.important_count(seq) is not None
                         and snap.important_count(iseq) is not None)
    if exact:
        assert d.gap + len(delivered_normal) == len(pending_normal)
        assert d.igap + len(delivered_important) == len(pending_important)
        # The counts signed into the listener's context for its new cursors.
        assert d.seq_ic == important_count(history, d.seq)
        assert d.iseq_ic == important_count(history, d.iseq)
    if pending_normal or pending_important:
        assert not d.empty or not exact
    if not d.empty:
        assert (d.seq, d.iseq) == (head, head)
        assert (d.seq_ic, d.iseq_ic) == (snap.head_ic, snap.head_ic)
    else:
        assert (d.seq, d.iseq) == (seq, iseq)


@given(history=st.lists(st.booleans(), max_size=60), count=st.integers(0, 100))
@settings(deadline=None)
def test_a_first_poll_gets_recent_normal_messages_and_the_heads(history: list[bool],
                                                                 count: int) -> None:
    plan: list[object] = list(history)
    snap, _ = asyncio.run(replay(plan, Retention(normal_keep=2000), log_cap=1000))
    d = recent(snap, count)
    normals = [s for s in range(1, len(history) + 1) if not history[s - 1]]
    assert [i.seq for i in d.messages] == (normals[-count:] if count else [])
    assert d.important == ()
    assert (d.seq, d.iseq, d.gap, d.igap) == (len(history), len(history), 0, 0)


def test_a_cursor_at_the_head_reads_nothing() -> None:
    snap, _history = asyncio.run(replay([False, True, False], Retention(), 100))
    d = read(snap, 3, 3)
    assert d.empty
    assert (d.seq, d.iseq) == (3, 3)


def test_a_new_epoch_restarts_the_snapshot() -> None:
    async def run() -> None:
        clock = FakeClock()
        store = MemoryStore(LogPolicy(), clock)
        cache = RoomCache(store.log, clock, Metrics())
        await cache.start()
        try:
            for i in range(5):
                await store.log.append(ROOM, NewMessage("u", i, False, ts=0))
            before = await cache.wait_pulled(ROOM)
            store.log._rooms.pop(ROOM)
            await store.log.append(ROOM, NewMessage("u", "again", False, ts=0))
            after = await cache.wait_pulled(ROOM)
            assert before.head == 5
            assert after.epoch != before.epoch
            assert after.head == 1
            assert [i.seq for i in after.normal] == [1]
        finally:
            await cache.stop()

    asyncio.run(run())


@settings(max_examples=150, deadline=None)
@given(plan=steps, normal_keep=st.integers(1, 12), important_keep=st.integers(1, 6),
       log_cap=st.integers(3, 40), limit=st.integers(1, 8), budget=st.integers(0, 400),
       data=st.data())
def test_an_answer_over_the_byte_budget_leaves_the_rest_pending(
        plan: list[object], normal_keep: int, important_keep: int, log_cap: int, limit: int,
        budget: int, data: st.DataObject) -> None:
    """Reading in answers of at most ``budget`` bytes, following each answer's
    cursors, delivers what one unbounded read would have (the important
    messages all, the normal ones at least the unbounded answer's), counts
    exactly the same messages as lost, and never one twice. (A cursor before
    the snapshot's counting anchor, where the list may have holes, is cut to
    the newest messages that fit instead: there only the counting holds.)"""
    keep = Retention(normal_keep=normal_keep, important_keep=important_keep,
                     important_window_ms=0)
    snap, history = asyncio.run(replay(plan, keep, log_cap))
    head = len(history)
    seq = data.draw(st.integers(0, head), label="seq")
    iseq = data.draw(st.integers(0, head), label="iseq")
    seq_ic, iseq_ic = important_count(history, seq), important_count(history, iseq)
    whole = read(snap, seq, iseq, limit=limit, seq_ic=seq_ic, iseq_ic=iseq_ic)
    start_seq = seq
    important: list[int] = []
    normal: list[int] = []
    gap = igap = 0
    for _ in range(head + 2):
        d = read(snap, seq, iseq, limit=limit, seq_ic=seq_ic, iseq_ic=iseq_ic, budget=budget)
        if d.empty:
            break
        size = sum(len(i.json) + 1 for i in (*d.important, *d.messages))
        assert size <= budget or len(d.important) + len(d.messages) == 1
        important += [i.seq for i in d.important]
        normal += [i.seq for i in d.messages]
        gap, igap = gap + d.gap, igap + d.igap
        assert d.seq >= seq
        assert d.iseq >= iseq
        seq, iseq, seq_ic, iseq_ic = d.seq, d.iseq, d.seq_ic, d.iseq_ic
        # The counts a listener carries in its context are the history's own.
        assert (seq_ic, iseq_ic) == (important_count(history, seq),
                                     important_count(history, iseq))
    else:
        raise AssertionError("the reads never caught up")
    assert (seq, iseq) == ((whole.seq, whole.iseq) if not whole.empty else (seq, iseq))
    assert important == [i.seq for i in whole.important]
    assert igap == whole.igap
    # The unbounded answer's normal messages all come, after older ones it
    # had counted as lost; none comes twice.
    tail = [i.seq for i in whole.messages]
    if start_seq >= snap.anchor_seq:
        assert normal[len(normal) - len(tail):] == tail
    assert normal == sorted(set(normal))
    assert set(normal) <= {i.seq for i in snap.normal}
    assert gap + len(normal) == whole.gap + len(whole.messages)


def test_a_hole_in_the_normal_list_is_counted_once_across_budgeted_answers() -> None:
    """The log's cap dropped message 2 between two pulls while 1 is still
    held (normal list 1, 3, 4, 5; the snapshot counts exactly only from 2
    on). Budgeted answers count every pending message once, sent or lost:
    cut before the counting anchor, they send the newest that fit (5) and
    count the rest lost, as ``limit`` does; counting 2 once per answer, as a
    cut at 1 would, counted it twice."""
    plan: list[object] = [False, "pull", False, False, False, False]
    keep = Retention(normal_keep=4, important_keep=1, important_window_ms=0)
    snap, _ = asyncio.run(replay(plan, keep, log_cap=3))
    assert [i.seq for i in snap.normal] == [1, 3, 4, 5]
    whole = read(snap, 0, 0, limit=4)
    assert whole.gap == 1
    seq = iseq = 0
    seq_ic = iseq_ic = 0
    gap, sent = 0, []
    while not (d := read(snap, seq, iseq, limit=4, seq_ic=seq_ic, iseq_ic=iseq_ic,
                         budget=0)).empty:
        gap += d.gap
        sent += [i.seq for i in d.messages]
        seq, iseq, seq_ic, iseq_ic = d.seq, d.iseq, d.seq_ic, d.iseq_ic
    assert snap.anchor_seq == 2
    assert sent == [5]
    assert gap + len(sent) == whole.gap + len(whole.messages) == 5


def test_a_cut_before_the_anchor_sends_the_newest_messages_that_fit() -> None:
    """Before the counting anchor a budgeted answer is the newest messages
    that fit, counted from the newest back: the two short ones, though the
    oldest pending message alone would fill the budget. The anchor itself is
    a position the snapshot counts; one before it is not."""
    plan: list[object] = [False, "pull", False, False, False, False]
    keep = Retention(normal_keep=4, important_keep=1, important_window_ms=0)
    long = "x" * 200
    snap, _ = asyncio.run(replay(plan, keep, log_cap=3, bodies={1: long, 2: long, 3: long}))
    assert [i.seq for i in snap.normal] == [1, 3, 4, 5]
    assert (snap.anchor_seq, snap.important_count(2), snap.important_count(1)) == (2, 0, None)
    short = sum(len(i.json) + 1 for i in snap.normal[2:])
    d = read(snap, 0, 0, limit=4, seq_ic=0, iseq_ic=0, budget=short)
    assert [i.seq for i in d.messages] == [4, 5]
    assert (d.gap, d.seq, d.iseq) == (3, 5, 5)  # 1 and 3 not sent, 2 lost


def test_fitting_counts_each_message_and_its_separator() -> None:
    """``_fit`` counts a message's JSON and one separator byte: messages of 9
    bytes take 10 each, so 30 bytes fit three and 29 fit two; a first message
    over the budget goes alone only when one is required."""
    snap, _ = asyncio.run(replay([False] * 4, Retention(normal_keep=4, important_keep=1,
                                                        important_window_ms=0), log_cap=9))
    items = snap.normal[:3]
    size = len(items[0].json)
    assert {len(i.json) for i in items} == {size}
    assert _fit(items, 3 * (size + 1), at_least_one=False) == 3
    assert _fit(items, 3 * (size + 1) - 1, at_least_one=False) == 2
    assert _fit(items, size, at_least_one=True) == 1
    assert _fit(items, size, at_least_one=False) == 0


def test_a_room_that_does_not_exist_reads_as_its_own_empty_snapshot() -> None:
    snap = absent("made-up")
    assert (snap.room, snap.epoch, snap.head, snap.head_ic) == ("made-up", ABSENT_EPOCH, 0, 0)
    assert read(snap, 0, 0).empty
    assert recent(snap, 20).messages == ()


@given(history=st.lists(st.booleans(), max_size=60), count=st.integers(0, 100),
       budget=st.integers(0, 600))
@settings(deadline=None)
def test_recent_messages_fit_the_byte_budget(history: list[bool], count: int,
                                             budget: int) -> None:
    snap, _ = asyncio.run(replay(list(history), Retention(normal_keep=2000), log_cap=1000))
    d = recent(snap, count, budget)
    every = recent(snap, count)
    newest = [i.seq for i in every.messages]
    assert [i.seq for i in d.messages] == newest[len(newest) - len(d.messages):]
    assert d.messages or not every.messages
    size = sum(len(i.json) + 1 for i in d.messages)
    assert size <= budget or len(d.messages) == 1
    if len(d.messages) < len(newest):  # as many as fit: the next older one does not
        older = every.messages[len(newest) - len(d.messages) - 1]
        assert size + len(older.json) + 1 > budget
    assert (d.seq, d.iseq) == (every.seq, every.iseq)


def held(*sizes: int, first_seq: int = 1) -> tuple[Item, ...]:
    """Messages from ``first_seq`` on whose JSON takes ``sizes`` bytes."""
    return tuple(Item(first_seq + n, 0, b"x" * size, b"") for n, size in enumerate(sizes))


def test_a_first_poll_over_the_budget_gets_the_newest_messages_that_fit() -> None:
    # 100 + 10 + 10 + 10 bytes with separators: 25 bytes fit the newest two,
    # not the first (oldest) one alone, nor every other one.
    snap = Snapshot("r", "e", 4, 0, normal=held(99, 9, 9, 9))
    assert [i.seq for i in recent(snap, 4, budget=25).messages] == [3, 4]
    assert [i.seq for i in recent(snap, 4, budget=35).messages] == [2, 3, 4]


def test_an_answer_over_the_budget_counts_each_message_and_its_separator() -> None:
    # Four messages of 9 bytes take 40 with their separators: 39 bytes send
    # three, the cursor stops after the third, the fourth stays pending.
    snap = Snapshot("r", "e", 4, 0, normal=held(9, 9, 9, 9))
    d = read(snap, 0, 4, budget=39)
    assert ([i.seq for i in d.messages], d.gap, d.seq) == ([1, 2, 3], 0, 3)
    assert len(read(snap, 0, 4, budget=40).messages) == 4


def test_lost_normal_messages_alone_are_counted_and_move_the_cursor() -> None:
    # 1 and 2 normal, no longer held; 3, 4, 5 important and already read.
    snap = Snapshot("r", "e", 5, 3, important=held(9, 9, 9, first_seq=3), index=(3, 4, 5))
    d = read(snap, 0, 5)
    assert (d.messages, d.important, d.gap, d.igap) == ((), (), 2, 0)
    assert (d.seq, d.iseq, d.seq_ic, d.iseq_ic) == (5, 5, 3, 3)


def test_a_signed_count_is_used_only_when_it_is_possible() -> None:
    # The snapshot knows counts from seq 10 on (5 important up to it), and 11
    # is important, 12 normal. Before 10 it takes the listener's signed count
    # when the stretch up to 10 could hold that many important messages.
    snap = Snapshot("r", "e", 12, 6, normal=held(9, first_seq=12), anchor_seq=10, anchor_ic=5,
                    index=(11,))
    # 3 up to 8: 9 and 10 both important, possible; only 12 was normal.
    d = read(snap, 8, 12, seq_ic=3)
    assert ([i.seq for i in d.messages], d.gap, d.seq_ic) == ([12], 0, 6)
    # 0 up to 9 would make 5 important messages of the one at 10: ignored,
    # the unknown stretch (10) counts as normal, in the gap.
    d = read(snap, 9, 12, seq_ic=0)
    assert ([i.seq for i in d.messages], d.gap) == ([12], 1)


def test_a_cursor_with_only_the_other_kind_behind_it_keeps_its_place_and_counts() -> None:
    # 1-3 normal, 4 and 5 important. The normal cursor at 3 has nothing
    # pending (only important messages came after it) and the important one is
    # at the head: nothing to send, the cursors stay where they are, with
    # their counts for the empty answer's context.
    snap = Snapshot("r", "e", 5, 2, normal=held(9, 9, 9), important=held(9, 9, first_seq=4),
                    index=(4, 5))
    d = read(snap, 3, 5)
    assert d.empty
    assert (d.seq, d.iseq, d.seq_ic, d.iseq_ic) == (3, 5, 0, 2)


def test_an_important_message_over_the_budget_goes_alone_with_the_lost_normal_count() -> None:
    # 1 and 2 normal, no longer held; 3 important, larger than the budget. It
    # goes (an answer always carries one message) and the two lost normal
    # messages are counted with it: both cursors move to the head.
    snap = Snapshot("r", "e", 3, 1, important=held(20, first_seq=3), index=(3,))
    d = read(snap, 0, 0, budget=10)
    assert ([i.seq for i in d.important], d.messages, d.gap, d.igap) == ([3], (), 2, 0)
    assert (d.seq, d.iseq, d.seq_ic, d.iseq_ic) == (3, 3, 1, 1)
