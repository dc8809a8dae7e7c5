"""A room's personal messages as a node holds them, and how a listener reads its own.

A personal message (``"to": uid``) is for one listener of the room. It takes
no room seq: the room numbers personal messages in a sequence of their own
(``pseq``, one position per personal message, whoever it is for), and the
store gives each its addressee's ordinal ``n`` (the addressee's 1st, 2nd, ...
personal message in the room).

A listener's cursor holds a ``pseq``: every personal message for it up to
there was delivered or counted. The positions of messages for other
listeners are holes it skips without counting anything. What it missed (its
messages no longer held when it came back) is counted in its own ordinals:
the first one held after its cursor, minus one, minus its ordinal at the
cursor. That ordinal is read from the newest of its messages held at or
before its cursor, or else from its signed context (``ctx``), which carries
it; when neither knows it, nothing is counted (never a loss it cannot show).

A node keeps one :class:`Personal` per room and epoch, grown by every pull and
trimmed like the important list (older than the window, or beyond the hard
cap; the newest ``important_keep`` stay). It is shared by the room's
snapshots of that epoch, each of which reads it only up to its own
``phead``: a snapshot stays a consistent view although the mailboxes behind
it grow (messages it does not know of are past its
``phead``) and shrink (a message trimmed meanwhile is counted as missed, as it
would be a moment later).

A poll pays one dictionary lookup for its own uid; a listener with no
personal message held costs nothing more.

**Bounded per node.** Besides each room's hard cap, a :class:`NodeCap` bounds
the personal messages all of a node's rooms hold together (the cache's
:class:`Personal` of every room, and the memory engine's own copy): past it,
the node drops held messages oldest first across its rooms, whatever the
window and ``keep`` (a listener counts them in ``pgap`` like any trimmed
ones). It costs one pointer per held message.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from .model import Entry, recalled_target, tombstone_of

if TYPE_CHECKING:
    from .snapshot import Item


@dataclass(eq=False, slots=True)
class Mailbox:
    """One uid's personal messages in a room, ascending position; those
    before ``start`` were trimmed (compacted away now and then)."""

    positions: list[int] = field(default_factory=list)
    ordinals: list[int] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    start: int = 0
    head_pos: int = 0
    """Position of the newest message for this uid this node saw (held or not)."""
    head_n: int = 0
    """Its ordinal: the uid's personal messages in the room up to ``head_pos``."""

    @property
    def empty(self) -> bool:
        return self.start >= len(self.positions)

    def _drop_oldest(self) -> None:
        self.start += 1
        start = self.start
        if start >= len(self.positions):
            self.positions, self.ordinals, self.items, self.start = [], [], [], 0
        elif start > 64 and start * 2 > len(self.positions):
            del self.positions[:start], self.ordinals[:start], self.items[:start]
            self.start = 0


class Holder(Protocol):
    """A room's personal messages as a :class:`NodeCap` sees them."""

    def drop_oldest(self) -> None:
        """Drop its oldest held message (it has one), telling its share."""


class NodeCap:
    """The personal messages all of a node's rooms hold, bounded together.

    Each holder (a room's :class:`Personal`, a memory engine's room) has a
    :class:`Share`, which it tells of every message it holds and drops. The
    cap keeps one reference to a share per message held, in the order they
    came (8 bytes each): past ``cap``, :meth:`enforce` takes the oldest
    references and has their holders drop their oldest messages. A holder
    that trimmed messages itself leaves references that no longer stand for
    a message of its own; such a reference drops its holder's oldest (newer
    than the reference) while it has any, or nothing. The references are
    compacted when they outnumber the held messages twice over, so they stay
    within a constant factor of ``cap``. A holder let go (a room dropped
    from the cache or the store, a new epoch) says so
    (:meth:`Share.release`) and leaves the count at once. (Not a weak
    reference: docs/development.md, "Compiled modules".)
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = 0
        """Personal messages held by all holders."""
        self._order: deque[Share] = deque()

    def share(self, holder: Holder) -> Share:
        """The share of a new holder (it holds nothing yet)."""
        return Share(self, holder)

    def enforce(self) -> None:
        """Drop the node's oldest held messages until at most ``cap`` are held."""
        order = self._order
        while self.held > self.cap and order:
            share = order.popleft()
            holder = share.holder
            if share.held > 0 and holder is not None:
                holder.drop_oldest()
        if len(order) > 2 * self.held + 4096:
            self._compact()

    def _compact(self) -> None:
        """Keep, per share, only the newest references, one per message it holds."""
        left: dict[Share, int] = {}
        kept: list[Share] = []
        for share in reversed(self._order):
            n = left.setdefault(share, share.held)
            if n > 0:
                left[share] = n - 1
                kept.append(share)
        kept.reverse()
        self._order = deque(kept)


