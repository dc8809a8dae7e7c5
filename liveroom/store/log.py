"""The message log's contract: one log per room with a dense ``seq`` and an
opaque ``epoch`` (:class:`MessageLog`), what it keeps (:class:`LogPolicy`),
what a pull reads (:class:`PullRequest`, :class:`Pulled`), a recalled
message's tombstone (:class:`Recalled`), and the notifier that tells every
recvsvr a room moved (:class:`Notifier`).

One of the store's interfaces (:mod:`.base`): every engine implements it, and
every method may raise :class:`~liveroom.errors.StoreUnavailable` and nothing
else from the driver.
"""

from __future__ import annotations

import base64
import os
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..model import Appended as Appended  # the store's answer, kept in a compiled module
from ..model import Entry, NewMessage
from ..ratelimit import RateLimits
from ..settings import (
    DEDUP_TTL,
    EMPTY_ROOM_TTL,
    HISTORY_TTL,
    IMPORTANT_HARD_CAP,
    IMPORTANT_KEEP,
    IMPORTANT_WINDOW,
    LOG_CAP,
    PERSONAL_HARD_CAP,
    PERSONAL_NODE_CAP,
    REVIEW_MAX,
    ROOM_TTL,
)

_EPOCHS = random.Random()  # seeded from os.urandom
# A worker forked from a node draws its own epochs, not its parent's.
os.register_at_fork(after_in_child=_EPOCHS.seed)


def new_epoch() -> str:
    """A fresh opaque epoch: 72 random bits (12 characters of URL-safe base64),
    so a lost and restarted log never repeats one. Drawn from a generator
    seeded from the system's entropy at start (and again in a forked worker),
    not from ``os.urandom`` each time: the Redis engine proposes one with
    every append (used only if the append creates the log), and a
    ``getrandom`` system call each was a tenth of a send's CPU there."""
    return base64.urlsafe_b64encode(_EPOCHS.getrandbits(72).to_bytes(9, "big")).decode()


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """How much of a room's log the store keeps, and for how long."""

    log_cap: int = LOG_CAP
    """Messages kept per room log (the newest; older ones are trimmed)."""
    important_keep: int = IMPORTANT_KEEP
    important_window_ms: int = int(IMPORTANT_WINDOW * 1000)
    """Important messages are kept while among the newest ``important_keep`` *or*
    younger than this, beyond ``log_cap`` (bounded by ``important_hard_cap``)."""
    important_hard_cap: int = IMPORTANT_HARD_CAP
    personal_hard_cap: int = PERSONAL_HARD_CAP
    """Personal messages are kept like important ones (the newest
    ``important_keep`` and those younger than ``important_window_ms``), up
    to ``personal_hard_cap`` of a room."""
    personal_node_cap: int = PERSONAL_NODE_CAP
    """The memory engine holds at most this many personal messages, all its
    rooms together (the oldest go first). The redis engine keeps them per
    room only: each node bounds its own cache."""
    room_ttl_ms: int = int(ROOM_TTL * 1000)
    """A room with no send and no read for this long expires."""
    empty_room_ttl_ms: int = int(EMPTY_ROOM_TTL * 1000)
    """A log an operator created (or opened) with no message yet expires this
    long after its creation, reads or not: a made-up name costs minutes, not
    days. Its first message extends it to ``room_ttl_ms``."""
    dedup_ttl_ms: int = int(DEDUP_TTL * 1000)
    """How long a ``client_msg_id`` is remembered."""
    durable_replicas: int = 0
    """Replicas that must hold a message before its send is acknowledged (the
    redis engine's ``WAIT``; 0: the master alone, replicated asynchronously).
    The memory engine has no replicas and ignores it."""
    durable_timeout_ms: int = 1_000
    """How long an append waits for ``durable_replicas``; a send still short
    of them is answered 503 (stored or not: retry with its client_msg_id)."""
    history_ttl_ms: int = int(HISTORY_TTL * 1000)
    """How long a room's counters (its broadcast's likes and gifts, see
    ``Counters``) and its moderation (``ModerationStore``: longer while
    a sanction lasts) live after their last write: the viewers history's
    keeping (``--history-ttl``)."""
    review_max: int = REVIEW_MAX
    """Held messages a room's review queue keeps (``ReviewStore``: one more
    drops the oldest), and decisions it remembers besides."""


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recalled message: what its tombstone keeps (everything but its
    body), and where the recall's notice is."""

    seq: int
    uid: str
    important: bool
    ts: int
    ic: int
    """Important messages in the room up to and including it (0: personal)."""
    to: str | None = None
    """A personal message's addressee (then ``seq`` is its position)."""
    n: int = 0
    """A personal message's ordinal for its addressee."""
    notice: int = 0
    """The seq of the recall's notice (a personal message's: its position in
    the room's personal sequence)."""


