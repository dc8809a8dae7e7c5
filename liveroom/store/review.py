"""Rooms' review queues in the store (:class:`ReviewStore`): messages a word
filter or the backend's send hook held for a moderator, each waiting in its
room until it is approved (then stored as its sender's) or denied.

One of the store's interfaces (:mod:`.base`): every engine implements it, and
every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..model import MAX_INT, NewMessage, is_digits, is_name
from ..settings import REVIEW_MAX as REVIEW_MAX
from .moderation import check_room

WHY_MAX = 200
"""The longest reason a message was held for, in characters."""
LIST_MAX = 1_000
""":meth:`ReviewStore.held`'s largest ``limit``."""
KINDS = ("normal", "important", "personal")
"""What a held message is (``Held.kind``): it goes to the room's normal
lane, its important lane, or to one listener (``Held.to``)."""
VERDICTS = ("approve", "deny")
"""What :meth:`ReviewStore.decide` decides."""


@dataclass(frozen=True, slots=True)
class Held:
    """A message waiting in its room's review queue, as the sender sent it."""

    id: str
    """Its id in the room (decimal digits, from 1; the room's ids restart only
    when its queue expired whole)."""
    uid: str
    """Its sender."""
    kind: str
    """One of :data:`KINDS`."""
    body: Any
    """The message's body; ``None`` once it is decided (it left the queue)."""
    at_ms: int
    """When its send was accepted (``NewMessage.ts``)."""
    why: str
    """Why it was held (the filter's or the hook's words)."""
    to: str | None = None
    """A personal message's addressee."""
    client_msg_id: str | None = None
    """The send's own, if it had one: the same send held again answers this id."""

    def message(self, ts: int, client_msg_id: str) -> NewMessage:
        """The message to store when it is approved at ``ts``, as its
        sender's, under ``client_msg_id`` (the approval's own, so a retried
        approval stores it once)."""
        return NewMessage(uid=self.uid, body=self.body, important=self.kind != "normal",
                          ts=ts, client_msg_id=client_msg_id, to=self.to)


def held_kind(message: NewMessage) -> str:
    """The kind of a message as :class:`Held` says it."""
    if message.to is not None:
        return "personal"
    return "important" if message.important else "normal"


@dataclass(frozen=True, slots=True)
class Holding:
    """What :meth:`ReviewStore.hold` did."""

    id: str
    """The held message's id."""
    again: bool
    """The send's ``client_msg_id`` was held before: ``id`` is that one's, and
    nothing was held now."""
    dropped: tuple[Held, ...] = ()
    """The oldest held messages this one pushed out of a full queue (their
    bodies included), oldest first: nobody will approve them now."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A held message's decision, as :meth:`ReviewStore.decide` answers it."""

    held: Held
    """The message; its ``body`` is ``None`` once its decision is settled (an
    approval whose message was stored, or a denial)."""
    verdict: str
    """``"approve"`` or ``"deny"``: the message's decision, whoever made it."""
    first: bool
    """This call decided it (else an earlier call had: its verdict stands)."""
    epoch: str = ""
    seq: int = 0
    """Where an approved message was stored (:meth:`ReviewStore.settle`); 0
    while its approval is not settled."""


def check_id(held_id: object) -> str:
    """Return ``held_id`` if it is a held message's id (1 to 16 decimal
    digits, not 0), else raise ``ValueError``."""
    if not isinstance(held_id, str) or not is_digits(held_id) or int(held_id) < 1:
        raise ValueError(f"a held message's id is 1 to 16 decimal digits, not {held_id!r}")
    return held_id


def check_hold(room: str, message: NewMessage, why: str) -> None:
    """Raise ``ValueError`` unless :meth:`ReviewStore.hold` may hold ``message``."""
    check_room(room)
    if not isinstance(message, NewMessage):
        raise ValueError(f"a held message is a NewMessage, not {message!r}")
    if not is_name(message.uid) or (message.to is not None and not is_name(message.to)):
        raise ValueError("a held message's uid (and addressee) must be names")
    if isinstance(message.ts, bool) or not isinstance(message.ts, int) \
            or not 0 <= message.ts <= MAX_INT:
        raise ValueError(f"a held message's ts must be an int in 0..2**53-1, not {message.ts!r}")
    if not isinstance(why, str) or len(why) > WHY_MAX:
        raise ValueError(f"why must be text of at most {WHY_MAX} characters")
    try:
        why.encode()
    except UnicodeEncodeError:
        raise ValueError("why must be text UTF-8 can hold (no lone surrogate)") from None


