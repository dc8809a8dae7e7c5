"""A room as a recvsvr caches it, and how a listener's cursor reads it.

A :class:`Snapshot` is immutable: the recvsvr builds a new one after a pull and
swaps the reference, so readers never lock. Reading is a binary search in a
tuple plus a slice (:func:`read`), and every message is already encoded.

Cursors. Every message of a room takes the next number of one sequence
(``seq``). A listener holds two positions in it: ``seq``, up to which every
*normal* message was delivered or counted, and ``iseq``, the same for
*important* ones. Counting needs to know how many of the messages between two
positions are important: ``I(x)``, the number of important messages with a seq
up to ``x``. The snapshot knows it exactly from its ``anchor`` on
(``anchor_ic`` important messages up to ``anchor_seq``, then every important
seq in ``index``); for a cursor older than the anchor the caller may pass the
value it signed into the listener's context, otherwise the unknown stretch is
counted as normal messages.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    from .personal import Personal


class Item(NamedTuple):
    """One message, encoded once for every answer that carries it."""

    seq: int
    ts: int
    json: bytes
    mp: bytes
    recall: int = 0
    """A recall's notice: the seq it recalls (answers list it in
    ``recalled``, not as a message); 0 for a message."""


_seq: Final = attrgetter("seq")

ABSENT_EPOCH: Final = "0"
"""The epoch of a room that does not exist (no log in the store: never sent to,
expired, or lost). Real epochs are 12-character random tokens, so this one never
collides with them; it is still a well-formed epoch a listener can pass back.
A listener whose cursor is in it reads a room that came to exist from the
beginning of its epoch (see ``proxy.polls.step.places``)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    room: str
    epoch: str
    head: int
    """Seq of the newest message in the room (0 when empty)."""
    head_ic: int
    """Important messages up to ``head``."""
    normal: tuple[Item, ...] = ()
    """The newest normal messages, ascending seq."""
    important: tuple[Item, ...] = ()
    """Retained important messages, ascending seq."""
    anchor_seq: int = 0
    anchor_ic: int = 0
    index: tuple[int, ...] = ()
    """Seqs of every important message in (anchor_seq, head]."""
    phead: int = 0
    """Position of the newest personal message this snapshot knows of."""
    personal: Personal | None = field(default=None, compare=False, repr=False)
    """The room's personal messages (:mod:`.personal`), read up to ``phead``;
    ``None`` while the room has had none this epoch."""
    root: str = field(default="", compare=False)
    """The epoch the room's broadcast began with, as the store said ("": not
    known): a renewed epoch keeps it."""
    born_ms: int = field(default=0, compare=False)
    """When this node's copy of the room's epoch began (its first pull of
    it, Unix ms): a young copy checks the messages listeners' contexts name
    (``proxy.polls.poll``)."""
    memo: dict[object, tuple[Delivery, bytes]] = field(default_factory=dict, compare=False,
                                                       repr=False)
    """What listeners at one cursor read, and their answer's encoded head,
    shared by all of them (see ``proxy.polls.poll``)."""

    @property
    def last_important(self) -> int:
        """Seq of the newest important message this snapshot knows of (0 if none)."""
        return max(self.index[-1] if self.index else 0,
                   self.important[-1].seq if self.important else 0)

    def important_count(self, position: int) -> int | None:
        """``I(position)``, or ``None`` when ``position`` is before the anchor."""
        if position < self.anchor_seq:
            return None
        if position >= self.head:
            return self.head_ic
        return self.anchor_ic + bisect_right(self.index, position)


def moved_past(snap: Snapshot, given: Snapshot) -> bool:
    """Whether ``snap`` is further on than ``given``: another epoch, a newer
    message, or a newer personal message."""
    return snap.epoch != given.epoch or snap.head > given.head or snap.phead > given.phead


def ts_at(snap: Snapshot, seq: int) -> int:
    """The ``ts`` of the message ``snap`` holds at ``seq`` (0: none held)."""
    for items in (snap.normal, snap.important):
        at = bisect_left(items, seq, key=_seq)
        if at < len(items) and items[at].seq == seq:
            return items[at].ts
    return 0


def anchors(snap: Snapshot) -> tuple[int, int]:
    """The ``ts`` of the message ``snap`` holds at its head and of the personal
    one at its ``phead`` (0 where it holds none): a pull after them checks the
    store holds the same there (``liveroom.store.log.Pulled.rewritten``)."""
    head = ts_at(snap, snap.head)
    personal = snap.personal
    phead = 0
    if personal is not None and personal.order and personal.order[-1][0] == snap.phead:
        phead = personal.order[-1][1]
    return head, phead


def absent(room: str) -> Snapshot:
    """The snapshot of a room that does not exist: empty, in :data:`ABSENT_EPOCH`.

    Costs one small object (its lists are the shared empty tuple): polls of
    made-up names keep nothing else, and nothing in the store."""
    return Snapshot(room, ABSENT_EPOCH, 0, 0)