@dataclass(frozen=True, slots=True)
class PullRequest:
    room: str
    after: int
    """Return entries with a seq greater than this."""
    limit: int
    """At most this many of the newest log entries (important ones beyond it
    are still returned while the store retains them)."""
    pafter: int = 0
    """Return personal messages with a position greater than this (the
    oldest first, at most :data:`PERSONAL_PULL` of them)."""
    anchor_ts: int = 0
    """The ``ts`` of the message at ``after`` as the reader holds it (0: none
    to check): see :attr:`Pulled.rewritten`."""
    panchor_ts: int = 0
    """The same for the personal message at ``pafter``."""


PERSONAL_PULL = 10_000
"""Most personal messages one pull of a room returns: a node that starts
serving a busy room catches up over several pulls, none of them huge."""


@dataclass(frozen=True, slots=True)
class Pulled:
    """A room's log after a position, as one read of the store saw it."""

    room: str
    epoch: str | None
    """``None`` when the room has no log (never written, expired or lost)."""
    head: int
    head_ic: int
    entries: tuple[Entry, ...]
    """Ascending seq, all after the request's ``after``: the newest ``limit``
    log entries, plus every retained important entry after ``after``."""
    complete: bool
    """True when no entry in ``(after, head]`` is missing from ``entries``."""
    undecodable: int = 0
    """Entries in ``(after, head]`` the engine read but could not decode (a
    corrupt stream entry): left out of ``entries``, so readers count them in
    ``gap`` like evicted ones."""
    phead: int = 0
    """The room's personal sequence as far as ``personal`` reaches: the
    position of the last personal message returned, or the room's newest
    when every retained one after ``pafter`` was."""
    personal: tuple[Entry, ...] = ()
    """Retained personal messages after the request's ``pafter``, ascending
    position (their ``seq``), each with its addressee's ordinal ``n``."""
    root: str = field(default="", compare=False)
    """The epoch the room's broadcast began with: a renewal keeps it, an
    ended broadcast's next starts its own ("": not known, a log written
    before the store kept it)."""
    rewritten: bool = False
    """The store holds, at the request's ``after`` (or ``pafter``), a message
    of another ``ts`` than the reader's ``anchor_ts`` (``panchor_ts``): its log
    was rewritten under the same epoch (a Redis restart lost its last writes,
    and appends took their seqs again). A reader must then not go on from its
    copy. A message the store no longer holds there (trimmed, recalled) is no
    evidence either way."""


