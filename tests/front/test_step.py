"""The poll's decisions (proxy.polls.step.step), as properties over plain values.

Snapshots are built whole (every message held, an anchor anywhere), cursors
are drawn around their heads in their epoch, another one or the absent one,
and paces come from a real tier table, their last answer up to ten seconds
before now (as a checked context gives it). :func:`arrive` plays the poll's
part: it reads when told to and pulls (another snapshot) when told to confirm,
so the properties speak of what a poll does, in order.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from liveroom.settings import Tier
from liveroom.snapshot import ABSENT_EPOCH, Delivery, Item, Snapshot, absent, read
from proxy.params import Cursor
from proxy.polls.step import Step, needs_ctx, places, same_epoch, step
from proxy.polls.tiers import PLAIN, Pace, TierTable

NOW = 1_700_000_000_000
TIERS = (Tier(1, 2.0), Tier(10, 5.0, 1.0), Tier(100, 0.0005))
"""Tiered: one without jitter, one with, one whose interval rounds to 0 ms."""
TABLE = TierTable(TIERS)
ANSWERS = {Step.RECENT, Step.RESET, Step.DELIVER, Step.STAND_FIRST, Step.STAND_RESET}
HOLDS = {Step.HOLD_RECENT, Step.HOLD_PLAIN, Step.HOLD_PACED}


def room(epoch: str, important: list[bool], anchor: int = 0) -> Snapshot:
    """A snapshot holding every message of ``important`` (seq = position + 1),
    counting exactly from ``anchor`` on."""
    if epoch == ABSENT_EPOCH:
        return absent("r")
    items = [Item(seq, 0, b"{}", b"\x80") for seq in range(1, len(important) + 1)]
    head = len(important)
    anchor = min(anchor, head)
    return Snapshot("r", epoch, head, sum(important),
                    normal=tuple(i for i, imp in zip(items, important, strict=True) if not imp),
                    important=tuple(i for i, imp in zip(items, important, strict=True) if imp),
                    anchor_seq=anchor, anchor_ic=sum(important[:anchor]),
                    index=tuple(i.seq for i, imp in zip(items, important, strict=True)
                                if imp and i.seq > anchor))


epochs = st.sampled_from(["e1", "e2", ABSENT_EPOCH])
snapshots = st.builds(room, epochs, st.lists(st.booleans(), max_size=12), st.integers(0, 12))
cursors = st.builds(Cursor, epochs, st.integers(0, 14), st.integers(0, 14), st.none())
tiers = st.sampled_from((PLAIN, *TIERS))
paces = st.builds(lambda tier, ago: TABLE.pace_in(tier, "u", NOW - ago), tiers,
                  st.integers(0, 10_000))
released = st.sampled_from([Step.HOLD_PLAIN, Step.HOLD_PACED])


def first_pace(tier: Tier) -> Pace:
    """A first poll's pace: it has no context, so its last answer is now."""
    return TABLE.pace_in(tier, "u", NOW)


def steps(snap: Snapshot | None, cursor: Cursor | None, pace: Pace, *, confirmed: bool = False,
          held_as: Step | None = None) -> list[Step]:
    """The steps a poll takes on ``snap``, reading when told to."""
    s = step(snap, cursor, pace, NOW, confirmed=confirmed, held_as=held_as)
    if s != Step.READ:
        return [s]
    assert snap is not None
    assert cursor is not None
    d = read(snap, cursor.seq, cursor.iseq)
    return [s, step(snap, cursor, pace, NOW, d, held_as=held_as)]


def arrive(snap: Snapshot, cursor: Cursor | None, pace: Pace, pulled: Snapshot) -> list[Step]:
    """The steps of a poll arriving on ``snap`` until it answers or is held;
    a confirming pull brings ``pulled``."""
    trace = steps(snap, cursor, pace)
    if trace[-1] == Step.CONFIRM:
        trace += steps(pulled, cursor, pace, confirmed=True)
    return trace


# -- properties ----------------------------------------------------------------


@given(snapshots, cursors, paces, snapshots)
def test_a_cursor_the_snapshot_cannot_place_is_confirmed_by_a_pull_before_anything(
        snap: Snapshot, cursor: Cursor, pace: Pace, pulled: Snapshot) -> None:
    trace = arrive(snap, cursor, pace, pulled)
    if places(snap, cursor):
        assert trace[0] == Step.READ
        return
    assert trace[0] == Step.CONFIRM
    if places(pulled, cursor):
        assert trace[1] == Step.READ
    else:
        # Still not placed: a reset, answered once due (paced like a first poll).
        due = pace.due_ms <= NOW
        assert trace[1:] == [Step.RESET if due else Step.HOLD_RECENT]