class Share:
    """What one holder holds of a :class:`NodeCap`."""

    __slots__ = ("cap", "held", "holder")

    def __init__(self, cap: NodeCap, holder: Holder) -> None:
        self.cap = cap
        self.held = 0
        self.holder: Holder | None = holder
        """``None`` once released."""

    def added(self, count: int) -> None:
        """The holder holds ``count`` more messages (the newest)."""
        if count and self.holder is not None:
            self.held += count
            self.cap.held += count
            order = self.cap._order
            if count == 1:
                order.append(self)  # a send adds one: no iterator object for it
            else:
                order.extend(repeat(self, count))

    def dropped(self, count: int) -> None:
        """The holder dropped ``count`` of its messages."""
        if self.holder is not None:
            self.held -= count
            self.cap.held -= count

    def release(self) -> None:
        """The holder is let go: its messages leave the count, and the cap
        keeps no reference to it (its remaining ones in the order are skipped)."""
        if self.holder is not None:
            self.dropped(self.held)
            self.holder = None


class Personal:
    """A room's personal messages held by this node (one epoch)."""

    def __init__(self, *, keep: int, hard_cap: int, window_ms: int,
                 node_cap: NodeCap | None = None) -> None:
        self.keep = keep
        self.hard_cap = hard_cap
        self.window_ms = window_ms
        self.share = node_cap.share(self) if node_cap is not None else None
        self.boxes: dict[str, Mailbox] = {}
        self.order: deque[tuple[int, int, str]] = deque()
        """(position, ts, uid) of every held message, ascending position."""
        self.emptied: deque[str] = deque()
        """Uids whose mailbox lost its last message, oldest first: such a
        mailbox is kept (its ordinal counts what its listener missed) until
        ``hard_cap`` of them wait, then dropped oldest first."""

    def release(self) -> None:
        """This node let go of the room's messages (a new epoch, the room
        dropped): they leave the node's count."""
        if self.share is not None:
            self.share.release()

    def add(self, entries: Iterable[Entry], item: Callable[[Entry], Item]) -> None:
        """Hold ``entries`` (personal, ascending position, all after those held)."""
        boxes, order = self.boxes, self.order
        added = 0
        for entry in entries:
            to = entry.to
            assert to is not None
            box = boxes.get(to)
            if box is None:
                box = boxes[to] = Mailbox()
            box.positions.append(entry.seq)
            box.ordinals.append(entry.n)
            box.items.append(item(entry))
            box.head_pos, box.head_n = entry.seq, entry.n
            order.append((entry.seq, entry.ts, to))
            added += 1
            target = recalled_target(entry)
            if target:  # a recall's notice: its message, held, becomes its tombstone
                at = bisect_right(box.positions, target, lo=box.start) - 1
                if at >= box.start and box.positions[at] == target:
                    box.items[at] = item(tombstone_of(entry))
        if self.share is not None:
            self.share.added(added)

    def drop_oldest(self) -> None:
        """Drop the oldest held message (there is one)."""
        _, _, uid = self.order.popleft()
        box = self.boxes[uid]
        box._drop_oldest()
        if box.empty:
            self.emptied.append(uid)
        if self.share is not None:
            self.share.dropped(1)

    def trim(self, now_ms: int) -> None:
        """Keep the newest ``keep`` messages and those younger than the
        window, up to ``hard_cap``; drop the others, oldest first; then the
        node's oldest while the node holds more than its cap."""
        order, boxes, emptied = self.order, self.boxes, self.emptied
        oldest_ok = now_ms - self.window_ms
        keep = self.keep
        while len(order) > keep and (order[0][1] < oldest_ok or len(order) > self.hard_cap):
            self.drop_oldest()
        if self.share is not None:
            self.share.cap.enforce()
        while len(emptied) > self.hard_cap:
            uid = emptied.popleft()
            kept = boxes.get(uid)
            if kept is not None and kept.empty:
                del boxes[uid]

    def addressees(self, after: int, upto: int) -> Iterator[str]:
        """The uids of held messages with a position in ``(after, upto]``
        (newest first): whose polls a pull that brought them must wake."""
        for position, _, uid in reversed(self.order):
            if position <= after:
                return
            if position <= upto:
                yield uid