def is_absent(snap: Snapshot) -> bool:
    return snap.epoch == ABSENT_EPOCH


class Delivery(NamedTuple):
    """What a poll answers: messages to send, what was skipped, the new cursors.

    A named tuple, the one value made per poll that is not a slotted value
    class (a poll adds its personal messages with ``_replace``):
    docs/development.md, "Compiled modules"."""

    important: tuple[Item, ...]
    messages: tuple[Item, ...]
    gap: int
    igap: int
    seq: int
    iseq: int
    seq_ic: int
    """``I(seq)`` of the new cursor, for the listener's context."""
    iseq_ic: int
    personal: tuple[Item, ...] = ()
    """The listener's own personal messages (:mod:`.personal`): not shared
    with other listeners, so never in what :func:`read` returns; a poll adds
    them."""
    pgap: int = 0

    @property
    def empty(self) -> bool:
        return not (self.important or self.messages or self.gap or self.igap
                    or self.personal or self.pgap)


def _count_at(snap: Snapshot, position: int, hint: int | None) -> int:
    known = snap.important_count(position)
    if known is not None:
        return known
    # A signed count from the listener's context is used when it is possible:
    # no more than the anchor's count, and no more important messages between
    # the position and the anchor than there are messages.
    if (hint is not None and 0 <= hint <= min(snap.anchor_ic, position)
            and snap.anchor_ic - hint <= snap.anchor_seq - position):
        return hint
    return snap.anchor_ic


def read(snap: Snapshot, seq: int, iseq: int, *, limit: int = 500,
         seq_ic: int | None = None, iseq_ic: int | None = None,
         budget: int | None = None) -> Delivery:
    """What a listener at ``(seq, iseq)`` has pending in ``snap``.

    Important messages after ``iseq`` come first, all of them; then the newest
    ``limit`` normal messages after ``seq``. Pending messages that are no longer
    held (evicted, or beyond ``limit``) are counted in ``igap`` and ``gap``, so
    nothing is counted twice and nothing is hidden. When something is pending
    both cursors move to the head. Cursors past the head read as nothing pending
    (the caller decides between waiting and a reset).

    ``budget`` bounds the encoded messages of the answer in bytes (JSON, the
    larger encoding): what does not fit stays pending, oldest first delivered,
    and the cursors stop at the last message delivered (see :func:`_within`).
    At least one message is always delivered, so a listener always advances.
    """
    head = snap.head
    if seq >= head and iseq >= head:
        return Delivery((), (), 0, 0, seq, iseq, snap.head_ic, snap.head_ic)
    imp = snap.important
    important = imp[bisect_right(imp, iseq, key=_seq):] if iseq < head else ()
    normal = snap.normal
    messages: tuple[Item, ...] = ()
    if seq < head:
        start = bisect_right(normal, seq, key=_seq)
        if len(normal) - start > limit:
            start = len(normal) - limit
        messages = normal[start:]
    i_seq = _count_at(snap, min(seq, head), seq_ic)
    i_iseq = _count_at(snap, min(iseq, head), iseq_ic)
    pending_normal = (head - snap.head_ic) - (min(seq, head) - i_seq)
    pending_important = snap.head_ic - i_iseq
    gap = max(0, pending_normal - len(messages))
    igap = max(0, pending_important - len(important))
    if not (important or messages or gap or igap):
        # Only the other kind was behind: nothing to deliver, cursors unchanged.
        return Delivery((), (), 0, 0, seq, iseq, i_seq, i_iseq)
    if budget is not None and _size(important) + _size(messages) > budget:
        return _within(snap, budget, important, messages, gap, igap, seq, i_seq, i_iseq)
    return Delivery(important, messages, gap, igap, head, head, snap.head_ic, snap.head_ic)


def _size(items: tuple[Item, ...]) -> int:
    """Bytes of ``items`` in a JSON answer (each with its separator)."""
    return sum(len(i.json) for i in items) + len(items)


def _fit(items: tuple[Item, ...], budget: int, *, at_least_one: bool) -> int:
    """How many of ``items``, oldest first, fit in ``budget`` bytes."""
    n = 0
    for item in items:
        budget -= len(item.json) + 1
        if budget < 0 and (n or not at_least_one):
            break
        n += 1
    return n