def check_held_list(room: str, limit: int) -> None:
    check_room(room)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIST_MAX:
        raise ValueError(f"limit must be an int in 1..{LIST_MAX}, not {limit!r}")


def check_find(room: str, held_id: str) -> None:
    check_room(room)
    check_id(held_id)


def check_verdict(room: str, held_id: str, verdict: str) -> None:
    check_room(room)
    check_id(held_id)
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, not {verdict!r}")


def check_settle(room: str, held_id: str, epoch: str, seq: int) -> None:
    check_room(room)
    check_id(held_id)
    if not isinstance(epoch, str) or not epoch or " " in epoch:
        raise ValueError(f"epoch must be a word, not {epoch!r}")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_INT:
        raise ValueError(f"seq must be an int in 1..2**53-1, not {seq!r}")


class ReviewStore(Protocol):
    """Each room's queue of held messages, oldest first.

    - **Bounded.** A room holds at most ``LogPolicy.review_max`` messages
      waiting: one more drops the oldest (:attr:`Holding.dropped` returns
      them, for the caller to count and tell). It also remembers as many of
      its latest decisions (so a retried approval answers the same), the
      oldest forgotten first: a decision that old, like an id never given,
      is unknown (``None``).
    - **Expiry.** A room's queue and decisions live ``LogPolicy.room_ttl_ms``
      after its last hold or decision (the store's own expiry, as a room's
      log lives that long after its last send): a message nobody decided in
      that time is gone. On Redis they survive a node's restart.
    - **One decision.** :meth:`decide` is atomic: of an approval and a
      denial racing for one message, one wins and the other is told so.
    - **Atomic per call**, each one round trip (one script call on Redis;
      every key of a room's queue in its slot on a Redis Cluster). Input
      that breaks a rule raises ``ValueError`` and stores nothing.
    """

    async def hold(self, room: str, message: NewMessage, why: str, *,
                   event: bytes | None = None,
                   dropped: tuple[str, bytes] | None = None) -> Holding:
        """Put ``message`` at the end of ``room``'s queue, held for ``why``
        (at most :data:`WHY_MAX` characters); its new id. A message whose
        ``client_msg_id`` the room holds (or decided) already answers that
        one's id with ``again`` and holds nothing. Raises ``ValueError`` for
        a room that is not a name, a uid or addressee that is not a name, a
        ``ts`` not in 0..2**53-1, or a ``why`` too long.

        In the same atomic step, the webhook events (``None``: none) are
        kept in the room's list of events (``Outbox``): ``event`` (the
        ``message.held``'s JSON) with its ``"held_id"`` added, unless
        ``again``; and for each message pushed out of a full queue, a
        ``message.dropped`` made of ``dropped`` (an id stem of ``ev_`` and
        16 hex digits, the i-th drop's id the stem and ``i`` in 8 hex
        digits; and the JSON of the event's ``type``, ``at_ms`` and
        ``room``) with ``"id"`` first and its ``"held_id"``, ``"uid"``,
        ``"kind"``, ``"to"`` and ``"why"`` added."""

    async def held(self, room: str, limit: int) -> tuple[list[Held], int]:
        """The room's waiting messages, oldest first, at most ``limit``
        (1..:data:`LIST_MAX`), and how many wait in all. Read-only."""

    async def find(self, room: str, held_id: str) -> Held | None:
        """Message ``held_id`` of ``room`` while it waits; ``None`` once it
        is decided, and for an id the room does not know. Read-only."""

    async def decide(self, room: str, held_id: str, verdict: str, *,
                     event: bytes | None = None) -> Verdict | None:
        """Decide message ``held_id`` of ``room`` (``"approve"`` or
        ``"deny"``): it leaves the queue. A message decided before keeps its
        decision (``first`` false, the earlier ``verdict``). ``None`` for an
        id the room does not know (never given, dropped, expired, or a
        decision forgotten). A denied message's body is gone from the store
        at once; an approved one's stays until :meth:`settle` (its caller
        stores the message, and may have to again after a failure).

        ``event``: the decision's webhook event (its JSON; ``None``: none),
        kept in the room's list of events (``Outbox``) in the same atomic
        step when the decision is the first, with ``"uid"`` and ``"kind"``
        added."""

    async def settle(self, room: str, held_id: str, epoch: str, seq: int, *,
                     event: bytes | None = None) -> None:
        """An approved message was stored at ``epoch``, ``seq`` (a personal
        one's: its position): the decision keeps where, and the body goes.
        Nothing happens for an id that is not approved (or not known).
        ``event``: the ``message.approved`` webhook event (its JSON;
        ``None``: none), kept in the room's list of events (``Outbox``) in
        the same atomic step when this is the approval's first settle."""