class PersonalRead(NamedTuple):
    """What a listener at ``pseq`` gets of its own personal messages."""

    items: tuple[Item, ...]
    pgap: int
    """Its messages after its cursor no longer held: missed, in its own count."""
    pseq: int
    """Its cursor after this answer."""
    pn: int | None
    """Its ordinal at that cursor, for its context (``None``: unknown)."""
    pts: int = 0
    """The ``ts`` of its message of ordinal ``pn`` (0: unknown), for its
    context: see :func:`retaken`."""


PTS_MASK: Final = 0xFFFFFFFF
"""The bits of a personal message's ``ts`` a context keeps (its low 32: two
messages a restart could swap are seconds apart, not 49 days)."""


def read_personal(personal: Personal | None, phead: int, uid: str, pseq: int,
                  pn: int | None, pts: int = 0) -> PersonalRead | None:
    """What ``uid`` at ``pseq`` (its ordinal there ``pn``, and that
    message's ``pts``, from its context, if known) has of its own up to
    ``phead``; ``None`` when this node holds no mailbox for it (nothing
    pending; the cursor moves to ``phead``, its ordinal stays what it was)."""
    box = personal.boxes.get(uid) if personal is not None else None
    if box is None:
        return None
    if pseq > phead:
        # Past what this node pulled (it lags the node the listener came
        # from): nothing to read yet, the cursor and its ordinal stay.
        return PersonalRead((), 0, pseq, pn, pts)
    positions, ordinals, start = box.positions, box.ordinals, box.start
    first = bisect_right(positions, pseq, lo=start)
    if first > start:
        pn = ordinals[first - 1]  # exact: its newest message at or before the cursor
    end = bisect_right(positions, phead, lo=first)
    if end > start:
        at_head: int | None = ordinals[end - 1]
        pts = box.items[end - 1].ts
    elif box.head_pos <= phead:
        at_head = box.head_n
        if at_head != pn:
            pts = 0  # a message no longer held
    else:
        at_head = pn
    if first < end:
        items = tuple(box.items[first:end])
        missed = ordinals[first] - 1 - pn if pn is not None else 0
    else:
        # Nothing held after the cursor; whatever came after it was trimmed.
        items = ()
        missed = at_head - pn if pn is not None and at_head is not None else 0
    return PersonalRead(items, max(0, missed), phead, at_head, pts)


def retaken(box: Mailbox, phead: int, pseq: int, pn: int, pts: int) -> bool:
    """Whether ``box`` (a uid's, read up to ``phead``) holds, at or before
    its uid's cursor ``pseq``, another message of ordinal ``pn`` than the
    one its context names (``pts``, masked by :data:`PTS_MASK`): the store
    lost the one the listener got (a Redis restart that lost its last
    second) and a later one for it took its position and ordinal, which the
    listener's cursor is past already. Its ordinals are read for what they
    are (a few bisections); a mailbox that no longer holds that ordinal
    tells nothing."""
    if not pts:
        return False
    start = box.start
    end = bisect_right(box.positions, min(pseq, phead), lo=start)
    ordinals = box.ordinals
    at = bisect_left(ordinals, pn, start, end)
    return at < end and ordinals[at] == pn and box.items[at].ts & PTS_MASK != pts