@given(snapshots, cursors, paces, snapshots)
def test_a_poll_arriving_answers_or_holds_and_pulls_at_most_once(
        snap: Snapshot, cursor: Cursor | None, pace: Pace, pulled: Snapshot) -> None:
    trace = arrive(snap, cursor, pace, pulled)
    assert trace[-1] in ANSWERS | HOLDS
    assert trace.count(Step.CONFIRM) <= 1
    assert trace.count(Step.READ) <= 1
    # Only a release answers without a snapshot or empty.
    assert not {Step.EMPTY, Step.STAND_FIRST, Step.STAND_RESET} & set(trace)


@given(snapshots, st.sampled_from(TIERS), snapshots)
def test_a_first_poll_answers_recent_at_once_in_a_plain_room_and_is_held_in_a_tiered_one(
        snap: Snapshot, tier: Tier, pulled: Snapshot) -> None:
    assert arrive(snap, None, first_pace(PLAIN), pulled) == [Step.RECENT]
    # In a tier its pace starts now: due only if the tier's interval rounds to 0.
    pace = first_pace(tier)
    assert arrive(snap, None, pace, pulled) == (
        [Step.RECENT] if pace.due_ms <= NOW else [Step.HOLD_RECENT])


@given(snapshots, cursors, paces, snapshots)
def test_in_a_tiered_room_nothing_is_answered_before_the_pace_is_due(
        snap: Snapshot, cursor: Cursor | None, pace: Pace, pulled: Snapshot) -> None:
    trace = arrive(snap, cursor, pace, pulled)
    if pace.due_ms > NOW:
        assert not ANSWERS & set(trace)
    else:
        assert Step.HOLD_RECENT not in trace


@given(snapshots, cursors, paces, st.sampled_from(list(Step)), st.integers(0, 14))
def test_an_empty_delivery_is_never_delivered(snap: Snapshot, cursor: Cursor, pace: Pace,
                                              held: Step, at: int) -> None:
    d = Delivery((), (), 0, 0, at, at, 0, 0)
    for h in (None, held):
        assert step(snap, cursor, pace, NOW, d, held_as=h) == (
            Step.HOLD_PLAIN if pace.plain else Step.HOLD_PACED)


@given(snapshots, cursors, st.integers(0, 10_000), snapshots)
def test_a_plain_room_delivers_whatever_is_pending_and_holds_only_plain(
        snap: Snapshot, cursor: Cursor, ago: int, pulled: Snapshot) -> None:
    pace = TABLE.pace_in(PLAIN, "u", NOW - ago)
    trace = arrive(snap, cursor, pace, pulled)
    assert not {Step.HOLD_RECENT, Step.HOLD_PACED} & set(trace)
    if Step.READ in trace:
        placed = snap if places(snap, cursor) else pulled
        pending = not read(placed, cursor.seq, cursor.iseq).empty
        assert trace[-1] == (Step.DELIVER if pending else Step.HOLD_PLAIN)


@given(snapshots, cursors, paces, snapshots)
def test_a_read_is_delivered_once_due_and_held_as_its_pace_says_otherwise(
        snap: Snapshot, cursor: Cursor, pace: Pace, pulled: Snapshot) -> None:
    trace = arrive(snap, cursor, pace, pulled)
    if Step.READ not in trace:
        return
    placed = snap if places(snap, cursor) else pulled
    pending = not read(placed, cursor.seq, cursor.iseq).empty
    if pending and pace.due_ms <= NOW:
        assert trace[-1] == Step.DELIVER
    else:
        assert trace[-1] == (Step.HOLD_PLAIN if pace.plain else Step.HOLD_PACED)


@given(snapshots, st.integers(0, 14), st.integers(0, 14))
def test_the_absent_epochs_start_cursor_is_placed_in_any_snapshot(
        snap: Snapshot, seq: int, iseq: int) -> None:
    assert places(snap, Cursor(ABSENT_EPOCH, 0, 0, None))
    assert same_epoch(snap, Cursor(ABSENT_EPOCH, 0, 0, None))
    # Only the start: any other cursor of the absent epoch reads another epoch.
    if (seq, iseq) != (0, 0) and snap.epoch != ABSENT_EPOCH:
        assert not same_epoch(snap, Cursor(ABSENT_EPOCH, seq, iseq, None))