def _within(snap: Snapshot, budget: int, important: tuple[Item, ...],
            messages: tuple[Item, ...], gap: int, igap: int, seq: int, i_seq: int,
            i_iseq: int) -> Delivery:
    """A delivery cut to ``budget`` bytes; what does not fit stays pending.

    Important messages go first, oldest first; the important cursor stops at
    the last one delivered. Those no longer held are all older than every
    held one (the list is trimmed from its oldest), so ``igap`` is counted
    now, whole, and the cursor's count is exact: those lost plus those sent.

    Normal messages get what is left, oldest first (no room left: the normal
    cursor stays, nothing of them counted yet). The normal list may have
    holes (messages the log's cap dropped between two pulls), so what is
    counted lost is what lies up to the last message sent, exactly: there the
    snapshot counts positions from its anchor on. A cut before the anchor,
    where the snapshot cannot count, sends the newest messages that fit
    instead, the older ones counted in ``gap`` like those beyond ``limit``.
    """
    head = snap.head
    k = _fit(important, budget, at_least_one=True)
    if k < len(important):
        sent = important[:k]
        return Delivery(sent, (), 0, igap, seq, sent[-1].seq, i_seq, i_iseq + igap + k)
    budget -= _size(important)
    if not messages:  # only lost normal messages were pending: count them now
        return Delivery(important, (), gap, igap, head, head, snap.head_ic, snap.head_ic)
    n = _fit(messages, budget, at_least_one=not important)
    if n == 0:
        return Delivery(important, (), 0, igap, seq, head, i_seq, snap.head_ic)
    if n < len(messages):
        last = messages[n - 1].seq
        known = snap.important_count(last)
        if known is not None:
            lost = max(0, (last - known) - (seq - i_seq) - n)
            return Delivery(important, messages[:n], lost, igap, last, head, known,
                            snap.head_ic)
        n = _fit(messages[::-1], budget, at_least_one=not important)
        gap += len(messages) - n
        messages = messages[len(messages) - n:]
    return Delivery(important, messages, gap, igap, head, head, snap.head_ic, snap.head_ic)


def recent(snap: Snapshot, count: int, budget: int | None = None) -> Delivery:
    """A first poll: the last ``count`` normal messages (as many of the newest
    as fit in ``budget`` bytes), cursors at the head."""
    messages = snap.normal[max(0, len(snap.normal) - count):] if count else ()
    if budget is not None and _size(messages) > budget:
        keep = _fit(messages[::-1], budget, at_least_one=True)
        messages = messages[len(messages) - keep:]
    return Delivery((), messages, 0, 0, snap.head, snap.head, snap.head_ic, snap.head_ic)


_ts: Final = attrgetter("ts")

MINUTE_MS: Final = 60_000


def sent_per_minute(snap: Snapshot, now_ms: int, normal_keep: int) -> float:
    """Messages (normal and important) sent to the room in the minute before
    ``now_ms``, as far as this snapshot's messages tell; ``normal_keep`` is
    how many normal messages the cache keeps (when its list is that long,
    older ones were evicted).

    Seqs are dense within an epoch, so the messages after the newest held one
    that is a minute old or more number exactly ``head`` minus its seq, when
    the cache holds every message after it: always after a normal one (the
    cache drops the oldest first), after an important one only when no normal
    message in between was dropped; otherwise the figure is an estimate, at
    most that count, as below. When every held message is younger than a
    minute:

    - the normal list is not full: every message of the epoch the store still
      keeps is held, so the count from the oldest held one on is exact (a
      broadcast that began less than a minute ago counts only its own);
    - it is full (more than ``normal_keep`` messages a minute): an estimate,
      the held messages over the time since the oldest of them, scaled to a
      minute.

    Times are the messages' ``ts``, taken by the proxies that accepted them
    (clocks of several hosts: a skew of a second moves the figure a little).
    """
    cutoff = now_ms - MINUTE_MS
    normal, important = snap.normal, snap.important
    full = len(normal) >= normal_keep
    old_normal = bisect_right(normal, cutoff, key=_ts)
    old_important = bisect_right(important, cutoff, key=_ts)
    if old_normal:
        # Every normal message after a held one is held (evictions drop the
        # oldest), and every important one: the count after it is exact.
        base = normal[old_normal - 1].seq
        if old_important:
            base = max(base, important[old_important - 1].seq)
        return float(snap.head - base)
    if old_important:
        base = important[old_important - 1].seq
        if not full or not normal:
            return float(snap.head - base)
        # Normal messages between that important one and the oldest held
        # normal one may have been evicted, older than a minute or not.
        between = normal[0].seq - base - 1 - sum(
            1 for item in important[old_important:] if item.seq < normal[0].seq)
        if not between:
            return float(snap.head - base)
        young = len(normal) + len(important) - old_important
        return float(max(young, min(snap.head - base, _scaled(snap, normal[0], now_ms))))
    oldest = min((items[0] for items in (normal, important) if items),
                 key=lambda item: item.seq, default=None)
    if oldest is None:
        return 0.0
    if not full:
        return float(snap.head - oldest.seq + 1)
    return _scaled(snap, oldest, now_ms)


def _scaled(snap: Snapshot, oldest: Item, now_ms: int) -> float:
    """The messages from ``oldest`` on, over the time since it, scaled to a minute."""
    return (snap.head - oldest.seq + 1) * MINUTE_MS / max(now_ms - oldest.ts, 1000)
