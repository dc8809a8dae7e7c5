"""What a poll does with its cursor: the listener path's decisions, without I/O.

A poll (:mod:`.poll`) reads, holds, pulls and answers; every choice between
those is :func:`step`'s, a pure function of plain values: the room's snapshot,
the listener's cursor, its pace (:mod:`.tiers`), what the cursor has pending
once read, the time, and what the poll already went through (a confirming
pull, a hold). The poll calls it again each time it learns something (a read,
a pull, a wake-up) and does what the returned :class:`Step` names, so the
rules live here only:

- a first poll (no cursor) is answered with the recent messages, once its
  pace is due: at once in a plain room, held until due in a tiered one;
- a cursor the snapshot cannot place (:func:`places`) is confirmed by a fresh
  pull first (this node may only lag behind the node the listener came
  from), then read, or reset: answered with the recent messages, paced like
  a first poll (skipping the cursor must not skip the pace);
- a placed cursor is read; what it has pending is delivered once its pace is
  due, otherwise the poll is held, plain or paced; the listener's own
  personal messages are delivered at once, due or not (they cut through
  the hold, for one listener only);
- a held poll the hold releases with a newer snapshot reads it again:
  another real epoch is a reset at once (the poll asked the reader, whose
  snapshot is the room's newest: no pull confirms it), but a real epoch's
  cursor is reset into the absent epoch (the room's log gone) only after a
  confirming pull; something pending is delivered (the hold judged it
  due), nothing is held again; released without a snapshot (its deadline,
  a newer poll of its listener, shutdown) it is answered empty;
- a held first poll or reset is answered when released, without messages
  when released without a snapshot (which only says where the room stands).

:func:`needs_ctx` says when the listener's signed context must be checked
before its pace is known.

Nothing here reads a clock or awaits; the values are those the poll holds.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final, TypeGuard

from liveroom.settings import Tier
from liveroom.snapshot import ABSENT_EPOCH, Delivery, Snapshot

from ..params import Cursor
from .tiers import Pace


class Step(IntEnum):
    """What a poll does next (compare with the module's aliases, which skip
    the enum's attribute lookup on the hot path)."""

    RECENT = 0
    """Answer a first poll with the recent messages, cursors at the head."""
    RESET = 1
    """Answer with the recent messages, as a reset of the listener's cursor."""
    HOLD_RECENT = 2
    """Hold a first poll or a reset until its pace is due."""
    STAND_FIRST = 3
    """A held first poll released without a snapshot: its answer without
    messages, from the snapshot it was held with (where the room stands)."""
    STAND_RESET = 4
    """The same for a held reset."""
    CONFIRM = 5
    """Pull the room afresh, then step again with ``confirmed``."""
    READ = 6
    """Read what the cursor has pending, then step again with the delivery."""
    DELIVER = 7
    """Answer with what was read."""
    HOLD_PLAIN = 8
    """Hold until the room changes or the poll times out."""
    HOLD_PACED = 9
    """Hold in the room's ticker until due (or an important message cuts through)."""
    EMPTY = 10
    """Answer with nothing: the listener's cursor unchanged."""


RECENT: Final = Step.RECENT
RESET: Final = Step.RESET
HOLD_RECENT: Final = Step.HOLD_RECENT
STAND_FIRST: Final = Step.STAND_FIRST
STAND_RESET: Final = Step.STAND_RESET
CONFIRM: Final = Step.CONFIRM
READ: Final = Step.READ
DELIVER: Final = Step.DELIVER
HOLD_PLAIN: Final = Step.HOLD_PLAIN
HOLD_PACED: Final = Step.HOLD_PACED
EMPTY: Final = Step.EMPTY


def same_epoch(snap: Snapshot, cursor: Cursor) -> bool:
    """Whether ``cursor`` reads ``snap``'s epoch. A cursor at the start of the
    absent epoch (a listener that waited on a room before it existed) reads a
    room that came to exist from the beginning of its epoch, as if it were
    ``(snap.epoch, 0, 0)``: important messages first, the evicted counted in
    ``gap``, so nothing sent at the room's creation is lost (a reset would
    answer only the recent normal messages)."""
    return cursor.epoch == snap.epoch or (
        cursor.epoch == ABSENT_EPOCH and cursor.seq == 0 and cursor.iseq == 0)


def places(snap: Snapshot, cursor: Cursor) -> bool:
    """Whether ``snap`` can place ``cursor`` (same epoch, or the start of the
    absent one, see :func:`same_epoch`; not past the head)."""
    return same_epoch(snap, cursor) and cursor.seq <= snap.head and cursor.iseq <= snap.head


def needs_ctx(cursor: Cursor | None, tier: Tier, snap: Snapshot) -> TypeGuard[Cursor]:
    """Whether the listener's signed context must be checked before its poll
    is paced and read: in a tiered room (its pace counts from its last
    non-empty answer, which the context carries), or for a cursor older than
    the snapshot's counting anchor (the context's important counts place it).
    A plain room's listener at or past the anchor is paced from now: its
    context is checked only if it is answered empty. A first poll has none."""
    if cursor is None:
        return False
    anchor = snap.anchor_seq
    return tier.interval > 0 or anchor > cursor.seq or anchor > cursor.iseq


def step(snap: Snapshot | None, cursor: Cursor | None, pace: Pace, now_ms: int,
         d: Delivery | None = None, *, confirmed: bool = False,
         held_as: Step | None = None, rewritten: bool = False) -> Step:
    """What the poll does next.

    ``snap`` is the room's snapshot the poll stands on (``None`` only when a
    hold released it without one), ``cursor`` the listener's (``None``: a
    first poll), ``pace`` its pace in the room and ``now_ms`` the Unix time
    in ms. ``d`` is what the cursor has pending in ``snap``, once read (only
    after :data:`READ`); ``confirmed`` says a fresh pull brought ``snap``
    (only after :data:`CONFIRM`); ``held_as`` is how the poll was held when the
    hold released it (``None``: not released); ``rewritten`` says the
    snapshot holds another message than the one the listener's context
    names at its cursor (a store that lost it): the cursor is not placed.

    A pace is due at ``pace.due_ms``; a plain pace is due at once (its due
    time is its last answer, never after now).
    """
    if d is not None:
        # Read where the snapshot placed the cursor. A released poll is due:
        # the hold released it.
        if not d.empty and (held_as is not None or now_ms >= pace.due_ms or d.personal):
            return DELIVER
        return HOLD_PLAIN if pace.plain else HOLD_PACED
    if held_as is not None:
        if held_as == HOLD_RECENT:
            if snap is None:
                return STAND_FIRST if cursor is None else STAND_RESET
            return RECENT if cursor is None else RESET
        if snap is None:
            return EMPTY
        assert cursor is not None  # only a cursor is held plain or paced
        if same_epoch(snap, cursor):
            return READ
        # Never a real epoch into the absent one on the hold's word alone: a
        # pull says whether the log is really gone.
        return CONFIRM if snap.epoch == ABSENT_EPOCH else RESET
    assert snap is not None  # only a hold releases a poll without a snapshot
    if cursor is None:
        return RECENT if now_ms >= pace.due_ms else HOLD_RECENT
    if places(snap, cursor) and not rewritten:
        return READ
    if not confirmed:
        return CONFIRM
    return RESET if now_ms >= pace.due_ms else HOLD_RECENT