class MessageLog(Protocol):
    """One log per room with a dense ``seq`` and an opaque ``epoch``.

    - ``append`` is atomic and one round trip: client_msg_id dedup, next seq,
      the entry (with its important count ``ic``), retention of important
      entries, expiry refresh, and the notify to every recvsvr.
    - A personal message (``NewMessage.to``) takes no seq: it takes the next
      position of the room's *personal sequence* and the next ordinal ``n``
      of its addressee in the room (both go on across epochs, like seq, and
      restart only when the log was lost), and is kept like an important
      one, up to ``personal_hard_cap``. Its
      notify carries seq 0 ("pull me"), never a seq.
    - A room's ``epoch`` changes when its log was lost (a store restarted empty,
      expiry) and on :meth:`renew_epoch`; seqs restart from 1 in a new epoch
      only when the log was lost.
    - ``pull`` only reads. With ``reads_replicas`` it reads replicas, which
      may lag behind each other: a pull may then see less than one before it.
    """

    reads_replicas: bool

    async def open_room(self, room: str) -> str:
        """The room's epoch, creating an empty log if it has none.

        Only operator actions call it (a vip add): a poll never creates a log.
        A log created here lives ``empty_room_ttl_ms`` until its first message."""

    async def append(self, room: str, message: NewMessage,
                     limits: RateLimits | None = None, *, may_create: bool = True,
                     provisional: bool = False) -> Appended:
        """Store one message and notify; a seen ``client_msg_id`` stores nothing.

        With ``may_create`` false, a send to a room with no log raises
        :class:`~liveroom.errors.NewRoomRefused` and stores nothing. With
        ``provisional``, a log this send creates (``Appended.created``) is its
        sender's alone: it expires ``empty_room_ttl_ms`` after that sender's
        last send until another uid sends to it or :meth:`touch` counts a
        read of it by another uid (then ``room_ttl_ms``, as any room).

        With ``limits``, the sender's windows (per room and ``message.uid``) and
        the room's cap are checked in the same round trip, at ``message.ts``:
        over any of them nothing is stored or counted and
        :class:`~liveroom.errors.RateLimited` is raised with ``retry_after``
        (seconds until the first send would be accepted again). Only stored
        sends count; a repeated ``client_msg_id`` answers as before, uncounted.
        """

    async def pull(self, requests: Sequence[PullRequest]) -> list[Pulled]:
        """Read several rooms in one batch (one round trip on Redis)."""

    async def recall(self, room: str, seq: int, *, at_ms: int, personal: bool = False,
                     sender: str | None = None, since_ms: int = 0,
                     event: bytes | None = None) -> Recalled:
        """Recall message ``seq`` (``personal``: the personal message at
        position ``seq``): its tombstone takes its place and the recall's
        notice is appended, in one atomic step and one round trip. A reader
        finds both or neither: never a message gone without its notice.

        The tombstone: its body is gone from the store, and every later pull
        returns the entry with body ``None`` (its seq, ic, uid, lane and ts
        kept) wherever it returned the message. The notice: an important
        entry of ``model.RECALL_UID`` at ``at_ms``, body
        ``model.recall_notice`` of what the tombstone keeps, client_msg_id
        ``model.recall_notice_id``; a personal message's is a personal
        message to the same addressee. It is appended as :meth:`append`
        appends (its seq, the notify to every recvsvr, the trimming), so
        every reader of the room sees it: on Redis a pull that holds the
        notice puts the tombstone where the message was, and one that holds
        the message holds the notice (it is newer, and important); a pull
        that reads a personal notice reads the tombstone too.

        Recalling a recalled message answers the same again (its notice's
        seq included) and appends nothing, while the room keeps its record
        of the recall (``room_ttl_ms``, longer than the notice's
        client_msg_id is remembered). Raises
        :class:`~liveroom.errors.NotFound` when the room keeps no such
        message (never sent, trimmed, a notice itself, or the room has no
        log); with ``sender``, :class:`~liveroom.errors.Forbidden` unless the
        message is that uid's, normal (an important message carrying its uid
        is the backend's), sent at or after ``since_ms``. Either changes
        nothing.

        ``event``: the webhook event of the action (``Events.ahead``'s JSON;
        ``None``: none), kept in the room's list of events in the same
        atomic step (``Outbox``) when the message is recalled now
        (not before), with ``"uid"`` (the message's sender) and ``"to"``
        (a personal message's addressee, else ``null``) added."""

    async def renew_epoch(self, room: str, stale: str) -> str:
        """Give the room a new epoch if it is still ``stale``; return the current one."""

    async def touch(self, rooms: Sequence[str],
                    readers: Mapping[str, Collection[str]] | None = None) -> None:
        """Count a read of these rooms: push their expiry back (a room with no
        message yet by ``empty_room_ttl_ms`` at most); never creates a log.

        ``readers`` names the uids that read each room (two distinct ones
        are enough; a room missing from it had none known). A room of one
        sender (see :meth:`append`'s ``provisional``) read only by that sender
        is left as it is, its short expiry included: its creator's own polls
        never make it last. Read by another uid it becomes a room like any
        other. ``None``: the readers are not known, and count as somebody
        else (an operator's read)."""


class AppendAtOnce(Protocol):
    """The ``append_at_once`` of a log that never waits to append (the memory
    engine's): :meth:`MessageLog.append`'s arguments, answer and errors,
    without an await, so the sender path answers a send without a task. A
    log offers it as a method of its class; the Redis engines do not."""

    def __call__(self, room: str, message: NewMessage, limits: RateLimits | None = None, *,
                 may_create: bool = True, provisional: bool = False) -> Appended: ...


OnNotify = Callable[[str, int], None]
"""Called with (room, seq) when a room reached seq; seq 0 when the room got
a personal message (its personal sequence moved, not seq)."""


class OnResync(Protocol):
    """Called when notifies may have been lost (after the channel reconnected):
    notifies of ``rooms`` (None: of every room) may be gone, pull them."""

    def __call__(self, rooms: Collection[str] | None = None) -> None: ...


class Notifier(Protocol):
    """At-most-once hints "room R reached seq N" to every recvsvr of the system.

    A notify is only a hint: losing one never loses a message (recvsvr's
    fallback pull covers it). The channel reconnects by itself and calls every
    ``on_resync`` after it did, since notifies sent meanwhile are gone. A
    room's notifies arrive in the order of its appends; notifies of different
    rooms have no order between them (a cluster's shards publish apart).
    """

    def subscribe(self, on_notify: OnNotify, on_resync: OnResync) -> None: ...

    def watch(self, room: str) -> None:
        """This node reads ``room`` from now on: an engine that delivers a
        room's notifies only where asked (a cluster's sharded channels)
        subscribes it. Counted: each call is undone by one :meth:`unwatch`."""

    def unwatch(self, room: str) -> None:
        """This node no longer reads ``room`` (see :meth:`watch`)."""

    def hears(self, room: str) -> bool:
        """Whether notifies of ``room`` reach this node now (watched, and
        the subscription confirmed where an engine subscribes per room)."""

    @property
    def alive(self) -> bool:
        """Whether the channel is connected and answered its last probe."""