@given(snapshots, cursors)
def test_places_is_the_same_epoch_up_to_the_head(snap: Snapshot, cursor: Cursor) -> None:
    assert places(snap, cursor) == (same_epoch(snap, cursor) and cursor.seq <= snap.head
                                    and cursor.iseq <= snap.head)
    if cursor.epoch == snap.epoch:
        assert same_epoch(snap, cursor)


@given(snapshots, cursors, paces, released)
def test_a_released_poll_rereads_its_snapshot_without_a_pull_unless_the_room_vanished(
        snap: Snapshot, cursor: Cursor, pace: Pace, held: Step) -> None:
    trace = steps(snap, cursor, pace, held_as=held)
    if not same_epoch(snap, cursor):
        if snap.epoch == ABSENT_EPOCH:
            # A real epoch is never reset into the absent one on the hold's
            # word: a pull confirms the log is gone.
            assert trace[0] == Step.CONFIRM
            return
        assert trace == [Step.RESET]  # at once, due or not: the room moved on
        return
    assert Step.CONFIRM not in trace
    assert trace[0] == Step.READ
    # The hold released it: what is pending goes now, due or not.
    pending = not read(snap, cursor.seq, cursor.iseq).empty
    assert trace[1] == (Step.DELIVER if pending else
                        Step.HOLD_PLAIN if pace.plain else Step.HOLD_PACED)


@given(snapshots, st.one_of(st.none(), cursors), paces, released)
def test_a_poll_released_without_a_snapshot_is_answered_where_it_stands(
        snap: Snapshot, cursor: Cursor | None, pace: Pace, held: Step) -> None:
    if cursor is not None:
        assert step(None, cursor, pace, NOW, held_as=held) == Step.EMPTY
    # A held first poll or reset: its answer without messages.
    assert step(None, cursor, pace, NOW, held_as=Step.HOLD_RECENT) == (
        Step.STAND_FIRST if cursor is None else Step.STAND_RESET)
    # Released with the room's snapshot: answered with the recent messages.
    assert step(snap, cursor, pace, NOW, held_as=Step.HOLD_RECENT) == (
        Step.RECENT if cursor is None else Step.RESET)


@given(snapshots, st.one_of(st.none(), cursors), paces, snapshots,
       st.sampled_from([None, *HOLDS]), st.booleans())
def test_a_first_poll_is_never_reset_and_a_cursor_never_answered_as_first(
        snap: Snapshot, cursor: Cursor | None, pace: Pace, pulled: Snapshot,
        held: Step | None, without: bool) -> None:
    if cursor is None and held is not None:
        held = Step.HOLD_RECENT  # only a cursor is held plain or paced
    trace = arrive(snap, cursor, pace, pulled) if held is None else steps(
        None if without else snap, cursor, pace, held_as=held)
    if cursor is None:
        assert not {Step.RESET, Step.STAND_RESET, Step.CONFIRM, Step.READ} & set(trace)
    else:
        assert not {Step.RECENT, Step.STAND_FIRST} & set(trace)


@given(st.builds(room, st.just("e1"), st.lists(st.booleans(), min_size=1, max_size=12),
                 st.integers(1, 12)), cursors)
def test_the_context_is_checked_in_a_tier_or_before_the_anchor_only(
        snap: Snapshot, cursor: Cursor) -> None:
    for tier in TIERS:
        assert needs_ctx(cursor, tier, snap)
    before_anchor = cursor.seq < snap.anchor_seq or cursor.iseq < snap.anchor_seq
    assert needs_ctx(cursor, PLAIN, snap) == before_anchor
    for tier in (PLAIN, *TIERS):
        assert not needs_ctx(None, tier, snap)  # a first poll has none


# -- examples ------------------------------------------------------------------

PLAIN_NOW = first_pace(PLAIN)
TIERED = TABLE.pace_in(TIERS[0], "u", NOW - 500)
"""Due in 1.5 s."""


def test_a_cursor_behind_the_head_reads_and_gets_what_is_pending() -> None:
    snap = room("e1", [False, True, False])
    cursor = Cursor("e1", 1, 1, None)
    assert steps(snap, cursor, PLAIN_NOW) == [Step.READ, Step.DELIVER]
    at_head = Cursor("e1", 3, 3, None)
    assert steps(snap, at_head, PLAIN_NOW) == [Step.READ, Step.HOLD_PLAIN]


def test_a_cursor_at_a_message_the_snapshot_holds_otherwise_is_confirmed_then_reset(
        ) -> None:
    """The listener's context names another message at its seq than the
    snapshot holds there (the store lost it, a later send took the seq)."""
    snap = room("e1", [False] * 3)
    cursor = Cursor("e1", 2, 2, None)
    assert step(snap, cursor, PLAIN_NOW, NOW, rewritten=True) == Step.CONFIRM
    assert step(snap, cursor, PLAIN_NOW, NOW, confirmed=True, rewritten=True) == Step.RESET
    assert step(snap, cursor, PLAIN_NOW, NOW, confirmed=True) == Step.READ


def test_a_cursor_of_another_epoch_is_confirmed_then_reset() -> None:
    snap = room("e1", [False] * 3)
    cursor = Cursor("e2", 2, 2, None)
    assert arrive(snap, cursor, PLAIN_NOW, snap) == [Step.CONFIRM, Step.RESET]
    # This node lagged: the pull brings the listener's epoch.
    assert arrive(snap, cursor, PLAIN_NOW, room("e2", [False] * 3)) == [
        Step.CONFIRM, Step.READ, Step.DELIVER]


def test_a_cursor_past_the_head_is_confirmed() -> None:
    snap = room("e1", [False] * 3)
    assert step(snap, Cursor("e1", 4, 3, None), PLAIN_NOW, NOW) == Step.CONFIRM
    assert step(snap, Cursor("e1", 3, 4, None), PLAIN_NOW, NOW) == Step.CONFIRM


def test_a_reset_in_a_tiered_room_waits_for_its_pace() -> None:
    snap = room("e1", [False] * 3)
    cursor = Cursor("e2", 2, 2, None)
    assert arrive(snap, cursor, TIERED, snap) == [Step.CONFIRM, Step.HOLD_RECENT]
    assert step(snap, cursor, TIERED, NOW, held_as=Step.HOLD_RECENT) == Step.RESET
    assert step(snap, cursor, TIERED, TIERED.due_ms, confirmed=True) == Step.RESET


def test_a_first_poll_in_a_tiered_room_is_held_then_answered() -> None:
    snap = room("e1", [False] * 3)
    pace = first_pace(TIERS[0])
    assert step(snap, None, pace, NOW) == Step.HOLD_RECENT
    assert step(snap, None, pace, NOW + 2000, held_as=Step.HOLD_RECENT) == Step.RECENT
    assert step(None, None, pace, NOW + 10, held_as=Step.HOLD_RECENT) == Step.STAND_FIRST


def test_a_paced_poll_is_held_until_due_then_delivers_when_released() -> None:
    snap = room("e1", [False] * 3)
    cursor = Cursor("e1", 1, 1, None)
    assert steps(snap, cursor, TIERED) == [Step.READ, Step.HOLD_PACED]
    assert step(snap, cursor, TIERED, TIERED.due_ms,
                read(snap, 1, 1)) == Step.DELIVER
    assert steps(room("e1", [False] * 4), cursor, TIERED, held_as=Step.HOLD_PACED) == [
        Step.READ, Step.DELIVER]
    assert step(None, cursor, TIERED, NOW, held_as=Step.HOLD_PACED) == Step.EMPTY


def test_a_released_poll_of_a_recreated_room_is_reset_at_once() -> None:
    cursor = Cursor("e1", 3, 3, None)
    assert steps(room("e2", [False]), cursor, TIERED, held_as=Step.HOLD_PACED) == [Step.RESET]


def test_a_listener_that_waited_on_an_absent_room_reads_it_from_the_start() -> None:
    start = Cursor(ABSENT_EPOCH, 0, 0, None)
    assert steps(absent("r"), start, PLAIN_NOW) == [Step.READ, Step.HOLD_PLAIN]
    assert steps(room("e1", [True, False]), start, PLAIN_NOW, held_as=Step.HOLD_PLAIN) == [
        Step.READ, Step.DELIVER]


def test_the_context_is_checked_for_a_cursor_before_the_anchor_in_a_plain_room() -> None:
    snap = room("e1", [False] * 6, anchor=4)
    assert needs_ctx(Cursor("e1", 3, 5, None), PLAIN, snap)
    assert needs_ctx(Cursor("e1", 5, 3, None), PLAIN, snap)
    assert not needs_ctx(Cursor("e1", 4, 4, None), PLAIN, snap)
    assert needs_ctx(Cursor("e1", 6, 6, None), TIERS[0], snap)
